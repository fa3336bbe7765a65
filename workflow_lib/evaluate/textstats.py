"""Diversity and repetition of sampled continuations, per run: distinct-1..4, repetition and rep-4.

Computed on the continuations only, on their token ids (the samples' `continuation_ids`), so the numbers do not
depend on how text splits on whitespace; a samples file without that column falls back to the whitespace words of
`text`. All counts are numpy over the flat token array and its row offsets: n-grams get integer codes once
(`ngram_codes`), then are counted per run and per continuation with np.unique on (group, code) keys. The
definitions and their sources: docs/method.md §4, "Other metrics".
"""

from __future__ import annotations

import numpy as np

DISTINCT_ORDERS = (1, 2, 3, 4)
REPEAT_ORDER = 4
FIELDS = tuple(f"distinct_{n}" for n in DISTINCT_ORDERS) + ("repetition", "rep_4")


def continuation_tokens(samples) -> tuple[np.ndarray, np.ndarray]:
    """(values, offsets) of the continuations of a samples Arrow table: row i is values[offsets[i]:offsets[i+1]]."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if "continuation_ids" in samples.column_names:
        column = samples.column("continuation_ids")
        lists = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
        lengths = pc.fill_null(pc.list_value_length(lists), 0).to_numpy(zero_copy_only=False).astype(np.int64)
        values = lists.flatten().to_numpy(zero_copy_only=False).astype(np.int64)
    else:
        words = [text.split() for text in samples.column("text").to_pylist()]
        lengths = np.array([len(w) for w in words], dtype=np.int64)
        flat = [word for row in words for word in row]
        values = (
            np.unique(np.array(flat, dtype=object).astype(str), return_inverse=True)[1].astype(np.int64)
            if flat
            else np.zeros(0, dtype=np.int64)
        )
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    return values, offsets


def ngram_codes(values: np.ndarray, offsets: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(code, row) of every n-gram that lies inside one row; equal n-grams share a code in [0, #distinct)."""
    lengths = np.diff(offsets)
    row_of_token = np.repeat(np.arange(len(lengths)), lengths)
    start = np.flatnonzero(np.arange(len(values)) + n <= offsets[row_of_token + 1])
    grams = np.ascontiguousarray(values[start[:, None] + np.arange(n)], dtype=np.int64)  # [m, n]
    as_bytes = grams.view(np.dtype((np.void, grams.itemsize * n))).ravel()  # one opaque key per row, exact
    codes = np.unique(as_bytes, return_inverse=True)[1].reshape(-1) if len(start) else np.zeros(0, dtype=np.int64)
    return codes.astype(np.int64), row_of_token[start]


def distinct_per_group(codes: np.ndarray, group: np.ndarray, n_groups: int) -> tuple[np.ndarray, np.ndarray]:
    """(distinct n-grams, n-grams) per group."""
    n_codes = int(codes.max()) + 1 if len(codes) else 1
    pairs = np.unique(group * n_codes + codes)
    return np.bincount(pairs // n_codes, minlength=n_groups), np.bincount(group, minlength=n_groups)


def share(numerator: np.ndarray, denominator: np.ndarray) -> np.ndarray:
    """numerator / denominator, 0 where the denominator is 0."""
    return np.divide(numerator, denominator, out=np.zeros(len(numerator)), where=denominator > 0)


def text_stats(values: np.ndarray, offsets: np.ndarray, run_index: np.ndarray, n_runs: int) -> dict[str, np.ndarray]:
    """distinct_1..distinct_4, repetition and rep_4 per run (docs/method.md §4, "Other metrics"); `run_index[i]` in
    [0, n_runs) is continuation i's run."""
    run_index = np.asarray(run_index, dtype=np.int64)
    n_rows = len(offsets) - 1
    stats = {}
    for n in DISTINCT_ORDERS:
        codes, row = ngram_codes(values, offsets, n)
        distinct, total = distinct_per_group(codes, run_index[row], n_runs)
        stats[f"distinct_{n}"] = share(distinct, total)
        if n == REPEAT_ORDER:
            distinct_row, total_row = distinct_per_group(codes, row, n_rows)
            per_row = share(total_row - distinct_row, total_row)
            continuations = np.bincount(run_index, minlength=n_runs)
            stats["repetition"] = share(
                np.bincount(run_index, weights=distinct_row < total_row, minlength=n_runs), continuations
            )
            stats["rep_4"] = share(np.bincount(run_index, weights=per_row, minlength=n_runs), continuations)
    return stats
