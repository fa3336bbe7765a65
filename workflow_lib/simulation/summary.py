"""The simulation study's summary: mean +- 2 SE over replications, paired differences to intensity 0, figure.

Every replication of a vocabulary size shares truth, data and initial weights across intensities, so the
difference MAE(alpha) - MAE(0) is taken within a replication and its SE is the SE of those differences.
Reading (a) (rows never seen as a first element) exists only in replications that leave such rows; its mean
is over those replications (`n_unseen_rows_reps` says how many), and where none do, the summary and the
figure say so instead of showing a number.
"""

from __future__ import annotations

import polars as pl

from workflow_lib.files import atomic_path

READINGS = ("unseen_rows", "unseen_pairs", "all")
KEYS = ["vocab_size", "synonyms", "intensity"]


def _mean_2se(column: str, name: str) -> list[pl.Expr]:
    col = pl.col(column)
    n = col.count()
    return [
        col.mean().alias(f"{name}_mean"),
        pl.when(n > 1).then(2 * col.std(ddof=1) / n.sqrt()).otherwise(None).alias(f"{name}_2se"),
    ]


def summarize(results: pl.DataFrame) -> pl.DataFrame:
    """One row per (vocab_size, synonyms, intensity)."""
    baseline = results.filter(pl.col("intensity") == 0).select(
        ["vocab_size", "synonyms", "replication"] + [pl.col(f"mae_{r}").alias(f"base_{r}") for r in READINGS]
    )
    paired = results.join(baseline, on=["vocab_size", "synonyms", "replication"], how="left")
    aggregations = [
        pl.len().alias("replications"),
        (pl.col("n_unseen_rows") > 0).sum().alias("n_unseen_rows_reps"),
        pl.col("n_unseen_rows").mean().alias("n_unseen_rows_mean"),
        pl.col("n_unseen_pairs").mean().alias("n_unseen_pairs_mean"),
        (pl.col("n_replaced").sum() / pl.col("n_eligible").sum()).alias("replaced_share"),
        pl.col("n_unseen_rows_perturbed").mean().alias("n_unseen_rows_perturbed_mean"),
    ]
    for r in READINGS:
        aggregations += _mean_2se(f"mae_{r}", f"mae_{r}") + _mean_2se(f"uniform_{r}", f"uniform_{r}")
        aggregations += _mean_2se(f"diff_{r}", f"diff_{r}")
    paired = paired.with_columns([(pl.col(f"mae_{r}") - pl.col(f"base_{r}")).alias(f"diff_{r}") for r in READINGS])
    return paired.group_by(KEYS).agg(aggregations).sort(KEYS)


def _cell(mean, se, digits=5) -> str:
    if mean is None:
        return "n/a"
    return f"{mean:.{digits}f}" + ("" if se is None else f" ± {se:.{digits}f}")


def markdown(summary: pl.DataFrame) -> str:
    """A readable table: both readings with their 2 SE and the paired difference to intensity 0."""
    lines = [
        "# Simulation study (paper Section 4)",
        "",
        (
            "MAE of the estimated transition matrix, mean ± 2 SE over replications; Δ = paired difference to "
            "intensity 0. (a) rows never seen as a first element of a training pair, (b) pairs never seen. "
            "'n/a' under (a): no replication left an unseen row."
        ),
        "",
        (
            "| V | synonyms | alpha | reps | reps with (a) | rows (a) | MAE (a) | Δ (a) | uniform (a) | pairs (b) "
            "| MAE (b) | Δ (b) | uniform (b) |"
        ),
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in summary.iter_rows(named=True):
        lines.append(
            f"| {r['vocab_size']} | {r['synonyms']} | {r['intensity']:g} | {r['replications']} "
            f"| {r['n_unseen_rows_reps']} "
            f"| {r['n_unseen_rows_mean']:.1f} | {_cell(r['mae_unseen_rows_mean'], r['mae_unseen_rows_2se'])} "
            f"| {_cell(r['diff_unseen_rows_mean'], r['diff_unseen_rows_2se'])} "
            f"| {_cell(r['uniform_unseen_rows_mean'], None)} | {r['n_unseen_pairs_mean']:.0f} "
            f"| {_cell(r['mae_unseen_pairs_mean'], r['mae_unseen_pairs_2se'])} "
            f"| {_cell(r['diff_unseen_pairs_mean'], r['diff_unseen_pairs_2se'])} "
            f"| {_cell(r['uniform_unseen_pairs_mean'], None)} |"
        )
    return "\n".join(lines) + "\n"


def write_summary(inputs: list[str], csv_path: str, markdown_path: str, figure_stem: str) -> pl.DataFrame:
    from workflow_lib.simulation.figure import simulation_figure

    results = pl.concat([pl.read_parquet(p) for p in inputs])
    summary = summarize(results)
    with atomic_path(csv_path) as tmp:
        summary.write_csv(tmp, float_precision=8)
    with atomic_path(markdown_path) as tmp:
        tmp.write_text(markdown(summary))
    simulation_figure(summary, figure_stem)
    return summary
