"""Training with a perturbation of the embedding space (Algorithm 1 with T on embeddings; NEFTune): the noise reaches
the positions the data lists and nothing before them, only in training mode, the run learns, and a killed run
resumes to the same weights (the noise's generator is restored with the checkpoint)."""

from __future__ import annotations

import argparse
import csv
import json
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from workflow_lib.data.tokenization import train_bpe
from workflow_lib.files import write_parquet
from workflow_lib.perturb.synonym_table import SynonymTable
from workflow_lib.perturb.training_data import perturb_blocks
from workflow_lib.train.batches import TrainingRows, collate
from workflow_lib.train.forward import TargetLogits
from workflow_lib.train.trainer import train

SETTINGS = {
    "learning_rate": 3e-3,
    "lr_scheduler": "constant",
    "warmup_steps": 0,
    "weight_decay": 0.0,
    "batch_size": 8,
    "gradient_accumulation_steps": 1,
    "epochs": 3,
    "max_length": 64,
    "max_grad_norm": 1.0,
    "mixed_precision": "no",
    "gradient_checkpointing": False,
    "checkpoint_every": 5,
    "eval_every": 10,
    "log_every": 5,
    "select_best": False,
    "validation": True,
    "gpus": 0,
    "seed": 3,
    "select_by": "nll",
}
MODEL = {"source": "scratch", "architecture": {"n_layer": 1, "n_head": 2, "n_embd": 32, "n_positions": 64}}
NOISE = {"strategy": "embedding-noise", "noise": "gaussian", "scale": 1.0}
NEFTUNE = {"strategy": "neftune", "neftune_alpha": 5.0}


@pytest.fixture(autouse=True)
def fresh_accelerator_state():
    from accelerate.state import AcceleratorState

    AcceleratorState._reset_state(reset_partial_state=True)
    yield


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("embedding-training")
    texts = [" the cat sat on the mat .", " a dog ran in the park .", " the bird sang a song ."] * 40
    tokenizer = train_bpe(texts, 300, min_frequency=1)
    tokenizer.save_pretrained(root / "tok")
    ids = np.concatenate([tokenizer(t)["input_ids"] for t in texts])
    blocks = ids[: len(ids) // 16 * 16].reshape(-1, 16)
    table = SynonymTable.from_rows(len(tokenizer), [], [], [])
    for name, strategy, alpha, settings in (
        ("plain", "insertion", 0.0, None),
        ("embedding-noise", "embedding-noise", 0.3, NOISE),
        ("neftune", "neftune", 1.0, NEFTUNE),
    ):
        rows = perturb_blocks(blocks, "augment", strategy, alpha, table, 1, 0, "k", embedding=settings)
        write_parquet(rows, root / f"{name}.parquet")
    write_parquet(perturb_blocks(blocks[:8], "augment", "insertion", 0.0, table, 1, 0, "v"), root / "val.parquet")
    return root


def test_noise_reaches_the_listed_positions_and_nothing_before_them_in_training_mode_only(data):
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    lm = GPT2LMHeadModel(GPT2Config(vocab_size=300, n_layer=1, n_head=2, n_embd=32, n_positions=64))
    rows = TrainingRows(str(data / "embedding-noise.parquet"), 64)
    copy = next(i for i in range(len(rows)) if len(rows[i][3]) and rows[i][3].min() > 2)
    batch = collate([rows[copy], rows[0]], pad_id=0)  # a noised copy, and an original row (nothing listed)
    first = int(rows[copy][3].min())
    assert batch["noise_mask"][0].nonzero().squeeze(1).tolist() == sorted(rows[copy][3].tolist())
    assert not batch["noise_mask"][1].any()
    inputs = {k: batch[k] for k in ("input_ids", "attention_mask", "target_row", "target_pos", "noise_mask")}
    module = TargetLogits(lm, NOISE).train()
    lm.eval()  # no dropout: the noise is the only difference
    noised = module(**inputs)
    clean = TargetLogits(lm, None)(**inputs)
    rows_, pos = batch["target_row"], batch["target_pos"]
    before = (rows_ == 0) & (pos < first)
    assert torch.equal(noised[before], clean[before])  # causal: a prefix before the first noised position is clean
    assert not torch.allclose(noised[(rows_ == 0) & (pos >= first)], clean[(rows_ == 0) & (pos >= first)])
    assert torch.equal(noised[rows_ == 1], clean[rows_ == 1])
    assert torch.equal(module.eval()(**inputs), clean)  # validation reads the unperturbed text


def args_for(data, out, name):
    return argparse.Namespace(
        train=str(data / f"{name}.parquet"),
        validation=str(data / "val.parquet"),
        tokenizer=str(data / "tok"),
        model_key="tiny",
        resume_dir=str(out / "resume"),
        output=str(out / "model"),
    )


def losses(out) -> list[float]:
    with open(out / "model" / "train_log.csv") as handle:
        return [float(r["loss"]) for r in csv.DictReader(handle)]


def test_both_strategies_learn_and_train_otherwise_than_without_noise(data, tmp_path):
    history = {}
    for name in ("plain", "embedding-noise", "neftune"):
        train(args_for(data, tmp_path / name, name), dict(SETTINGS), MODEL, {"loss": "mle"})
        history[name] = losses(tmp_path / name)
        assert np.mean(history[name][-3:]) < np.mean(history[name][:3])
    assert history["embedding-noise"] != history["plain"] and history["neftune"] != history["plain"]


def command(data, out, name) -> list[str]:
    return [
        sys.executable,
        "-m",
        "workflow_lib.train.trainer",
        "--train",
        str(data / f"{name}.parquet"),
        "--validation",
        str(data / "val.parquet"),
        "--tokenizer",
        str(data / "tok"),
        "--model-key",
        "tiny",
        "--model",
        json.dumps(MODEL),
        "--objective",
        json.dumps({"loss": "mle"}),
        "--settings",
        json.dumps({**SETTINGS, "epochs": 4}),
        "--resume-dir",
        str(out / "resume"),
        "--output",
        str(out / "model"),
    ]


@pytest.mark.parametrize("name", ["embedding-noise", "neftune"])
def test_a_killed_run_resumes_to_the_same_weights(data, tmp_path, name):
    whole = subprocess.run(command(data, tmp_path / "whole", name), capture_output=True, text=True, timeout=300)
    assert whole.returncode == 0, whole.stderr
    out = tmp_path / "killed"
    out.mkdir()
    state = out / "resume" / "state" / "trainer_state.json"
    with open(out / "killed.log", "w") as stderr:
        process = subprocess.Popen(command(data, out, name), stdout=subprocess.DEVNULL, stderr=stderr)
        deadline = time.monotonic() + 300
        while not state.exists() and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.005)
        process.send_signal(signal.SIGKILL)
        assert process.wait(timeout=60) == -signal.SIGKILL, (out / "killed.log").read_text()[-3000:]
    resumed = subprocess.run(command(data, out, name), capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0 and "resuming from step" in resumed.stderr, resumed.stderr
    a = load_file(tmp_path / "whole" / "model" / "model.safetensors")
    b = load_file(out / "model" / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
