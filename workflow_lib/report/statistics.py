"""Paired statistics on arrays: the t interval over runs, the prompt bootstrap and Holm's correction.

Why here and not in `contrasts`: these functions know nothing of the study's paths or conditions; they take
arrays and return an `Estimate`, so they are tested on simulated data with known answers.
"""

from __future__ import annotations

import hashlib
from typing import Callable, NamedTuple

import numpy as np

# A table of m comparisons is Holm-corrected, which multiplies its smallest p by m. B resamples resolve a
# two-sided p down to 2/(B + 1), so B >= 200 m lets the table's smallest adjusted p reach 2m/(B + 1) < 0.01.
RESAMPLES_PER_COMPARISON = 200
# The fewest paired runs a t-test over runs reports a p for: with 2 runs the test has 1 degree of freedom and
# a score quantised into a few values (MAUVE on few texts) gives a tiny spread and a p near 0 by arithmetic alone.
MIN_RUNS = 3
# Prompt indices drawn at once: [rows, n] with rows * n about this many (16 MiB of int64), so B = 200 m
# resamples of thousands of prompts never sit in memory whole.
CHUNK_ELEMENTS = 1 << 21


class Estimate(NamedTuple):
    """A difference A - B, its 95% interval (None when it cannot be had), a two-sided p (None when it cannot
    be had) and the pairs used."""

    difference: float
    low: float | None
    high: float | None
    p: float | None
    n: int


def paired_t(a, b, level: float = 0.95) -> Estimate:
    """Mean of d = a - b over paired runs, a t interval (df = n - 1) and the paired t-test's p. Fewer than
    MIN_RUNS runs: the mean only, no interval and no p (not testable). No spread: a condition against itself
    (d = 0 everywhere) is no difference (interval [0, 0], p = 1); every run moved by the same non-zero amount
    has no uncertainty to test, so no interval and no p (the t statistic is infinite, and p = 0 would be a
    certainty that three runs cannot give)."""
    from scipy import stats

    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    d = a - b
    if not np.isfinite(d).all():
        raise ValueError("paired t: a non-finite per-run value; no estimate is made")
    n, mean = len(d), float(d.mean())
    if n < MIN_RUNS:
        return Estimate(mean, None, None, None, n)
    sd = float(d.std(ddof=1))
    # A spread at the level of rounding ((x - 0.25) - (x - 0.3) is not exactly 0.05 for every x) is no spread.
    if sd <= 8 * np.finfo(np.float64).eps * max(float(np.abs(a).max()), float(np.abs(b).max())):
        return Estimate(mean, mean, mean, 1.0, n) if mean == 0.0 else Estimate(mean, None, None, None, n)
    se = sd / np.sqrt(n)
    half = float(stats.t.ppf(0.5 + level / 2, n - 1)) * se
    return Estimate(mean, mean - half, mean + half, float(2 * stats.t.sf(abs(mean) / se, n - 1)), n)


def resamples_for(comparisons: int, minimum: int) -> int:
    """B for a Holm table of `comparisons` rows: at least `minimum`, and enough that a row whose every
    replicate lies on one side of 0 keeps an adjusted p of at most 0.01 (see RESAMPLES_PER_COMPARISON)."""
    return max(int(minimum), RESAMPLES_PER_COMPARISON * int(comparisons))


def _seed(identity: str) -> int:
    return int.from_bytes(hashlib.sha256(identity.encode()).digest()[:8], "little")


def bootstrap_indices(n: int, resamples: int, identity: str, start: int = 0) -> np.ndarray:
    """Rows start .. start + resamples of the comparison's [B, n] matrix of prompt indices drawn with
    replacement, from a PCG64 stream seeded by `identity`'s hash. Each index uses one 64-bit draw (a uniform
    double times n), so row r always starts at draw r * n: any row range is had by advancing the stream, and
    the matrix is the same bytes however it is cut into chunks."""
    generator = np.random.PCG64(_seed(identity))
    generator.advance(start * n)
    # floor(u n) < n for u < 1 and n < 2^53; the minimum only guards that promise.
    indices = (np.random.Generator(generator).random((resamples, n)) * n).astype(np.int64)
    return np.minimum(indices, n - 1, out=indices)


class Resampling(NamedTuple):
    """`count` bootstrap resamples of `n` prompts, seeded by `identity`, drawn `chunk_elements` indices at a time."""

    n: int
    count: int
    identity: str
    chunk_elements: int = CHUNK_ELEMENTS

    def replicates(self, statistic: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
        """statistic(indices [rows, n]) -> [..., rows] over the chunks, joined along the last axis: [..., count]."""
        rows = max(1, self.chunk_elements // max(self.n, 1))
        parts = [statistic(bootstrap_indices(self.n, min(rows, self.count - start), self.identity, start))
                 for start in range(0, self.count, rows)]
        return np.concatenate(parts, axis=-1)


def _replicates(statistic: Callable[[np.ndarray], np.ndarray], resampling: Resampling | np.ndarray) -> np.ndarray:
    """A ready [B, n] index matrix (small studies, tests) or a Resampling drawn in chunks."""
    if isinstance(resampling, Resampling):
        return resampling.replicates(statistic)
    return statistic(np.asarray(resampling))


def percentile_estimate(observed: float, replicates: np.ndarray, n: int) -> Estimate:
    """95% percentile interval and the two-sided bootstrap p = 2 (1 + k) / (B + 1), k the replicates on the
    far side of 0 (the fewer of those <= 0 and >= 0), at most 1. The +1 counts the observed sample among the
    resamples (Davison and Hinkley 1997, section 4.4), so p is never below 2/(B + 1), the smallest p that B
    resamples resolve: no p is reported finer than the resampling can tell."""
    replicates = np.asarray(replicates, dtype=np.float64)
    if not (np.isfinite(observed) and np.isfinite(replicates).all()):
        raise ValueError(f"bootstrap: a non-finite difference ({observed}) or replicate; no estimate is made")
    low, high = np.quantile(replicates, [0.025, 0.975])
    far = min(int(np.count_nonzero(replicates <= 0)), int(np.count_nonzero(replicates >= 0)))
    p = min(1.0, 2 * (1 + far) / (len(replicates) + 1))
    return Estimate(float(observed), float(low), float(high), p, n)


def bootstrap_mean_differences(a: np.ndarray, b: np.ndarray, resampling: Resampling | np.ndarray) -> list[Estimate]:
    """For each row of [k, n] per-prompt values a and b (paired by position), the mean over prompts of a - b,
    every row resampled by the same indices (one pass over the resamples for k metrics)."""
    d = np.atleast_2d(np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64))
    # One 1-D gather per metric: numpy gathers a 1-D array several times faster than d[:, rows].
    replicates = _replicates(lambda rows: np.stack([np.take(x, rows).mean(axis=-1) for x in d]), resampling)
    return [percentile_estimate(d[k].mean(), replicates[k], d.shape[1]) for k in range(len(d))]


def bootstrap_mean_difference(a: np.ndarray, b: np.ndarray, resampling: Resampling | np.ndarray) -> Estimate:
    """Mean over prompts of a - b (per-prompt values, paired by position), resampled by `resampling`."""
    return bootstrap_mean_differences(a, b, resampling)[0]


def bootstrap_perplexity_difference(nll_a, tokens_a, nll_b, tokens_b, resampling: Resampling | np.ndarray) -> Estimate:
    """ppl_A - ppl_B, ppl = exp(sum NLL / sum tokens) over the prompts (summed NLL and token count per prompt,
    paired by position), each resample the same prompts for both."""
    arrays = [np.asarray(x, dtype=np.float64) for x in (nll_a, tokens_a, nll_b, tokens_b)]

    def difference(rows):
        (na, ta, nb, tb) = (x[rows] for x in arrays)
        return np.exp(na.sum(axis=-1) / ta.sum(axis=-1)) - np.exp(nb.sum(axis=-1) / tb.sum(axis=-1))

    return percentile_estimate(difference(np.arange(len(arrays[0]))), _replicates(difference, resampling), len(arrays[0]))


def holm(p_values: list[float | None]) -> list[float | None]:
    """Holm's step-down adjustment: the k-th smallest of m p-values becomes max over j <= k of
    min(1, (m - j + 1) p_(j)). A missing p stays missing and does not count in m."""
    present = sorted((p, i) for i, p in enumerate(p_values) if p is not None)
    adjusted: list[float | None] = [None] * len(p_values)
    running = 0.0
    for rank, (p, i) in enumerate(present):
        running = max(running, min(1.0, (len(present) - rank) * p))
        adjusted[i] = running
    return adjusted
