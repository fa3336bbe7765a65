"""Data-parallel training through the train rule's own command: two CPU processes over gloo (`training.gpus: 2` on a
machine without CUDA), as a GPU cluster runs `accelerate launch --multi_gpu` with one process per GPU."""

from __future__ import annotations

import csv
import json
import os
import shutil
import threading
import time
from pathlib import Path

import psutil
import pyarrow.parquet as pq
import pytest
import torch
from safetensors.torch import load_file

from support.workflow_runs import snakemake, tiny_builtin, tiny_config, write_config

pytestmark = pytest.mark.workflow

# No dropout: two processes at batch b and one at batch 2b then take the same steps, up to summation order.
ARCH = {
    "n_layer": 1,
    "n_head": 2,
    "n_embd": 32,
    "n_positions": 128,
    "resid_pdrop": 0.0,
    "embd_pdrop": 0.0,
    "attn_pdrop": 0.0,
}
# float32 sums in another order: measured ~1e-6 on losses and validation losses, ~1e-6 on weights (2026-11-23),
# 2.0e-5 on one weight (mlp.c_fc) on an AVX-512 Xeon (2026-11-25) and 5.8e-5 there on the CI host (2026-11-30):
# Adam divides each step by the gradient's own size, so a weight whose gradient is near 0 turns rounding into a
# step. A batch trained twice, or a process's batch dropped, moves weights by about the learning rate (3e-3) a
# step: the weight tolerance is a tenth of one step, 5x the largest rounding measured.
TOLERANCE, WEIGHT_TOLERANCE = 1e-4, 3e-4


def parallel_config() -> dict:
    config = tiny_config()
    # 12 steps an epoch: two epochs (the sampler's order set per epoch, a resume across the epoch boundary) with a
    # kill at the first checkpoint (step 5) well before the end; each compared step can show a gradient summed
    # instead of averaged, or a batch trained twice.
    config["datasets"]["synthetic"] = tiny_builtin(train=6)
    train = {
        "learning_rate": 3e-3,
        "lr_scheduler": "linear",
        "epochs": 2,
        "checkpoint_every": 5,
        "eval_every": 4,
        "max_grad_norm": 0,
    }
    config["models"] = {
        "two": {
            "source": "scratch",
            "tokenizer": "bpe",
            "architecture": ARCH,
            "training": {**train, "gpus": 2, "batch_size": 4},
        },
        "one": {
            "source": "scratch",
            "tokenizer": "bpe",
            "architecture": ARCH,
            "training": {**train, "gpus": 1, "batch_size": 8},
        },
    }
    config["experiments"] = {
        "main": {"models": ["two", "one"], "train_dataset": "synthetic", "eval_sets": ["syn-test"]}
    }
    return config


def model_dir(workdir, model: str):
    return workdir / "results/models" / model / "synthetic/mle/none/augment-m1/none-0/seed1"


def log_rows(folder) -> list[dict]:
    with open(folder / "train_log.csv") as handle:
        return list(csv.DictReader(handle))


def kill_training_at_first_checkpoint(workdir: Path, state_file: Path, killed: list[list], done: threading.Event):
    """A preemption from outside, as a cluster's SIGKILL: once the train job's first checkpoint is on disk, kill every
    process of it (accelerate launch and its workers), found by their command line and working directory."""
    while not state_file.exists() and not done.is_set():
        time.sleep(0.01)
    if done.is_set():
        return
    for process in psutil.process_iter(["cmdline", "cwd"]):
        if "workflow_lib.train.trainer" in (process.info["cmdline"] or []) and process.info["cwd"] == str(workdir):
            try:
                process.kill()
                killed.append(process.info["cmdline"])
            except psutil.NoSuchProcess:
                pass


def test_two_processes_train_data_parallel_and_resume_exactly(workdir):
    write_config(workdir, parallel_config())
    first = snakemake(workdir, "--until", "train")
    assert first.returncode == 0, first.stdout + first.stderr
    two, one = model_dir(workdir, "two"), model_dir(workdir, "one")
    log = (workdir / "results/logs/train" / two.relative_to(workdir / "results/models")).with_suffix(".log").read_text()
    assert "training.gpus = 2 but there is no CUDA device: 2 CPU processes (gloo)" in log

    summary = json.loads((two / "train_summary.json").read_text())
    assert summary["ran"].pop("realised")["realised_share"] == 0  # no perturbation: nothing perturbed
    assert summary["ran"] | {"steps_per_epoch": None} == {
        "processes": 2,
        "distributed": "MULTI_CPU",
        "device": "cpu",
        "mixed_precision": "no",
        "master_weights": "float32",
        "global_batch": 8,
        "steps_per_epoch": None,
    }
    rows = pq.read_metadata(workdir / "results/perturbed/bpe/synthetic/none/augment-m1/none-0/seed1.parquet").num_rows
    assert summary["ran"]["steps_per_epoch"] == rows // 8  # the data split between the processes, not trained twice
    history_two, history_one = log_rows(two), log_rows(one)
    assert len(history_two) == len(history_one) == 2 * (rows // 8)
    assert float(history_two[-1]["lr"]) == 0.0 and float(history_two[-2]["lr"]) > 0  # the schedule spans all steps

    # Two processes at batch 4 take the steps one process takes at batch 8.
    for a, b in zip(history_two, history_one):
        assert float(a["loss"]) == pytest.approx(float(b["loss"]), abs=TOLERANCE)
        assert (a["validation_loss"] == "") == (b["validation_loss"] == "")
        if a["validation_loss"]:  # each process scores every other validation row: the same number either way
            assert float(a["validation_loss"]) == pytest.approx(float(b["validation_loss"]), abs=TOLERANCE)
    w_two, w_one = load_file(two / "model.safetensors"), load_file(one / "model.safetensors")
    # Except the attention's key bias: its gradient is 0 up to rounding (softmax ignores a shift shared by all keys),
    # and Adam rescales that rounding noise into steps of about the learning rate.
    d = ARCH["n_embd"]
    key_bias = torch.zeros(3 * d, dtype=torch.bool)
    key_bias[d : 2 * d] = True
    for name in w_two:
        differs = (w_two[name] - w_one[name]).abs()
        assert float((differs[~key_bias] if name.endswith("c_attn.bias") else differs).max()) < WEIGHT_TOLERANCE, name

    # SIGKILL both processes after a checkpoint, rerun: the resumed run ends with the uninterrupted weights.
    reference = workdir / "uninterrupted"
    shutil.copytree(two, reference)
    shutil.rmtree(two)
    checkpoints = workdir / "results/checkpoints" / two.relative_to(workdir / "results/models")
    killed_commands: list[list] = []
    done = threading.Event()
    killer = threading.Thread(
        target=kill_training_at_first_checkpoint,
        args=(Path(os.path.realpath(workdir)), checkpoints / "state" / "trainer_state.json", killed_commands, done),
    )
    killer.start()
    killed = snakemake(workdir, "--until", "train")
    done.set()
    killer.join()
    workers = [command for command in killed_commands if "launch" not in command]
    assert len(workers) == 2, killed_commands  # the kill reached both processes of the job
    assert killed.returncode != 0 and not two.exists()
    step = json.loads((checkpoints / "state" / "trainer_state.json").read_text())["step"]
    assert 5 <= step < len(history_two) and step % 5 == 0
    resumed = snakemake(workdir, "--until", "train")
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    log = (workdir / "results/logs/train" / two.relative_to(workdir / "results/models")).with_suffix(".log").read_text()
    assert f"resuming from step {step} of {len(history_two)}" in log
    a, b = load_file(reference / "model.safetensors"), load_file(two / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    timeless = lambda rows: [{k: v for k, v in r.items() if k != "tokens_per_s"} for r in rows]
    assert timeless(log_rows(reference)) == timeless(log_rows(two))
    assert not checkpoints.exists()
