"""The trainer: every objective learns, a killed run resumes to the same weights, bad settings fail early."""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pytest
import torch
from safetensors.torch import load_file

from workflow_lib.cli import StageError
from workflow_lib.config import PREDEFINED_OBJECTIVES
from workflow_lib.files import write_parquet
from workflow_lib.perturb import SynonymTable
from workflow_lib.perturbed_data import perturb_blocks
from workflow_lib.tokenization import train_bpe
from workflow_lib.train import TrainingRows, collate, train

SETTINGS = {"learning_rate": 3e-3, "lr_scheduler": "constant", "warmup_steps": 0, "weight_decay": 0.0, "batch_size": 8,
            "gradient_accumulation_steps": 1, "epochs": 6, "max_length": 64, "max_grad_norm": 1.0, "mixed_precision": "no",
            "gradient_checkpointing": False, "checkpoint_every": 5, "eval_every": 10, "log_every": 5, "select_best": False,
            "validation": True, "gpus": 0, "seed": 3}
MODEL = {"source": "scratch", "architecture": {"n_layer": 1, "n_head": 2, "n_embd": 32, "n_positions": 64}}


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """A memorisable set: a few repeated sentences, tokenised, with a trained BPE."""
    root = tmp_path_factory.mktemp("train")
    texts = [" the cat sat on the mat .", " a dog ran in the park .", " the bird sang a song ."] * 40
    tokenizer = train_bpe(texts, 300, min_frequency=1)
    tokenizer.save_pretrained(root / "tok")
    ids = np.concatenate([tokenizer(t)["input_ids"] for t in texts])
    blocks = ids[: len(ids) // 16 * 16].reshape(-1, 16)
    table = SynonymTable.from_rows(len(tokenizer), [], [], [])
    write_parquet(perturb_blocks(blocks, "augment", "insertion", 0.0, table, 1, 0, "k"), root / "augment.parquet")
    cats = SynonymTable.from_rows(len(tokenizer), list(range(10, 40)), [[t + 1] for t in range(10, 40)], [[1.0]] * 30)
    write_parquet(perturb_blocks(blocks, "prefix", "insertion", 0.2, cats, 1, 0, "k"), root / "prefix.parquet")
    write_parquet(pa.table({"input_ids": pa.array(blocks[:8].tolist(), pa.list_(pa.int32()))}), root / "val.parquet")
    return root


def args_for(data, out, train_file="augment.parquet", resume="resume"):
    return argparse.Namespace(train=str(data / train_file), validation=str(data / "val.parquet"), tokenizer=str(data / "tok"),
                              model_key="tiny", resume_dir=str(out / resume), output=str(out / "model"))


def losses(out) -> list[float]:
    with open(out / "model" / "train_log.csv") as handle:
        return [float(r["loss"]) for r in csv.DictReader(handle)]


@pytest.mark.parametrize("objective", sorted(PREDEFINED_OBJECTIVES) + ["alpha_power"])
def test_every_objective_learns_a_memorisable_set(data, tmp_path, objective):
    spec = PREDEFINED_OBJECTIVES.get(objective, {"loss": "alpha_power", "alpha": 3.0})
    train(args_for(data, tmp_path), dict(SETTINGS), MODEL, dict(spec))
    history = losses(tmp_path)
    assert np.mean(history[-5:]) < np.mean(history[:5]) - 0.1 * abs(np.mean(history[:5]))
    summary = json.loads((tmp_path / "model" / "train_summary.json").read_text())
    assert summary["steps"] == len(history)
    assert (tmp_path / "model" / "model.safetensors").exists() and (tmp_path / "model" / "tokenizer.json").exists()
    assert not (tmp_path / "resume").exists()  # checkpoints are removed once the model is written


def test_prefix_mode_trains_from_explicit_targets(data, tmp_path):
    rows = TrainingRows(str(data / "prefix.parquet"), 64)
    ids, pos, tgt = rows[0]
    batch = collate([rows[0], rows[1]], pad_id=0)
    assert len(batch["target_ids"]) == len(rows[0][2]) + len(rows[1][2])
    assert (batch["input_ids"][batch["target_row"], batch["target_pos"] + 1] != 0).all()
    train(args_for(data, tmp_path, "prefix.parquet"), dict(SETTINGS), MODEL, {"loss": "mle"})
    history = losses(tmp_path)
    assert np.mean(history[-5:]) < np.mean(history[:5])


def run_cli(data, out, env_extra=None):
    cmd = [sys.executable, "-m", "workflow_lib.train", "--train", str(data / "augment.parquet"), "--validation",
           str(data / "val.parquet"), "--tokenizer", str(data / "tok"), "--model-key", "tiny", "--model", json.dumps(MODEL),
           "--objective", json.dumps({"loss": "mle"}), "--settings", json.dumps({**SETTINGS, "epochs": 2}),
           "--resume-dir", str(out / "resume"), "--output", str(out / "model")]
    return subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **(env_extra or {})}, timeout=300)


def test_killed_run_resumes_to_the_same_weights(data, tmp_path):
    whole = run_cli(data, tmp_path / "whole")
    assert whole.returncode == 0, whole.stderr
    killed = run_cli(data, tmp_path / "killed", {"PERTURBED_LM_KILL_AT_STEP": "13"})
    assert killed.returncode == -9  # SIGKILL
    assert (tmp_path / "killed" / "resume" / "trainer_state.json").exists() and not (tmp_path / "killed" / "model").exists()
    assert json.loads((tmp_path / "killed" / "resume" / "trainer_state.json").read_text())["step"] == 10
    resumed = run_cli(data, tmp_path / "killed")
    assert resumed.returncode == 0, resumed.stderr
    assert "resuming from step 10" in resumed.stderr
    a = load_file(tmp_path / "whole" / "model" / "model.safetensors")
    b = load_file(tmp_path / "killed" / "model" / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert losses(tmp_path / "whole") == losses(tmp_path / "killed")


def test_batch_larger_than_data_fails_before_training(data, tmp_path):
    with pytest.raises(StageError, match=r"training.batch_size = 100000 .* larger than the training data"):
        train(args_for(data, tmp_path), {**SETTINGS, "batch_size": 100000}, MODEL, {"loss": "mle"})
    assert not (tmp_path / "model").exists() and not (tmp_path / "resume").exists()


def test_select_best_keeps_the_checkpoint_with_the_lowest_validation_loss(data, tmp_path):
    settings = {**SETTINGS, "select_best": True, "eval_every": 3, "learning_rate": 3e-2, "epochs": 4}
    train(args_for(data, tmp_path), settings, MODEL, {"loss": "mle"})
    with open(tmp_path / "model" / "train_log.csv") as handle:
        rows = [r for r in csv.DictReader(handle) if r["validation_loss"]]
    best_row = min(rows, key=lambda r: float(r["validation_loss"]))
    summary = json.loads((tmp_path / "model" / "train_summary.json").read_text())
    assert summary["best"]["step"] == int(best_row["step"])
    assert summary["best"]["loss"] == pytest.approx(float(best_row["validation_loss"]))
    # the saved weights are the best step's: their validation loss is the best one
    from transformers import AutoModelForCausalLM

    from workflow_lib.train import TrainingRows, collate, target_logits

    model = AutoModelForCausalLM.from_pretrained(tmp_path / "model").eval()
    batch = collate([TrainingRows(str(data / "val.parquet"), 64)[i] for i in range(8)], 0)
    with torch.no_grad():
        loss = torch.nn.functional.cross_entropy(target_logits(model, batch), batch["target_ids"])
    assert float(loss) == pytest.approx(summary["best"]["loss"], rel=1e-4)
