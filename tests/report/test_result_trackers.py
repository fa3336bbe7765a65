"""A finished study's results in MLflow (a file store) and W&B (offline), through the logging job's command
(workflow_lib/report/trackers.py), and the job planned only where `report.report_to` names a tracker."""

from __future__ import annotations

import json
import subprocess
import sys

import polars as pl
import pytest

from support.workflow_runs import SESSION_ENV, planned_rules, snakemake, tiny_config, write_config
from workflow_lib.report.conditions import KEYS
from workflow_lib.report.trackers import KEY_TAG, PROJECT

CONDITION = {
    "model": "tiny",
    "dataset": "synthetic",
    "objective": "mle",
    "train_synonyms": "none",
    "train_mode": "augment",
    "copies": 1,
    "train_strategy": "none",
    "train_intensity": 0.0,
    "seed": 42,
    "eval_set": "syn-test",
    "decoder": "unbiased",
    "test_synonyms": "none",
    "test_strategy": "none",
    "test_intensity": 0.0,
    "test_mode": "exact",
}


@pytest.fixture
def report(tmp_path):
    """A study's report files: two conditions' metrics (one without MAUVE), a contrast, a summary."""
    rows = [
        {**CONDITION, "rouge1_mean": 0.61, "rouge1_2se": 0.01, "mauve_mean": 0.9, "mauve_2se": 0.02, "tv_mean": 0.4},
        {**CONDITION, "objective": "brier", "rouge1_mean": 0.58, "rouge1_2se": 0.02, "mauve_mean": None},
    ]
    pl.DataFrame(rows).write_csv(tmp_path / "metrics.csv")
    pl.DataFrame([{"family": "objective", "metric": "rouge1", "diff": -0.03, "p": 0.2}]).write_csv(
        tmp_path / "contrasts.csv"
    )
    (tmp_path / "summary.md").write_text("# Summary\n\n## What this study found\n\n- ROUGE-1 fell.\n\n## Tables\n\nx\n")
    (tmp_path / "table1.md").write_text("| a |\n")
    return tmp_path


def log_results(report, report_to: list[str]) -> dict:
    settings = {"report_to": report_to, "dir": str(report / "tracking"), "study": "my-study"}
    command = [sys.executable, "-m", "workflow_lib.report.trackers", "--metrics", str(report / "metrics.csv")]
    command += ["--contrasts", str(report / "contrasts.csv"), "--summary", str(report / "summary.md")]
    command += ["--tables", str(report / "table1.md"), "--settings", json.dumps(settings)]
    command += ["--output", str(report / "tracked.json")]
    env = {**SESSION_ENV, "WANDB_MODE": "offline", "WANDB_SILENT": "true"}
    env.pop("MLFLOW_TRACKING_URI", None)
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads((report / "tracked.json").read_text())


def test_each_condition_is_an_mlflow_run_with_its_metrics_and_the_study_one_with_its_report(report, monkeypatch):
    from mlflow.tracking import MlflowClient

    tracked = log_results(report, ["mlflow"])
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    client = MlflowClient(tracking_uri=(report / "tracking/mlflow").resolve().as_uri())
    experiment = client.get_experiment_by_name(PROJECT)
    runs = {r.info.run_name: r for r in client.search_runs([experiment.experiment_id])}
    assert len(runs) == 3 and tracked["mlflow"]["condition_runs"] == 2
    mle = runs["/".join(str(CONDITION[k]) for k in KEYS)]
    assert mle.data.metrics == {
        "rouge1_mean": 0.61,
        "rouge1_2se": 0.01,
        "mauve_mean": 0.9,
        "mauve_2se": 0.02,
        "tv_mean": 0.4,
    }
    assert {k: mle.data.params[k] for k in ("objective", "seed", "test_mode")} == {
        "objective": "mle",
        "seed": "42",
        "test_mode": "exact",
    }
    brier = next(r for name, r in runs.items() if "/brier/" in name)
    assert "mauve_mean" not in brier.data.metrics  # not scored: no value, never a 0 or a NaN
    study = runs["my-study (report)"]
    assert study.info.run_id == tracked["mlflow"]["study_run"]
    assert study.data.tags["mlflow.note.content"] == "# Summary\n\n## What this study found\n\n- ROUGE-1 fell."
    artifacts = {a.path for a in client.list_artifacts(study.info.run_id, "report")}
    assert artifacts == {f"report/{n}" for n in ("summary.md", "metrics.csv", "contrasts.csv", "table1.md")}
    # A rerun (a changed metric) updates its own runs: no new run, the latest value is the new one.
    frame = pl.read_csv(report / "metrics.csv").with_columns(pl.col("rouge1_mean") + 0.1)
    frame.write_csv(report / "metrics.csv")
    log_results(report, ["mlflow"])
    again = {r.info.run_name: r for r in client.search_runs([experiment.experiment_id])}
    assert {n: r.info.run_id for n, r in again.items()} == {n: r.info.run_id for n, r in runs.items()}
    assert again[mle.info.run_name].data.metrics["rouge1_mean"] == pytest.approx(0.71)
    assert all(KEY_TAG in r.data.tags for r in again.values())


def test_wandb_offline_holds_the_studys_run_under_a_stable_id(report):
    first = log_results(report, ["wandb"])["wandb"]["id"]
    second = log_results(report, ["wandb"])["wandb"]["id"]
    assert first == second  # the same study resumes its run
    folders = sorted((report / "tracking/wandb/wandb").glob(f"offline-run-*-{first}"))
    assert len(folders) == 2 and all(list(f.glob("run-*.wandb")) for f in folders)


@pytest.mark.workflow
def test_the_logging_job_is_planned_only_where_a_tracker_is_named(tmp_path):
    config = tiny_config()
    write_config(tmp_path, config)
    plain = snakemake(tmp_path, "-n")
    assert plain.returncode == 0 and "track_results" not in planned_rules(plain.stdout), plain.stderr[-2000:]
    config["report"] = {"report_to": ["mlflow"]}
    write_config(tmp_path, config)
    tracked = snakemake(tmp_path, "-n")
    assert tracked.returncode == 0 and "track_results" in planned_rules(tracked.stdout), tracked.stderr[-2000:]
