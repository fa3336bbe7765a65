"""The theorems' verdicts on the premise classes, read from the exact sups, never the lab's rows; and every verdict
that can read "holds" made to read "violated" by real inputs (a T, a class, a delta), through premise_table."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from workflow_lib.lab import perturbation, prefix_sets, theorems
from workflow_lib.lab.laws import build_sets, grammar_of

BUILTIN = {"seed": 7, "words_per_class": 4}
SETS = {"prefixes": 12, "length": 16, "deltas": [0, 1, 2], "last": 12, "tries": 16, "seed": 3}
SPECS = {"uniform": {"q0": "uniform", "beta": 0.9, "last": 12}, "synonym": {"q0": "synonym", "beta": 1.0, "last": 12}}


@pytest.fixture(scope="module")
def lab():
    grammar = grammar_of(BUILTIN)
    frame = pl.from_arrow(build_sets(grammar, SETS)).sort("row")
    return grammar, prefix_sets.lexicon(grammar, SETS["seed"]), frame


def table_of(lab, specs: dict) -> pl.DataFrame:
    grammar, lex, frame = lab
    return theorems.premise_table(grammar, lex, frame, specs, SETS["length"], SETS["seed"], draws=4)


@pytest.fixture(scope="module")
def table(lab):
    return table_of(lab, SPECS)


def pick(table: pl.DataFrame, cls: str, name: str, delta: int, family: str = "synonym") -> dict:
    (hit,) = table.filter(
        (pl.col("class") == cls)
        & (pl.col("perturbation") == name)
        & (pl.col("family") == family)
        & (pl.col("delta") == delta)
    ).iter_rows(named=True)
    return hit


@pytest.mark.parametrize(
    ("value", "bound", "cap", "expected"),
    [
        (0.3, 0.2, 1.0, "violated"),
        (0.1, 2.0, 1.0, "vacuous"),
        (0.1, 0.2, 1.0, "holds"),
        (0.0, 0.0, np.inf, "holds"),
        (0.01, 0.0, np.inf, "violated"),
        (1.0, 1.0, 1.0, "vacuous"),
        (0.2 + theorems.TOLERANCE, 0.2, 1.0, "holds"),  # within the tolerance of the bound
        (0.5, 1.0, 1.0 + theorems.TOLERANCE, "vacuous"),  # a bound within the tolerance of the cap says nothing
    ],
)
def test_verdicts(value, bound, cap, expected):
    assert theorems.verdict(value, bound, cap) == expected


def test_not_applicable_says_whether_u_perturb_is_above_the_tolerance():
    assert theorems.not_applicable(theorems.TOLERANCE) == "not applicable (SP_perturb fails; U_perturb = 0)"
    assert theorems.not_applicable(1e-9) == "not applicable (SP_perturb fails; U_perturb > 0)"


def test_lab_runs_add_the_propositions_settings_to_uniform_ts_only():
    specs = {"u": {"q0": "uniform", "beta": 0.9, "last": 12}, "s": {"q0": "synonym", "beta": 1.0, "last": 12}}
    assert theorems.lab_runs(specs, 16) == {
        **specs,
        "u, l = L": {"q0": "uniform", "beta": 0.9, "last": 16},
        "u, l = L, beta = 0.9844": {"q0": "uniform", "beta": 1 - 1 / 64, "last": 16},
    }
    whole = {"w": {"q0": "uniform", "beta": 0.5, "last": 16}}  # already l = L: no second copy of it
    assert list(theorems.lab_runs(whole, 16)) == ["w", "w, l = L, beta = 0.9844"]


def test_sp_perturb_holds_only_where_t_forgets_every_word():
    assert theorems.sp_perturb_holds("uniform", 0.9, 12, 16, 0)
    assert theorems.sp_perturb_holds("uniform", 1.0, 16, 16, 3)
    assert not theorems.sp_perturb_holds("uniform", 1.0, 12, 16, 1)  # keeps the words before the window
    assert not theorems.sp_perturb_holds("uniform", 0.99, 16, 16, 1)  # keeps each word with probability 0.01
    assert not theorems.sp_perturb_holds("synonym", 1.0, 16, 16, 1)  # keeps classes


def test_the_sups_not_the_rows_decide_and_the_rows_stay_as_a_sample(table):
    """Class `unseen` under uniform replacement of the last 12 of 16 words: the rows' unseen synonyms all lie
    inside the window, but an unseen word at position 0 is never replaced, so U_perturb(1) is the members' TV."""
    hit = pick(table, "unseen", "uniform", 1)
    assert hit["U_perturb"] == pytest.approx(hit["member_tv"]) and hit["U_perturb_rows"] == pytest.approx(
        0.1 * hit["member_tv"]
    )
    assert hit["worst_prefix"] == "an unseen word at position 0, before T's window"
    composition = pick(table, "unseen", "uniform", 1, family="composition")
    assert composition["U_base_rows"] == 0 and composition["U_base"] == pytest.approx(hit["member_tv"])
    assert (table.filter(pl.col("delta") == 0)[["U_base", "U_perturb"]].to_numpy() == 0).all()


def test_robustness_with_the_propositions_c_is_violated_by_an_unseen_word_before_the_window(table):
    """The issue's case: d(X', X) = 1 and U_perturb(1) = the members' TV > 2 (1 - beta) = 0.2. The theorem's
    own C (exact for the T that runs) is 1 there, so the theorem itself is vacuous, not violated."""
    hit = pick(table, "unseen", "uniform", 1)
    assert hit["C_proposition"] == pytest.approx(0.1) and hit["U_perturb"] > 2 * hit["C_proposition"]
    assert hit["robustness_proposition"] == "violated" and hit["robustness"] == "vacuous"
    at_l = pick(table, "unseen", "uniform, l = L", 2)  # l = L: the Proposition's C is an upper bound, and holds
    assert at_l["U_perturb"] == pytest.approx(at_l["member_tv"] * (1 - 0.9**2))
    assert at_l["C"] == pytest.approx(1 - 0.9**2) and at_l["U_perturb"] > 0.4 * 2 * at_l["C"]
    assert at_l["robustness"] == "holds" and at_l["robustness_proposition"] == "holds"


def test_extrapolability_is_not_applicable_where_sp_perturb_fails_and_holds_where_it_holds(lab, table):
    """Where SP_perturb fails the theorem says nothing: U_perturb > 0 there is reported, never as a violation."""
    from workflow_lib.lab.theorems import verdict

    hit = pick(table, "unseen", "synonym", 1)
    assert hit["U_perturb_rows"] == 0  # class replacement maps the rows' synonyms onto the support ...
    assert hit["sp_perturb"] == "fails" and hit["U_perturb"] > 0.99  # ... not position 0's
    assert hit["extrapolability"] == "not applicable (SP_perturb fails; U_perturb > 0)"
    assert verdict(0.01, 0.0, float("inf")) == "violated"  # the check SP-holding rows go through can fail
    forgetful = table_of(lab, {"all": {"q0": "uniform", "beta": 1.0, "last": SETS["length"]}})
    for cls in ("unseen", "off-support"):
        hit = pick(forgetful, cls, "all", 2)
        assert hit["sp_perturb"] == "holds" and hit["U_perturb"] == 0 and hit["extrapolability"] == "holds"


def test_contraction_holds_where_the_exact_alpha_is_below_one_half(table):
    hit = pick(table, "unseen", "uniform, l = L, beta = 0.9844", 1)
    assert hit["alpha"] == pytest.approx(1 - 0.984375**16) and hit["alpha"] < 0.5
    assert hit["U_perturb_inf"] == pytest.approx(hit["alpha"] * hit["member_tv"])
    assert hit["contraction"] == "holds"
    assert pick(table, "unseen", "uniform", 1)["contraction"] == "vacuous"  # alpha = 1


def test_contraction_with_the_propositions_alpha_is_violated_for_l_below_l(lab):
    """The Proposition's alpha <= (1 - beta) l = 0.12 at l = 12 < L = 16 promises U_perturb^inf <= 0.24 U_base^inf;
    an unseen word before the window keeps U_perturb^inf = U_base^inf."""
    hit = pick(table_of(lab, {"light": {"q0": "uniform", "beta": 0.99, "last": 12}}), "unseen", "light", 1)
    assert hit["alpha_proposition"] == pytest.approx(0.12) and hit["U_perturb_inf"] == pytest.approx(hit["U_base_inf"])
    assert hit["contraction_proposition"] == "violated" and hit["contraction"] == "vacuous"


def test_a_class_whose_distinct_members_disagree_on_the_support_once_perturbed_has_u_perturb_zero(table):
    """Uniform replacement moves support prefixes off the support, so `off-support`'s members differ there once
    perturbed: only a member paired with itself is admissible, and U_perturb = 0 (not 'no admissible pair')."""
    hit = pick(table, "off-support", "uniform", 2)
    assert not hit["admissible"] and hit["U_perturb"] == 0 and hit["U_perturb_inf"] == 0
    assert hit["U_base"] == pytest.approx(hit["member_tv"])
    assert hit["extrapolability"] == "not applicable (SP_perturb fails; U_perturb = 0)"
    assert "no admissible pair" not in table.to_pandas().to_string()
    kept = pick(table, "off-support", "synonym", 1, family="composition")  # class replacement keeps compositions
    assert kept["admissible"] and kept["U_perturb_rows"] == pytest.approx(kept["U_base_rows"]) == pytest.approx(
        kept["U_perturb"]
    )


def test_the_constants_are_the_t_that_runs(table):
    hit = pick(table, "unseen", "uniform", 2)
    assert (hit["alpha"], hit["C"]) == perturbation.exact_constants("uniform", 0.9, 12, 16, 2)
    assert (hit["alpha_proposition"], hit["C_proposition"]) == pytest.approx(
        perturbation.proposition_constants(0.9, 12, 2)
    )


def test_a_row_above_its_sup_is_a_bug_and_stops(table):
    doctored = table.with_columns(
        pl.when((pl.col("delta") == 1) & (pl.col("class") == "unseen"))
        .then(pl.col("U_perturb") + 0.01)
        .otherwise(pl.col("U_perturb_rows"))
        .alias("U_perturb_rows")
    )
    with pytest.raises(ValueError, match="exceeds the sup over every prefix"):
        theorems.check_rows_within_sups(doctored)
    theorems.check_rows_within_sups(table)


def test_class_replacement_has_no_propositions_constants_and_its_rows_c_is_its_own(lab, table):
    """The Proposition is about uniform replacement: class replacement's rows say so rather than borrow its
    constants; C_rows is the largest TV to the support prefix of the T that runs, row by row."""
    _, lex, frame = lab
    for delta in (0, 1, 2):
        hit = pick(table, "unseen", "synonym", delta, family="composition")
        assert hit["alpha_proposition"] is None and hit["C_proposition"] is None
        assert hit["contraction_proposition"] == hit["robustness_proposition"] == theorems.NOT_PROPOSITION
    ids = np.stack(frame["ids"].to_list()).astype(np.int64)
    support = {(f, b): r for f, b, r, d in frame.select("family", "base", "row", "delta").iter_rows() if d == 0}
    bases = ids[[support[(f, b)] for f, b in frame.select("family", "base").iter_rows()]]
    for name, spec in SPECS.items():
        c_rows, _ = perturbation.row_tv_to_base(lex, ids, bases, spec["q0"], spec["beta"], spec["last"])
        for family in ("synonym", "composition"):
            for delta in (1, 2):
                rows = (frame["family"] == family) & (frame["delta"] == delta)
                assert pick(table, "unseen", name, delta, family)["C_rows"] == c_rows[rows.to_numpy()].max()
    assert pick(table, "unseen", "synonym", 1, "composition")["C_rows"] == 1.0  # a new class sequence is kept
    assert pick(table, "unseen", "synonym", 1)["C_rows"] == 0.0  # a synonym is restored by its class


def test_a_bound_below_the_cap_holds_and_the_factor_2_is_the_theorems(lab):
    """Uniform replacement of all 16 words at betas where 2 x the constant x U is below the members' TV (the bound
    says something, and holds) but 3 x would not be: the verdicts read 2, and U_base, exactly as the theorems do."""
    table = table_of(
        lab, {"c": {"q0": "uniform", "beta": 0.972, "last": 16}, "r": {"q0": "uniform", "beta": 0.7746, "last": 16}}
    )
    contraction = pick(table, "unseen", "c", 1)
    spread = contraction["member_tv"]
    assert contraction["U_base_inf"] == pytest.approx(spread)
    for alpha, verdict in (
        (contraction["alpha"], "contraction"),
        (contraction["alpha_proposition"], "contraction_proposition"),
    ):
        assert 2 * alpha * spread < spread <= 3 * alpha * spread
        assert contraction[verdict] == "holds"
    robustness = pick(table, "unseen", "r", 2)
    for c, verdict in ((robustness["C"], "robustness"), (robustness["C_proposition"], "robustness_proposition")):
        assert 2 * c < spread <= 3 * c and robustness[verdict] == "holds"


def test_delta_0_has_no_premise_or_extrapolability_verdict_and_counts_its_rows(lab, table):
    """At delta 0 every prefix is a support prefix: SP_perturb and Extrapolability are about delta >= 1, so the
    cells are a dash; n_prefixes is the number of the family's rows at that delta."""
    frame = lab[2]
    for delta in (0, 1, 2):
        for family in ("synonym", "composition"):
            hit = pick(table, "unseen", "uniform", delta, family)
            assert hit["n_prefixes"] == frame.filter((pl.col("family") == family) & (pl.col("delta") == delta)).height
            assert (hit["sp_perturb"] == "—") == (delta == 0) and (hit["extrapolability"] == "—") == (delta == 0)


def test_many_class_replacement_ts_listed_first_still_make_one_table(lab):
    """Class replacement has no Proposition constants (None): more than 100 such rows before the first uniform T
    must not fix the column's type from them."""
    specs = {f"s{i}": {"q0": "synonym", "beta": 1.0, "last": 12} for i in range(9)}
    table = table_of(lab, {**specs, "u": {"q0": "uniform", "beta": 0.9, "last": 12}})
    assert table.height > 100 and table["alpha_proposition"].dtype == pl.Float64
    assert pick(table, "unseen", "u", 1)["alpha_proposition"] == pytest.approx(1.0)


def test_a_single_row_above_its_sup_is_named(table):
    row = (pl.col("delta") == 1) & (pl.col("class") == "unseen") & (pl.col("perturbation") == "synonym")
    doctored = table.with_columns(
        pl.when(row & (pl.col("family") == "composition"))
        .then(0.5)
        .otherwise(pl.col("U_base_rows"))
        .alias("U_base_rows"),
        pl.when(row & (pl.col("family") == "composition")).then(0.0).otherwise(pl.col("U_base")).alias("U_base"),
    )
    message = (
        "premise class unseen, T = synonym, composition rows at delta 1: U on the rows (0.500000, 0.000000) exceeds "
        "the sup over every prefix (0.000000, "
    )
    with pytest.raises(ValueError) as error:
        theorems.check_rows_within_sups(doctored)
    assert str(error.value).startswith(message)
