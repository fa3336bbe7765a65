"""report.statistics against values computed by hand or by scipy's reference implementation: the paired t over runs
(its interval, p and degrees of freedom, and where it refuses), and the perplexity difference's untested case."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from workflow_lib.report.statistics import (
    Estimate,
    Permutations,
    _seed,
    bootstrap_indices,
    holm,
    paired_t,
    permutation_mean_differences,
    permutation_p,
    permutation_perplexity_difference,
    swap_masks,
    t_intervals,
)

EPS = np.finfo(np.float64).eps


def test_paired_t_is_scipys_paired_t_test_with_its_interval():
    a, b = [1.5, 3.0, 4.5, 2.0], [0.5, 1.0, 1.5, 1.0]  # d = 1, 2, 3, 1
    estimate = paired_t(a, b)
    reference = stats.ttest_rel(a, b)
    interval = reference.confidence_interval(0.95)
    assert estimate.difference == pytest.approx(1.75) and estimate.n == 4 and estimate.untested is None
    assert estimate.p == pytest.approx(reference.pvalue, rel=1e-12)
    assert (estimate.low, estimate.high) == (
        pytest.approx(interval.low, rel=1e-12),
        pytest.approx(interval.high, rel=1e-12),
    )
    # by hand: sd 0.9574, se 0.4787, t(0.975, 3) = 3.1824
    assert estimate.high - estimate.difference == pytest.approx(3.182446 * np.sqrt(0.916667 / 4), rel=1e-5)
    narrow = paired_t(a, b, level=0.5)
    assert narrow.high - narrow.difference == pytest.approx(0.764892 * np.sqrt(0.916667 / 4), rel=1e-5)


def test_a_condition_against_itself_at_zero_is_no_difference():
    assert paired_t([0.0, 0.0, 0.0], [0.0, 0.0, 0.0]) == Estimate(0.0, 0.0, 0.0, 1.0, 3)


def test_runs_that_all_moved_by_the_same_amount_are_not_testable():
    assert paired_t([1.25, 2.25, 3.25], [1.0, 2.0, 3.0]) == Estimate(0.25, None, None, None, 3, "no spread")
    # the same shift computed at a scale of thousands differs by rounding only: still no spread
    a = np.array([1000.1, 2000.2, 3000.3])
    b = a - 0.05
    assert np.std(a - b) > 0
    assert paired_t(a, b).untested == "no spread"


def test_the_rounding_margin_is_eight_machine_epsilons():
    """d = 0, 0, k eps has sd k eps / sqrt(3): no spread up to 8 eps (k = 13), a t-test from just above (k = 14)."""
    assert paired_t([1.0, 1.0, 1.0 + 13 * EPS], [1.0, 1.0, 1.0]).untested == "no spread"
    tested = paired_t([1.0, 1.0, 1.0 + 14 * EPS], [1.0, 1.0, 1.0])
    assert tested.untested is None and tested.p == pytest.approx(
        stats.ttest_rel([0.0, 0.0, 14 * EPS], [0.0] * 3).pvalue
    )


def test_integer_runs_give_the_same_estimate_as_floats():
    as_int = paired_t(np.array([1, 2, 4], dtype=np.uint8), np.array([3, 3, 3], dtype=np.uint8))
    assert as_int == paired_t([1.0, 2.0, 4.0], [3.0, 3.0, 3.0]) and as_int.difference < 0


def _perplexity_case():
    na, ta = np.array([2.0, 3.0, 4.0]), np.array([1.0, 1.0, 2.0])
    nb, tb = np.array([1.0, 2.0, 3.0]), np.array([1.0, 1.0, 1.0])
    return na, ta, nb, tb


def test_three_prompts_give_the_perplexity_difference_and_its_interval_but_no_p():
    """2^3 = 8 swaps: the smallest p is 2/8, so the test is not run ("3 prompts"); the difference and the
    linearisation interval are still given, by hand: ppl_A = e^(9/4), ppl_B = e^(6/3)."""
    na, ta, nb, tb = _perplexity_case()
    estimate = permutation_perplexity_difference(na, ta, nb, tb, Permutations(3, 2000, "three"))
    ppl_a, ppl_b = np.exp(9 / 4), np.exp(2.0)
    influence = ppl_a * (na - 9 / 4 * ta) / ta.mean() - ppl_b * (nb - 2.0 * tb) / tb.mean()
    half = stats.t.ppf(0.975, 2) * influence.std(ddof=1) / np.sqrt(3)
    assert estimate == Estimate(
        pytest.approx(ppl_a - ppl_b),
        pytest.approx(ppl_a - ppl_b - half),
        pytest.approx(ppl_a - ppl_b + half),
        None,
        3,
        "3 prompts",
    )


def test_one_prompt_has_no_interval():
    estimate = permutation_perplexity_difference([2.0], [1.0], [1.0], [1.0], Permutations(1, 2000, "one"))
    assert estimate == Estimate(pytest.approx(np.e**2 - np.e), None, None, None, 1, "1 prompt")


def test_integer_token_counts_give_the_same_perplexity_difference():
    """Unsigned token counts too: a swap moves tb - ta tokens, which is negative where B's prompt is shorter."""
    rng = np.random.default_rng(4)
    ta, tb = rng.integers(5, 30, 8), rng.integers(5, 30, 8)
    na, nb = 3.0 * ta + rng.normal(0, 1, 8), 3.2 * tb + rng.normal(0, 1, 8)
    permutations = Permutations(8, 2000, "eight")
    as_int = permutation_perplexity_difference(na, ta.astype(np.uint16), nb, tb.astype(np.uint16), permutations)
    assert as_int.p is not None and (tb < ta).any()
    assert as_int == permutation_perplexity_difference(na, ta.astype(float), nb, tb.astype(float), permutations)


@pytest.mark.parametrize("which", range(4))
def test_a_non_finite_per_prompt_value_of_either_side_is_refused(which):
    arrays = list(_perplexity_case())
    arrays[which] = arrays[which].copy()
    arrays[which][1] = np.nan
    with pytest.raises(ValueError, match="a non-finite per-prompt value"):
        permutation_perplexity_difference(*arrays, Permutations(3, 2000, "three"))


def test_bootstrap_rows_start_at_row_0_and_any_row_range_is_the_same_bytes():
    whole = bootstrap_indices(5, 4, "boot")
    np.testing.assert_array_equal(whole, bootstrap_indices(5, 4, "boot", start=0))
    np.testing.assert_array_equal(whole[2:], bootstrap_indices(5, 2, "boot", start=2))
    assert whole.shape == (4, 5) and whole.min() >= 0 and whole.max() <= 4


def test_bootstrap_indices_reach_every_prompt_including_the_last():
    assert set(bootstrap_indices(2, 100, "two").ravel().tolist()) == {0, 1}


def test_integer_per_prompt_values_give_the_same_mean_differences():
    a = np.array([[1, 2, 4, 0, 3, 5, 1]], dtype=np.uint8)
    b = np.array([[3, 3, 3, 1, 1, 1, 2]], dtype=np.uint8)
    permutations = Permutations(7, 2000, "ints")
    as_int = permutation_mean_differences(a, b, permutations)
    assert as_int == permutation_mean_differences(a.astype(float), b.astype(float), permutations)
    assert as_int[0].difference == pytest.approx(2 / 7)


def test_swap_masks_are_the_little_endian_bits_of_the_raw_draws():
    """n = 70 prompts take w = 2 raw 64-bit draws a row: row r holds bit j of draw 2r + j // 64 at column j."""
    masks = swap_masks(70, 3, "bits")
    generator = np.random.PCG64(_seed("bits"))
    raw = [int(v) for v in generator.random_raw(6)]
    expected = [[(raw[2 * r + j // 64] >> (j % 64)) & 1 for j in range(70)] for r in range(3)]
    np.testing.assert_array_equal(masks, np.array(expected, dtype=np.float64))
    assert masks.dtype == np.float64
    np.testing.assert_array_equal(swap_masks(70, 2, "bits", start=1), masks[1:])


def test_a_test_whose_smallest_p_is_the_level_is_run():
    """B = 19 random swaps: the smallest p is 1/20 = 0.05, not above the level, so the test runs; B = 18 cannot."""
    assert Permutations(100, 19, "x").untested() is None
    assert Permutations(100, 18, "x").untested() == "100 prompts"


def _reached(masks):
    """A statistic whose observed value is 1 and whose swap reaches it exactly where prompt 0 is not swapped."""
    return 1.0 - masks[:, :1]


def test_the_sequential_p_stops_at_the_draw_that_makes_stop_after():
    permutations = Permutations(100, 5000, "seq")
    p = permutation_p(lambda masks, rows: _reached(masks), 1, permutations, stop_after=20)
    reach = np.flatnonzero(swap_masks(100, 5000, "seq")[:, 0] == 0)
    assert p.dtype == np.float64 and p[0] == pytest.approx(20 / (reach[19] + 1))
    # every swap reaches a statistic of 0: stop_after = 64 is made at the first chunk's last draw, p = 64/64
    assert permutation_p(lambda masks, rows: np.zeros((len(masks), 1)), 1, permutations, stop_after=64)[0] == 1.0


def test_a_row_that_never_stops_counts_every_drawn_swap_across_chunks():
    """A statistic reached only where prompts 0-5 are all unswapped (about 1 in 64 swaps), over B = 1000 swaps drawn
    in chunks of at most 100 / 10 = 10 masks: p = (1 + reaches) / (B + 1) over the whole stream."""
    permutations = Permutations(10, 1000, "rare", chunk_elements=100)

    def statistic(masks, rows):
        return (masks[:, :6].sum(1, keepdims=True) == 0).astype(float) + 1.0  # observed 2, a swap 1 or 2

    reaches = int((swap_masks(10, 1000, "rare")[:, :6].sum(1) == 0).sum())
    assert 0 < reaches < 20
    assert permutation_p(statistic, 1, permutations)[0] == pytest.approx((1 + reaches) / 1001)


def test_t_intervals_of_two_prompts_and_of_rows_with_different_spreads():
    difference = np.array([1.0, 1.0])
    influence = np.array([[-1.0, 1.0], [-2.0, 2.0]])  # sd sqrt(2) and 2 sqrt(2)
    low, high = t_intervals(difference, influence)
    half = stats.t.ppf(0.975, 1) * np.sqrt(2) / np.sqrt(2)
    np.testing.assert_allclose(high - difference, [half, 2 * half])
    np.testing.assert_allclose(difference - low, [half, 2 * half])
    assert t_intervals(np.array([1.0]), np.array([[0.5]])) is None


def test_holm_caps_every_adjusted_p_at_1():
    assert holm([0.6, 0.7, None]) == [1.0, 1.0, None]
    assert holm([0.01, 0.04, 0.03]) == [pytest.approx(0.03), pytest.approx(0.06), pytest.approx(0.06)]
