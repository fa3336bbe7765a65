"""The evaluation prompts of EMO's protocol, which the paper follows (docs/method.md §4).

A row becomes a prompt when it is long enough for a prefix, its 80-word human continuation and some slack,
and is not a WikiText heading. The model continues the `prefix`; MAUVE and ROUGE compare its text with the
`reference` (prefix + the next words), so both are cut by whitespace words, never tokens, and keep the prefix.
"""

from __future__ import annotations

import polars as pl

from workflow_lib.data.cleaning import WORD_PATTERN

FILTER_KEYS = ("dropped_min_chars", "dropped_min_words", "dropped_forbidden")


def make_prompts(
    texts: list[str],
    doc_ids: list[int] | None,
    prefix_words: int = 20,
    reference_words: int = 80,
    min_chars: int = 100,
    extra_words: int = 10,
    forbidden: str | None = "==",
    max_prompts: int | None = None,
    min_prompts: int = 1,
) -> tuple[pl.DataFrame, dict]:
    """Filter rows and cut them into (prefix, reference) pairs; returns the prompts and per-filter counts.

    Filters, applied in this order and each counted on the rows the previous ones left:
    `dropped_min_chars` (fewer than `min_chars` characters), `dropped_min_words` (fewer whitespace words than
    prefix_words + reference_words + extra_words), `dropped_forbidden` (contains `forbidden`; None or "" turns
    this filter off). Then the first `max_prompts` survivors are kept (None: all); the rest are counted as
    `dropped_max_prompts`.

    Words are Python `str.split()` words, re-joined by single spaces: prefix = the first `prefix_words`,
    reference = the first `prefix_words + reference_words`. Output columns: prompt_id (int64, 0..n-1),
    doc_id (int64; the row index when `doc_ids` is None), prefix, reference. Raises ValueError, with every
    count, when fewer than `min_prompts` rows survive (or `max_prompts`, where that is smaller), so a misconfigured
    eval set fails loudly instead of scoring nothing, or a handful.
    """
    if doc_ids is not None and len(doc_ids) != len(texts):
        raise ValueError(f"doc_ids has {len(doc_ids)} entries but texts has {len(texts)}")
    if prefix_words < 1 or reference_words < 0 or extra_words < 0 or min_chars < 0:
        raise ValueError(
            f"need prefix_words >= 1 and reference_words, extra_words, min_chars >= 0; got prefix_words="
            f"{prefix_words}, reference_words={reference_words}, extra_words={extra_words}, min_chars={min_chars}"
        )
    if max_prompts is not None and max_prompts < 1:
        raise ValueError(f"max_prompts must be >= 1 or None, got {max_prompts}")

    min_words = prefix_words + reference_words + extra_words
    frame = pl.DataFrame(
        {"doc_id": list(range(len(texts))) if doc_ids is None else list(doc_ids), "text": list(texts)},
        schema={"doc_id": pl.Int64, "text": pl.String},
    )
    stats: dict[str, int] = {"rows_in": frame.height}
    text = pl.col("text")

    def drop_unless(frame: pl.DataFrame, keep: pl.Expr, key: str) -> pl.DataFrame:
        kept = frame.filter(keep)  # a null row (None text) fails every filter and is dropped here
        stats[key] = frame.height - kept.height
        return kept

    frame = drop_unless(frame, text.str.len_chars() >= min_chars, "dropped_min_chars")
    frame = frame.with_columns(words=text.str.extract_all(WORD_PATTERN))
    frame = drop_unless(frame, pl.col("words").list.len() >= min_words, "dropped_min_words")
    if forbidden:
        frame = drop_unless(frame, ~text.str.contains(forbidden, literal=True), "dropped_forbidden")
    else:
        stats["dropped_forbidden"] = 0
    stats["rows_eligible"] = frame.height
    if max_prompts is not None:
        frame = frame.head(max_prompts)
    stats["dropped_max_prompts"] = stats["rows_eligible"] - frame.height
    stats["prompts"] = frame.height

    need = min(min_prompts, max_prompts or min_prompts)
    if frame.height < max(need, 1):
        left = f"only {frame.height} prompts left" if frame.height else "no prompts left"
        raise ValueError(
            f"{left} from {stats['rows_in']} rows (fewer than {need}: prompts.min_prompts): "
            f"{stats['dropped_min_chars']} shorter than {min_chars} "
            f"characters, {stats['dropped_min_words']} with fewer than {min_words} words "
            f"({prefix_words} prefix + {reference_words} reference + {extra_words} extra), "
            f"{stats['dropped_forbidden']} containing {forbidden!r}"
        )

    words = pl.col("words")
    prompts = frame.select(
        pl.int_range(pl.len(), dtype=pl.Int64).alias("prompt_id"),
        pl.col("doc_id"),
        words.list.slice(0, prefix_words).list.join(" ").alias("prefix"),
        words.list.slice(0, prefix_words + reference_words).list.join(" ").alias("reference"),
    )
    return prompts, stats
