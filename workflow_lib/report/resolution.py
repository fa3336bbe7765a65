"""Which MAUVE cells the report may show as numbers: those whose runs had enough texts to resolve anything and
whose eval set's controls show that the featuriser sees what MAUVE is meant to score.

The evaluate step flags a metrics file whose runs had fewer than `evaluation.mauve.min_texts` texts per side
(`mauve_status` "too few texts (n)", workflow_lib.evaluate.metrics), or whose eval set's MAUVE controls failed
("MAUVE cannot see <controls> at n = .. with <featuriser>", workflow_lib.evaluate.control_scores); the tidy table carries
the flag. Why one module: the tables, figures, contrasts, findings and summary must all refuse the same cells, so
they ask here instead of each testing the column. A table without the column (a file written before the flag) is
read as all resolvable.
"""

from __future__ import annotations

from typing import cast

import polars as pl

# The metric whose cells this module gates, by its registry name (metric_registry): MAUVE, the one metric with a
# floor of texts and controls (evaluation.mauve). The report spells it here only.
MAUVE = "mauve"
STATUS = f"{MAUVE}_status"
BLIND = "MAUVE cannot see"  # how a status set by the controls begins (evaluate/control_scores.py `verdict`)


def _flagged(frame: pl.DataFrame) -> pl.Expr:
    """True on the rows whose MAUVE is flagged as not resolvable."""
    return (pl.col(STATUS).is_not_null() & (pl.col(STATUS) != "")) if STATUS in frame.columns else pl.lit(False)


def refused(frame: pl.DataFrame) -> pl.DataFrame:
    """The rows whose MAUVE is flagged as not resolvable."""
    return frame.filter(_flagged(frame))


def resolved(frame: pl.DataFrame) -> pl.DataFrame:
    """The rows whose MAUVE may be shown and compared (MAUVE present and not flagged)."""
    mean = f"{MAUVE}_mean"
    rows = frame.filter(pl.col(mean).is_not_null()) if mean in frame.columns else frame
    if STATUS not in frame.columns:
        return rows
    return rows.filter(pl.col(STATUS).is_null() | (pl.col(STATUS) == ""))


def refusal_label(frame: pl.DataFrame) -> str:
    """A figure's two lines for a panel whose every MAUVE cell was refused: why, in a few words."""
    statuses = refused(frame)[STATUS].to_list()
    if any(status.startswith(BLIND) for status in statuses):
        return "MAUVE not shown here: its controls fail\n(MAUVE cannot see degraded human text)"
    return "MAUVE not resolvable here:\ntoo few texts per run"


def refusal_sentence(frame: pl.DataFrame) -> str | None:
    """Plain sentences when some MAUVE cells were refused (None when none was): for cells under the floor, how many,
    their text counts and the floor; for cells whose controls failed, which eval sets and what MAUVE cannot see
    there; and what follows from each."""
    out = refused(frame)
    if not out.height:
        return None
    blind = out.filter(pl.col(STATUS).str.starts_with(BLIND))
    few = out.filter(~pl.col(STATUS).str.starts_with(BLIND))
    # the evaluated cells: scored, or refused (a refused cell has no score: workflow_lib.evaluate.metrics)
    measured = (
        frame.filter(pl.col("mauve_mean").is_not_null() | _flagged(frame)).height
        if "mauve_mean" in frame.columns
        else out.height
    )
    sentences = []
    if few.height:
        texts = few["mauve_texts"].drop_nulls() if "mauve_texts" in few.columns else pl.Series([], dtype=pl.Int64)
        floor = (
            few["mauve_min_texts"].drop_nulls() if "mauve_min_texts" in few.columns else pl.Series([], dtype=pl.Int64)
        )
        counts = (
            (f"{cast(int, texts.min())}" + (f"-{cast(int, texts.max())}" if texts.max() != texts.min() else ""))
            if texts.len()
            else "too few"
        )
        under = f", under the floor evaluation.mauve.min_texts = {cast(int, floor.max())}" if floor.len() else ""
        which = (
            "MAUVE is not resolvable in this study"
            if few.height >= measured
            else f"MAUVE is not resolvable in {few.height} of {measured} evaluated cells"
        )
        sentences.append(
            f"{which}: its runs have {counts} texts per side{under} (with so few, k-means quantises the score into "
            "a handful of buckets and it cannot tell a clear difference from none; mauve-text asks for a few "
            'thousand). Those cells read "too few texts (n)" and take no part in the paired comparisons, their '
            "marks or these findings; raise prompts.max_prompts to report MAUVE."
        )
    if blind.height:
        by_status = blind.group_by(STATUS, maintain_order=True).agg(pl.col("eval_set").unique(maintain_order=True))
        where = "; ".join(f"on {', '.join(sorted(sets))}, {status}" for status, sets in by_status.sort(STATUS).rows())
        share = "every evaluated cell" if blind.height >= measured else f"{blind.height} of {measured} evaluated cells"
        sentences.append(
            f"MAUVE's controls fail in {share}: {where} (\"What MAUVE "
            'can see here"). Those cells are not reported and take no part in the paired comparisons, their marks '
            "or these findings."
            + (
                " Here the exact TV to the true law (its table below) measures extrapolation without a featuriser."
                if "tv_mean" in frame.columns and frame["tv_mean"].drop_nulls().len()
                else ""
            )
        )
    return " ".join(sentences)
