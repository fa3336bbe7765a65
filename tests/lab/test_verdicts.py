"""The theory lab's markdown and figure, and the `lab` CLI on a tiny grammar with its refusals."""

from __future__ import annotations

import json
import sys

import numpy as np
import polars as pl
import pytest

from workflow_lib.cli import StageError
from workflow_lib.lab import bounds, perturbation, prefix_sets, theorems, verdicts
from workflow_lib.lab.laws import build_sets, grammar_of

BUILTIN = {"seed": 7, "words_per_class": 4}
SETS = {"prefixes": 6, "length": 16, "deltas": [0, 1, 2], "last": 12, "tries": 16, "seed": 3}
SETTINGS = {
    "last": 12,
    "length": 16,
    "draws": 2,
    "premise_draws": 4,
    "seed": 3,
    "perturbations": {"syn": {"q0": "uniform", "beta": 0.9}},
}


@pytest.fixture
def lab_files(tmp_path):
    """A tiny grammar's prefix sets and three models' (random) laws on disk."""
    sets = build_sets(grammar_of(BUILTIN), SETS)
    pl.from_arrow(sets).write_parquet(tmp_path / "prefixes.parquet")
    words = len(sets.column("truth")[0])
    rng = np.random.default_rng(0)
    paths = []
    for m in range(3):
        paths.append(tmp_path / f"m{m}.npz")
        np.savez(
            paths[-1],
            laws=rng.dirichlet(np.ones(words + 1), size=(2, sets.num_rows)),
            perturbations=np.array(["none", "syn"]),
            single=np.ones(words, dtype=bool),
        )
    return tmp_path, [str(p) for p in paths]


def run_cli(monkeypatch, folder, laws, settings=SETTINGS, builtin=BUILTIN):
    """The `lab` command in-process; a str settings or builtin is passed as it is (JSON or not)."""
    monkeypatch.setattr(
        sys,
        "argv",
        [
            "lab",
            "--prefixes",
            str(folder / "prefixes.parquet"),
            "--laws",
            *laws,
            "--builtin",
            builtin if isinstance(builtin, str) else json.dumps(builtin),
            "--settings",
            settings if isinstance(settings, str) else json.dumps(settings),
            "--csv",
            str(folder / "out/u.csv"),
            "--premise",
            str(folder / "out/p.csv"),
            "--markdown",
            str(folder / "out/u.md"),
            "--figure",
            str(folder / "out/fig"),
        ],
    )
    verdicts.main()


def test_cli_writes_both_tables_the_markdown_and_the_figure(lab_files, monkeypatch):
    folder, laws = lab_files
    run_cli(monkeypatch, folder, laws)
    trained = pl.read_csv(folder / "out/u.csv")
    assert trained.columns == bounds.COLUMNS and trained.height == 2 * 2 * 3  # families x T's x deltas
    assert trained["draws"].to_list() == [1 if t == "none" else SETTINGS["draws"] for t in trained["perturbation"]]
    premise = pl.read_csv(folder / "out/p.csv")
    assert {
        "class",
        "U_base",
        "U_perturb",
        "U_base_rows",
        "U_perturb_rows",
        "worst_prefix",
        "robustness",
        "sp_perturb",
        "extrapolability",
        "contraction",
        "contraction_proposition",
    } <= set(premise.columns)
    assert set(premise["perturbation"]) == {"syn", "syn, l = L", "syn, l = L, beta = 0.9844"}
    text = (folder / "out/u.md").read_text()
    for heading in (
        "**T's constants**",
        "**Model classes that meet the premise**",
        "**Global uncertainties",
        "**Trained models, descriptive**",
    ):
        assert heading in text
    assert "not U of any class" in text and "estimates U from below" not in text
    assert "no admissible pair" not in text and "Ĉ: the largest share" in text


def test_the_findings_read_the_sups_and_derive_the_contraction_threshold(lab_files, monkeypatch):
    """The issue's case through the CLI: `unseen` under uniform replacement of the last 12 of 16 words has an
    unseen word at position 0 within distance 1, so Robustness with the Proposition's C reads violated; the beta
    at which alpha(T) = 1/2 comes from the code's exact alpha, not a hand-written number."""
    folder, laws = lab_files
    run_cli(monkeypatch, folder, laws)
    text = (folder / "out/u.md").read_text()
    line = next(x for x in text.splitlines() if x.startswith("- **Premise class `unseen`, T = syn**"))
    assert "with the Proposition's C: violated" in line and "unseen words at positions 0-1, before T's window" in line
    exact_beta, prop_beta = perturbation.contraction_betas(16)
    assert f"beta > {exact_beta:.4f}" in text and f"asks beta > {prop_beta:.4f}" in text
    assert "0.9875" not in text
    off = next(x for x in text.splitlines() if x.startswith("- **Premise class `off-support`, T = syn**"))
    assert "a member paired with itself" in off and "U_perturb(delta) = 0 at every delta" in off
    for ext in ("png", "pdf"):
        assert (folder / f"out/fig.{ext}").stat().st_size > 1000
    assert not list((folder / "out").glob(".*tmp*"))


def test_cli_refuses_a_nan_law_naming_the_file(lab_files, monkeypatch):
    folder, laws = lab_files
    with np.load(laws[1]) as data:
        broken = dict(data)
    broken["laws"][1, 2, 0] = np.nan
    np.savez(laws[1], **broken)
    with pytest.raises(StageError, match=r"m1\.npz: laws has 1 non-finite"):
        run_cli(monkeypatch, folder, laws)
    assert not (folder / "out/u.csv").exists()


def test_cli_refuses_a_single_model_and_mismatched_perturbations(lab_files, monkeypatch):
    folder, laws = lab_files
    with pytest.raises(StageError, match=r"1 model\(s\) \(.*m0\.npz\).*at least 2 models"):
        run_cli(monkeypatch, folder, laws[:1])
    with np.load(laws[2]) as data:
        other = dict(data) | {"perturbations": np.array(["none", "other"])}
    np.savez(laws[2], **other)
    with pytest.raises(StageError, match=r"m2\.npz: perturbations \['none', 'other'\] differ"):
        run_cli(monkeypatch, folder, laws)


def test_cli_refuses_non_finite_truth_and_incomplete_settings(lab_files, monkeypatch):
    folder, laws = lab_files
    with pytest.raises(StageError, match=r"lacks \['premise_draws'\]"):
        run_cli(monkeypatch, folder, laws, {k: v for k, v in SETTINGS.items() if k != "premise_draws"})
    frame = pl.read_parquet(folder / "prefixes.parquet")
    nan = [float("nan")] * len(frame["truth"][0])
    frame.with_columns(truth=pl.when(pl.col("row") == 5).then(pl.lit(nan)).otherwise(pl.col("truth"))).write_parquet(
        folder / "prefixes.parquet"
    )
    with pytest.raises(StageError, match=r"prefixes\.parquet: truth has non-finite values .* rows \[5\]"):
        run_cli(monkeypatch, folder, laws)


def test_figure_is_deterministic_with_at_most_five_lines_a_panel(lab_files, monkeypatch, tmp_path):
    folder, laws = lab_files
    run_cli(monkeypatch, folder, laws)
    trained, premise = pl.read_csv(folder / "out/u.csv"), pl.read_csv(folder / "out/p.csv")
    verdicts.figure(trained, premise, str(tmp_path / "a"))
    verdicts.figure(trained, premise, str(tmp_path / "b"))
    for ext in ("png", "pdf"):
        assert (tmp_path / f"a.{ext}").read_bytes() == (tmp_path / f"b.{ext}").read_bytes()
    saved = []
    monkeypatch.setattr("workflow_lib.plotting._save", lambda fig, stem: saved.append(fig))
    verdicts.figure(trained, premise, "unused")
    (fig,) = saved
    assert all(len([x for x in ax.get_lines() if not x.get_label().startswith("_")]) <= 5 for ax in fig.axes)
    top = {line.get_label(): line for line in fig.axes[0].get_lines()}
    none = trained.filter((pl.col("family") == "composition") & (pl.col("perturbation") == "none")).sort("delta")
    assert list(top["no perturbation"].get_ydata()) == pytest.approx(none["U_max"].to_list())
    fig.canvas.draw()
    legend = fig.legends[0].get_window_extent()
    assert all(not legend.overlaps(ax.get_window_extent()) for ax in fig.axes)


# The report's wording, helper by helper (mutation testing found each untested): what a reader sees of the verdicts.


def test_cells_rows_and_tables_render_as_markdown():
    assert verdicts._num(0.12345) == "0.123" and verdicts._num(0.12345, 1) == "0.1" and verdicts._num(2) == "2.000"
    assert verdicts._num(None) == "—" and verdicts._num(float("nan")) == "—"
    assert verdicts._row(["a", 1, None]) == "| a | 1 | None |"
    assert verdicts._table(["x", "y"], [[1, 2], [3, 4]]) == ["| x | y |", "|---|---|", "| 1 | 2 |", "| 3 | 4 |"]


def test_a_span_is_one_number_when_the_values_agree_to_three_decimals():
    assert verdicts._span(pl.Series([0.2, 0.2002])) == "0.200"
    assert verdicts._span(pl.Series([0.2, 0.2005])) == "0.200 to 0.201"  # 5e-4 apart: a span
    assert verdicts._span(pl.Series([-0.3, 0.3])) == "-0.300 to 0.300"  # apart though |high + low| is 0
    assert verdicts._span(pl.Series([0.0, 5e-4])) == "0.000 to 0.001"  # exactly 5e-4 apart: a span


def test_verdicts_by_delta_group_the_deltas_that_read_alike():
    assert verdicts._by_delta(["holds", "holds", "holds"], [1, 2, 4]) == "holds"
    assert verdicts._by_delta(["vacuous"], [1]) == "vacuous"
    assert verdicts._by_delta(["holds", "vacuous", "holds"], [1, 2, 4]) == "holds (delta 1, 4), vacuous (delta 2)"
    assert verdicts._by_delta(["vacuous", "holds"], [1, 2]) == "vacuous (delta 1), holds (delta 2)"


def test_extrapolability_names_its_premise_only_where_it_holds():
    assert verdicts._extrapolability("holds", "holds") == "holds, SP_perturb holds"
    assert (
        verdicts._extrapolability("not applicable (SP_perturb fails)", "fails") == "not applicable (SP_perturb fails)"
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
    assert verdicts._rows_sample(premise, "unseen", "uniform", 1) == "fun 0.300 / 0.400; syn 0.100 / 0.200"
    assert verdicts._rows_sample(premise, "unseen", "uniform", 2) == "syn 0.500 / 0.600"
    sups = verdicts.sups_frame(premise)
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
    text = verdicts._contraction_findings(premise, 40)
    assert "beta > 0.9828" in text and "asks beta > 0.9875" in text and "with l = L = 40" in text
    assert text.endswith(
        "not necessary: class `unseen`, T = uniform: U_perturb^inf = 0.700 < U_base^inf = 1.000 at "
        "alpha = 0.637; class `half`, T = uniform: U_perturb^inf = 0.600 < U_base^inf = 1.000 at "
        "alpha = 0.500."
    )
    none = verdicts._contraction_findings(premise.filter(pl.col("perturbation") == "narrow"), 40)
    assert none.endswith(
        "The bound is sufficient for a gain, not necessary: no admissible class here gains where the bound is vacuous."
    )


@pytest.fixture(scope="module")
def premise():
    """The premise table for uniform replacement of all 16 words at beta 0.9, 0.972 (alpha between 1/3 and 1/2)
    and 1, and class replacement, at delta up to 3."""
    grammar = grammar_of(BUILTIN)
    frame = pl.from_arrow(build_sets(grammar, {**SETS, "deltas": [0, 1, 2, 3]})).sort("row")
    specs = {
        "u": {"q0": "uniform", "beta": 0.9, "last": 16},
        "s": {"q0": "synonym", "beta": 1.0, "last": 12},
        "all": {"q0": "uniform", "beta": 1.0, "last": 16},
        "c": {"q0": "uniform", "beta": 0.972, "last": 16},
    }
    lex = prefix_sets.lexicon(grammar, SETS["seed"])
    return theorems.premise_table(grammar, lex, frame, specs, 16, SETS["seed"], draws=4)


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
    lines = verdicts.findings(trained, premise, 16)
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
    text = verdicts._contraction_findings(premise, 16)
    assert "class `unseen`, T = u: U_perturb^inf" in text and "T = c:" not in text


def test_the_markdown_tables_rows_hold_the_sups_the_bounds_and_the_rows_sample(premise):
    rows = verdicts._premise_rows(premise)
    assert len(rows) == 2 * 7 * 3  # classes x T's x delta >= 1
    unseen = next(r for r in rows if r[:3] == ["unseen", "u", 1])
    member_tv = premise["member_tv"][0]
    assert unseen[3:8] == [
        f"{member_tv:.3f}",
        f"{member_tv * 0.1:.3f}",
        "an unseen word at position 0, inside T's window",
        verdicts._rows_sample(premise, "unseen", "u", 1),
        f"{2 * 0.1:.3f}",  # 2 C, C = 1 - beta
    ]
    assert unseen[6].startswith("composition ") and "; synonym " in unseen[6]
    assert unseen[8:] == ["holds", "holds", "fails", "not applicable (SP_perturb fails; U_perturb > 0)"]
    off = next(r for r in rows if r[:3] == ["off-support", "u", 2])
    assert off[4] == "0.000 (self-pairs only)"
    glob = verdicts._global_rows(premise)
    assert [r[:2] for r in glob] == [
        [c, t] for t in premise["perturbation"].unique(maintain_order=True) for c in ("unseen", "off-support")
    ]
    alpha = 1 - 0.9**16
    assert next(r for r in glob if r[:2] == ["unseen", "u"])[2:] == [
        f"{member_tv:.3f}",
        f"{member_tv * alpha:.3f}",
        f"{alpha:.3f}",
        f"{2 * alpha * member_tv:.3f}",
        "vacuous",
        "1.000",
        "vacuous",
    ]


def test_a_laws_file_is_read_with_its_label_and_optional_arrays_or_refused_naming_what_it_lacks(tmp_path):
    laws = np.full((2, 3, 4), 0.25)
    full = tmp_path / "a.npz"
    np.savez(
        full,
        laws=laws,
        perturbations=np.array(["none", "u"]),
        single=np.ones(3, bool),
        label=np.array("gpt2 run 1"),
        differs=np.zeros((2, 3)),
        laws_half=laws,
    )
    model = verdicts._read_model(str(full))
    assert model["label"] == "gpt2 run 1" and model["differs"].shape == (2, 3) and model["laws_half"].shape == (2, 3, 4)
    bare = tmp_path / "b.npz"
    np.savez(bare, laws=laws, perturbations=np.array(["none", "u"]), single=np.ones(3, bool))
    model = verdicts._read_model(str(bare))
    assert model["label"] == "b" and "differs" not in model and "laws_half" not in model
    lacking = tmp_path / "c.npz"
    np.savez(lacking, laws=laws)
    with pytest.raises(StageError) as error:
        verdicts._read_model(str(lacking))
    assert str(error.value) == f"{lacking}: missing arrays ['perturbations', 'single']"


CAPTIONS = [
    (
        "**T's constants**, exact for the T that runs (alpha, C) beside the Proposition's statement (Prop.); C on rows: "
        "the largest TV(T(.|X'), T(.|X0)) between a row and its own support prefix."
    ),
    (
        "**Model classes that meet the premise** (pairs agree on the support; docs/theory.md, 'The theory lab'): "
        "U_base(δ) and U_perturb(δ), exact sups over every prefix within δ of the support, the prefix that attains them, "
        "and each theorem's verdict from them. 'On the lab's rows' is a descriptive sample, U_base / U_perturb at the rows "
        "of each family at exactly δ, not U. Extrapolability: whether U_perturb(δ) = 0, beside its premise SP_perturb; "
        "'self-pairs only': no two distinct members agree on the support once perturbed."
    ),
    (
        "**Global uncertainties and Contractivity** (U^∞ = U(L): no prefix lies farther than L from the support; "
        "Assumption UI holds for both classes)."
    ),
    (
        "**Trained models, descriptive**: max / mean pairwise TV over the group on each delta set (not U: the models "
        "disagree on the support), its growth from delta 0, the max from half the draws (Monte Carlo check), and the TV "
        "to the true law. Ĉ: the largest share, over the set's rows, of T's draws in which a row's perturbed words differ "
        "from its support prefix's (the two share T's keys); a pair's TV on a row exceeds its TV on the support prefix "
        "by at most twice that share (asserted)."
    ),
]
HEADS = [
    ["T", "l", "family", "δ", "α", "α (Prop.)", "C", "C (Prop.)", "C on rows"],
    [
        "class",
        "T",
        "δ",
        "U_base(δ)",
        "U_perturb(δ)",
        "attained at",
        "on the lab's rows",
        "2C",
        "robustness",
        "robustness (Prop.'s C)",
        "SP_perturb",
        "extrapolability",
    ],
    [
        "class",
        "T",
        "U_base^∞",
        "U_perturb^∞",
        "α",
        "2α U_base^∞",
        "contraction",
        "α (Prop.)",
        "contraction (Prop.'s α)",
    ],
    [
        "family",
        "T",
        "δ",
        "prefixes",
        "draws",
        "U_max",
        "U_mean",
        "growth",
        "U_max (half draws)",
        "support disagreement",
        "Ĉ",
        "TV truth ± 2SE",
    ],
]


def _cells(line: str) -> list[str]:
    assert line.startswith("| ") and line.endswith(" |")
    return line[2:-2].split(" | ")


def test_the_summarys_lab_section_is_four_captioned_tables_then_the_findings(premise):
    """What a reader of the summary sees, block by block: each caption and header as written, and every cell the
    value its frame holds (three decimals, a dash for a missing value): no cell may lose its number."""
    trained = pl.DataFrame(
        {
            "family": ["synonym", "synonym"],
            "perturbation": ["u", "u"],
            "delta": [0, 2],
            "n_prefixes": [6, 5],
            "n_models": [3, 3],
            "draws": [8, 8],
            "U_max": [0.1234, 0.5],
            "U_mean": [0.05, 0.25],
            "U_growth": [0.0, 0.3766],
            "U_max_half_draws": [None, 0.55],
            "support_disagreement": [0.1234, 0.1234],
            "C_draws": [0.0, 0.375],
            "tv_truth_mean": [0.2, 0.3],
            "tv_truth_2se": [None, 0.0125],
        }
    )
    blocks = verdicts.markdown(trained, premise, 16).split("\n\n")
    assert blocks[-1].endswith("\n") and blocks[-1] == "\n".join(verdicts.findings(trained, premise, 16)) + "\n"
    assert blocks[:-1:2] == CAPTIONS
    tables = [block.split("\n") for block in blocks[1:-1:2]]
    for table, head in zip(tables, HEADS, strict=True):
        assert _cells(table[0]) == head and table[1] == "|" + "---|" * len(head)

    def num(value):
        return "—" if value is None else f"{value:.3f}"

    consts = premise.filter(pl.col("class") == premise["class"][0])
    assert [_cells(line) for line in tables[0][2:]] == [
        [r["perturbation"], str(r["last"]), r["family"], str(r["delta"])]
        + [num(r[k]) for k in ("alpha", "alpha_proposition", "C", "C_proposition", "C_rows")]
        for r in consts.iter_rows(named=True)
    ]
    assert any("—" in line for line in tables[0][2:])  # class replacement has no Proposition values
    assert [_cells(line) for line in tables[1][2:]] == [[str(c) for c in r] for r in verdicts._premise_rows(premise)]
    assert [_cells(line) for line in tables[2][2:]] == [[str(c) for c in r] for r in verdicts._global_rows(premise)]
    assert [_cells(line) for line in tables[3][2:]] == [
        ["synonym", "u", "0", "6", "8", "0.123", "0.050", "0.000", "—", "0.123", "0.000", "0.200"],
        ["synonym", "u", "2", "5", "8", "0.500", "0.250", "0.377", "0.550", "0.123", "0.375", "0.300 ± 0.013"],
    ]


CLI_ARGS = ["--prefixes", "--laws", "--builtin", "--settings", "--csv", "--premise", "--markdown", "--figure"]


@pytest.mark.parametrize("left_out", CLI_ARGS)
def test_cli_refuses_a_missing_argument_naming_it(left_out, monkeypatch, capsys):
    """Each argument the `lab` rule passes is required: a rule that lost one stops at the parser, naming it."""
    argv = [part for name in CLI_ARGS if name != left_out for part in (name, "x")]
    monkeypatch.setattr(sys, "argv", ["lab", *argv])
    with pytest.raises(SystemExit) as stopped:
        verdicts.main()
    assert stopped.value.code == 2
    error = capsys.readouterr().err
    assert error.startswith("usage: python -m workflow_lib.lab.verdicts")
    assert f"error: the following arguments are required: {left_out}" in error


@pytest.mark.parametrize("broken, name", [("settings", "lab --settings"), ("builtin", "lab --builtin")])
def test_cli_names_the_argument_whose_json_is_broken(broken, name, lab_files, monkeypatch):
    folder, laws = lab_files
    with pytest.raises(StageError, match=rf"^{name}: not valid JSON \("):
        run_cli(monkeypatch, folder, laws, **{broken: "{not json"})
    assert not (folder / "out").exists()


def test_cli_refuses_prefixes_without_a_column_naming_the_file_and_the_column(lab_files, monkeypatch):
    folder, laws = lab_files
    pl.read_parquet(folder / "prefixes.parquet").drop("base").write_parquet(folder / "prefixes.parquet")
    with pytest.raises(StageError) as error:
        run_cli(monkeypatch, folder, laws)
    assert str(error.value) == f"{folder / 'prefixes.parquet'}: missing columns ['base']"


def test_below_beta_1_class_replacements_row_tv_is_stated_as_a_bound_not_as_0():
    """At beta < 1 a row whose changes keep their class is restored only with probability beta^m: its TV to the
    support prefix is at most 1 - beta^m (perturbation.row_tv_to_base marks it not exact), never "0 exactly"."""
    grammar = grammar_of(BUILTIN)
    frame = pl.from_arrow(build_sets(grammar, SETS)).sort("row")
    lex = prefix_sets.lexicon(grammar, SETS["seed"])
    specs = {"s9": {"q0": "synonym", "beta": 0.9, "last": 12}}
    premise = theorems.premise_table(grammar, lex, frame, specs, 16, SETS["seed"], draws=4)
    trained = pl.DataFrame(schema={"family": pl.Utf8, "perturbation": pl.Utf8})
    (line,) = [x for x in verdicts.findings(trained, premise, 16) if x.startswith("- **T = s9**")]
    worst = premise.filter(pl.col("delta") > 0)["C_rows"].max()
    assert 0 < worst <= 1
    assert line.endswith(
        "on the rows TV(T(.|X'), T(.|X0)) is at most 1 - beta^m (m changes; a bound, not the value) where every "
        f"change keeps its class, else 1 (max {worst:.3g})."
    )
    assert "0 exactly" not in line


def test_the_specs_come_from_a_bare_mapping_or_the_rules_settings_with_a_shared_last():
    bare = {"u": {"q0": "uniform", "beta": 0.9, "last": 12}}
    assert verdicts.settings_specs(bare) == bare and verdicts.settings_specs(bare) is not bare
    rule = {
        "last": 12,
        "perturbations": {"u": {"q0": "uniform", "beta": 0.9}, "w": {"q0": "uniform", "beta": 1.0, "last": 16}},
    }
    assert verdicts.settings_specs(rule) == {
        "u": {"q0": "uniform", "beta": 0.9, "last": 12},
        "w": {"q0": "uniform", "beta": 1.0, "last": 16},  # a spec's own last wins
    }
    assert verdicts.settings_specs({"perturbations": {"u": {"q0": "uniform", "beta": 0.9}}}) == {
        "u": {"q0": "uniform", "beta": 0.9}
    }  # no shared last: none added


def _figure_of(monkeypatch, trained, premise):
    saved = []
    monkeypatch.setattr("workflow_lib.plotting._save", lambda fig, stem: saved.append((fig, stem)))
    verdicts.figure(trained, premise, "stem")
    ((fig, stem),) = saved
    assert stem == "stem"
    return fig


def test_the_figure_shows_each_familys_numbers_where_its_labels_say(lab_files, monkeypatch):
    """What a reader sees, panel by panel, against the tables it draws: the titles and axis labels, every line's
    points (the trained models' max TV, the premise class's sups per T and its rows' sample as circles of the
    line's colour, the TV to the truth with its 2 SE bars), the shared axes and ticks, and the sizes."""
    from workflow_lib.plotting import line_style

    folder, laws = lab_files
    run_cli(monkeypatch, folder, laws)
    trained, premise = pl.read_csv(folder / "out/u.csv"), pl.read_csv(folder / "out/p.csv")
    fig = _figure_of(monkeypatch, trained, premise)
    assert tuple(fig.get_size_inches()) == pytest.approx((9.2, 9.0))  # 2 families x 4.6 in
    assert fig._suptitle.get_text() == (
        "Theory lab on the synthetic grammar: trained models (descriptive) and a model class that meets the "
        "theorems' premise"
    )
    assert fig._suptitle.get_fontsize() == 9
    axes = np.array(fig.axes[:6]).reshape(3, 2)
    names = ["none", *trained["perturbation"].to_list(), *premise["perturbation"].to_list()]
    styles = {name: line_style(i) for i, name in enumerate(dict.fromkeys(names))}
    cls = premise.filter(pl.col("class") == "unseen")
    for col, family in enumerate(["composition", "synonym"]):
        top, middle, bottom = axes[:, col]
        assert top.get_title() == f"{family} prefixes\n({verdicts.FAMILY_NOTES[family]})"
        assert top.title.get_fontsize() == 9
        part = trained.filter(pl.col("family") == family)
        deltas = sorted(set(part["delta"].to_list()))
        for ax in (top, middle, bottom):
            assert list(ax.get_xticks()) == deltas and ax.get_ylim() == pytest.approx((-0.02, 1.02))
            assert ax.xaxis.get_ticklabels()[0].get_fontsize() == 8
        assert bottom.get_xlabel() == "δ: Hamming distance to the training support"
        assert bottom.xaxis.label.get_fontsize() == 9
        for name, label in (("none", "no perturbation"), ("syn", "T = syn")):
            line = part.filter(pl.col("perturbation") == name).sort("delta")
            (drawn,) = [x for x in top.get_lines() if x.get_label() == label]
            assert list(drawn.get_xdata()) == line["delta"].to_list()
            assert list(drawn.get_ydata()) == pytest.approx(line["U_max"].to_list())
            assert drawn.get_color() == styles[name]["color"] and drawn.get_marker() == styles[name]["marker"]
            (errors,) = [c for c in bottom.containers if c.get_label() == label]
            points, _caps, (bars,) = errors
            assert list(points.get_ydata()) == pytest.approx(line["tv_truth_mean"].to_list())
            spans = [segment[1, 1] - segment[0, 1] for segment in bars.get_segments()]
            assert spans == pytest.approx([2 * (e or 0.0) for e in line["tv_truth_2se"].to_list()])
            assert len(_caps) == 2 and _caps[0].get_markersize() == 2 * 2  # capsize 2 (matplotlib: 2x in points)
        rows = cls.filter(pl.col("family") == family)
        sups = verdicts.sups_frame(cls).filter(pl.col("delta").is_in(rows["delta"].unique().to_list()))
        lines = {x.get_label(): x for x in middle.get_lines() if not x.get_label().startswith("_")}
        base = sups.group_by("delta").agg(pl.col("U_base").max()).sort("delta")
        assert list(lines["no perturbation"].get_ydata()) == pytest.approx(base["U_base"].to_list())
        perturbed = sups.filter(pl.col("perturbation") == "syn").sort("delta")
        assert list(lines["T = syn"].get_ydata()) == pytest.approx(perturbed["U_perturb"].to_list())
        circles = [x for x in middle.get_lines() if x.get_label() == "_rows"]
        shown = ["none", *dict.fromkeys(rows["perturbation"].to_list())]
        assert len(circles) == len(shown) == len(lines) > 2
        for circle, name in zip(circles, shown):
            sample = (
                rows.group_by("delta").agg(pl.col("U_base_rows").max()).sort("delta")["U_base_rows"]
                if name == "none"
                else rows.filter(pl.col("perturbation") == name).sort("delta")["U_perturb_rows"]
            )
            assert circle.get_linestyle() == "None" and circle.get_marker() == "o"
            assert circle.get_markerfacecolor() == "none" and circle.get_color() == styles[name]["color"]
            assert list(circle.get_ydata()) == pytest.approx(sample.to_list())
    left = axes[:, 0]
    assert [ax.get_ylabel() for ax in left] == [
        "trained models:\nmax pairwise TV (not U)",
        "premise class 'unseen': U(δ),\nsup over every prefix (lines);\non the lab's rows (circles)",
        "trained models: TV to the\ntrue law (mean ± 2 SE)",
    ]
    assert all(ax.yaxis.label.get_fontsize() == 8 for ax in left)
    assert [ax.get_ylabel() for ax in axes[:, 1]] == ["", "", ""]


def test_the_figure_names_coinciding_lines_and_says_when_a_panel_has_nothing(lab_files, monkeypatch):
    """Two T's whose sups are equal draw one line over the other: the panel names them, so none seems missing. A
    family with no trained models, or no premise rows, says so in its panels instead of leaving them blank."""
    folder, laws = lab_files
    settings = {
        **SETTINGS,
        "perturbations": {"syn": {"q0": "uniform", "beta": 0.9}, "twin": {"q0": "uniform", "beta": 0.9}},
    }
    for path in laws:
        with np.load(path) as data:
            model = dict(data)
        model["laws"] = np.concatenate([model["laws"], model["laws"][1:]])
        model["perturbations"] = np.array(["none", "syn", "twin"])
        np.savez(path, **model)
    run_cli(monkeypatch, folder, laws, settings)
    trained, premise = pl.read_csv(folder / "out/u.csv"), pl.read_csv(folder / "out/p.csv")
    fig = _figure_of(monkeypatch, trained, premise)
    middle = fig.axes[2]
    (note,) = [t for t in middle.texts if t.get_text().startswith("equal")]
    groups = note.get_text().removeprefix("equal, drawn over each other:\n").split("\n\n")
    assert note.get_text().startswith("equal, drawn over each other:\n") and any(
        "T = syn\nT = twin" in group for group in groups
    )
    labels = {x.get_label() for x in middle.get_lines()}
    assert all(len(group.split("\n")) > 1 and set(group.split("\n")) <= labels for group in groups)
    assert note.get_position() == (0.35, 0.5) and note.get_fontsize() == 7 and note.get_va() == "center"
    assert note.get_transform() == middle.transAxes and not note.get_in_layout()
    fig = _figure_of(
        monkeypatch, trained.filter(pl.col("family") == "synonym"), premise.filter(pl.col("family") == "synonym")
    )
    assert [t.get_text() for t in fig.axes[0].texts] == [] and len(fig.axes) >= 3
    fig = _figure_of(monkeypatch, trained.filter(pl.col("family") == "synonym"), premise)
    top, middle, bottom = (fig.axes[i] for i in (0, 2, 4))
    assert [t.get_text() for t in top.texts] == ["no trained models"] == [t.get_text() for t in bottom.texts]
    fig = _figure_of(monkeypatch, trained, premise.filter(pl.col("class") == "other"))
    assert [t.get_text() for t in fig.axes[2].texts] == ["no premise class"]


def test_the_figure_plots_against_delta_shares_each_rows_axis_and_has_a_panel_when_the_lab_is_empty(
    lab_files, monkeypatch
):
    """Deltas that are not 0, 1, 2 (so a line drawn against its index would show), and not the same in the trained
    table (0, 1, 4) as in the premise table (0, 1, 3): every line and circle sits at its deltas, in its T's style;
    a column's ticks are both tables' deltas; a missing 2 SE is a bar of 0; a row of panels shares its y axis;
    three rows, laid out by matplotlib's constrained engine; only coinciding lines are named, two or more. An empty
    lab still draws one labelled column, at least 7 in wide, with no line."""
    from workflow_lib.plotting import line_style

    folder, laws = lab_files
    run_cli(monkeypatch, folder, laws)
    trained = pl.read_csv(folder / "out/u.csv").with_columns(pl.col("delta").replace_strict({0: 0, 1: 1, 2: 4}))
    trained = trained.with_columns(
        pl.when(pl.col("delta") == 4).then(None).otherwise(pl.col("tv_truth_2se")).alias("tv_truth_2se")
    )
    premise = pl.read_csv(folder / "out/p.csv").with_columns(pl.col("delta").replace_strict({0: 0, 1: 1, 2: 3}))
    fig = _figure_of(monkeypatch, trained, premise)
    assert fig.axes[0].get_gridspec().get_geometry() == (3, 2)
    assert type(fig.get_layout_engine()).__name__ == "ConstrainedLayoutEngine"
    axes = np.array(fig.axes[:6]).reshape(3, 2)
    for row in axes:
        assert row[0].get_shared_y_axes().joined(row[0], row[1])
    names = dict.fromkeys(["none", *trained["perturbation"].to_list(), *premise["perturbation"].to_list()])
    styles = {name: line_style(i) for i, name in enumerate(names)}
    labels = {("no perturbation" if name == "none" else f"T = {name}"): name for name in names}
    top, middle, bottom = axes[:, 0]
    assert all(list(ax.get_xticks()) == [0, 1, 3, 4] for ax in axes[:, 0])
    for name, label in (("none", "no perturbation"), ("syn", "T = syn")):
        (drawn,) = [x for x in top.get_lines() if x.get_label() == label]
        assert list(drawn.get_xdata()) == [0, 1, 4]
        (errors,) = [c for c in bottom.containers if c.get_label() == label]
        points, _caps, (bars,) = errors
        assert list(points.get_xdata()) == [0, 1, 4]
        assert points.get_color() == styles[name]["color"] and points.get_marker() == styles[name]["marker"]
        spans = [segment[1, 1] - segment[0, 1] for segment in bars.get_segments()]
        assert spans[2] == 0.0 and spans[0] > 0
    lines = [x for x in middle.get_lines() if not x.get_label().startswith("_")]
    circles = [x for x in middle.get_lines() if x.get_label() == "_rows"]
    assert len(lines) == len(circles) >= 2
    for line, circle in zip(lines, circles):
        style = styles[labels[line.get_label()]]
        assert line.get_color() == style["color"] and line.get_marker() == style["marker"]
        assert list(line.get_xdata()) == list(circle.get_xdata()) == [0, 1, 3]
    sups = {x.get_label(): tuple(x.get_ydata()) for x in lines}
    equal = {frozenset(a for a in sups if sups[a] == sups[b]) for b in sups}
    named = {
        frozenset(group.split("\n"))
        for note in (t.get_text() for t in middle.texts if t.get_text().startswith("equal"))
        for group in note.removeprefix("equal, drawn over each other:\n").split("\n\n")
    }
    assert named == {group for group in equal if len(group) >= 2}  # every pair or more that coincides, only those
    empty = _figure_of(monkeypatch, trained.clear(), premise.clear())
    assert [ax.get_title() for ax in empty.axes[:1]] == ["(none) prefixes"]
    assert tuple(empty.get_size_inches()) == pytest.approx((7.0, 9.0))
    assert [t.get_text() for t in empty.axes[0].texts] == ["no trained models"]
    assert empty.axes[1].get_lines() == [] and [t.get_text() for t in empty.axes[1].texts] == ["no premise class"]


def test_cli_names_the_laws_file_whose_draws_differ_from_the_groups(lab_files, monkeypatch):
    """Files of one group must share the lab's draws: a file whose coupling shares differ is named by its path."""
    folder, laws = lab_files
    rows = pl.read_parquet(folder / "prefixes.parquet").height
    for i, path in enumerate(laws):
        with np.load(path) as data:
            model = dict(data)
        model["differs"] = np.full((2, rows), 0.5 if i == 2 else 0.25)
        np.savez(path, **model)
    with pytest.raises(StageError) as error:
        run_cli(monkeypatch, folder, laws)
    assert str(error.value).startswith(f"{laws[2]}: its perturbation draws differ from {laws[0]}'s;")
