"""One pair's rows (contrasts.compare): the files it reads (MAUVE by run, the per-prompt sidecars on the prompts both
have), a joint MAUVE result in place of the paired t, and a non-finite score refused."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import polars as pl
import pytest

from workflow_lib.report.contrasts import contrasts


def test_a_joint_mauve_result_keeps_why_it_was_not_tested(tmp_path, monkeypatch):
    from workflow_lib.report.contrasts import JOINT, compare

    monkeypatch.chdir(tmp_path)  # no sidecars here: the MAUVE row alone
    pair = {
        "family": "perturbation",
        "model": "tiny",
        "dataset": "syn",
        "objective": "mle",
        "eval_set": "test",
        "decoder": "unbiased",
        "seed": 1,
        "a": "insertion 0.5",
        "b": "no perturbation",
        "kind": "metrics",
        "path_a": "joint_a.json",
        "path_b": "joint_b.json",
    }
    joint = {"difference": 0.01, "low": None, "high": None, "p": None, "n": 4, "untested": "4 prompts", "resamples": 16}
    [row] = compare(pair, joint=joint)
    assert (row["metric"], row["method"], row["not_testable"], row["resamples"], row["n"]) == (
        "mauve",
        JOINT,
        "4 prompts",
        16,
        4,
    )
    assert compare(pair, joint={**joint, "untested": None, "p": 0.5})[0]["not_testable"] is None
    assert compare(pair, joint={**joint, "status": "too few texts (20)"}) == []


def test_mauve_by_run_reads_the_run_ids_or_numbers_the_runs(tmp_path):
    from workflow_lib.report.study_files import mauve_by_run as _mauve_by_run

    assert _mauve_by_run({"mauve": [0.5, 0.6]}) == {0: 0.5, 1: 0.6}
    assert _mauve_by_run({"mauve": [0.5, 0.6], "run_ids": [3, 7]}) == {3: 0.5, 7: 0.6}
    assert _mauve_by_run({"mauve": None, "mauve_status": "too few texts (8)"}) == {}


def test_shared_prompts_average_each_sides_rouge_over_the_runs_both_have():
    from workflow_lib.report.study_files import shared_prompts as _shared_prompts

    a = pl.DataFrame({"prompt_id": [0, 0, 1, 1, 2], "run": [0, 1, 0, 1, 0], "rouge1": [0.1, 0.3, 0.5, 0.7, 0.9]})
    b = pl.DataFrame({"prompt_id": [0, 1, 1, 3], "run": [1, 0, 1, 0], "rouge1": [0.2, 0.4, 0.6, 0.8]})
    both = _shared_prompts(a, b, {"path_a": "a", "path_b": "b"})
    assert both.columns == ["prompt_id", "rouge1", "rouge1_b"]
    assert both["prompt_id"].to_list() == [0, 1]
    assert both["rouge1"].to_list() == pytest.approx([0.3, 0.6]) and both["rouge1_b"].to_list() == pytest.approx(
        [0.2, 0.5]
    )


def _sidecar(path: Path, prompts: list[int]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pl.DataFrame(
        {
            "prompt_id": prompts,
            "run": [0] * len(prompts),
            "rouge1": [0.5] * len(prompts),
            "rouge2": [0.5] * len(prompts),
            "rougeL": [0.5] * len(prompts),
        }
    ).write_parquet(path.with_name(path.name.removesuffix(".json") + ".prompts.parquet"))


def test_compare_needs_both_sidecars_and_a_shared_prompt(tmp_path, monkeypatch):
    from workflow_lib.report.contrasts import compare

    monkeypatch.chdir(tmp_path)
    pair = {
        "family": "perturbation",
        "model": "tiny",
        "dataset": "syn",
        "objective": "mle",
        "eval_set": "test",
        "decoder": "unbiased",
        "seed": 1,
        "a": "insertion 0.5",
        "b": "no perturbation",
        "kind": "metrics",
        "path_a": "a.json",
        "path_b": "b.json",
    }
    for name in ("a.json", "b.json"):
        Path(name).write_text(json.dumps({"mauve": [0.5, 0.6, 0.7], "run_ids": [0, 1, 2]}))

    def rows():  # each call reads the files afresh
        return [(r["metric"], r["n"], r["not_testable"]) for r in compare(pair)]

    _sidecar(Path("a.json"), [0, 1])
    assert rows() == [("mauve", 3, None)]  # b has no sidecar
    _sidecar(Path("b.json"), [5, 6])
    assert rows() == [("mauve", 3, None)]  # no shared prompt
    _sidecar(Path("b.json"), [1, 6])
    assert rows() == [
        ("mauve", 3, None),
        ("rouge1", 1, "1 prompt"),
        ("rouge2", 1, "1 prompt"),
        ("rougeL", 1, "1 prompt"),
    ]


def test_a_non_finite_per_prompt_score_stops_the_comparison_naming_both_files(tmp_path, monkeypatch):
    """A NaN in a per-prompt sidecar is no estimate: the job stops with an error that names the two metrics files
    compared (a wrong result never looks like a result)."""
    from workflow_lib.cli import StageError
    from workflow_lib.report.contrasts import compare

    monkeypatch.chdir(tmp_path)
    keys = ("family", "model", "dataset", "objective", "eval_set", "decoder", "seed")
    pair = {**dict.fromkeys(keys, "x"), "kind": "metrics", "path_a": "runs/a.json", "path_b": "runs/b.json"}
    pair |= {"a": "insertion 0.5", "b": "no perturbation"}
    for name in (pair["path_a"], pair["path_b"]):
        _sidecar(Path(name), [0, 1, 2, 3, 4, 5])
        Path(name).write_text(json.dumps({"mauve": None, "run_ids": [0]}))
    frame = pl.read_parquet("runs/b.prompts.parquet")
    frame.with_columns(pl.Series("rouge2", [0.5, float("nan"), 0.5, 0.5, 0.5, 0.5])).write_parquet(
        "runs/b.prompts.parquet"
    )
    with pytest.raises(StageError) as error:
        compare(pair)
    assert str(error.value) == (
        "runs/a.json vs runs/b.json: permutation test: a non-finite per-prompt value; no estimate is made"
    )


def test_joint_mauve_results_replace_the_paired_t_and_enter_holm(study, tmp_path, monkeypatch):
    """One perturbation pair tested on the shared quantisation at p = 0.05 exactly, the other two not testable: Holm's
    m is 1, so its adjusted p is 0.05, which is not below the level. Pairs without a result keep the paired t."""
    from workflow_lib.comparisons import designed_mauve, pair_id
    from workflow_lib.report import contrasts as module

    designed = designed_mauve(study, 0.025)
    perturbation = sorted(k for k, p in designed.items() if p["family"] == "perturbation")
    results = []
    for i, key in enumerate(perturbation):
        result = {
            "difference": 0.04,
            "low": 0.01,
            "high": 0.07,
            "p": 0.05 if i == 0 else None,
            "n": 15,
            "untested": None if i == 0 else "5 prompts",
            "resamples": 2000,
        }
        path = tmp_path / "joint" / f"{key}.json"
        path.parent.mkdir(exist_ok=True)
        path.write_text(json.dumps(result))
        results.append(str(path))
    frame = contrasts(study, 0.025, mauve=results)
    mauve = frame.filter(pl.col("metric") == "mauve")
    joint = mauve.filter(pl.col("method") == module.JOINT)
    assert (
        sorted(
            pair_id(p)
            for p in module.pairs(module.conditions(study), 0.025)
            if p["kind"] == "metrics" and p["family"] == "perturbation"
        )
        == perturbation
    )
    assert joint.height == 3 and set(joint["family"]) == {"perturbation"}
    tested = joint.filter(pl.col("p").is_not_null())
    assert tested.height == 1 and tested["p_holm"].to_list() == [0.05] and tested["significant"].to_list() == [False]
    assert sorted(joint["not_testable"].drop_nulls().to_list()) == ["5 prompts", "5 prompts"]
    assert (joint["resamples"] == 2000).all() and (joint["n"] == 15).all()
    assert set(mauve.filter(pl.col("family") != "perturbation")["method"]) == {module.PAIRED_T}
    assert frame.filter(pl.col("metric") == "perplexity").equals(
        contrasts(study, 0.025).filter(pl.col("metric") == "perplexity")
    )
    # the same through the command line
    out = tmp_path / "cli.csv"
    monkeypatch.setattr(
        sys, "argv", ["contrasts", "--intensity", "0.025", "--output", str(out), "--mauve", *results, "--", *study]
    )
    module.main()
    assert module.read_contrasts(str(out)).equals(frame)
