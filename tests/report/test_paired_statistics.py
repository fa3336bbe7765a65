"""Paired comparisons' statistics on arrays: the paired t over runs, the paired permutation tests of a mean and
of a perplexity difference, and Holm's correction."""

from __future__ import annotations

import numpy as np
import pytest

from workflow_lib.report.statistics import (
    Permutations,
    holm,
    paired_t,
    permutation_mean_difference,
    permutation_perplexity_difference,
)


def test_paired_t_interval_excludes_zero_for_conditions_built_to_differ():
    rng = np.random.default_rng(1)
    base = rng.uniform(0.6, 0.9, 10)  # run-to-run variation shared by both arms (same prompts, same seeds)
    better = base + 0.05 + rng.normal(0, 0.01, 10)
    est = paired_t(better, base)
    assert est.n == 10 and est.low > 0 and abs(est.difference - 0.05) < 0.01 and est.p < 1e-6
    # unpaired, the shared variation would swamp the difference; paired it does not
    assert est.high - est.low < 0.05


def test_a_non_finite_run_stops_the_paired_t_saying_why():
    """A wrong result must not look like a result: NaN or inf in one run raises, with the reason."""
    for bad in (np.nan, np.inf):  # a wrong result must not look like a result: the job stops, saying why
        with pytest.raises(ValueError, match=r"^paired t: a non-finite per-run value; no estimate is made$"):
            paired_t(np.array([0.5, bad, 0.4]), np.array([0.4, 0.4, 0.4]))


def test_a_perplexity_that_overflows_stops_the_test_saying_why():
    """Finite per-prompt NLL whose perplexity overflows (exp(1000)): no difference of infinities is reported."""
    tokens = np.full(12, 10.0)
    with (
        np.errstate(over="ignore", invalid="ignore"),
        pytest.raises(
            ValueError, match=r"^permutation test: a non-finite perplexity difference \(inf\); no estimate is made$"
        ),
    ):
        permutation_perplexity_difference(1000 * tokens, tokens, 3 * tokens, tokens, Permutations(12, 200, "x"))


def test_a_condition_against_itself_is_no_difference():
    x = np.array([0.71, 0.74, 0.69, 0.80])
    assert tuple(paired_t(x, x.copy())) == (0.0, 0.0, 0.0, 1.0, 4, None)
    y = np.linspace(0.1, 0.9, 40)
    same = permutation_mean_difference(y, y.copy(), Permutations(40, 200, "self"))
    assert (same.difference, same.low, same.high, same.p, same.untested) == (0.0, 0.0, 0.0, 1.0, None)
    tokens = np.full(40, 30.0)
    ppl = permutation_perplexity_difference(y * tokens, tokens, y * tokens, tokens, Permutations(40, 200, "self"))
    assert (ppl.difference, ppl.low, ppl.high, ppl.p) == (0.0, 0.0, 0.0, 1.0)


def test_one_run_has_no_interval_and_no_p():
    est = paired_t([0.8], [0.7])
    assert est.low is None and est.high is None and est.p is None and est.n == 1
    assert est.difference == pytest.approx(0.1)


def test_t_intervals_cover_the_true_difference():
    """Over 400 synthetic studies of 30 prompts (the default study's size), the 95% t interval of a ROUGE-like
    mean difference (bounded, skewed, tied) and the linearised interval of a perplexity difference cover the truth
    about 95% of the time (at least 92%: 3 Monte Carlo standard errors under 95%)."""
    rng = np.random.default_rng(7)
    n, studies, covered_mean, covered_ppl = 30, 400, 0, 0
    for study in range(studies):
        level = rng.beta(2, 5, n)
        b = np.round(level * 30 + rng.normal(0, 2, n)).clip(0, 30) / 30
        a = np.round(level * 30 + rng.normal(0, 2, n)).clip(0, 30) / 30 + 0.03
        est = permutation_mean_difference(a, b, Permutations(n, 200, f"rep{study}"))
        covered_mean += est.low <= 0.03 <= est.high
        tokens = rng.integers(20, 60, n).astype(np.float64)
        rate = rng.gamma(9.0, 1 / 3.0, n)  # the prompt's own difficulty, shared by both models
        rate_a, rate_b = rate + rng.normal(0, 0.3, n), rate + 0.1 + rng.normal(0, 0.3, n)
        # the truth of a ratio of sums: exp(sum nll / sum tokens) under the expected rates
        truth = np.exp((tokens * rate).sum() / tokens.sum()) - np.exp((tokens * (rate + 0.1)).sum() / tokens.sum())
        ppl = permutation_perplexity_difference(
            rate_a * tokens, tokens, rate_b * tokens, tokens, Permutations(n, 200, f"rep{study}")
        )
        covered_ppl += ppl.low <= truth <= ppl.high
    assert covered_mean >= 0.92 * studies and covered_ppl >= 0.92 * studies


def test_the_permutation_p_is_scipys_exact_p_and_the_swaps_repeat():
    """With all 2^n swaps enumerated, p is scipy.stats.permutation_test's exact paired p, for a mean difference and
    for a perplexity difference (swap a prompt's NLL and tokens); the same identity draws the same swaps."""
    from scipy import stats

    rng = np.random.default_rng(5)
    for n in (6, 9, 11):
        a, b = rng.normal(0.3, 0.1, n), rng.normal(0.25, 0.1, n)
        ours = permutation_mean_difference(a, b, Permutations(n, 4000, "x"))
        theirs = stats.permutation_test(
            (a, b),
            lambda x, y, axis: np.mean(x - y, axis=axis),
            permutation_type="samples",
            n_resamples=np.inf,
            vectorized=True,
        )
        assert ours.p == pytest.approx(theirs.pvalue, rel=1e-12)
        tokens_a, tokens_b = rng.integers(20, 60, n).astype(float), rng.integers(20, 60, n).astype(float)
        nll_a, nll_b = tokens_a * rng.normal(3.0, 0.2, n), tokens_b * rng.normal(3.1, 0.2, n)

        def ppl_difference(na, ta, nb, tb, axis):
            return np.exp(na.sum(axis) / ta.sum(axis)) - np.exp(nb.sum(axis) / tb.sum(axis))

        # scipy's "samples" permutations swap one pair of samples; a prompt's (NLL, tokens) move together, so the
        # 2^n swaps are enumerated here by hand
        ours = permutation_perplexity_difference(nll_a, tokens_a, nll_b, tokens_b, Permutations(n, 4000, "x"))
        swaps = ((np.arange(2**n)[:, None] >> np.arange(n)) & 1).astype(bool)
        null = ppl_difference(
            np.where(swaps, nll_b, nll_a),
            np.where(swaps, tokens_b, tokens_a),
            np.where(swaps, nll_a, nll_b),
            np.where(swaps, tokens_a, tokens_b),
            axis=1,
        )
        observed = ppl_difference(nll_a, tokens_a, nll_b, tokens_b, axis=0)
        assert ours.p == pytest.approx(np.mean(np.abs(null) >= abs(observed) * (1 - 1e-9)), rel=1e-12)
    a, b = rng.normal(0.3, 0.1, 50), rng.normal(0.25, 0.1, 50)
    assert permutation_mean_difference(a, b, Permutations(50, 2000, "same")) == permutation_mean_difference(
        a, b, Permutations(50, 2000, "same")
    )


def test_holm_against_a_hand_computation():
    # sorted: 0.005, 0.01, 0.03, 0.04 (m = 4) -> 4*0.005 = 0.02, 3*0.01 = 0.03, 2*0.03 = 0.06, max(0.06, 1*0.04) = 0.06
    adjusted = holm([0.01, 0.04, 0.03, 0.005, None])
    assert adjusted[4] is None
    assert adjusted[:4] == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])
