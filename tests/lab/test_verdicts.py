"""The theory lab's trained-model table (descriptive), its internal coupling assertion, the markdown and figure,
and the `lab` CLI on a tiny grammar with its refusals."""

from __future__ import annotations

import json
import sys

import numpy as np
import polars as pl
import pytest

from workflow_lib.cli import StageError
from workflow_lib.lab import bounds, perturbation, verdicts
from workflow_lib.lab.laws import build_sets, grammar_of

# Four rows of one family: two support prefixes (delta 0) and their delta-1 versions (same base).
ROWS = [(0, 0, 0), (1, 0, 1), (2, 1, 0), (3, 1, 1)]  # (row, delta, base)
ONE = [1.0, 0.0, 0.0]
# "none" laws of three models on cells (word 0, word 1, other). Pair TVs (A,B), (A,C), (B,C) per row:
# row 0: 0, 0, 0; row 1: 0, 0.1, 0.1; row 2: 0.5, 0.3, 0.2; row 3: 0.2, 0, 0.2.
LAWS = np.array(
    [
        [ONE, ONE, ONE, ONE],
        [ONE, ONE, [0.5, 0.5, 0.0], [0.8, 0.2, 0.0]],
        [ONE, [0.9, 0.1, 0.0], [0.7, 0.3, 0.0], ONE],
    ]
)
CONSTANTS = {
    ("syn", "synonym", d): {
        "alpha": 1.0,
        "alpha_proposition": 0.4,
        "C": float(d),
        "C_proposition": 0.1 * d,
        "C_rows": 0.05 * d,
    }
    for d in (0, 1)
}


def prefixes(family: str = "synonym", truth=(1.0, 0.0)) -> pl.DataFrame:
    return pl.DataFrame(
        {
            "row": [r for r, _, _ in ROWS],
            "family": [family] * 4,
            "delta": [d for _, d, _ in ROWS],
            "base": [b for _, _, b in ROWS],
            "text": ["a b"] * 4,
            "truth": [list(truth)] * 4,
        },
        schema={
            "row": pl.Int64,
            "family": pl.Utf8,
            "delta": pl.Int64,
            "base": pl.Int64,
            "text": pl.Utf8,
            "truth": pl.List(pl.Float64),
        },
    )


def models(perturbed: np.ndarray | None = None, single=(True, True)) -> list[dict]:
    """Three models with LAWS unperturbed and `perturbed` (default: LAWS again) under "syn"."""
    perturbed = LAWS if perturbed is None else perturbed
    return [
        {
            "laws": np.stack([LAWS[m], perturbed[m]]),
            "perturbations": np.array(["none", "syn"]),
            "single": np.array(single),
            "label": f"model {m}",
        }
        for m in range(3)
    ]


def table(perturbed: np.ndarray | None = None, group: list[dict] | None = None) -> pl.DataFrame:
    return bounds.uncertainty_table(prefixes(), group or models(perturbed), CONSTANTS, draws=8)


def row(frame: pl.DataFrame, perturbation: str, delta: int) -> dict:
    (hit,) = frame.filter((pl.col("perturbation") == perturbation) & (pl.col("delta") == delta)).iter_rows(named=True)
    return hit


def test_tv_of_a_model_with_itself_is_zero():
    laws = np.random.default_rng(0).dirichlet(np.ones(5), size=(2, 7))  # two different models, 7 rows
    tv = bounds.pairwise_tv(np.stack([laws[0], laws[0], laws[1]]))  # pairs (0,1), (0,2), (1,2)
    assert tv.shape == (3, 7)
    assert np.all(tv[0] == 0)
    assert np.all(tv[1] > 0) and np.allclose(tv[1], tv[2])


def test_pairwise_tv_matches_a_hand_computation():
    tv = bounds.pairwise_tv(np.array([[[0.5, 0.5, 0.0]], [[1.0, 0.0, 0.0]], [[0.2, 0.2, 0.6]]]))
    assert tv[:, 0] == pytest.approx([0.5, 0.6, 0.8])
    by_row = [[0, 0, 0], [0, 0.1, 0.1], [0.5, 0.3, 0.2], [0.2, 0, 0.2]]  # LAWS' pairs, as in its comment
    assert bounds.pairwise_tv(LAWS).T == pytest.approx(np.array(by_row))


def test_coarse_truth_and_fold_move_multi_token_mass_into_the_other_cell():
    single = np.array([True, False, True])
    assert bounds.coarse_truth(np.array([[0.2, 0.3, 0.5]]), single) == pytest.approx(np.array([[0.2, 0.0, 0.5, 0.3]]))
    assert bounds.fold(np.array([0.1, 0.2, 0.3, 0.4]), single) == pytest.approx([0.1, 0.0, 0.3, 0.6])


def test_table_describes_the_models_disagreement_and_attaches_ts_constants():
    frame = table(perturbed=np.stack([LAWS[0], LAWS[0], LAWS[1]]))
    assert frame.columns == bounds.COLUMNS
    none0, none1 = row(frame, "none", 0), row(frame, "none", 1)
    assert none0["U_max"] == pytest.approx(0.1) and none1["U_max"] == pytest.approx(0.5)
    assert none1["U_growth"] == pytest.approx(0.4) and none1["support_disagreement"] == pytest.approx(0.1)
    assert none1["U_mean"] == pytest.approx(np.mean([0.5, 0.3, 0.2, 0.2, 0, 0.2]))
    assert none1["tv_truth_mean"] == pytest.approx(np.mean([0, 0.5, 0.3, 0, 0.2, 0]))
    assert none1["draws"] == 1 and none1["alpha"] is None and none1["C"] is None
    syn1 = row(frame, "syn", 1)
    assert syn1["draws"] == 8 and syn1["C"] == 1.0 and syn1["C_proposition"] == pytest.approx(0.1)
    assert syn1["U_max"] == pytest.approx(0.5)  # models 0 and 1 equal, model 2 as before
    assert not {c for c in frame.columns if c.startswith(("respects", "bound", "violations"))}


def test_half_draws_column_reports_how_far_the_monte_carlo_average_moves():
    group = models()
    for m in group:
        m["laws_half"] = m["laws"].copy()
    group[0]["laws_half"][1, 2] = [0.0, 1.0, 0.0]  # model A's first-half average moves on row 2
    frame = table(group=group)
    assert row(frame, "syn", 1)["U_max"] == pytest.approx(0.5)
    assert row(frame, "syn", 1)["U_max_half_draws"] == pytest.approx(0.7)  # A vs C on row 2: (0,1,0) vs (.7,.3,0)
    assert row(frame, "none", 1)["U_max_half_draws"] is None


def test_the_coupling_assertion_passes_consistent_draws_and_stops_on_inconsistent_ones():
    group = models()
    for m in group:  # every row changed in half of the draws: 2 x 0.5 + support TV >= any TV
        m["differs"] = np.full((2, 4), 0.5)
    assert table(group=group).height == 4
    for m in group:  # no draw changed a delta-1 row: its TV must equal its support prefix's, and does not
        m["differs"] = np.zeros((2, 4))
    with pytest.raises(StageError, match="coupling inequality fails at row 2.*which is a bug"):
        table(group=group)


def test_missing_constants_are_refused_by_name():
    with pytest.raises(StageError, match="no constants of T for perturbation 'syn', family 'synonym', delta 1"):
        bounds.uncertainty_table(prefixes(), models(), {k: v for k, v in CONSTANTS.items() if k[2] == 0}, draws=8)


def test_assert_coupling_names_the_row_and_pair():
    tv = np.array([[0.0, 0.3]])
    bounds.assert_coupling(tv, np.array([[0.0, 0.1]]), np.array([0.0, 0.1]), "syn")
    with pytest.raises(StageError, match="row 1, pair 0"):
        bounds.assert_coupling(tv, np.array([[0.0, 0.0]]), np.array([0.0, 0.1]), "syn")


def test_the_coupling_assertion_allows_round_off_up_to_its_tolerance_and_no_more():
    share, base = np.array([0.0]), np.array([[0.0]])
    bounds.assert_coupling(np.array([[bounds.TOLERANCE]]), base, share, "syn")  # exactly at the tolerance: passes
    with pytest.raises(StageError, match="coupling inequality fails at row 0, pair 0"):
        bounds.assert_coupling(np.array([[2 * bounds.TOLERANCE]]), base, share, "syn")


def test_laws_are_compared_on_the_words_every_model_spells_as_one_token():
    laws = models(single=(True, True))
    laws[1]["single"] = np.array([True, False])  # model B spells word 1 with several tokens
    laws[1]["laws"] = bounds.fold(laws[1]["laws"], laws[1]["single"])
    frame = bounds.uncertainty_table(prefixes(truth=(0.5, 0.5)), laws, CONSTANTS, draws=8)
    # Word 1 folds into "other" for every model and for the truth: TVs are unchanged (other cells were 0).
    assert row(frame, "none", 1)["U_max"] == pytest.approx(0.5)
    assert row(frame, "none", 0)["truth_other_mass"] == pytest.approx(0.5)


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
