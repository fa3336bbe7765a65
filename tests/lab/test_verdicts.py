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


def run_cli(monkeypatch, folder, laws, settings=SETTINGS):
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
            json.dumps(BUILTIN),
            "--settings",
            json.dumps(settings),
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
