"""The checkpoint folder (workflow_lib/train/checkpoints.py, issue 64): a workdir copied without its file times resumes,
a damaged newest checkpoint falls back to the previous one, a killed job's temporaries are cleared, and a second
trainer cannot write a folder in use. Each resumed run ends with the uninterrupted run's weights."""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import test_train as base  # the trainer's tests: their data, settings and helpers (tests/train/ is on sys.path)
import torch
from safetensors.torch import load_file

from workflow_lib.cli import StageError
from workflow_lib.train import checkpoints
from workflow_lib.train.trainer import train

data = base.data  # the memorisable set, shared with the trainer's tests
fresh_accelerator_state = base.fresh_accelerator_state  # autouse: each train() is a job of its own


@pytest.fixture(scope="module")
def uninterrupted(data, tmp_path_factory) -> Path:
    """The run of base.KILLED_SETTINGS (48 steps, a checkpoint every 5) that nothing interrupts."""
    out = tmp_path_factory.mktemp("uninterrupted")
    whole = base.run_cli(data, out, base.KILLED_SETTINGS)
    assert whole.returncode == 0, whole.stderr
    return out


def same_weights(a: Path, b: Path) -> None:
    first, second = load_file(a / "model" / "model.safetensors"), load_file(b / "model" / "model.safetensors")
    assert first.keys() == second.keys() and all(torch.equal(first[k], second[k]) for k in first)
    assert base.losses(a) == base.losses(b)


def kill_when(command: list[str], markers: list[Path], log: Path, cwd: Path | None = None) -> None:
    """Start the trainer's CLI and SIGKILL it as soon as every marker exists; assert that the kill stopped it."""
    with open(log, "w") as stderr:
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=stderr, cwd=cwd)
        deadline = time.monotonic() + 300
        while not all(m.exists() for m in markers) and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.005)
        process.send_signal(signal.SIGKILL)
        returncode = process.wait(timeout=60)
    assert returncode == -signal.SIGKILL, log.read_text()[-3000:]


def step_of(folder: Path) -> int:
    return json.loads((folder / checkpoints.STATE_FILE).read_text())["step"]


def test_a_workdir_copied_without_its_file_times_resumes_from_its_checkpoint(data, uninterrupted, tmp_path):
    """`cp -r` gives every file a new mtime (as a data job that reran to the same bytes does): the checkpoint is still
    this run's, so the copy resumes from it, not from step 0, and ends with the uninterrupted weights."""
    workdir = tmp_path / "workdir"
    shutil.copytree(data, workdir / "data")
    relative = base.cli_command(Path("data"), Path("out"), base.KILLED_SETTINGS)  # a workflow's paths: relative
    (workdir / "out").mkdir()
    kill_when(relative, [workdir / "out/resume/state" / checkpoints.STATE_FILE], workdir / "killed.log", workdir)
    step = step_of(workdir / "out/resume/state")
    time.sleep(0.05)  # coarse file-time clocks: the copies' times must differ from the originals'
    copy = tmp_path / "copy"
    shutil.copytree(workdir, copy, copy_function=shutil.copyfile)  # the bytes, not the times
    original, copied = workdir / "data/augment.parquet", copy / "data/augment.parquet"
    assert original.stat().st_mtime_ns != copied.stat().st_mtime_ns
    resumed = subprocess.run(relative, capture_output=True, text=True, timeout=300, cwd=copy)
    assert resumed.returncode == 0, resumed.stderr
    assert f"resuming from step {step} of 48" in resumed.stderr and "discarding" not in resumed.stderr
    same_weights(uninterrupted, copy / "out")


@pytest.mark.parametrize("damaged", ["model.safetensors", checkpoints.STATE_FILE])
def test_a_truncated_newest_checkpoint_falls_back_to_the_previous_one(data, uninterrupted, tmp_path, damaged):
    """Killed with two checkpoints on disk, the newest one's file cut in half (a crash of the machine mid-write, a full
    disk): the rerun warns naming the file, resumes the previous checkpoint and ends with the uninterrupted weights."""
    out = tmp_path / "killed"
    out.mkdir()
    resume = out / "resume"
    markers = [resume / name / checkpoints.STATE_FILE for name in (checkpoints.PREVIOUS, checkpoints.CURRENT)]
    kill_when(base.cli_command(data, out, base.KILLED_SETTINGS), markers, out / "killed.log")
    newest, previous = step_of(resume / checkpoints.CURRENT), step_of(resume / checkpoints.PREVIOUS)
    assert previous == newest - 5
    target = resume / checkpoints.CURRENT / damaged
    target.write_bytes(target.read_bytes()[: target.stat().st_size // 2])
    resumed = base.run_cli(data, out, base.KILLED_SETTINGS)
    assert resumed.returncode == 0, resumed.stderr
    assert f"checkpoint {resume / checkpoints.CURRENT} is damaged: {target}" in resumed.stderr
    assert "falling back to the previous checkpoint" in resumed.stderr
    assert f"resuming from step {previous} of 48" in resumed.stderr
    same_weights(uninterrupted, out)


def write_checkpoint(resume: Path, name: str, step: int, mark: str = "run", marked: bool = True) -> Path:
    """A checkpoint folder as save_checkpoint leaves it: its files, then (if marked) the marker listing them."""
    folder = resume / name
    folder.mkdir(parents=True)
    (folder / "model.safetensors").write_bytes(bytes(range(256)) * (step + 1))
    if marked:
        saved = {"step": step, "best": {}, "log": [], "fingerprint": mark, "files": checkpoints.file_list(folder)}
        (folder / checkpoints.STATE_FILE).write_text(json.dumps(saved))
    return folder


def test_a_kill_at_any_moment_of_a_save_leaves_the_newest_complete_checkpoint(tmp_path):
    """A save writes state.tmp and marks it, then state -> state.old and state.tmp -> state: wherever a kill falls,
    `settle` and `choose` find the newest marked one; an unmarked state.tmp (a save cut short) is removed."""
    resume = tmp_path / "resume"
    assert checkpoints.choose(resume / "none", "run") is None
    write_checkpoint(resume, "state", 10)
    write_checkpoint(resume, "state.tmp", 15, marked=False)  # cut short
    checkpoints.settle(resume)
    assert not (resume / "state.tmp").exists() and checkpoints.choose(resume, "run")[0] == resume / "state"
    write_checkpoint(resume, "state.tmp", 15)  # marked, killed before the swap
    checkpoints.settle(resume)
    assert step_of(resume / "state") == 15 and step_of(resume / "state.old") == 10
    write_checkpoint(resume, "state.tmp", 20)  # the next save, killed between its two renames
    shutil.rmtree(resume / "state.old")
    os.replace(resume / "state", resume / "state.old")
    checkpoints.settle(resume)
    folder, saved = checkpoints.choose(resume, "run")
    assert folder == resume / "state" and saved["step"] == 20 and step_of(resume / "state.old") == 15


def test_a_corrupted_checkpoint_of_the_same_size_falls_back_and_none_left_starts_from_zero(tmp_path, caplog):
    """A flipped byte keeps the size: the sha256 in the marker finds it. With no loadable checkpoint left the run
    starts from step 0, saying so (a retry cannot repair a damaged checkpoint, so it does not fail)."""
    caplog.set_level(logging.WARNING)
    resume = tmp_path / "resume"
    write_checkpoint(resume, "state.old", 5)
    newest = write_checkpoint(resume, "state", 10)
    data = bytearray((newest / "model.safetensors").read_bytes())
    data[7] ^= 1
    (newest / "model.safetensors").write_bytes(bytes(data))
    folder, saved = checkpoints.choose(resume, "run")
    assert folder == resume / "state.old" and saved["step"] == 5
    assert f"{newest / 'model.safetensors'} is corrupted" in caplog.text and not newest.exists()
    (folder / "model.safetensors").unlink()
    assert checkpoints.choose(resume, "run") is None
    assert f"{folder / 'model.safetensors'} is missing" in caplog.text
    assert f"no loadable checkpoint is left in {resume}: training starts from step 0" in caplog.text


def dead_pid() -> int:
    """The id of a process that has ended."""
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def test_what_killed_jobs_left_is_removed_at_the_start(data, tmp_path, caplog):
    """A killed job's temporary model (`.model.tmp-<pid>`), an unmarked state.tmp and a best.tmp are removed, each
    with a log line; a live process's temporary is left alone."""
    caplog.set_level(logging.INFO)
    stale = tmp_path / f".model.tmp-{dead_pid()}"
    live = tmp_path / f".model.tmp-{os.getppid()}"
    for folder in (stale, live, tmp_path / "resume/state.tmp", tmp_path / "resume/best.tmp"):
        folder.mkdir(parents=True)
        (folder / "model.safetensors").write_text("half a model")
    train(base.args_for(data, tmp_path), {**base.SETTINGS, "epochs": 1}, base.MODEL, {"loss": "mle"})
    assert not stale.exists() and live.exists()
    assert f"removing {stale}: the temporary of process" in caplog.text
    assert f"removing {tmp_path / 'resume/state.tmp'}: a save that was cut short" in caplog.text
    assert f"removing {tmp_path / 'resume/best.tmp'}" in caplog.text
    assert (tmp_path / "model/model.safetensors").exists() and not (tmp_path / "resume").exists()


HOLD = """
import sys, time
from pathlib import Path
from workflow_lib.train.checkpoints import acquire

handle = acquire(Path(sys.argv[1]))
print("held", flush=True)
time.sleep(120)
"""  # a live trainer's hold on its checkpoint folder, in a process of its own


def test_a_second_trainer_on_a_folder_in_use_fails_naming_it_and_the_holder(data, tmp_path):
    """A requeued job beside a live one: the second trainer stops before touching the folder, naming it and the
    holding process; once the holder has died its lock goes with it, and training runs."""
    resume = tmp_path / "resume"
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(resume)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        write_checkpoint(resume, "state", 5, mark="the live run's")
        with pytest.raises(StageError) as error:
            train(base.args_for(data, tmp_path), {**base.SETTINGS, "epochs": 1}, base.MODEL, {"loss": "mle"})
        assert str(error.value).startswith(f"{resume}: the checkpoint folder is in use by another trainer")
        assert f"(pid {holder.pid} on {socket.gethostname()})" in str(error.value)
        assert step_of(resume / "state") == 5 and not (tmp_path / "model").exists()  # the live run's, untouched
    finally:
        holder.kill()
        holder.wait()
    train(base.args_for(data, tmp_path), {**base.SETTINGS, "epochs": 1}, base.MODEL, {"loss": "mle"})
    assert (tmp_path / "model/model.safetensors").exists()


def test_a_resumed_training_continues_its_mlflow_and_wandb_runs(data, tmp_path, monkeypatch):
    """Issue 67: a training killed after a checkpoint and rerun continues the tracker runs it started (the ids its
    checkpoint saved): one MLflow run, whose history reaches the last step, and one W&B id in both offline folders."""
    from mlflow.tracking import MlflowClient

    from workflow_lib.train import tracking

    trackers = tmp_path / "tracking"
    monkeypatch.setenv(tracking.ENV, json.dumps({"report_to": ["mlflow", "wandb"], "dir": str(trackers)}))
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    out = tmp_path / "killed"
    out.mkdir()
    state = out / "resume" / checkpoints.CURRENT / checkpoints.STATE_FILE
    kill_when(base.cli_command(data, out, base.KILLED_SETTINGS), [state], out / "killed.log")
    saved = json.loads(state.read_text())["tracker_runs"]
    assert set(saved) == {"mlflow", "wandb"}, saved
    resumed = base.run_cli(data, out, base.KILLED_SETTINGS)
    assert resumed.returncode == 0, resumed.stderr
    assert "resuming from step" in resumed.stderr

    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    client = MlflowClient(tracking_uri=(trackers / "mlflow").resolve().as_uri())
    runs = client.search_runs([client.get_experiment_by_name(tracking.PROJECT).experiment_id])
    assert [r.info.run_id for r in runs] == [saved["mlflow"]]  # the same run, not a second one
    steps = {m.step for m in client.get_metric_history(saved["mlflow"], "loss")}
    assert max(steps) == 48 and min(steps) == 1  # before the kill and after the resume, in one run
    assert runs[0].info.status == "FINISHED"
    folders = sorted((trackers / "wandb/wandb").glob("offline-run-*"))
    assert len(folders) == 2 and all(f.name.endswith(f"-{saved['wandb']}") for f in folders), folders
