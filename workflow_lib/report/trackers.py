"""A finished study's results in the experiment trackers it names (`report.report_to`: mlflow, wandb), where
lm-evaluation-harness users find theirs: per evaluated condition its metrics, and per study its tables, contrasts
and summary (the findings). docs/usage.md, "Results in MLflow and W&B".

MLflow: one run per row of report/metrics.csv (its condition as params, its metrics' means and 2 SE), and one run
for the study with the report's files as artifacts and the summary as its note. W&B: one run for the study, whose
tables hold metrics.csv and contrasts.csv and whose artifact holds the report's files. Runs carry a key made of the
study and the condition, so a rerun updates its own runs instead of adding new ones.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import json
import logging
import math
import os
from pathlib import Path

from workflow_lib.cli import parse_json_arg, run
from workflow_lib.files import write_json
from workflow_lib.metric_registry import REGISTRY
from workflow_lib.report.conditions import KEYS
from workflow_lib.train.tracking import PROJECT  # the trainings' project: one place to look

log = logging.getLogger("workflow_lib.report.trackers")

KEY_TAG = "perturbed_lm.key"  # an MLflow run's study and condition, so a rerun finds its own run
TRACKERS = ("mlflow", "wandb")


def run_key(study: str, row: dict | None) -> str:
    """A run's key: the study's, and its condition's (the identity columns) where it is one row."""
    identity = json.dumps([study, None if row is None else [row.get(k) for k in KEYS]], default=str)
    return hashlib.sha256(identity.encode()).hexdigest()[:32]


def row_metrics(row: dict) -> dict[str, float]:
    """The row's finite metric values: each registered metric's mean (and 2 SE) under its column name."""
    out = {}
    for metric in REGISTRY:
        for column in (metric.mean_column, f"{metric.name}_2se"):
            value = row.get(column)
            if isinstance(value, (int, float)) and math.isfinite(value):
                out[column] = float(value)
    return out


def run_name(row: dict) -> str:
    """The condition as a path: model/dataset/objective/train condition/seed/eval set/decoder/test condition."""
    return "/".join(str(row.get(k)) for k in KEYS)


def log_mlflow(rows: list[dict], files: list[Path], summary: str, study: str, folder: Path) -> dict:
    """One MLflow run per row and one for the study (a file store under `folder`/mlflow unless MLFLOW_TRACKING_URI
    names a server); their ids."""
    mlflow = importlib.import_module("mlflow")  # an extra (pip install -e .[mlflow]), where a study asks for it
    if "MLFLOW_TRACKING_URI" not in os.environ:
        os.environ["MLFLOW_TRACKING_URI"] = (folder.resolve() / "mlflow").as_uri()
        os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    client = mlflow.tracking.MlflowClient()
    experiment = client.get_experiment_by_name(PROJECT)
    experiment_id = experiment.experiment_id if experiment else client.create_experiment(PROJECT)

    def run_for(key: str, name: str) -> str:
        found = client.search_runs([experiment_id], filter_string=f"tags.`{KEY_TAG}` = '{key}'", max_results=1)
        if found:
            return found[0].info.run_id
        return client.create_run(experiment_id, run_name=name, tags={KEY_TAG: key, "study": study}).info.run_id

    ids = {}
    for row in rows:
        run_id = run_for(run_key(study, row), run_name(row))
        params = [mlflow.entities.Param(k, str(row.get(k))) for k in KEYS]
        existing = client.get_run(run_id).data.params
        metrics = [mlflow.entities.Metric(k, v, 0, 0) for k, v in row_metrics(row).items()]
        client.log_batch(run_id, metrics=metrics, params=[p for p in params if p.key not in existing])
        client.set_terminated(run_id)
        ids[run_name(row)] = run_id
    study_run = run_for(run_key(study, None), f"{study} (report)")
    client.set_tag(study_run, "mlflow.note.content", summary)  # the run's description in MLflow's UI
    for path in files:
        client.log_artifact(study_run, str(path), artifact_path="report")
    client.set_terminated(study_run)
    return {"study_run": study_run, "condition_runs": len(ids)}


def log_wandb(
    metrics_csv: Path, contrasts_csv: Path, files: list[Path], summary: str, study: str, folder: Path
) -> dict:
    """One W&B run for the study (offline where WANDB_MODE=offline): the two tidy tables and the report's files."""
    import polars as pl

    wandb = importlib.import_module("wandb")
    (folder / "wandb").mkdir(parents=True, exist_ok=True)
    key = run_key(study, None)[:16]
    with wandb.init(
        project=PROJECT, name=f"{study} (report)", id=key, resume="allow", dir=str(folder / "wandb"), job_type="report"
    ) as tracked:
        for name, path in (("metrics", metrics_csv), ("contrasts", contrasts_csv)):
            frame = pl.read_csv(path, infer_schema_length=None)
            tracked.log({name: wandb.Table(columns=frame.columns, data=[list(r) for r in frame.iter_rows()])})
        tracked.summary["findings"] = summary
        artifact = wandb.Artifact(f"report-{key}", type="report")
        for path in files:
            artifact.add_file(str(path), name=path.name)
        tracked.log_artifact(artifact)
        return {"id": tracked.id}


def findings(summary_md: str) -> str:
    """The summary's opening, up to its second section: what the study found, as the tracker's note shows it."""
    parts = summary_md.split("\n## ")
    return "\n## ".join(parts[:2]).strip()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m workflow_lib.report.trackers", description=__doc__.splitlines()[0])
    parser.add_argument("--metrics", required=True, type=Path)
    parser.add_argument("--contrasts", required=True, type=Path)
    parser.add_argument("--summary", required=True, type=Path)
    parser.add_argument("--tables", nargs="*", default=[], type=Path, help="the report's tables to attach")
    parser.add_argument("--settings", required=True, help="JSON: {report_to, dir, study}")
    parser.add_argument("--output", required=True)
    args = parser.parse_args()

    import polars as pl

    settings = parse_json_arg(args.settings, "report")
    folder, study = Path(settings["dir"]), settings["study"]
    rows = pl.read_csv(args.metrics, infer_schema_length=None).to_dicts()
    files = [args.summary, args.metrics, args.contrasts, *args.tables]
    summary = findings(args.summary.read_text())
    logged: dict = {"study": study}
    for name in settings["report_to"]:
        if name == "mlflow":
            logged["mlflow"] = log_mlflow(rows, files, summary, study, folder)
        elif name == "wandb":
            logged["wandb"] = log_wandb(args.metrics, args.contrasts, files, summary, study, folder)
        log.info("%s: %s", name, logged[name])
    write_json(logged, args.output)


if __name__ == "__main__":
    run(main)
