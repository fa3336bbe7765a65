"""The premise-meeting model classes: each per-prefix share against the perturber's own draws, T's window included,
and the sups U_base(delta), U_perturb(delta) against a brute-force sup over every prefix of a tiny grammar."""

from __future__ import annotations

from itertools import product

import numpy as np
import polars as pl
import pytest

from workflow_lib.lab import perturbation, prefix_sets, premise
from workflow_lib.lab.laws import build_sets, grammar_of

BUILTIN = {"seed": 7, "words_per_class": 4}
SETS = {"prefixes": 12, "length": 16, "deltas": [0, 1, 2], "last": 12, "tries": 16, "seed": 3}
TINY = {
    "seed": 3,
    "n_noun_classes": 2,
    "n_verb_classes": 2,
    "n_adj_classes": 1,
    "words_per_class": 2,
    "ood_fraction": 0.25,
}


@pytest.fixture(scope="module")
def lab():
    grammar = grammar_of(BUILTIN)
    frame = pl.from_arrow(build_sets(grammar, SETS)).sort("row")
    return grammar, prefix_sets.lexicon(grammar, SETS["seed"]), frame


@pytest.fixture(scope="module")
def tiny():
    """Every prefix of 3 words over a tiny grammar's lexicon (17 seen words and 6 unseen), and its distance."""
    grammar = grammar_of(TINY)
    lex = prefix_sets.lexicon(grammar, 0)
    every = np.array(list(product(range(len(lex.words)), repeat=3)), dtype=np.int64)
    return grammar, lex, every, prefix_sets.support_distance(grammar, lex, every)


def draw_frequency(
    grammar, lex, cls: str, prefixes: np.ndarray, q0: str, beta: float, last: int, draws: int
) -> np.ndarray:
    """Per prefix, the share of keyed draws of the real perturber whose X~ lies outside the class's A."""
    keys = perturbation.keys_for(11, np.arange(len(prefixes)))
    return np.mean(
        [
            premise.outside_a(
                grammar,
                lex,
                cls,
                perturbation.perturb_words(lex, prefixes, q0, beta, last, keys, d, weights_source=grammar),
            )
            for d in range(draws)
        ],
        axis=0,
    )


def test_members_differ_and_their_largest_tv_is_hand_checkable():
    laws = premise.member_laws(np.array([[0.5, 0.3, 0.2], [0.3, 0.5, 0.2]]))
    assert laws == pytest.approx(np.array([[1 / 3] * 3, [0.4, 0.4, 0.2], [0.0, 0.0, 1.0]]))
    assert premise.max_pairwise_tv(laws) == pytest.approx(0.8)  # unigram vs the point mass on its rarest word


@pytest.mark.parametrize("q0", ["uniform", "synonym"])
def test_unseen_share_is_the_frequency_of_draws_that_keep_an_unseen_word(lab, q0):
    grammar, lex, frame = lab
    ids = np.stack(frame["ids"].to_list())
    beta = 0.6 if q0 == "uniform" else 0.7
    kept = draw_frequency(grammar, lex, "unseen", ids, q0, beta, 12, draws=2000)
    exact = premise.unseen_share(lex, ids, q0, beta, 12)
    assert (exact > 0).any() and (exact == 0).any()
    assert kept == pytest.approx(exact, abs=0.05)


@pytest.mark.parametrize("q0", ["uniform", "synonym"])
def test_an_unseen_word_before_the_window_is_always_kept(lab, q0):
    """The l < L case: T never reaches position 0 of a 16-word prefix when it perturbs the last 12 words, so an
    unseen word there survives every draw (share 1), while one in the last position survives with 1 - beta."""
    grammar, lex, frame = lab
    base = np.stack(frame.filter(pl.col("delta") == 0)["ids"].to_list())[:3]
    unseen = int(np.flatnonzero(~lex.seen)[0])
    rows = base.copy()
    rows[0, 0] = unseen  # before the window
    rows[1, -1] = unseen  # inside
    rows[2, [0, -1]] = unseen  # both
    exact = premise.unseen_share(lex, rows, q0, 0.9, 12)
    assert exact == pytest.approx([1.0, 0.1, 1.0])
    assert draw_frequency(grammar, lex, "unseen", rows, q0, 0.9, 12, draws=400) == pytest.approx(exact, abs=0.05)
    assert premise.unseen_share(lex, rows, q0, 0.9, 16) == pytest.approx([0.1, 0.1, 1 - 0.9**2])  # l = L


def test_off_support_share_is_the_frequency_of_draws_that_leave_the_support(tiny):
    grammar, lex, every, _ = tiny
    representative = np.searchsorted(grammar.word_class, np.arange(len(grammar.class_names)))
    accepted = prefix_sets.support_distance(grammar, lex, representative[lex.word_class[every]]) == 0
    rng = np.random.default_rng(5)  # prefixes whose class sequence the support holds (unseen words or not), and others
    sample = np.concatenate([rng.permutation(every[accepted])[:200], rng.permutation(every[~accepted])[:100]])
    for beta, last in ((0.7, 1), (0.7, 2), (1.0, 3)):  # at l = 1, an unseen word at position 1 is never replaced
        exact = premise.off_support_share(grammar, lex, sample, "synonym", beta, last)
        assert ((exact > 0) & (exact < 1)).any() == (beta < 1) and (exact == 0).any() and (exact == 1).any()
        frequency = draw_frequency(grammar, lex, "off-support", sample, "synonym", beta, last, draws=400)
        assert frequency == pytest.approx(exact, abs=0.12)
    with pytest.raises(ValueError) as error:
        premise.off_support_share(grammar, lex, sample, "uniform", 0.5, 3)
    assert str(error.value) == (
        "off_support_share: no closed form for q0 'uniform' at beta 0.5 (none is needed: no pair of the off-support "
        "class is admissible under it)"
    )


def test_worst_prefixes_are_at_exact_distance_and_refuse_an_off_support_start(lab):
    grammar, lex, frame = lab
    support = np.stack(frame.filter(pl.col("delta") == 0)["ids"].to_list())[0]
    worst = premise.worst_prefixes(grammar, lex, support, [0, 1, 2, 40])
    assert np.array_equal(worst[0], support)
    assert prefix_sets.support_distance(grammar, lex, worst).tolist() == [0, 1, 2, 16]
    assert (~lex.seen[worst[2, :2]]).all() and np.array_equal(worst[2, 2:], support[2:])
    with pytest.raises(ValueError, match="not a support prefix"):
        premise.worst_prefixes(grammar, lex, worst[1], [1])


def test_admissibility_follows_whether_t_keeps_the_support_in_a(lab):
    grammar, lex, frame = lab
    support = np.stack(frame.filter(pl.col("delta") == 0)["ids"].to_list())[0]
    assert premise.admissible(grammar, lex, "unseen", "uniform", 0.9, support)
    assert premise.admissible(grammar, lex, "off-support", "synonym", 0.5, support)
    assert premise.admissible(grammar, lex, "off-support", "uniform", 0.0, support)  # T is the identity
    assert not premise.admissible(grammar, lex, "off-support", "uniform", 0.9, support)
    # ... and the draws agree: uniform replacement takes some support prefix off the support, class replacement none.
    ids = np.stack(frame.filter(pl.col("delta") == 0)["ids"].to_list())
    assert draw_frequency(grammar, lex, "off-support", ids, "uniform", 0.3, 12, draws=8).max() > 0
    assert draw_frequency(grammar, lex, "off-support", ids, "synonym", 0.7, 12, draws=8).max() == 0


@pytest.mark.parametrize(
    ("cls", "q0", "beta", "last"),
    [
        ("unseen", "uniform", 0.7, 2),
        ("unseen", "uniform", 0.7, 3),
        ("unseen", "synonym", 0.7, 2),
        ("unseen", "synonym", 1.0, 3),
        ("off-support", "synonym", 0.7, 2),
        ("off-support", "synonym", 1.0, 3),
        ("off-support", "uniform", 0.0, 3),
    ],
)
def test_the_sups_are_the_brute_force_sups_over_every_prefix(tiny, cls, q0, beta, last):
    """U(delta) / spread over all 23^3 prefixes of the tiny lexicon, against `class_sups`' worst prefix."""
    grammar, lex, every, distance = tiny
    support = every[distance == 0][0]
    sups = premise.class_sups(grammar, lex, cls, q0, beta, last, support, [0, 1, 2, 3])
    assert sups["admissible"]
    base, share = (
        premise.outside_a(grammar, lex, cls, every),
        premise.leave_share(grammar, lex, cls, every, q0, beta, last),
    )
    assert share[distance == 0].max() == 0  # admissible: no support prefix leaves A
    for delta in range(4):
        within = distance <= delta
        assert sups["U_base"][delta] == base[within].max()
        assert sups["U_perturb"][delta] == pytest.approx(share[within].max())
    if cls == "unseen" and last < 3:
        assert sups["U_perturb"][1] == 1.0  # the unseen word before the window


def test_without_an_admissible_distinct_pair_u_perturb_is_zero(tiny):
    grammar, lex, every, distance = tiny
    sups = premise.class_sups(grammar, lex, "off-support", "uniform", 0.7, 3, every[distance == 0][0], [0, 1, 3])
    assert not sups["admissible"] and sups["U_perturb"].tolist() == [0.0, 0.0, 0.0]
    assert sups["U_base"].tolist() == [0.0, 1.0, 1.0]


def test_the_draws_check_stops_a_closed_form_that_ignores_the_window(lab):
    """Shares computed as if T reached position 0 (the l = L formula at l < L) contradict the perturber."""
    grammar, lex, frame = lab
    rows = np.stack(frame.filter(pl.col("delta") == 0)["ids"].to_list())[:2]
    rows[:, 0] = int(np.flatnonzero(~lex.seen)[0])
    keys = perturbation.keys_for(1, np.arange(2))
    right = premise.unseen_share(lex, rows, "synonym", 1.0, 12)
    premise.check_shares_against_draws(grammar, lex, "unseen", rows, right, "synonym", 1.0, 12, keys, 4)
    wrong = premise.unseen_share(lex, rows, "synonym", 1.0, 16)  # 1 - 1^1 = 0: as if position 0 were replaced
    with pytest.raises(ValueError, match="row 0 has exact share 0 .* the closed form is wrong"):
        premise.check_shares_against_draws(grammar, lex, "unseen", rows, wrong, "synonym", 1.0, 12, keys, 4)


def test_the_worst_prefix_is_described_where_it_lies():
    assert premise.describe_worst(0, 32, 40) == "a support prefix"
    assert premise.describe_worst(1, 32, 40) == "an unseen word at position 0, before T's window"
    assert premise.describe_worst(4, 40, 40) == "unseen words at positions 0-3, inside T's window"
    assert premise.describe_worst(9, 32, 40).endswith("position 0 lies before T's window")


def test_at_beta_0_the_off_support_share_is_whether_the_prefix_is_off_the_support(tiny):
    """T keeps every word at beta 0, so the share is 1 exactly at distance 1 or more, for either Q0."""
    grammar, lex, every, distance = tiny
    for q0 in ("uniform", "synonym"):
        share = premise.off_support_share(grammar, lex, every, q0, 0.0, 3)
        assert share.dtype == np.float64 and set(np.unique(distance)) >= {0, 1, 2}
        np.testing.assert_array_equal(share, (distance >= 1).astype(np.float64))


def test_the_largest_tv_is_taken_per_pair_over_words():
    """TV sums over the words of one pair, then the max runs over pairs (not the other way round)."""
    assert premise.max_pairwise_tv(np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]])) == 1.0
    three = np.array([[0.5, 0.5, 0.0], [0.5, 0.0, 0.5], [0.0, 0.5, 0.5]])
    assert premise.max_pairwise_tv(three) == pytest.approx(0.5)


def test_an_unknown_class_is_refused_by_name(tiny):
    grammar, lex, every, _ = tiny
    with pytest.raises(ValueError, match=r"class must be one of \('unseen', 'off-support'\), not 'unsen'"):
        premise.outside_a(grammar, lex, "unsen", every[:2])
    with pytest.raises(ValueError, match=r"class must be one of \('unseen', 'off-support'\), not 'unsen'"):
        premise.leave_share(grammar, lex, "unsen", every[:2], "synonym", 0.5, 3)


def test_admissibility_is_refused_when_no_replacement_leaves_the_support(lab, monkeypatch):
    """A grammar in which no last word leaves the support would leave uniform replacement's case undecided: the
    function says so instead of guessing (the builtin grammars never get there, so the distances are faked)."""
    grammar, lex, frame = lab
    support = np.stack(frame.filter(pl.col("delta") == 0)["ids"].to_list())[0]
    monkeypatch.setattr(prefix_sets, "support_distance", lambda g, x, p: np.zeros(len(p), dtype=np.int64))
    message = (
        "no seen word in the last position takes this support prefix off the support; "
        "the off-support class's admissibility under uniform replacement is undecided"
    )
    with pytest.raises(ValueError) as error:
        premise.admissible(grammar, lex, "off-support", "uniform", 0.9, support)
    assert str(error.value) == message


def test_worst_prefixes_without_delta_0_and_the_refusal_names_the_prefixs_distance(lab):
    grammar, lex, frame = lab
    support = np.stack(frame.filter(pl.col("delta") == 0)["ids"].to_list())[0]
    worst = premise.worst_prefixes(grammar, lex, support, [2, 5])
    assert prefix_sets.support_distance(grammar, lex, worst).tolist() == [2, 5]
    off = support.copy()
    off[-1] = int(np.flatnonzero(~lex.seen)[0])  # one substitution away
    with pytest.raises(ValueError, match=r"not a support prefix \(distance 1\)"):
        premise.worst_prefixes(grammar, lex, off, [3])


def test_unseen_words_ending_where_the_window_starts_are_before_it():
    assert premise.describe_worst(8, 32, 40) == "unseen words at positions 0-7, before T's window"
    assert premise.describe_worst(9, 32, 40) == "unseen words at positions 0-8; position 0 lies before T's window"


def test_the_draws_check_stops_a_share_of_1_that_never_leaves_and_names_its_row(lab):
    """Support prefixes never leave A: a closed form giving the second one share 1 is caught, and named."""
    grammar, lex, frame = lab
    rows = np.stack(frame.filter(pl.col("delta") == 0)["ids"].to_list())[:2]
    keys = perturbation.keys_for(1, np.arange(2))
    with pytest.raises(ValueError, match="row 1 has exact share 1 of leaving A, but draw 0 disagrees"):
        premise.check_shares_against_draws(
            grammar, lex, "unseen", rows, np.array([0.0, 1.0]), "synonym", 0.5, 12, keys, 2
        )
