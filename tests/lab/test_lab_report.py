"""The theory lab's report: pairwise TV, U(delta) against the bounds on hand-built laws, the findings it writes,
the figure, and the CLI's refusals."""

from __future__ import annotations

import sys
import types

import numpy as np
import polars as pl
import pytest

from workflow_lib.cli import StageError
from workflow_lib.lab import bounds, report

# Four rows of one family: two support prefixes (delta 0) and their delta-1 versions (same base).
ROWS = [(0, 0, 0), (1, 0, 1), (2, 1, 0), (3, 1, 1)]  # (row, delta, base)
ONE = [1.0, 0.0, 0.0]
# "none" laws of three models on cells (word 0, word 1, other). Pair TVs (A,B), (A,C), (B,C) per row:
# row 0: 0, 0, 0; row 1: 0, 0.1, 0.1; row 2: 0.5, 0.3, 0.2; row 3: 0.2, 0, 0.2.
LAWS = np.array([
    [ONE, ONE, ONE, ONE],
    [ONE, ONE, [0.5, 0.5, 0.0], [0.8, 0.2, 0.0]],
    [ONE, [0.9, 0.1, 0.0], [0.7, 0.3, 0.0], ONE],
])


def prefixes(family: str = "synonym", truth=(1.0, 0.0)) -> pl.DataFrame:
    return pl.DataFrame({"row": [r for r, _, _ in ROWS], "family": [family] * 4, "delta": [d for _, d, _ in ROWS],
                         "base": [b for _, _, b in ROWS], "text": ["a b"] * 4, "truth": [list(truth)] * 4},
                        schema={"row": pl.Int64, "family": pl.Utf8, "delta": pl.Int64, "base": pl.Int64,
                                "text": pl.Utf8, "truth": pl.List(pl.Float64)})


def models(perturbed: np.ndarray | None = None, single=(True, True)) -> list[dict]:
    """Three models with LAWS unperturbed and `perturbed` (default: LAWS again) under "syn"."""
    perturbed = LAWS if perturbed is None else perturbed
    return [{"laws": np.stack([LAWS[m], perturbed[m]]), "perturbations": np.array(["none", "syn"]),
             "single": np.array(single), "label": f"model {m}"} for m in range(3)]


def table(constants: dict, perturbed: np.ndarray | None = None) -> pl.DataFrame:
    return bounds.uncertainty_table(prefixes(), models(perturbed), {}, constants)


def constants(c1: float, alpha: float = 0.25) -> dict:
    return {("syn", "synonym", 0): (alpha, 0.0), ("syn", "synonym", 1): (alpha, c1)}


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


def test_table_measures_u_and_tv_to_truth_on_a_constructed_example():
    frame = table(constants(0.25))
    assert frame.columns == bounds.COLUMNS
    assert frame.select("perturbation", "delta").rows() == [("none", 0), ("none", 1), ("syn", 0), ("syn", 1)]
    support, off = row(frame, "none", 0), row(frame, "none", 1)
    assert (off["n_prefixes"], off["n_models"], off["n_pairs"]) == (2, 3, 3)
    assert support["U_max"] == pytest.approx(0.1) and support["U_mean"] == pytest.approx(0.2 / 6)
    assert off["U_max"] == pytest.approx(0.5) and off["U_mean"] == pytest.approx(1.4 / 6)
    # TV to the truth (word 0 with certainty): model A 0 everywhere; B 0, 0, 0.5, 0.2; C 0, 0.1, 0.3, 0.
    assert support["tv_truth_mean"] == pytest.approx(0.1 / 6) and off["tv_truth_mean"] == pytest.approx(1.0 / 6)
    # 2 SE of two per-row means a, b is |a - b|: rows 2 and 3 average 0.8/3 and 0.2/3 over the models.
    assert support["tv_truth_2se"] == pytest.approx(0.1 / 3) and off["tv_truth_2se"] == pytest.approx(0.2)
    assert off["slack"] == pytest.approx(0.1)  # the pairs' max TV on rows 0 and 1
    assert support["alpha"] is None and support["bound_robust"] is None and support["respects_robust"] is None
    perturbed = row(frame, "syn", 1)
    assert perturbed["U_base"] == pytest.approx(0.5) and perturbed["bound_robust"] == pytest.approx(0.5)
    assert perturbed["bound_contraction"] == pytest.approx(2 * 0.25 * 0.5)
    assert perturbed["respects_contraction"] is False  # 0.5 > 0.25


def test_a_violated_robustness_bound_is_reported_and_named():
    frame = table(constants(0.2))  # 2C = 0.4 < U = 0.5 at delta 1
    assert row(frame, "syn", 1)["respects_robust"] is False
    text = report.markdown(frame)
    assert "2C violated at" in text and "delta=1: U=0.500 > 2C=0.400" in text
    assert "| synonym | syn | 1 | 2 | 0.500 | 0.233 |" in text


def test_laws_within_the_bound_respect_it():
    agree = np.array([[ONE, ONE, [0.6, 0.4, 0.0], ONE],
                      [ONE, ONE, ONE, [0.7, 0.3, 0.0]],
                      [ONE, ONE, ONE, ONE]])  # agree on the support, at most 0.4 apart off it
    frame = table(constants(0.2), agree)
    assert frame.filter(pl.col("perturbation") == "syn")["respects_robust"].to_list() == [True, True]
    assert row(frame, "syn", 1)["U_max"] == pytest.approx(0.4)
    text = report.markdown(frame)
    assert "2C respected at every delta" in text and "2C violated" not in text and "2Ĉ + slack violated" not in text
    # The contraction bound is its own check: 2 alpha U_base = 0.25 < U = 0.4 here, and the text says so.
    assert "2αU_base violated at delta=1: U=0.400 > 2αU_base=0.250" in text


def test_triangle_check_counts_every_violating_row_and_pair():
    # C = 0.1: row 2's pairs (0.5, 0.3, 0.2) against 0.2 + 0 -> 2 violations; row 3's (0.2, 0, 0.2) against
    # 0.2 + (0, 0.1, 0.1) -> none.
    strict = row(table(constants(0.1)), "syn", 1)
    assert strict["violations_triangle"] == 2 and strict["respects_triangle"] is False
    assert strict["bound_triangle"] == pytest.approx(0.3)
    finding = "2Ĉ + slack violated at delta=1: U=0.500 > 2Ĉ + slack=0.300 (2 row/pairs)"
    assert finding in report.markdown(table(constants(0.1)))
    loose = row(table(constants(0.15)), "syn", 1)  # against 0.3 + 0: only the 0.5 pair
    assert loose["violations_triangle"] == 1
    assert row(table(constants(0.25)), "syn", 1)["respects_triangle"] is True


def test_findings_say_whether_sp_perturb_holds_from_the_constants():
    holds = report.markdown(table(constants(0.0)))
    assert "C = 0 at every delta > 0, so Assumption SP_perturb holds" in holds
    assert "differs from it by at most 0.400" in holds  # U 0.5 at delta 1 against its support slack 0.1
    assert "SP_perturb fails" in report.markdown(table(constants(0.3)))


def test_laws_are_compared_on_the_words_every_model_spells_as_one_token():
    laws = models(single=(True, True))
    laws[1]["single"] = np.array([True, False])  # model B spells word 1 with several tokens
    laws[1]["laws"] = bounds.fold(laws[1]["laws"], laws[1]["single"])
    frame = bounds.uncertainty_table(prefixes(truth=(0.5, 0.5)), laws, {}, constants(0.25))
    # Word 1 folds into "other" for every model and for the truth: TVs are unchanged (other cells were 0).
    assert row(frame, "none", 1)["U_max"] == pytest.approx(0.5)
    assert row(frame, "none", 0)["truth_other_mass"] == pytest.approx(0.5)


@pytest.fixture
def lab_files(tmp_path, monkeypatch):
    """Prefixes and three models' laws on disk, and a stand-in for workflow_lib.lab.perturbation.bound_constants."""
    calls = []

    def bound_constants(q0, family, beta, last, delta):
        calls.append((q0, family, beta, last, delta))
        return min((1 - beta) * last, 1.0), min((1 - beta) * delta, 1.0)

    monkeypatch.setitem(sys.modules, "workflow_lib.lab.perturbation", types.SimpleNamespace(bound_constants=bound_constants))
    frame = pl.concat([prefixes("synonym"), prefixes("composition").with_columns(pl.col("row") + 4, pl.col("base") + 2)])
    frame.write_parquet(tmp_path / "prefixes.parquet")
    paths = []
    for m, model in enumerate(models()):
        model["laws"] = np.concatenate([model["laws"], model["laws"]], axis=1)
        paths.append(tmp_path / f"m{m}.npz")
        np.savez(paths[-1], **model)
    return tmp_path, [str(p) for p in paths], calls


def run_cli(monkeypatch, folder, laws, settings='{"last": 4, "perturbations": {"syn": {"q0": "uniform", "beta": 0.9}}}'):
    monkeypatch.setattr(sys, "argv", ["lab_report", "--prefixes", str(folder / "prefixes.parquet"), "--laws", *laws,
                                      "--settings", settings, "--csv", str(folder / "out/u.csv"),
                                      "--markdown", str(folder / "out/u.md"), "--figure", str(folder / "out/fig")])
    report.main()


def test_cli_writes_the_table_markdown_and_figure(lab_files, monkeypatch):
    folder, laws, calls = lab_files
    run_cli(monkeypatch, folder, laws)
    written = pl.read_csv(folder / "out/u.csv")
    assert written.columns == bounds.COLUMNS and written.height == 8
    synonym = written.filter(pl.col("family") == "synonym")
    assert row(synonym, "syn", 1)["bound_robust"] == pytest.approx(0.2)  # 2 C = 2 (1 - beta) delta
    assert ("uniform", "synonym", 0.9, 4, 1) in calls
    assert "| composition | none | 0 |" in (folder / "out/u.md").read_text()
    for ext in ("png", "pdf"):
        assert (folder / f"out/fig.{ext}").stat().st_size > 1000
    assert not list((folder / "out").glob(".*tmp*"))


def test_cli_refuses_a_nan_law_naming_the_file(lab_files, monkeypatch):
    folder, laws, _ = lab_files
    with np.load(laws[1]) as data:
        broken = dict(data)
    broken["laws"][1, 2, 0] = np.nan
    np.savez(laws[1], **broken)
    with pytest.raises(StageError, match=r"m1\.npz: laws has 1 non-finite"):
        run_cli(monkeypatch, folder, laws)
    assert not (folder / "out/u.csv").exists()


def test_cli_refuses_a_single_model_and_mismatched_perturbations(lab_files, monkeypatch):
    folder, laws, _ = lab_files
    with pytest.raises(StageError, match=r"1 model\(s\) \(.*m0\.npz\).*at least 2 models"):
        run_cli(monkeypatch, folder, laws[:1])
    with np.load(laws[2]) as data:
        other = dict(data) | {"perturbations": np.array(["none", "other"])}
    np.savez(laws[2], **other)
    with pytest.raises(StageError, match=r"m2\.npz: perturbations \['none', 'other'\] differ"):
        run_cli(monkeypatch, folder, laws)


def test_cli_refuses_non_finite_truth_naming_the_prefixes(lab_files, monkeypatch):
    folder, laws, _ = lab_files
    frame = pl.read_parquet(folder / "prefixes.parquet")
    frame.with_columns(truth=pl.when(pl.col("row") == 5).then(pl.lit([float("nan"), 1.0])).otherwise(pl.col("truth"))) \
        .write_parquet(folder / "prefixes.parquet")
    with pytest.raises(StageError, match=r"prefixes\.parquet: truth has non-finite values .* rows \[5\]"):
        run_cli(monkeypatch, folder, laws)


def test_figure_is_deterministic_and_puts_points_at_their_own_delta(tmp_path, monkeypatch):
    frame = table(constants(0.2)).with_columns(delta=pl.col("delta") * 3)  # deltas 0 and 3
    report.figure(frame, str(tmp_path / "a"))
    report.figure(frame, str(tmp_path / "b"))
    for ext in ("png", "pdf"):
        assert (tmp_path / f"a.{ext}").read_bytes() == (tmp_path / f"b.{ext}").read_bytes()
    saved = []
    monkeypatch.setattr("workflow_lib.figures._save", lambda fig, stem: saved.append(fig))
    report.figure(frame, "unused")
    (fig,) = saved
    top = fig.axes[0]
    lines = {line.get_label(): line for line in top.get_lines()}
    assert list(lines["U_perturb, T = syn"].get_xdata()) == [0, 3]
    assert list(lines["U_base (no perturbation)"].get_ydata()) == pytest.approx([0.1, 0.5])
    assert list(lines["2C, T = syn"].get_ydata()) == pytest.approx([0.0, 0.4])
    assert list(top.get_xticks()) == [0, 3]
    fig.canvas.draw()
    legend = fig.legends[0].get_window_extent()
    assert all(not legend.overlaps(ax.get_window_extent()) for ax in fig.axes)


def test_the_triangle_check_uses_the_draws_coupling_when_the_laws_carry_it():
    # Under "syn", row 2 (delta 1, base 0) has pair TVs 0.5/0.3/0.2 with 0 on its support prefix. With C = 0.1,
    # 2Ĉ + slack = 0.2 is exceeded by two pairs; but if in 30% of the draws the row's perturbed words differed
    # from its support prefix's, the coupling allows 0.6 there, and row 3 (TV <= 0.2, its base 0.1) 0.1 + 0.2.
    group = models()
    for m in group:
        m["differs"] = np.array([[0.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.3, 0.1]])
    frame = bounds.uncertainty_table(prefixes(), group, {}, constants(0.1))
    coupled = row(frame, "syn", 1)
    assert coupled["C_draws"] == pytest.approx(0.3) and coupled["violations_triangle"] == 0
    assert coupled["bound_triangle"] == pytest.approx(0.6) and coupled["respects_robust"] is False  # bare 2C: 0.2
    for m in group:
        m["differs"] = np.array([[0.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.1, 0.0]])
    # Row 2: 0.5 and 0.3 exceed 2 x 0.1 + 0; row 3 (coupling 0): 0.2 > 0 + 0 (A, B) and 0.2 > 0 + 0.1 (B, C).
    assert row(bounds.uncertainty_table(prefixes(), group, {}, constants(0.1)), "syn", 1)["violations_triangle"] == 4
    group[2]["differs"] = np.zeros((2, 4))
    with pytest.raises(StageError, match="model 2: its perturbation draws differ from model 0"):
        bounds.uncertainty_table(prefixes(), group, {}, constants(0.1))
