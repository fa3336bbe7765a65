"""Where a study's power is lost: training seeds or sampling? Read from a finished study's contrasts.

For every contrast tested across training seeds (unit "seeds"), the variance of one seed's difference d_s has two
parts: training randomness (the seeds' own models) and the sampling noise of the within-seed estimate (prompts and
runs; for perplexity, the prompts only). The second is measured by the per-checkpoint rows of the same contrast: their
95% interval gives each seed's standard error (half-width / 1.96, an approximation for the percentile-bootstrap
MAUVE intervals). So

    share of sampling = mean(se_s^2) / sd(d_s)^2      (capped at 1; near 1: d_s varies no more than sampling predicts)

and the standard error of the across-seeds mean, sd / sqrt(k), would shrink by 1 / sqrt(2) with twice the seeds but
only to sqrt(1 - share / 2) of itself with twice the prompts x runs per seed. (With k = 3 the sd is itself uncertain
to a factor of about 2 either way: a guide to where the next budget goes, not a measurement to publish.)

    python bench/seed_variance.py --results results/real/results
"""

from __future__ import annotations

import argparse
from pathlib import Path

import polars as pl

MATCH = ["family", "metric", "model", "objective", "eval_set", "decoder", "a", "b"]
Z = 1.959964


def variance_split(contrasts: pl.DataFrame) -> pl.DataFrame:
    """One row per across-seeds contrast (its arm A; B is the baseline): k, sd of the seeds' differences, the
    within-seed se (root mean square), the sampling share, the detectable effect, and the across-seeds SE with twice
    the sampling per seed relative to now (twice the seeds: 0.707 always)."""
    seeds = contrasts.filter(pl.col("unit") == "seeds")
    within = (
        contrasts.filter((pl.col("unit") == "checkpoint") & pl.col("low").is_not_null())
        .with_columns(((pl.col("high") - pl.col("low")) / (2 * Z)).alias("se"))
        .group_by(MATCH)
        .agg((pl.col("se") ** 2).mean().sqrt().alias("within_se"), pl.len().alias("checkpoints"))
    )
    out = seeds.join(within, on=MATCH, how="left").with_columns(
        ((pl.col("within_se") ** 2) / (pl.col("spread") ** 2)).clip(upper_bound=1.0).alias("sampling_share")
    )
    return out.select(
        "family",
        "metric",
        "eval_set",
        "a",
        pl.col("n").alias("seeds"),
        "difference",
        pl.col("spread").alias("sd_between_seeds"),
        "within_se",
        "sampling_share",
        "detectable",
        "p_holm",
        "not_testable",
        (1 - pl.col("sampling_share") / 2).sqrt().alias("se_ratio_2x_sampling"),  # 2x seeds: 0.707 always
    ).sort("family", "metric", "eval_set")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--results", type=Path, default=Path("results/real/results"))
    args = parser.parse_args()
    table = variance_split(pl.read_csv(args.results / "report/contrasts.csv", infer_schema_length=None))
    with pl.Config(tbl_rows=100, tbl_cols=20, fmt_str_lengths=40, tbl_width_chars=250, float_precision=3):
        print(table)


if __name__ == "__main__":
    main()
