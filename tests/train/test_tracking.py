"""Training runs in TensorBoard, MLflow and Weights & Biases (offline), through the train rule's own command."""

from __future__ import annotations

import csv

import pytest

from studies.served import job_environment, warm_server
from support.workflow_runs import SESSION_ENV, planned_rules, snakemake, tiny_builtin, tiny_config, write_config
from workflow_lib.config import ConfigError, validate_config
from workflow_lib.train import tracking

ARCH = {"n_layer": 1, "n_head": 2, "n_embd": 32, "n_positions": 128}
RUNS = {model: f"{model}/synthetic/mle/none/augment-m1/none-0/seed1" for model in ("two", "one")}
LOGGED = ("loss", "lr", "grad_norm", "tokens_per_s", "validation_loss", "validation_objective")


def tracked_config(report_to: list[str]) -> dict:
    config = tiny_config()
    config["datasets"]["synthetic"] = tiny_builtin(train=12)
    train = {"epochs": 1, "eval_every": 4, "log_every": 3, "checkpoint_every": 5}
    config["models"] = {
        "two": {
            "source": "scratch",
            "tokenizer": "bpe",
            "architecture": ARCH,
            "training": {**train, "gpus": 2, "batch_size": 4},
        },
        "one": {"source": "scratch", "tokenizer": "bpe", "architecture": ARCH, "training": {**train, "batch_size": 8}},
    }
    config["training"] = {**config["training"], "report_to": report_to}
    config["experiments"] = {
        "main": {"models": ["two", "one"], "train_dataset": "synthetic", "eval_sets": ["syn-test"]}
    }
    return config


def csv_rows(workdir, run: str) -> list[dict]:
    with open(workdir / "results/models" / run / "train_log.csv") as handle:
        return list(csv.DictReader(handle))


def csv_series(rows: list[dict], name: str) -> dict[int, float]:
    return {int(r["step"]): float(r[name]) for r in rows if r[name] != ""}


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("tracking")
    write_config(workdir, tracked_config(["tensorboard", "mlflow", "wandb"]))
    env = {**SESSION_ENV, "WANDB_MODE": "offline", "WANDB_SILENT": "true"}
    env.pop("MLFLOW_TRACKING_URI", None)
    # The jobs of one thread (the data's, and model "one"'s training) run warm in a server of this environment, as
    # they would cold: the session's server has another (without WANDB_MODE), so they would run cold there.
    with warm_server(job_environment(env), workdir / "warm.log") as warm_env:
        done = snakemake(workdir, "--until", "train", env=warm_env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "ran workflow_lib.train.trainer" in (workdir / "warm.log").read_text()  # model "one", warm
    return workdir


@pytest.mark.workflow
def test_tensorboard_runs_hold_the_csvs_values_once_per_step(trained):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    for model, run in RUNS.items():
        folder = trained / "results/tracking/tensorboard" / run
        events = sorted(folder.glob("events.out.tfevents.*"))
        assert len(events) == 1, (model, events)  # two processes: one writer, the main process's
        acc = EventAccumulator(str(folder), size_guidance={"scalars": 0})
        acc.Reload()
        rows = csv_rows(trained, run)
        for name in LOGGED:
            expected = csv_series(rows, name)
            logged = acc.Scalars(name)
            assert [e.step for e in logged] == sorted(expected), (model, name)  # each step once
            for event in logged:  # TensorBoard stores float32
                assert event.value == pytest.approx(expected[event.step], rel=1e-6, abs=1e-12), (
                    model,
                    name,
                    event.step,
                )
        assert len(csv_series(rows, "validation_loss")) >= 2 and len(csv_series(rows, "tokens_per_s")) >= 2


@pytest.mark.workflow
def test_mlflow_file_store_holds_one_named_run_per_job_with_the_csvs_values(trained, monkeypatch):
    from mlflow.tracking import MlflowClient

    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    client = MlflowClient(tracking_uri=(trained / "results/tracking/mlflow").resolve().as_uri())
    experiment = client.get_experiment_by_name(tracking.PROJECT)
    runs = client.search_runs([experiment.experiment_id])
    assert sorted(r.info.run_name for r in runs) == sorted(RUNS.values())  # one run per job, named by its wildcards
    for run in runs:
        rows = csv_rows(trained, run.info.run_name)
        assert run.data.params["training.batch_size"] == str({"two": 4, "one": 8}[run.info.run_name.split("/")[0]])
        for name in LOGGED:
            history = client.get_metric_history(run.info.run_id, name)
            assert {m.step: m.value for m in history} == csv_series(rows, name), (run.info.run_name, name)
            assert len(history) == len(csv_series(rows, name))  # the two-process job logged each step once


@pytest.mark.workflow
def test_wandb_offline_writes_a_run_folder_per_job(trained):
    runs = sorted((trained / "results/tracking/wandb/wandb").glob("offline-run-*"))
    assert len(runs) == len(RUNS), runs
    assert all(list(run.glob("run-*.wandb")) for run in runs)


@pytest.mark.workflow
def test_trackers_are_not_params_turning_one_off_retrains_nothing(trained):
    write_config(trained, tracked_config([]))
    plan = snakemake(trained, "--until", "train", "-n")
    assert plan.returncode == 0, plan.stderr
    assert "train" not in planned_rules(plan.stdout), plan.stdout  # the trained models stand


def test_a_tracker_that_is_not_installed_fails_at_config_check_naming_key_and_package(monkeypatch):
    import importlib.util

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "wandb" else find_spec(name, *a))
    with pytest.raises(ConfigError, match=r"training.report_to: not installed: wandb \(pip install wandb\)"):
        validate_config(tracked_config(["tensorboard", "wandb"]))
    assert validate_config(tracked_config(["tensorboard"]))["training"]["report_to"] == ["tensorboard"]


def test_run_names_and_logged_rows():
    assert (
        tracking.run_name("results/models/gpt2/wikitext2/mle/none/augment-m1/none-0/seed42")
        == "gpt2/wikitext2/mle/none/augment-m1/none-0/seed42"
    )
    assert tracking.logged({"step": 3, "epoch": 0, "loss": 1.5, "lr": 0.1}) == {"loss": 1.5, "lr": 0.1}
    flat = tracking.run_config({"batch_size": 8, "splits": ["train"]}, {"source": "scratch"}, {"loss": "mle"}, "r")
    assert flat == {
        "run": "r",
        "training.batch_size": 8,
        "training.splits": '["train"]',
        "model.source": "scratch",
        "objective.loss": "mle",
    }


def test_resuming_points_each_tracker_at_its_saved_run_or_a_new_one(tmp_path, monkeypatch, caplog):
    """W&B gets the saved id (a new run: a fresh one, so that its checkpoint can name it); MLflow the saved run where
    its store holds it, else a new run, with a warning (the study moved to another tracking store)."""
    from accelerate.tracking import MLflowTracker, WandBTracker

    wandb = WandBTracker(tracking.PROJECT, name="r")
    tracking.resume([wandb], {"wandb": "saved0id"})
    assert wandb.init_kwargs == {"name": "r", "id": "saved0id", "resume": "allow"}
    fresh = WandBTracker(tracking.PROJECT, name="r")
    tracking.resume([fresh], {})
    assert len(fresh.init_kwargs["id"]) == 16 and fresh.init_kwargs["id"] != wandb.init_kwargs["id"]

    monkeypatch.setenv("MLFLOW_TRACKING_URI", (tmp_path / "mlflow").as_uri())
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    mlflow = MLflowTracker(tracking.PROJECT, run_name="r")
    with caplog.at_level("WARNING", logger="workflow_lib.train.tracking"):
        tracking.resume([mlflow], {"mlflow": "0" * 32})
    assert mlflow.run_id is None and "is not in this tracking store: a new run is started" in caplog.text
