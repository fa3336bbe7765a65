"""Which MAUVE cells the report may show as numbers: those whose runs had enough texts to resolve anything.

The evaluate step flags a metrics file whose runs had fewer than `evaluation.mauve.min_texts` texts per side
(`mauve_status` "too few texts (n)", workflow_lib.evaluate.metrics); the tidy table carries the flag. Why one module:
the tables, figures, contrasts, findings and summary must all refuse the same cells, so they ask here instead of
each testing the column. A table without the column (a file written before the flag) is read as all resolvable.
"""

from __future__ import annotations

from typing import cast

import polars as pl

STATUS = "mauve_status"


def _flagged(frame: pl.DataFrame) -> pl.Expr:
    """True on the rows whose MAUVE is flagged as not resolvable."""
    return (pl.col(STATUS).is_not_null() & (pl.col(STATUS) != "")) if STATUS in frame.columns else pl.lit(False)


def refused(frame: pl.DataFrame) -> pl.DataFrame:
    """The rows whose MAUVE is flagged as not resolvable."""
    return frame.filter(_flagged(frame))


def resolved(frame: pl.DataFrame) -> pl.DataFrame:
    """The rows whose MAUVE may be shown and compared (MAUVE present and not flagged)."""
    rows = frame.filter(pl.col("mauve_mean").is_not_null()) if "mauve_mean" in frame.columns else frame
    if STATUS not in frame.columns:
        return rows
    return rows.filter(pl.col(STATUS).is_null() | (pl.col(STATUS) == ""))


def refusal_sentence(frame: pl.DataFrame) -> str | None:
    """One plain sentence when some MAUVE cells were refused (None when none was): how many, their text counts,
    the floor, and what follows from it."""
    out = refused(frame)
    if not out.height:
        return None
    texts = out["mauve_texts"].drop_nulls() if "mauve_texts" in out.columns else pl.Series([], dtype=pl.Int64)
    floor = out["mauve_min_texts"].drop_nulls() if "mauve_min_texts" in out.columns else pl.Series([], dtype=pl.Int64)
    counts = (
        (f"{cast(int, texts.min())}" + (f"-{cast(int, texts.max())}" if texts.max() != texts.min() else ""))
        if texts.len()
        else "too few"
    )
    under = f", under the floor evaluation.mauve.min_texts = {cast(int, floor.max())}" if floor.len() else ""
    # the evaluated cells: scored, or refused (a refused cell has no score: workflow_lib.evaluate.metrics)
    measured = (
        frame.filter(pl.col("mauve_mean").is_not_null() | _flagged(frame)).height
        if "mauve_mean" in frame.columns
        else out.height
    )
    which = (
        "MAUVE is not resolvable in this study"
        if out.height >= measured
        else f"MAUVE is not resolvable in {out.height} of {measured} evaluated cells"
    )
    return (
        f"{which}: its runs have {counts} texts per side{under} (with so few, k-means quantises the score into "
        "a handful of buckets and it cannot tell a clear difference from none; mauve-text asks for a few "
        'thousand). Those cells read "too few texts (n)" and take no part in the paired comparisons, their '
        "marks or these findings; raise prompts.max_prompts to report MAUVE."
    )
