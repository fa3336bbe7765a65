"""The premise-meeting model classes: exact shares against Monte Carlo, the verdicts, and each theorem's check
made to report a violation by a constant or a class that breaks it."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from workflow_lib.lab import perturbation, prefix_sets, premise
from workflow_lib.lab.laws import build_sets, grammar_of

BUILTIN = {"seed": 7, "words_per_class": 4}
SETS = {"prefixes": 12, "length": 16, "deltas": [0, 1, 2], "last": 12, "tries": 16, "seed": 3}
SPECS = {"uniform": {"q0": "uniform", "beta": 0.9, "last": 12}, "synonym": {"q0": "synonym", "beta": 1.0, "last": 12}}


@pytest.fixture(scope="module")
def lab():
    grammar = grammar_of(BUILTIN)
    frame = pl.from_arrow(build_sets(grammar, SETS)).sort("row")
    return grammar, prefix_sets.lexicon(grammar, SETS["seed"]), frame


@pytest.fixture(scope="module")
def table(lab):
    grammar, lex, frame = lab
    return premise.premise_table(grammar, lex, frame, SPECS, SETS["length"], SETS["seed"], draws=16)


def pick(table: pl.DataFrame, cls: str, name: str, family: str, delta: int) -> dict:
    (hit,) = table.filter((pl.col("class") == cls) & (pl.col("perturbation") == name) & (pl.col("family") == family)
                          & (pl.col("delta") == delta)).iter_rows(named=True)
    return hit


def test_members_differ_and_their_largest_tv_is_hand_checkable():
    laws = premise.member_laws(np.array([[0.5, 0.3, 0.2], [0.3, 0.5, 0.2]]))
    assert laws == pytest.approx(np.array([[1 / 3] * 3, [0.4, 0.4, 0.2], [0.0, 0.0, 1.0]]))
    assert premise.max_pairwise_tv(laws) == pytest.approx(0.8)  # unigram vs the point mass on its rarest word


@pytest.mark.parametrize("q0", ["uniform", "synonym"])
def test_unseen_share_is_the_frequency_of_draws_that_keep_an_unseen_word(lab, q0):
    grammar, lex, frame = lab
    ids = np.stack(frame["ids"].to_list())
    keys = perturbation.keys_for(1, frame["base"].to_numpy())
    beta = 0.6 if q0 == "uniform" else 0.7
    kept = np.mean([(~lex.seen[perturbation.perturb_words(lex, ids, q0, beta, 12, keys, d, weights_source=grammar)])
                    .any(1) for d in range(2000)], axis=0)
    exact = premise.unseen_share(lex, ids, q0, beta, 12)
    assert (exact > 0).any() and (exact == 0).any()
    assert kept == pytest.approx(exact, abs=0.05)


def test_clopper_pearson_brackets_the_share_and_is_one_sided_at_the_edges():
    low, high = premise.clopper_pearson(np.array([0, 5, 10]), 10)
    assert low[0] == 0 and high[2] == 1 and low[1] < 0.5 < high[1]
    assert high[0] == pytest.approx(1 - 0.025 ** (1 / 10))


@pytest.mark.parametrize(("low", "high", "bound", "cap", "expected"), [
    (0.3, 0.3, 0.2, 1.0, "violated"), (0.1, 0.1, 2.0, 1.0, "vacuous"), (0.1, 0.15, 0.2, 1.0, "holds"),
    (0.1, 0.3, 0.2, 1.0, "unresolved"), (None, None, 0.2, 1.0, "no admissible pair")])
def test_verdicts(low, high, bound, cap, expected):
    assert premise.verdict(low, high, bound, cap) == expected


def test_the_classes_meet_the_premise_where_t_allows_it(table):
    assert table.filter(pl.col("class") == "unseen")["admissible"].all()
    off = table.filter(pl.col("class") == "off-support")
    assert not off.filter(pl.col("q0") == "uniform")["admissible"].any()  # uniform T leaves the support
    assert off.filter(pl.col("q0") == "synonym")["admissible"].all() and off.filter(pl.col("q0") == "synonym")["exact"].all()
    assert (table.filter(pl.col("delta") == 0)["U_base"] == 0).all()


def test_class_replacement_maps_synonym_rows_onto_the_support_and_keeps_held_out_compositions(table):
    synonym_rows = pick(table, "off-support", "synonym", "synonym", 1)
    assert synonym_rows["U_base"] > 0.5 and synonym_rows["U_perturb_high"] == 0 and synonym_rows["extrapolability"] == "holds"
    composition = pick(table, "off-support", "synonym", "composition", 1)
    assert composition["U_perturb_low"] == pytest.approx(composition["U_base"])  # SP_perturb fails there: no gain
    assert composition["C"] == 1 and composition["robustness"] == "vacuous"


def test_at_l_equal_l_the_robustness_bound_binds_within_a_factor_two(table):
    """The unseen class at distance delta: U_perturb = (1 - beta^delta) x the members' TV, and 2C = 2 (1 - beta^delta)."""
    hit = pick(table, "unseen", "uniform, l = L", "synonym", 2)
    assert hit["C"] == pytest.approx(1 - 0.9 ** 2)
    assert hit["U_perturb_high"] == pytest.approx(hit["member_tv"] * (1 - 0.9 ** 2))
    assert hit["robustness"] == "holds" and hit["U_perturb_high"] > 0.4 * 2 * hit["C"]
    assert pick(table, "unseen", "uniform", "synonym", 2)["robustness"] == "vacuous"  # l < L: C = 1


def test_the_contraction_is_global_and_holds_where_the_proposition_promises_it(table):
    name = "uniform, l = L, beta = 0.9844"
    hit = pick(table, "unseen", name, "synonym", 1)
    assert hit["alpha"] == pytest.approx(1 - 0.984375 ** 16) and hit["alpha"] < 0.5
    assert hit["U_perturb_inf"] == pytest.approx(hit["alpha"] * hit["member_tv"])
    assert hit["contraction"] == "holds"
    assert pick(table, "unseen", "uniform", "synonym", 1)["contraction"] == "vacuous"  # alpha = 1


# ---- every check reports a violation when its premise is broken ---------------------------------------------


def test_robustness_reports_a_violation_when_c_is_too_small(lab, monkeypatch):
    grammar, lex, frame = lab
    monkeypatch.setattr(perturbation, "exact_constants", lambda *args: (1.0, 0.001))
    broken = premise.premise_table(grammar, lex, frame, SPECS, SETS["length"], SETS["seed"], draws=4)
    assert pick(broken, "off-support", "synonym", "composition", 1)["robustness"] == "violated"


def test_contraction_reports_a_violation_when_alpha_is_too_small(lab, monkeypatch):
    grammar, lex, frame = lab
    monkeypatch.setattr(perturbation, "exact_constants", lambda q0, beta, last, length, delta: (0.1, 1.0 if delta else 0.0))
    broken = premise.premise_table(grammar, lex, frame, SPECS, SETS["length"], SETS["seed"], draws=4)
    assert pick(broken, "off-support", "synonym", "composition", 1)["contraction"] == "violated"


def test_extrapolability_reports_a_violation_when_t_does_not_restore_the_support(lab, monkeypatch):
    """A class that differs on rows T claims to map onto the support: the synonym rows under class replacement,
    with a share of draws that (wrongly) keeps an unseen word."""
    grammar, lex, frame = lab
    monkeypatch.setattr(premise, "unseen_share", lambda lex, ids, q0, beta, last: (~lex.seen[ids]).any(1).astype(float))
    broken = premise.premise_table(grammar, lex, frame, {"synonym": SPECS["synonym"]}, SETS["length"], SETS["seed"], 4)
    assert pick(broken, "unseen", "synonym", "synonym", 1)["extrapolability"] == "violated"


def test_a_row_above_the_exact_global_uncertainty_is_a_bug_and_stops(lab, monkeypatch):
    grammar, lex, frame = lab
    monkeypatch.setattr(premise, "unseen_share", lambda lex, ids, q0, beta, last: (~lex.seen[ids]).any(1).astype(float))
    with pytest.raises(ValueError, match="exceeds the exact global one"):
        premise.premise_table(grammar, lex, frame, {"uniform": SPECS["uniform"]}, SETS["length"], SETS["seed"], 4)
