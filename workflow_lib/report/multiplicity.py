"""How many tests the findings were chosen among, and which survive a correction across the metrics they are reported
with (docs/method.md §4, "Multiplicity").

Each table of report.contrasts (family x metric x unit) is Holm-corrected on its own, but the findings read a family's
verdicts across MAUVE, ROUGE, the exact TV and perplexity together. Holm's step-down over every tested row of a
(family, unit) pair, whatever its metric, controls the family-wise error of the findings as they are read; the
summary names the rows that are significant within their own table but not across the metrics.
"""

from __future__ import annotations

import polars as pl

from workflow_lib.comparisons import NULL
from workflow_lib.report.statistics import ALPHA, holm


def across_metrics(contrasts: pl.DataFrame) -> pl.DataFrame:
    """The tested rows with `p_across`: Holm over all metrics within each (family, unit). Not the A/A null's
    (comparisons.NULL): a check of the test, not a finding."""
    tested = contrasts.filter(pl.col("p").is_not_null() & pl.col("p_holm").is_not_null() & (pl.col("family") != NULL))
    parts = []
    for _, part in tested.group_by(["family", "unit"], maintain_order=True):
        parts.append(part.with_columns(pl.Series("p_across", holm(part["p"].to_list()), dtype=pl.Float64)))
    return pl.concat(parts) if parts else tested.with_columns(pl.lit(None, dtype=pl.Float64).alias("p_across"))


def multiplicity_sentence(contrasts: pl.DataFrame | None) -> str | None:
    """'The findings above were read among N tests ...': the count, the tables, and what a correction across the
    metrics keeps; None without tested rows."""
    if contrasts is None or not contrasts.height:
        return None
    rows = across_metrics(contrasts)
    if not rows.height:
        return None
    tables = rows.select(["family", "metric", "unit"]).unique().height
    families = rows.select(["family", "unit"]).unique().height
    within = rows.filter(pl.col("p_holm") < ALPHA)
    kept = within.filter(pl.col("p_across") < ALPHA)
    lost = within.filter(pl.col("p_across") >= ALPHA)
    named = "; ".join(
        f"{r['family']} {r['metric']} {r['eval_set']} {r['objective']} {r['a']} (p_holm {r['p_holm']:.3f}, across "
        f"metrics {r['p_across']:.3f})"
        for r in lost.to_dicts()
    )
    return (
        f"These findings were read among {rows.height} tested contrasts in {tables} tables (family x metric x unit), "
        f"each Holm-corrected within its table. Held to Holm's correction across the metrics they are reported with "
        f"({families} families: every metric of a family and unit together), {kept.height} of the {within.height} rows "
        f"significant within their table stay significant" + (f"; these do not: {named}." if lost.height else ".")
    )
