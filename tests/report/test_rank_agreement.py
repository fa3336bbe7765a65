"""statistics.rank_agreement and its Spearman rho, on orders whose verdict follows by hand: every return path, the
size of the test that decides whether a p can reach the level, and the redraws within the standard errors."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from workflow_lib.report.statistics import RANK_PERMUTATIONS, Agreement, _rank_correlations, rank_agreement

ORDER = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]


def test_spearman_rho_of_each_row_against_each_row():
    """Rows [2, n] against a row [n]: one rho per row, by hand (rho = 1 - 6 sum d^2 / (n (n^2 - 1)))."""
    x = np.array([[1.0, 2.0, 3.0, 4.0], [4.0, 3.0, 2.0, 1.0]])
    y = np.array([10.0, 20.0, 40.0, 30.0])  # ranks 1 2 4 3
    rho = _rank_correlations(x, y)
    assert rho.shape == (2,)
    assert rho == pytest.approx([1 - 6 * 2 / 60, -(1 - 6 * 2 / 60)])
    # rows of y against rows of x, each row centred on its own mean
    both = _rank_correlations(
        np.array([[1.0, 2.0, 3.0], [3.0, 1.0, 2.0]]), np.array([[1.0, 2.0, 3.0], [1.0, 2.0, 3.0]])
    )
    assert both == pytest.approx([1.0, -0.5])
    assert both[1] == pytest.approx(stats.spearmanr([3.0, 1.0, 2.0], [1.0, 2.0, 3.0]).statistic)
    # a constant row has no rho (0 / 0), without a warning
    with np.errstate(all="raise"):
        assert np.isnan(_rank_correlations(np.array([1.0, 1.0, 1.0]), np.array([1.0, 2.0, 3.0])))


def test_a_constant_score_cannot_tell_with_its_reason():
    assert rank_agreement([0.5] * 6, [0.0] * 6, ORDER[:6], [0.0] * 6, "id") == Agreement(
        None, None, None, None, 6, "cannot tell", "one of the two is the same in every condition"
    )


def test_perfect_agreement_and_disagreement_of_eight_conditions():
    agree = rank_agreement(ORDER, [0.01] * 8, [10 * v for v in ORDER], [0.01] * 8, "agree")
    assert (agree.rho, agree.low, agree.high, agree.conditions, agree.verdict, agree.why) == (
        1.0,
        1.0,
        1.0,
        8,
        "agree",
        None,
    )
    assert 0 < agree.p < 0.001
    disagree = rank_agreement(ORDER, [0.01] * 8, ORDER[::-1], [0.01] * 8, "disagree")
    assert (disagree.rho, disagree.low, disagree.high, disagree.conditions, disagree.verdict) == (
        -1.0,
        -1.0,
        -1.0,
        8,
        "disagree",
    )
    assert 0 < disagree.p < 0.001 and disagree.why is None


def test_small_errors_cannot_reverse_a_well_separated_order_and_large_ones_can():
    """Means 1 apart with standard errors 0.01: no redraw swaps two conditions, so rho stays 1 in every redraw; with
    errors of 2 they swap often, and each condition is redrawn on its own (a shift shared by all keeps the order)."""
    tight = rank_agreement(ORDER, [0.01] * 8, ORDER, [0.01] * 8, "tight")
    assert tight.low == tight.high == 1.0
    loose = rank_agreement(ORDER, [5.0] * 8, ORDER, [0.0] * 8, "loose")
    assert loose.low < 0 and 0.5 < loose.high < 1 and loose.verdict == "cannot tell"
    assert loose.why == "the order changes when the means are redrawn within their standard errors"
    loose_y = rank_agreement(ORDER, [None] * 8, ORDER, [5.0] * 8, "loose")  # None counts as 0
    assert loose_y.low < 0 and 0.5 < loose_y.high < 1 and loose_y.p == loose.p


def test_the_same_identity_gives_the_same_numbers():
    """The redraws and the random pairings (8! > RANK_PERMUTATIONS) are seeded by the identity."""
    x, y, se = [0.3, 0.1, 0.4, 0.2, 0.8, 0.6, 0.5, 0.7], ORDER, [0.1] * 8
    first, again = rank_agreement(x, se, y, se, "same"), rank_agreement(x, se, y, se, "same")
    assert first == again
    assert math.factorial(8) > RANK_PERMUTATIONS and first.p is not None


def test_the_smallest_p_decides_whether_a_test_is_run():
    """Exact over the 5! = 120 orders, the smallest p is 2/120: at that level it is not below it, so the test runs
    and cannot reach it. Eight conditions draw RANK_PERMUTATIONS random pairings, whose smallest p is 2 / (B + 1)."""
    exact = rank_agreement(ORDER[:5], [0.0] * 5, ORDER[:5], [0.0] * 5, "five", level=2 / 120)
    assert exact.p == pytest.approx(2 / 120) and exact.verdict == "cannot tell" and exact.conditions == 5
    assert exact.why == "no rank correlation detectable at the level"
    smallest = 2.0 / (RANK_PERMUTATIONS + 1)
    at = rank_agreement(ORDER, [0.0] * 8, ORDER, [0.0] * 8, "eight", level=smallest)
    assert at.p is not None and at.why == "no rank correlation detectable at the level"
    below = rank_agreement(ORDER, [0.0] * 8, ORDER, [0.0] * 8, "eight", level=smallest * (1 - 1e-6))
    assert below.p is None and below.verdict == "cannot tell" and below.conditions == 8 and below.rho == 1.0
    assert below.why.startswith("with 8 conditions the rank correlation's permutation p cannot go below")


def test_four_conditions_cannot_reach_the_level():
    few = rank_agreement(ORDER[:4], [0.0] * 4, ORDER[:4], [0.0] * 4, "four")
    assert few == Agreement(
        1.0,
        None,
        1.0,
        1.0,
        4,
        "cannot tell",
        "with 4 conditions the rank correlation's permutation p cannot go below 2/24 = 0.08",
    )


def test_a_p_at_the_level_is_not_significant():
    """p < level, not <=: a perfect order of 5 has p = 2/120 exactly, which marks nothing at level 2/120 and agrees
    (or disagrees) at any level above it."""
    up, down = ORDER[:5], ORDER[:5][::-1]
    assert rank_agreement(up, [0.0] * 5, up, [0.0] * 5, "p", level=2 / 120).verdict == "cannot tell"
    assert rank_agreement(up, [0.0] * 5, down, [0.0] * 5, "p", level=2 / 120).verdict == "cannot tell"
    assert rank_agreement(up, [0.0] * 5, up, [0.0] * 5, "p", level=0.02).verdict == "agree"
    disagree = rank_agreement(up, [0.0] * 5, down, [0.0] * 5, "p", level=0.02)
    assert (disagree.verdict, disagree.p, disagree.conditions) == ("disagree", pytest.approx(2 / 120), 5)


def test_agreement_needs_every_redraw_range_on_its_side():
    """rho > 0 and p below the level but the redraws reach 0 (here exactly: rho over 8 takes steps of 1/42): cannot
    tell, and the same for disagreement."""
    wobbly = rank_agreement(ORDER, [3.05] * 8, ORDER, [0.0] * 8, "c")
    assert wobbly.p < 0.05 and wobbly.rho == 1.0 and wobbly.low == 0.0 and wobbly.verdict == "cannot tell"
    reversed_ = rank_agreement(ORDER, [3.05] * 8, ORDER[::-1], [0.0] * 8, "c")
    assert reversed_.p < 0.05 and reversed_.rho == -1.0 and reversed_.high == 0.0 and reversed_.verdict == "cannot tell"
    assert reversed_.conditions == 8


def test_a_weak_positive_rho_is_no_agreement():
    """rho = 1 - 40/84 over 8, with no error: p about 0.2, cannot tell with the reason, and the numbers kept."""
    x = [1.0, 5.0, 2.0, 8.0, 3.0, 6.0, 4.0, 7.0]
    weak = rank_agreement(x, [0.0] * 8, ORDER, [0.0] * 8, "weak")
    assert weak.rho == pytest.approx(1 - 40 / 84)
    assert weak.p > 0.2 and weak.verdict == "cannot tell" and weak.conditions == 8
    assert weak.why == "no rank correlation detectable at the level" and weak.low == weak.high == weak.rho
