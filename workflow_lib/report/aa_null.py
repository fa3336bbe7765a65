"""The summary's A/A null (`report.aa_null`; docs/method.md §4, "The A/A null"): one method against itself.

comparisons.null_pairs pairs each trained condition's later training seeds with its earlier ones; report.contrasts
tests them as it tests two methods (family "null"). Both arms are one method, so every difference is chance: a row
with p < 0.05 is a false positive of the test, which its premises allow in 5% of rows. This module writes what the
rows say; the test's level measured over many null studies is bench/aa_null.py's (docs/benchmarks.md, "The A/A null").
"""

from __future__ import annotations

import polars as pl

from workflow_lib.comparisons import NULL, null_arm
from workflow_lib.metric_registry import PAIRED as METRICS
from workflow_lib.report.contrasts import SEEDS
from workflow_lib.report.statistics import ALPHA


def null_rows(contrasts: pl.DataFrame | None) -> pl.DataFrame | None:
    """The A/A null's rows across training seeds (the seed-level test), or None where the study has none."""
    if contrasts is None or not contrasts.height or "unit" not in contrasts.columns:
        return None
    rows = contrasts.filter((pl.col("family") == NULL) & (pl.col("unit") == SEEDS))
    return rows if rows.height else None


def null_sentences(contrasts: pl.DataFrame | None) -> list[str]:
    """One sentence per metric of the seed-level test on the A/A null: how many rows it tested, how many reached
    p < 0.05 uncorrected, and each row's difference; then what a false positive means. [] without null rows."""
    rows = null_rows(contrasts)
    if rows is None:
        return []
    lines = []
    for metric, label in METRICS.items():
        part = rows.filter(pl.col("metric") == metric)
        if not part.height:
            continue
        tested = part.filter(pl.col("not_testable").is_null() & pl.col("p").is_not_null())
        rejected = tested.filter(pl.col("p") < ALPHA).height
        cells = []
        for r in part.sort(["eval_set", "objective", "a"]).to_dicts():
            what = f"{r['eval_set']} {r['objective']} ({null_arm(r['a'])})"
            if r["p"] is None or r["not_testable"] is not None:
                cells.append(f"{what}: not testable ({r['not_testable'] or 'no p'})")
                continue
            interval = f" [{r['low']:+.3f}, {r['high']:+.3f}]" if r["low"] is not None else ""
            cells.append(f"{what}: {r['difference']:+.3f}{interval}, p {r['p']:.3f} over {r['n']} seed pairs")
        lines.append(
            f"{label}: {rejected} of {tested.height} tested rows at p < {ALPHA:g} (uncorrected); " + "; ".join(cells)
        )
    lines.append(
        "Each row compares one method with itself (its later training seeds against its earlier ones, paired as the "
        "seed-level test pairs two methods' seeds), so every difference is training randomness: a row at p < "
        f"{ALPHA:g} is a false positive, which the test's premises allow in {ALPHA:.0%} of rows. One study's rows share "
        "their seeds, so their count is no measure of the level; bench/aa_null.py measures it over many null studies."
    )
    return lines
