"""Paired statistics on arrays: the t interval over runs, the prompt bootstrap and Holm's correction.

Why here and not in `contrasts`: these functions know nothing of the study's paths or conditions; they take
arrays and return an `Estimate`, so they are tested on simulated data with known answers.
"""

from __future__ import annotations

import hashlib
from typing import NamedTuple

import numpy as np

# ---- statistics on arrays ------------------------------------------------------------------------------


class Estimate(NamedTuple):
    """A difference A - B, its 95% interval (None when it cannot be had), a two-sided p and the pairs used."""

    difference: float
    low: float | None
    high: float | None
    p: float | None
    n: int


def paired_t(a, b, level: float = 0.95) -> Estimate:
    """Mean of d = a - b over paired runs, a t interval (df = n - 1) and the paired t-test's p. One run: no
    interval and no p. No spread (every run moved by the same amount): the interval is that amount, p = 1 if
    it is 0 and 0 otherwise."""
    from scipy import stats

    d = np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)
    n, mean = len(d), float(d.mean())
    if n < 2:
        return Estimate(mean, None, None, None, n)
    sd = float(d.std(ddof=1))
    if sd == 0.0:
        return Estimate(mean, mean, mean, 1.0 if mean == 0.0 else 0.0, n)
    se = sd / np.sqrt(n)
    half = float(stats.t.ppf(0.5 + level / 2, n - 1)) * se
    return Estimate(mean, mean - half, mean + half, float(2 * stats.t.sf(abs(mean) / se, n - 1)), n)


def bootstrap_indices(n: int, resamples: int, identity: str) -> np.ndarray:
    """[resamples, n] prompt indices drawn with replacement, from a generator seeded by `identity`'s hash."""
    seed = int.from_bytes(hashlib.sha256(identity.encode()).digest()[:8], "little")
    return np.random.default_rng(seed).integers(0, n, size=(resamples, n), dtype=np.int64)


def percentile_estimate(observed: float, replicates: np.ndarray, n: int) -> Estimate:
    """95% percentile interval and the two-sided bootstrap p = 2 min(P*(d <= 0), P*(d >= 0)), floored at 1/B
    (B resamples cannot tell a smaller p apart)."""
    low, high = np.quantile(replicates, [0.025, 0.975])
    p = 2 * min(float(np.mean(replicates <= 0)), float(np.mean(replicates >= 0)))
    return Estimate(float(observed), float(low), float(high), min(1.0, max(p, 1 / len(replicates))), n)


def bootstrap_mean_difference(a: np.ndarray, b: np.ndarray, indices: np.ndarray) -> Estimate:
    """Mean over prompts of a - b (per-prompt values, paired by position), resampled by `indices`."""
    d = np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)
    return percentile_estimate(d.mean(), d[indices].mean(axis=1), len(d))


def bootstrap_perplexity_difference(nll_a, tokens_a, nll_b, tokens_b, indices: np.ndarray) -> Estimate:
    """ppl_A - ppl_B, ppl = exp(sum NLL / sum tokens) over the prompts (summed NLL and token count per prompt,
    paired by position), each resample the same prompts for both."""
    arrays = [np.asarray(x, dtype=np.float64) for x in (nll_a, tokens_a, nll_b, tokens_b)]

    def difference(rows):
        (na, ta, nb, tb) = (x[rows] for x in arrays)
        return np.exp(na.sum(axis=-1) / ta.sum(axis=-1)) - np.exp(nb.sum(axis=-1) / tb.sum(axis=-1))

    return percentile_estimate(difference(np.arange(len(arrays[0]))), difference(indices), len(arrays[0]))


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
