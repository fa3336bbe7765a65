"""The `lab` CLI on a tiny grammar: both tables, the markdown and the figure it writes, how it reads a laws file
and its settings, and its refusals."""

from __future__ import annotations

import sys

import numpy as np
import polars as pl
import pytest

from support.lab_files import SETTINGS, run_cli
from workflow_lib.cli import StageError
from workflow_lib.lab import bounds, perturbation, verdicts


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
