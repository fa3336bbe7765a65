"""Training seeds as the unit of a comparison between training methods.

A within-seed contrast (report.contrasts, unit "checkpoint") compares two trained models of one training seed: its
test covers the prompts and sampling runs, so it speaks of those two checkpoints, not of the training methods. Where
both arms of a contrast were trained from k >= 2 seeds (an experiment's `seeds`), each seed s gives one difference
d_s (that seed's within-seed estimate: a mean ROUGE or TV difference over prompts, a perplexity difference, or the
joint MAUVE difference), and the method's effect is tested across seeds (statistics.across_seeds): the mean of d_s,
its t interval with k - 1 degrees of freedom, the one-sample t-test's p and the between-seed standard deviation.
The arms of a seed share initialisation and data order (the seed feeds both), so d_s is paired; prompts and runs are
nested within it. Fewer than 3 seeds: "not testable (2 seeds)". These rows form Holm tables of their own (family,
metric, unit), so the per-checkpoint rows keep theirs.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

SEED_T = "paired t over training seeds"


def seed_rows(rows: list[dict], group: list[str], unit: str) -> list[dict]:
    """One row of unit `unit` per group of within-seed `rows` (keyed by the `group` columns, every identity column
    but the seed and the unit) with two or more seeds: the across-seeds estimate. Columns as the within-seed rows';
    `seed` is None and `n` the number of seeds."""
    from workflow_lib.report.statistics import across_seeds

    groups: defaultdict[tuple, dict[int, float]] = defaultdict(dict)
    for r in rows:
        groups[tuple(r[k] for k in group)][r["seed"]] = r["difference"]
    out = []
    for key, by_seed in groups.items():
        if len(by_seed) < 2:
            continue
        differences = [by_seed[s] for s in sorted(by_seed)]
        estimate = across_seeds(differences)._asdict()
        untested = estimate.pop("untested")
        out.append(
            dict(zip(group, key))
            | {"seed": None, "unit": unit}
            | estimate
            | {
                "method": SEED_T,
                "not_testable": untested,
                "resamples": None,
                "smallest_p": None,
                "spread": float(np.std(differences, ddof=1)),
            }
        )
    return out


def pool_seeds(frame):
    """The tables' and figures' view of the tidy metrics: one row per condition. A condition trained from k >= 2 seeds
    becomes one row whose `<metric>_mean` is the mean over its seeds' means and `<metric>_2se` two standard errors over
    the seeds (the between-seed spread: training randomness, sampling inside it), with `seeds` = k and no `seed`; a
    condition of one seed keeps its row (its 2 SE over runs, or prefixes for the TV) with `seeds` = 1. Without this a
    table keyed by condition would show one seed's row and drop the others. Perplexity, one value per model, is pooled
    the same way (its `perplexity_2se`: two standard errors over seeds, null at one seed)."""
    import polars as pl

    from workflow_lib.metric_registry import REGISTRY
    from workflow_lib.report.conditions import KEYS

    if "seed" not in frame.columns or frame.height == 0:
        return frame.with_columns(seeds=pl.lit(1, dtype=pl.Int64))
    keys = [k for k in KEYS if k != "seed" and k in frame.columns]
    values = [m.name for m in REGISTRY if m.mean_column != m.name and m.mean_column in frame.columns]
    bare = [m.name for m in REGISTRY if m.mean_column == m.name]  # one value per model (perplexity): no 2 SE of its own
    counted = frame.with_columns(seeds=pl.col("seed").n_unique().over(keys).cast(pl.Int64))
    single = counted.filter(pl.col("seeds") == 1).with_columns(
        [pl.lit(None, dtype=pl.Float64).alias(f"{m}_2se") for m in bare]
    )
    several = counted.filter(pl.col("seeds") > 1)
    if not several.height:
        return single
    spread = lambda c: 2 * pl.col(c).std(ddof=1) / pl.col(c).count().sqrt()  # over the seeds that have a value
    pooled = several.group_by(keys, maintain_order=True).agg(
        [pl.col(f"{m}_mean").mean() for m in values]
        + [spread(f"{m}_mean").alias(f"{m}_2se") for m in values]
        + [c for m in bare for c in (pl.col(m).mean(), spread(m).alias(f"{m}_2se"))]
        + [
            pl.col(c).first()
            for c in several.columns
            if c not in keys and c not in {f"{m}_{s}" for m in values for s in ("mean", "2se")} | set(bare)
        ]
    )
    pooled = pooled.with_columns(pl.lit(None, dtype=frame.schema["seed"]).alias("seed"))
    return pl.concat([single, pooled.select(single.columns)], how="vertical_relaxed")
