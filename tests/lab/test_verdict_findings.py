"""The theory lab's findings, sentence by sentence, and the helpers that word them (mutation testing found each
untested): what a reader sees of the verdicts."""

from __future__ import annotations

import polars as pl

from support.lab_files import BUILTIN, SETS
from workflow_lib.lab import findings as lab_findings
from workflow_lib.lab import prefix_sets, premise_views, theorems
from workflow_lib.lab import tables as lab_tables
from workflow_lib.lab.laws import build_sets, grammar_of


def test_a_span_is_one_number_when_the_values_agree_to_three_decimals():
    assert lab_findings._span(pl.Series([0.2, 0.2002])) == "0.200"
    assert lab_findings._span(pl.Series([0.2, 0.2005])) == "0.200 to 0.201"  # 5e-4 apart: a span
    assert lab_findings._span(pl.Series([-0.3, 0.3])) == "-0.300 to 0.300"  # apart though |high + low| is 0
    assert lab_findings._span(pl.Series([0.0, 5e-4])) == "0.000 to 0.001"  # exactly 5e-4 apart: a span


def test_verdicts_by_delta_group_the_deltas_that_read_alike():
    assert lab_findings._by_delta(["holds", "holds", "holds"], [1, 2, 4]) == "holds"
    assert lab_findings._by_delta(["vacuous"], [1]) == "vacuous"
    assert lab_findings._by_delta(["holds", "vacuous", "holds"], [1, 2, 4]) == "holds (delta 1, 4), vacuous (delta 2)"
    assert lab_findings._by_delta(["vacuous", "holds"], [1, 2]) == "vacuous (delta 1), holds (delta 2)"


def test_extrapolability_names_its_premise_only_where_it_holds():
    assert lab_findings._extrapolability("holds", "holds") == "holds, SP_perturb holds"
    assert (
        lab_findings._extrapolability("not applicable (SP_perturb fails)", "fails")
        == "not applicable (SP_perturb fails)"
    )


def _sups(rows):
    names = [
        "class",
        "perturbation",
        "delta",
        "family",
        "admissible",
        "alpha",
        "U_base_inf",
        "U_perturb_inf",
        "U_base_rows",
        "U_perturb_rows",
    ]
    return pl.DataFrame([dict(zip(names, r)) for r in rows], orient="row")


def test_the_row_sample_and_the_sups_frame_pick_their_own_class_t_and_delta():
    premise = _sups(
        [
            ("unseen", "uniform", 1, "syn", True, 1.0, 1.0, 0.9, 0.10, 0.20),
            ("unseen", "uniform", 1, "fun", True, 1.0, 1.0, 0.9, 0.30, 0.40),
            ("unseen", "uniform", 2, "syn", True, 1.0, 1.0, 0.9, 0.50, 0.60),
            ("unseen", "synonym", 1, "syn", True, 1.0, 1.0, 0.9, 0.70, 0.80),
            ("off", "uniform", 1, "syn", True, 1.0, 1.0, 0.9, 0.91, 0.92),
        ]
    )
    assert lab_tables._rows_sample(premise, "unseen", "uniform", 1) == "fun 0.300 / 0.400; syn 0.100 / 0.200"
    assert lab_tables._rows_sample(premise, "unseen", "uniform", 2) == "syn 0.500 / 0.600"
    sups = premise_views.sups_frame(premise)
    assert sups.select("class", "perturbation", "delta", "family").rows() == [
        ("unseen", "uniform", 1, "syn"),
        ("unseen", "uniform", 2, "syn"),
        ("unseen", "synonym", 1, "syn"),
        ("off", "uniform", 1, "syn"),
    ]  # the first row of each, in the table's order


def test_the_contraction_finding_lists_only_admissible_gains_where_the_bound_is_vacuous():
    premise = _sups(
        [
            ("unseen", "uniform", 1, "syn", True, 0.637, 1.0, 0.7, 0, 0),  # a gain at alpha >= 1/2
            ("unseen", "uniform", 2, "syn", True, 0.637, 1.0, 0.7, 0, 0),  # the same class and T: once
            ("half", "uniform", 1, "syn", True, 0.5, 1.0, 0.6, 0, 0),  # alpha = 1/2: still vacuous
            ("unseen", "narrow", 1, "syn", True, 0.3, 1.0, 0.2, 0, 0),  # alpha < 1/2: the bound shows it
            ("off", "uniform", 1, "syn", False, 1.0, 1.0, 0.0, 0, 0),  # not admissible
            ("edge", "uniform", 1, "syn", True, 1.0, 1.0, 1.0 - 5e-4, 0, 0),  # exactly round-off: no gain
            ("same", "uniform", 1, "syn", True, 1.0, 1.0, 0.9996, 0, 0),
        ]
    )  # within round-off: no gain
    text = lab_findings._contraction_findings(premise, 40)
    assert "beta > 0.9828" in text and "asks beta > 0.9875" in text and "with l = L = 40" in text
    assert text.endswith(
        "not necessary: class `unseen`, T = uniform: U_perturb^inf = 0.700 < U_base^inf = 1.000 at "
        "alpha = 0.637; class `half`, T = uniform: U_perturb^inf = 0.600 < U_base^inf = 1.000 at "
        "alpha = 0.500."
    )
    none = lab_findings._contraction_findings(premise.filter(pl.col("perturbation") == "narrow"), 40)
    assert none.endswith(
        "The bound is sufficient for a gain, not necessary: no admissible class here gains where the bound is vacuous."
    )


def test_the_findings_state_each_ts_constants_each_classs_sups_and_the_trained_models_numbers(premise):
    """The sentences of `findings`, each number derived here from the definitions (not read from the table where
    a formula gives it), and a trained-models table with a half-draws column."""
    trained = pl.DataFrame(
        {
            "family": ["synonym"] * 3 + ["composition"] * 3,
            "perturbation": ["u"] * 6,
            "delta": [0, 1, 2] * 2,
            "n_models": [3] * 6,
            "draws": [8] * 6,
            "U_max": [0.1, 0.3, 0.5] * 2,
            "U_growth": [0.0, 0.2, 0.4] * 2,
            "U_max_half_draws": [None, 0.35, 0.55] + [None] * 3,  # composition: files without half-draw laws
            "tv_truth_mean": [0.2, 0.25, 0.3] * 2,
        }
    )
    lines = lab_findings.findings(trained, premise, 16)
    alpha = 1 - 0.9**16
    assert lines[0] == (
        f"- **T = u** (uniform replacement of the last 16 of 16 words, beta = 0.9): alpha(T) = {alpha:.3f} and C = "
        f"{0.1:.3f} to {1 - 0.9**3:.3f} for delta >= 1, exactly; the Proposition states alpha <= 1.000 and C = "
        f"0.100 to 0.300. On the lab's rows, whose changes lie inside the window, TV(T(.|X'), T(.|X0)) is at most "
        f"{premise.filter(pl.col('perturbation') == 'u')['C_rows'].max():.3f}."
    )
    assert lines[1] == (
        "- **T = s** (class replacement, beta = 1.0): alpha(T) = 1 and C = 1 for delta >= 1 (a changed function word "
        "or a held-out class sequence is never restored); on the rows TV(T(.|X'), T(.|X0)) is 0 exactly where every "
        "change keeps its class, else 1 (max 1)."
    )
    heads = [line.split("**")[1] for line in lines if line.startswith("- **")]
    runs = ["u", "s", "all", "c"] + [f"{r}, l = L, beta = 0.9844" for r in ("u", "all", "c")]
    classes = [f"Premise class `{c}`, T = {r}" for r in runs for c in ("unseen", "off-support")]
    trained_heads = ["Trained models, synonym rows, T = u", "Trained models, composition rows, T = u"]
    assert heads == [f"T = {r}" for r in runs] + classes + trained_heads  # in the tables' order
    unseen_u = next(line for line in lines if line.startswith("- **Premise class `unseen`, T = u**"))
    rows_top = premise.filter((pl.col("class") == "unseen") & (pl.col("perturbation") == "u"))["U_perturb_rows"].max()
    member_tv = premise["member_tv"][0]
    u_perturb = ", ".join(f"{member_tv * (1 - 0.9**d):.3f}" for d in (1, 2, 3))
    assert (
        f"U_perturb(delta) = {u_perturb} at delta = 1, 2, 3 (attained by unseen words at positions 0-2, inside "
        f"T's window); on the lab's rows U_perturb reaches {rows_top:.3f}." in unseen_u
    )
    assert "Extrapolability (U_perturb = 0): not applicable (SP_perturb fails; U_perturb > 0);" in unseen_u
    assert (
        f"U_perturb^inf = {member_tv * alpha:.3f} against 2 alpha U_base^inf = {2 * alpha * member_tv:.3f}, vacuous"
        in unseen_u
    )
    forgetful = next(line for line in lines if line.startswith("- **Premise class `unseen`, T = all**"))
    assert "Extrapolability (U_perturb = 0): holds, SP_perturb holds;" in forgetful
    assert "on the lab's rows U_perturb reaches 0.000." in forgetful  # beta 1 at l = L restores every row
    assert lines[-2] == (
        "- **Trained models, synonym rows, T = u**: the 3 models disagree by 0.100 (max TV) on the support and by "
        "0.500 at delta = 2 (growth +0.400); from half of the 8 draws U_max at delta = 2 would be 0.550; TV to the "
        "truth 0.200 -> 0.300. They do not agree on the support, so this is not U of any class."
    )
    assert lines[-1] == (
        "- **Trained models, composition rows, T = u**: the 3 models disagree by 0.100 (max TV) on the support and "
        "by 0.500 at delta = 2 (growth +0.400); TV to the truth 0.200 -> 0.300. They do not agree on the support, so "
        "this is not U of any class."
    )


def test_a_gain_is_listed_only_where_the_contractivity_bound_is_vacuous(premise):
    """T = c has alpha 0.365: its bound 2 alpha U_base^inf is below U_base^inf and says the gain itself, so it is
    not listed among the gains the bound misses; T = u (alpha 0.815, vacuous bound) is."""
    alpha = 1 - 0.972**16
    assert 1 / 3 < alpha < 1 / 2
    text = lab_findings._contraction_findings(premise, 16)
    assert "class `unseen`, T = u: U_perturb^inf" in text and "T = c:" not in text


def test_below_beta_1_class_replacements_row_tv_is_stated_as_a_bound_not_as_0():
    """At beta < 1 a row whose changes keep their class is restored only with probability beta^m: its TV to the
    support prefix is at most 1 - beta^m (perturbation.row_tv_to_base marks it not exact), never "0 exactly"."""
    grammar = grammar_of(BUILTIN)
    frame = pl.from_arrow(build_sets(grammar, SETS)).sort("row")
    lex = prefix_sets.lexicon(grammar, SETS["seed"])
    specs = {"s9": {"q0": "synonym", "beta": 0.9, "last": 12}}
    premise = theorems.premise_table(grammar, lex, frame, specs, 16, SETS["seed"], draws=4)
    trained = pl.DataFrame(schema={"family": pl.Utf8, "perturbation": pl.Utf8})
    (line,) = [x for x in lab_findings.findings(trained, premise, 16) if x.startswith("- **T = s9**")]
    worst = premise.filter(pl.col("delta") > 0)["C_rows"].max()
    assert 0 < worst <= 1
    assert line.endswith(
        "on the rows TV(T(.|X'), T(.|X0)) is at most 1 - beta^m (m changes; a bound, not the value) where every "
        f"change keeps its class, else 1 (max {worst:.3g})."
    )
    assert "0 exactly" not in line
