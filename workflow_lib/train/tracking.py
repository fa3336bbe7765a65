"""Experiment trackers for training (`training.report_to`): TensorBoard, Weights & Biases and MLflow, through
accelerate's trackers, logged from the main process only.

One run per training job, named after its output path's wildcards (model/dataset/objective/condition/seed), with
the job's settings as the run's configuration; a training resumed from a checkpoint continues its own tracker runs
(their ids are saved in each checkpoint: `resume`, `run_ids`). Each optimizer step logs the row `train_log.csv`
records: loss, learning rate, gradient norm, tokens/s and, at each evaluation, the validation NLL and objective loss.

The trackers are not params of the train rule: turning one on must not retrain a finished model. rules/train.smk
passes `training.report_to` and `training.tracking_dir` to the jobs in the environment (PERTURBED_LM_TRACKING),
and a training that runs logs to them.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import uuid
from pathlib import Path

log = logging.getLogger("workflow_lib.train.tracking")

ENV = "PERTURBED_LM_TRACKING"
PROJECT = "perturbed-lm"
# tracker name -> (the module accelerate imports, the pip package that provides it)
TRACKERS = {
    "tensorboard": ("tensorboard", "tensorboard"),
    "wandb": ("wandb", "wandb"),
    "mlflow": ("mlflow", "mlflow-skinny"),
}


def missing(report_to: list[str]) -> list[str]:
    """The trackers asked for whose package is not installed, each as 'name (pip install package)'."""
    return [
        f"{name} (pip install {TRACKERS[name][1]})"
        for name in report_to
        if importlib.util.find_spec(TRACKERS[name][0]) is None
    ]


def settings_from_env() -> dict:
    """{report_to, dir} as rules/train.smk sets them; none when the job runs outside the workflow."""
    return json.loads(os.environ.get(ENV, "{}")) or {"report_to": [], "dir": "results/tracking"}


def run_name(output: str) -> str:
    """results/models/<model>/<dataset>/<objective>/<synonyms>/<mode>/<strategy-intensity>/seed<n> -> the part
    after results/models/ (the job's wildcards, in path order)."""
    parts = Path(output).parts
    return "/".join(parts[parts.index("models") + 1 :]) if "models" in parts else Path(output).name


def trackers(report_to: list[str], folder: str, run: str) -> list:
    """accelerate tracker objects for this run (build them on the main process only)."""
    from accelerate.tracking import MLflowTracker, TensorBoardTracker, WandBTracker

    root = Path(folder).resolve()
    out = []
    for name in report_to:
        if name == "tensorboard":  # <dir>/tensorboard/<run>: `tensorboard --logdir <dir>` shows every run
            out.append(TensorBoardTracker(run, root / "tensorboard"))
        elif name == "mlflow":
            if "MLFLOW_TRACKING_URI" not in os.environ:  # a file store under <dir>/mlflow unless the user set a server
                os.environ["MLFLOW_TRACKING_URI"] = (root / "mlflow").as_uri()
                os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")  # MLflow 3 keeps it in maintenance mode
            out.append(MLflowTracker(PROJECT, run_name=run))
        elif name == "wandb":  # online where the user is logged in; WANDB_MODE=offline writes <dir>/wandb only
            (root / "wandb").mkdir(parents=True, exist_ok=True)
            out.append(WandBTracker(PROJECT, name=run, dir=str(root / "wandb"), group=run.split("/")[0]))
    return out


def resume(trackers: list, runs: dict[str, str]) -> None:
    """Point the trackers, before they start, at the runs a checkpoint saved (`runs`, tracker name -> run id): W&B
    resumes its id (a new run gets a new id, so the checkpoint can name it), MLflow its run where the store still
    holds it. TensorBoard writes into the run's own folder either way."""
    for tracker in trackers:
        if tracker.name == "wandb":
            tracker.init_kwargs |= {"id": runs.get("wandb") or uuid.uuid4().hex[:16], "resume": "allow"}
        elif tracker.name == "mlflow" and runs.get("mlflow"):
            # Imported as accelerate imports it, only where a study turns MLflow on (an extra: envs/ pin no tracker).
            mlflow = importlib.import_module("mlflow")
            try:
                mlflow.tracking.MlflowClient().get_run(runs["mlflow"])
                tracker.run_id = runs["mlflow"]
            except mlflow.exceptions.MlflowException:
                log.warning("MLflow run %s is not in this tracking store: a new run is started", runs["mlflow"])


def run_ids(trackers: list) -> dict[str, str]:
    """The started trackers' run ids, which each checkpoint keeps so that a resumed training continues them."""
    ids = {}
    for tracker in trackers:
        if tracker.name == "wandb":
            ids["wandb"] = tracker.run.id
        elif tracker.name == "mlflow":
            ids["mlflow"] = tracker.active_run.info.run_id
    return ids


def run_config(settings: dict, model_spec: dict, objective: dict, run: str) -> dict:
    """The run's configuration, flat and scalar (TensorBoard's hparams and MLflow's params take scalars only)."""
    flat: dict[str, int | float | str] = {"run": run}
    for prefix, values in (("training", settings), ("model", model_spec), ("objective", objective)):
        for key, value in values.items():
            flat[f"{prefix}.{key}"] = value if isinstance(value, (int, float, str, bool)) else json.dumps(value)
    return flat


def logged(row: dict) -> dict:
    """A train_log.csv row as the trackers get it: every value but the step and epoch."""
    return {k: float(v) for k, v in row.items() if k not in ("step", "epoch")}
