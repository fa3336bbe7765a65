"""Text statistics of sampled continuations, per run: distinct-1..4, repetition and rep-4, one registry of them.

Adding one is one function here, decorated with its `Metric` (`statistic`): it reads a `Texts` and returns a value per
run; the evaluation writes it and metric_registry.py reads its entry from this file's syntax tree. Computed on the
continuations' token ids (`continuation_ids`; without them, the whitespace words of `text`), as numpy over the flat
token array and its row offsets: n-grams get integer codes once per n (`Texts.ngrams`), counted per run and per
continuation with np.unique on (group, code) keys. Definitions and sources: docs/method.md §4, "Other metrics".
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from workflow_lib.metric_registry import Metric


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


class Texts:
    """The continuations of one evaluation: the flat token array `values`, its row offsets (row i is
    values[offsets[i]:offsets[i+1]]) and each row's run in [0, n_runs); what a statistic reads. Each n's n-gram codes
    and per-continuation counts are computed once, whichever statistics read them."""

    def __init__(self, values: np.ndarray, offsets: np.ndarray, run_index: np.ndarray, n_runs: int):
        self.values, self.offsets, self.n_runs = values, offsets, n_runs
        self.run_index = np.asarray(run_index, dtype=np.int64)
        self.n_rows = len(offsets) - 1
        self._ngrams: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self._per_row: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    def ngrams(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        """(code, row) of every n-gram inside one continuation (`ngram_codes`), computed once per n."""
        if n not in self._ngrams:
            self._ngrams[n] = ngram_codes(self.values, self.offsets, n)
        return self._ngrams[n]

    def distinct(self, n: int) -> np.ndarray:
        """Per run: its distinct n-grams over its n-grams (0 for a run with none)."""
        codes, row = self.ngrams(n)
        return share(*distinct_per_group(codes, self.run_index[row], self.n_runs))

    def per_continuation(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        """(distinct n-grams, n-grams) of each continuation, computed once per n."""
        if n not in self._per_row:
            codes, row = self.ngrams(n)
            self._per_row[n] = distinct_per_group(codes, row, self.n_rows)
        return self._per_row[n]

    def run_mean(self, per_row: np.ndarray) -> np.ndarray:
        """Per run: the mean over its continuations of a value per continuation (0 for a run with none)."""
        continuations = np.bincount(self.run_index, minlength=self.n_runs)
        return share(np.bincount(self.run_index, weights=per_row, minlength=self.n_runs), continuations)


Statistic = Callable[[Texts], np.ndarray]
STATISTICS: dict[str, tuple[Metric, Statistic]] = {}  # name -> (its registry entry, its function), in order


def statistic(metric: Metric) -> Callable[[Statistic], Statistic]:
    """Registers a text statistic under its `Metric`. metric_registry.py reads the decorator from this file's syntax
    tree, so its arguments are literals, and the function is a top-level one."""

    def register(function: Statistic) -> Statistic:
        if metric.name in STATISTICS:
            raise ValueError(f"text statistic {metric.name!r} is registered twice")
        STATISTICS[metric.name] = (metric, function)
        return function

    return register


def text_stats(values: np.ndarray, offsets: np.ndarray, run_index: np.ndarray, n_runs: int) -> dict[str, np.ndarray]:
    """Every registered statistic per run, in their order (docs/method.md §4, "Other metrics"); `run_index[i]` in
    [0, n_runs) is continuation i's run."""
    texts = Texts(values, offsets, run_index, n_runs)
    stats = {}
    for name, (_, function) in STATISTICS.items():
        stats[name] = np.asarray(function(texts), dtype=np.float64)
        if stats[name].shape != (n_runs,):
            raise ValueError(
                f"text statistic {name!r} gave shape {stats[name].shape}, not one value per run ({n_runs})"
            )
    return stats


# The statistics, in the order of the report's columns. A new one is a function like these (at the end, or where its
# column goes): its `Metric` (metric_registry.py's fields, literals only) and one value per run from a `Texts`.
@statistic(Metric("distinct_1", "distinct-1", "metrics", ranked=False, gloss="share of distinct unigrams"))
def distinct_1(texts: Texts) -> np.ndarray:
    return texts.distinct(1)


@statistic(
    Metric("distinct_2", "distinct-2", "metrics", tables=("other",), ranked=False, gloss="share of distinct bigrams")
)
def distinct_2(texts: Texts) -> np.ndarray:
    return texts.distinct(2)


@statistic(Metric("distinct_3", "distinct-3", "metrics", ranked=False, gloss="share of distinct trigrams"))
def distinct_3(texts: Texts) -> np.ndarray:
    return texts.distinct(3)


@statistic(Metric("distinct_4", "distinct-4", "metrics", ranked=False, gloss="share of distinct 4-grams"))
def distinct_4(texts: Texts) -> np.ndarray:
    return texts.distinct(4)


@statistic(Metric("repetition", "repetition", "metrics", tables=("other",), ranked=False))
def repetition(texts: Texts) -> np.ndarray:
    """The share of a run's continuations that repeat a 4-gram."""
    distinct, total = texts.per_continuation(4)
    return texts.run_mean(distinct < total)


@statistic(Metric("rep_4", "rep-4", "metrics", ranked=False))
def rep_4(texts: Texts) -> np.ndarray:
    """A run's mean over its continuations of the share of 4-grams that repeat an earlier one."""
    distinct, total = texts.per_continuation(4)
    return texts.run_mean(share(total - distinct, total))
