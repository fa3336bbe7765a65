"""Paired statistics on arrays: the paired permutation test over prompts, t intervals, the paired t over runs, the
test across seeds, what a test could have seen, the rank agreement and Holm's correction.

Why here and not in `contrasts`: these functions know nothing of the study's paths or conditions; they take
arrays and return an `Estimate`, so they are tested on simulated data with known answers (and on simulated null
studies: tests/report/test_calibration.py). Why a permutation test over prompts, and what it replaced:
docs/method.md §4, "Paired comparisons".
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable
from typing import NamedTuple

import numpy as np

ALPHA = 0.05  # the level of every mark; a test that cannot reach it is not testable
# The fewest paired runs (or training seeds) a t-test reports a p for: with 2 the test has 1 degree of freedom and
# a score quantised into a few values (MAUVE on few texts) gives a tiny spread and a p near 0 by arithmetic alone.
MIN_RUNS = MIN_SEEDS = 3
# Besag and Clifford's (1991) sequential p: a row stops drawing swaps once this many reach its statistic, with
# p = STOP_AFTER / (swaps drawn), which is as exact as the fixed-B p. A clearly null row then costs about
# STOP_AFTER / p swaps instead of B; a row near the Holm threshold still draws hundreds to thousands.
STOP_AFTER = 20
# Swap masks drawn at once: [rows, n] with rows * n at most this many (16 MiB of float64), so B = 200 m swaps of
# thousands of prompts never sit in memory whole. The first chunk is small so that null rows stop after it.
CHUNK_ELEMENTS = 1 << 21
FIRST_CHUNK = 64
# |T*| within this relative distance of |T| counts as reaching it: sums taken in another order differ in the last
# bits, and counting such a near-tie can only raise p.
TIE_TOLERANCE = 1e-9


class Estimate(NamedTuple):
    """A difference A - B, its 95% interval (None when it cannot be had), a two-sided p (None when the contrast
    was not tested), the pairs used and, when there is no p, why (`untested`: "2 runs", "no spread", "5 prompts")."""

    difference: float
    low: float | None
    high: float | None
    p: float | None
    n: int
    untested: str | None = None


def plural(n: int, what: str) -> str:
    return f"{n} {what}" + ("" if n == 1 else "s")


def paired_t(a, b, level: float = 0.95, unit: str = "run") -> Estimate:
    """Mean of d = a - b over paired runs (or any paired `unit`: training seeds), a t interval (df = n - 1) and the
    paired t-test's p. Fewer than MIN_RUNS pairs: the mean only, not testable ("2 runs"). No spread: a condition
    against itself (d = 0 everywhere) is no difference (interval [0, 0], p = 1); every run moved by the same non-zero
    amount has no uncertainty to test, so no interval and no p ("no spread": the t statistic is infinite, and p = 0
    would be a certainty that three runs cannot give). With MIN_RUNS runs or more and a spread, the t-test's p can be
    as small as any level, so it is testable."""
    from scipy import stats

    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    d = a - b
    if not np.isfinite(d).all():
        raise ValueError("paired t: a non-finite per-run value; no estimate is made")
    n, mean = len(d), float(d.mean())
    if n < MIN_RUNS:
        return Estimate(mean, None, None, None, n, plural(n, unit))
    sd = float(d.std(ddof=1))
    # A spread at the level of rounding ((x - 0.25) - (x - 0.3) is not exactly 0.05 for every x) is no spread.
    if sd <= 8 * np.finfo(np.float64).eps * max(float(np.abs(a).max()), float(np.abs(b).max())):
        return Estimate(mean, mean, mean, 1.0, n) if mean == 0.0 else Estimate(mean, None, None, None, n, "no spread")
    se = sd / np.sqrt(n)
    half = float(stats.t.ppf(0.5 + level / 2, n - 1)) * se
    return Estimate(mean, mean - half, mean + half, float(2 * stats.t.sf(abs(mean) / se, n - 1)), n)


def across_seeds(differences, level: float = 0.95) -> Estimate:
    """A training method's effect with training seeds as the unit: the mean over k seeds of d_s, seed s's A - B (each
    arm trained from seed s: the same initialisation and data order, so d_s is paired), its t interval (df = k - 1)
    and the one-sample t-test of mean 0. Under "the two methods give checkpoints of one law", the k differences are
    independent and symmetric about 0 whatever the prompts (they are fixed, shared by every seed: the test speaks of
    training randomness on these prompts); the t-test's level at 3 to 10 seeds under normal, heavy-tailed and
    ROUGE-like seed laws is shown in tests/report/test_calibration.py. Fewer than MIN_SEEDS seeds: not testable
    ("2 seeds"): at 2 the interval's multiplier is 12.7 and a near-equal pair gives p near 0 by arithmetic alone."""
    d = np.asarray(differences, dtype=np.float64)
    return paired_t(d, np.zeros_like(d), level, unit="seed")


def detectable(
    low: float | None, high: float | None, df: int | None, comparisons: int, power: float = 0.8
) -> float | None:
    """The smallest true |difference| a row's test detects with `power` (80%) at Holm's first step, ALPHA / m for a
    table of m tested rows (the most the table asks of any row, so at least what a later step needs): the shift
    delta at which a two-sided t-test with df degrees of freedom (a z-test when df is None) rejects with that
    probability, from the noncentral t law (exact for a t-test on normal data; for the permutation tests over many
    prompts, their t approximation). The SE is read back from the row's 95% interval (t with df degrees of freedom;
    None: a normal or percentile interval). None when the row has no interval."""
    from scipy import optimize, stats

    if low is None or high is None:
        return None
    law = stats.norm if df is None else stats.t(df)
    se = (high - low) / (2 * float(law.ppf(0.975)))
    if se <= 0:
        return 0.0
    critical = float(law.ppf(1 - ALPHA / (2 * max(comparisons, 1))))

    def rejects(shift: float) -> float:  # P(reject) at a true shift of `shift` standard errors
        if df is None or df > 200:  # the noncentral t is the normal law's there (and scipy's nct loses digits)
            return float(stats.norm.sf(critical - shift) + stats.norm.cdf(-critical - shift))
        # The far tail, -critical at a large shift, is below any float scipy computes (it returns NaN there): 0.
        return float(stats.nct.sf(critical, df, shift) + np.nan_to_num(stats.nct.cdf(-critical, df, shift)))

    # Power 0.8 needs a shift of the critical value plus about one standard error of the t statistic: a few times it.
    return float(optimize.brentq(lambda shift: rejects(shift) - power, 0.0, 4 * (critical + 3))) * se


def detectable_interval(seen: float | None, df: int | None, level: float = 0.95) -> tuple[float | None, float | None]:
    """The 95% interval of a `detectable` figure: it is a multiple of the row's estimated standard error, whose
    square rests on df degrees of freedom (df s^2 / sigma^2 ~ chi2(df)), so the figure at the true sigma lies between
    seen sqrt(df / chi2_hi) and seen sqrt(df / chi2_lo). At 3 seeds (df 2): 0.52 to 6.3 times it. None without df
    (the joint MAUVE test's percentile interval) or without a figure."""
    from scipy import stats

    if seen is None or df is None or df < 1:
        return None, None
    tail = (1 - level) / 2
    return (
        seen * float(np.sqrt(df / stats.chi2.ppf(1 - tail, df))),
        seen * float(np.sqrt(df / stats.chi2.ppf(tail, df))),
    )


# A Holm p in [FRAGILE[0], FRAGILE[1]) sits near the level: float kernels that differ across CPUs, or another
# k-means seed, can move such a p across 0.05 (a newcomer's rerun moved EMO against MLE's MAUVE from "no difference"
# to p_holm 0.040). A convention, named in every finding it marks: a factor of 5 below the level, 2 above it.
FRAGILE = (ALPHA / 5, 2 * ALPHA)


def fragile(p_holm: float | None) -> bool:
    return p_holm is not None and FRAGILE[0] <= p_holm < FRAGILE[1]


def _seed(identity: str) -> int:
    return int.from_bytes(hashlib.sha256(identity.encode()).digest()[:8], "little")


def bootstrap_indices(n: int, resamples: int, identity: str, start: int = 0) -> np.ndarray:
    """Rows start .. start + resamples of the comparison's [B, n] matrix of prompt indices drawn with
    replacement, from a PCG64 stream seeded by `identity`'s hash. Each index uses one 64-bit draw (a uniform
    double times n), so row r always starts at draw r * n: any row range is had by advancing the stream, and
    the matrix is the same bytes however it is cut into chunks. (Used by descriptive resampling intervals; no
    p-value of the report comes from a bootstrap.)"""
    generator = np.random.PCG64(_seed(identity))
    generator.advance(start * n)
    # floor(u n) < n for u < 1 and n < 2^53; the minimum only guards that promise.
    indices = (np.random.Generator(generator).random((resamples, n)) * n).astype(np.int64)
    return np.minimum(indices, n - 1, out=indices)


def swap_masks(n: int, rows: int, identity: str, start: int = 0) -> np.ndarray:
    """Rows start .. start + rows of the comparison's [B, n] swap masks (1.0: swap the prompt's two values), from
    a PCG64 stream seeded by `identity`'s hash. Row r is the bits of raw draws r w .. (r + 1) w - 1, w = ceil(n / 64),
    read little-endian, so any row range is had by advancing the stream: the same bytes however it is chunked."""
    words = -(-n // 64)
    generator = np.random.PCG64(_seed(identity))
    generator.advance(start * words)
    raw = generator.random_raw(rows * words).astype("<u8").reshape(rows, words)
    bits = np.unpackbits(raw.view(np.uint8), axis=1, bitorder="little")[:, :n]
    return bits.astype(np.float64)


class Permutations(NamedTuple):
    """The swaps of one comparison of `n` prompts: all 2^n of them when 2^n <= `count`, else `count` random ones
    seeded by `identity`, drawn at most `chunk_elements` mask entries at a time."""

    n: int
    count: int  # type: ignore[assignment]  # the field shadows tuple.count on purpose; nothing calls that method
    identity: str
    chunk_elements: int = CHUNK_ELEMENTS

    @property
    def exact(self) -> bool:
        return self.n < 63 and 2**self.n <= self.count

    @property
    def draws(self) -> int:
        """How many swaps the test may draw: 2^n when exact, else B."""
        return 2**self.n if self.exact else self.count

    @property
    def smallest_p(self) -> float:
        """The smallest p the test can give: exactly, the observed statistic and its full swap (-T) are always as
        extreme, so 2 / 2^n; by Monte Carlo, 1 / (B + 1) (no drawn swap reaches |T|)."""
        return 2.0 / 2**self.n if self.exact else 1.0 / (self.count + 1)

    def untested(self, level: float = ALPHA) -> str | None:
        """Why this test cannot mark anything at `level` (its smallest p is above it), or None."""
        return plural(self.n, "prompt") if self.smallest_p > level else None

    def masks(self, start: int, rows: int) -> np.ndarray:
        if self.exact:
            patterns = np.arange(start, start + rows, dtype=np.int64)[:, None]
            return ((patterns >> np.arange(self.n, dtype=np.int64)) & 1).astype(np.float64)
        return swap_masks(self.n, rows, self.identity, start)


def permutation_p(
    statistics: Callable[[np.ndarray, np.ndarray], np.ndarray],
    rows: int,
    permutations: Permutations,
    stop_after: int = STOP_AFTER,
) -> np.ndarray:
    """Two-sided permutation p of `rows` statistics that share one comparison's swaps.

    statistics(masks [L, n], active [a]) -> [L, a]: the statistics of rows `active` with each of L swap masks
    applied (an all-zero mask is the observed data). Exact (2^n <= B): p = #{|T*| >= |T|} / 2^n over every mask,
    the observed one included. Monte Carlo: p = (1 + #{|T*| >= |T|}) / (B + 1), or, for a row that stop_after
    swaps reach within its first L draws, p = stop_after / L (Besag and Clifford 1991); both are exactly valid
    (P(p <= u) <= u under exchangeability). A row's p depends only on the masks, never on the chunking."""
    n = permutations.n
    everything = np.arange(rows)
    threshold = np.abs(statistics(np.zeros((1, n)), everything)[0]) * (1 - TIE_TOLERANCE)
    counts = np.zeros(rows, dtype=np.int64)
    p = np.full(rows, np.nan)
    limit = max(1, permutations.chunk_elements // max(n, 1))
    active, start, chunk = everything, 0, min(FIRST_CHUNK, limit)
    sequential = not permutations.exact
    while start < permutations.draws and active.size:
        size = min(chunk, permutations.draws - start)
        reached = np.abs(statistics(permutations.masks(start, size), active)) >= threshold[active]
        if sequential:
            running = counts[active][None, :] + np.cumsum(reached, axis=0)
            done = running[-1] >= stop_after
            first = np.argmax(running[:, done] >= stop_after, axis=0)  # the draw that made stop_after
            p[active[done]] = stop_after / (start + first + 1)
            counts[active] = running[-1]
            active = active[~done]
        else:
            counts[active] += reached.sum(axis=0)
        start += size
        chunk = min(2 * chunk, limit)
    if sequential:
        p[active] = (counts[active] + 1) / (permutations.count + 1)
    else:
        p = counts / permutations.draws
    return np.minimum(p, 1.0)


def t_intervals(
    difference: np.ndarray, influence: np.ndarray, level: float = 0.95
) -> tuple[np.ndarray, np.ndarray] | None:
    """difference +- t(n - 1) sd(influence) / sqrt(n) for each row of [k, n] influence values: the t interval over
    n prompts of a statistic whose per-prompt influence values (for a mean, d_i - mean) are given. It is the
    paired t interval for a mean, and the linearisation (delta-method) interval for a smooth statistic such as a
    perplexity. One prompt: None (no interval)."""
    from scipy import stats

    influence = np.atleast_2d(influence)
    n = influence.shape[1]
    if n < 2:
        return None
    half = float(stats.t.ppf(0.5 + level / 2, n - 1)) * influence.std(axis=1, ddof=1) / np.sqrt(n)
    return difference - half, difference + half


def _check_finite(*arrays: np.ndarray) -> None:
    if not all(np.isfinite(x).all() for x in arrays):
        raise ValueError("permutation test: a non-finite per-prompt value; no estimate is made")


def permutation_mean_differences(a: np.ndarray, b: np.ndarray, permutations: Permutations) -> list[Estimate]:
    """For each row of [k, n] per-prompt values a and b (paired by position): the mean over prompts of d = a - b,
    its t interval over prompts, and the sign-flip test's p (swapping a prompt's a and b flips the sign of its d;
    every row uses the same swaps). Too few prompts for any p to reach ALPHA: no p, untested "n prompts"."""
    d = np.atleast_2d(np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64))
    _check_finite(d)
    total = d.sum(axis=1)
    untested = permutations.untested()
    if untested is None:
        columns = np.ascontiguousarray(d.T)
        # The sum over prompts of the swapped d: swapping prompt i subtracts 2 d_i.
        p = permutation_p(lambda masks, rows: total[rows] - 2 * (masks @ columns[:, rows]), len(d), permutations)
    means = d.mean(axis=1)
    interval = t_intervals(means, d - means[:, None])
    return [
        Estimate(
            float(means[k]),
            None if interval is None else float(interval[0][k]),
            None if interval is None else float(interval[1][k]),
            None if untested else float(p[k]),
            d.shape[1],
            untested,
        )
        for k in range(len(d))
    ]


def permutation_mean_difference(a: np.ndarray, b: np.ndarray, permutations: Permutations) -> Estimate:
    """Mean over prompts of a - b (per-prompt values, paired by position), with its sign-flip test."""
    return permutation_mean_differences(a, b, permutations)[0]


def permutation_perplexity_difference(nll_a, tokens_a, nll_b, tokens_b, permutations: Permutations) -> Estimate:
    """ppl_A - ppl_B, ppl = exp(sum NLL / sum tokens) over the prompts (summed NLL and token count per prompt,
    paired by position). p: swap a prompt's (NLL, tokens) between A and B and recompute both perplexities. The
    interval is the t interval of the difference's linearisation: prompt i's influence on ppl is
    ppl (nll_i - log(ppl) tokens_i) / mean tokens, and on the difference, A's minus B's."""
    na, ta, nb, tb = (np.asarray(x, dtype=np.float64) for x in (nll_a, tokens_a, nll_b, tokens_b))
    _check_finite(na, ta, nb, tb)
    n = len(na)
    sums = np.array([na.sum(), ta.sum(), nb.sum(), tb.sum()])
    swap = np.ascontiguousarray(
        np.stack([nb - na, tb - ta], axis=1)
    )  # what a swap adds to A's sums (and takes from B's)

    def difference(masks, rows):
        moved = masks @ swap
        return (
            np.exp((sums[0] + moved[:, 0]) / (sums[1] + moved[:, 1]))
            - np.exp((sums[2] - moved[:, 0]) / (sums[3] - moved[:, 1]))
        )[:, None]

    observed = float(difference(np.zeros((1, n)), None)[0, 0])
    ppl_a, ppl_b = np.exp(sums[0] / sums[1]), np.exp(sums[2] / sums[3])
    influence = (ppl_a * (na - np.log(ppl_a) * ta) / ta.mean()) - (ppl_b * (nb - np.log(ppl_b) * tb) / tb.mean())
    interval = t_intervals(np.array([observed]), influence)
    low, high = (None, None) if interval is None else (float(interval[0][0]), float(interval[1][0]))
    if not np.isfinite(observed):
        raise ValueError(f"permutation test: a non-finite perplexity difference ({observed}); no estimate is made")
    if untested := permutations.untested():
        return Estimate(observed, low, high, None, n, untested)
    return Estimate(observed, low, high, float(permutation_p(difference, 1, permutations)[0]), n)


class Agreement(NamedTuple):
    """Do two scores order the same conditions alike? Spearman's rho, its permutation p (None when it cannot reach
    the level), the range of rho when each condition's means are redrawn within their standard errors, and the
    verdict: "agree", "disagree" or "cannot tell", with why when it cannot tell."""

    rho: float | None
    p: float | None
    low: float | None
    high: float | None
    conditions: int
    verdict: str
    why: str | None = None


RANK_PERMUTATIONS = 9999  # random pairings for the rank correlation's p when n! is more (8 conditions and up)
REDRAWS = 2000  # redraws of the conditions' means within their standard errors


def _rank_correlations(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Spearman's rho of each row of x [..., n] with each row of y [..., n] (average ranks for ties: spearmanr's)."""
    from scipy.stats import rankdata

    rx, ry = rankdata(x, axis=-1), rankdata(y, axis=-1)
    rx, ry = rx - rx.mean(-1, keepdims=True), ry - ry.mean(-1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        return (rx * ry).sum(-1) / np.sqrt((rx**2).sum(-1) * (ry**2).sum(-1))


def rank_agreement(x, x_se, y, y_se, identity: str, level: float = ALPHA) -> Agreement:
    """Whether scores x and y (one mean per condition, with standard errors; None or NaN counts as 0) order the
    conditions alike, with uncertainty, instead of a point rho against a fixed cut:
    - p: the two-sided permutation test of rho = 0 (scipy.stats.permutation_test, pairings; exact over all n!
      orders when n! <= RANK_PERMUTATIONS, else that many random ones seeded by `identity`). Its smallest
      attainable value is 2 / n! exactly, so with 4 conditions or fewer (2/24 = 0.083) it can never reach 0.05:
      no p, and the verdict is "cannot tell".
    - low, high: the 2.5% and 97.5% points of rho when each condition's x and y are redrawn from normals at their
      means with their standard errors: an order that the means' own noise can reverse is no order.
    agree: p < level, rho > 0 and low > 0; disagree: p < level, rho < 0 and high < 0 (the scores order the
    conditions in opposite ways); cannot tell otherwise, the default at small sizes."""
    from scipy import stats

    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    x_se, y_se = (np.nan_to_num(np.asarray(se, dtype=np.float64)) for se in (x_se, y_se))
    n = len(x)
    rho = float(_rank_correlations(x, y))
    if not np.isfinite(rho):
        return Agreement(None, None, None, None, n, "cannot tell", "one of the two is the same in every condition")
    rng = np.random.default_rng(_seed(identity))
    redrawn = _rank_correlations(
        x + x_se * rng.standard_normal((REDRAWS, n)), y + y_se * rng.standard_normal((REDRAWS, n))
    )
    low, high = (float(v) for v in np.quantile(np.nan_to_num(redrawn), [0.025, 0.975]))
    exact = math.factorial(n) <= RANK_PERMUTATIONS
    smallest = 2.0 / math.factorial(n) if exact else 2.0 / (RANK_PERMUTATIONS + 1)
    if smallest > level:
        return Agreement(
            rho,
            None,
            low,
            high,
            n,
            "cannot tell",
            f"with {n} conditions the rank correlation's permutation p cannot go below "
            f"2/{math.factorial(n)} = {smallest:.2f}",
        )
    ranks_y = stats.rankdata(y)
    p = float(
        stats.permutation_test(
            (x,),
            lambda u, axis: _rank_correlations(u, ranks_y),
            permutation_type="pairings",
            vectorized=True,
            n_resamples=RANK_PERMUTATIONS,
            rng=rng,
        ).pvalue
    )
    if p < level and rho > 0 and low > 0:
        return Agreement(rho, p, low, high, n, "agree")
    if p < level and rho < 0 and high < 0:
        return Agreement(rho, p, low, high, n, "disagree")
    why = (
        "no rank correlation detectable at the level"
        if p >= level
        else "the order changes when the means are redrawn within their standard errors"
    )
    return Agreement(rho, p, low, high, n, "cannot tell", why)


def holm(p_values: list[float | None]) -> list[float | None]:
    """Holm's step-down adjustment: the k-th smallest of m p-values becomes max over j <= k of
    min(1, (m - j + 1) p_(j)). A missing p (a row that was not tested) stays missing and does not count in m:
    it can never be marked, so leaving it out keeps the family-wise error of the rest at the level."""
    present = sorted((p, i) for i, p in enumerate(p_values) if p is not None)
    adjusted: list[float | None] = [None] * len(p_values)
    running = 0.0
    for rank, (p, i) in enumerate(present):
        running = max(running, min(1.0, (len(present) - rank) * p))
        adjusted[i] = running
    return adjusted
