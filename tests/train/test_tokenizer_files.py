"""A saved tokenizer is the same bytes with and without HF_HUB_OFFLINE: the tokenizer rule's folder and a trained
model's tokenizer files (transformers records `local_files_only`, which offline mode forces to True)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from support.trainer_runs import trainer_command
from workflow_lib.data.tokenization import train_bpe
from workflow_lib.files import write_parquet
from workflow_lib.perturb.synonym_table import SynonymTable
from workflow_lib.perturb.training_data import perturb_blocks

REPO = Path(__file__).resolve().parents[2]
OFFLINE = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE")
SETTINGS = {
    "learning_rate": 3e-3,
    "lr_scheduler": "constant",
    "warmup_steps": 0,
    "weight_decay": 0.0,
    "batch_size": 8,
    "gradient_accumulation_steps": 1,
    "epochs": 1,
    "max_length": 64,
    "max_grad_norm": 1.0,
    "mixed_precision": "no",
    "gradient_checkpointing": False,
    "checkpoint_every": 100,
    "eval_every": 0,
    "log_every": 5,
    "select_best": False,
    "validation": True,
    "gpus": 0,
    "seed": 3,
    "select_by": "nll",
}
MODEL = {"source": "scratch", "architecture": {"n_layer": 1, "n_head": 2, "n_embd": 16, "n_positions": 64}}


def environment(offline: bool) -> dict:
    """This process's environment with the offline switches on, or without them at all."""
    env = {k: v for k, v in os.environ.items() if k not in OFFLINE} | {"PYTHONPATH": str(REPO)}
    return env | ({k: "1" for k in OFFLINE} if offline else {})


def files(folder: Path, names=("tokenizer_config.json", "tokenizer.json", "special_tokens_map.json")) -> dict:
    return {name: (folder / name).read_bytes() for name in names if (folder / name).exists()}


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("tokenizer_files")
    texts = [" the cat sat on the mat .", " a dog ran in the park ."] * 20
    tokenizer = train_bpe(texts, 300, min_frequency=1)
    tokenizer.save_pretrained(root / "tok")
    ids = np.concatenate([tokenizer(t)["input_ids"] for t in texts])
    blocks = ids[: len(ids) // 16 * 16].reshape(-1, 16)
    table = SynonymTable.from_rows(len(tokenizer), [], [], [])
    write_parquet(perturb_blocks(blocks, "augment", "insertion", 0.0, table, 1, 0, "k"), root / "train.parquet")
    write_parquet(perturb_blocks(blocks[:8], "augment", "insertion", 0.0, table, 1, 0, "k"), root / "val.parquet")
    return root


def test_the_tokenizer_rule_writes_the_same_bytes_with_and_without_offline_mode(data, tmp_path):
    saved = []
    for offline in (False, True):
        out = tmp_path / f"offline-{offline}"
        spec = json.dumps({"source": "hf", "name": str(data / "tok")})
        subprocess.run(
            [
                sys.executable,
                "-m",
                "workflow_lib.data.tokenization",
                "tokenizer",
                "--key",
                "t",
                "--spec",
                spec,
                "--output",
                str(out),
            ],
            check=True,
            env=environment(offline),
            capture_output=True,
            timeout=300,
        )
        saved.append(files(out))
    assert "tokenizer_config.json" in saved[0] and saved[0] == saved[1]
    assert "local_files_only" not in json.loads(saved[0]["tokenizer_config.json"])


@pytest.mark.parametrize("select_best", [False, True])  # the final model saved, or the best checkpoint copied
def test_a_trained_models_tokenizer_is_the_same_bytes_with_and_without_offline_mode(data, tmp_path, select_best):
    settings = {**SETTINGS, "select_best": select_best, "eval_every": 2 if select_best else 0}
    saved = []
    for offline in (False, True):
        out = tmp_path / f"offline-{offline}"
        cmd = trainer_command(data, out, model=MODEL, settings=settings)
        done = subprocess.run(
            cmd, env=environment(offline) | {"OMP_NUM_THREADS": "1"}, capture_output=True, text=True, timeout=300
        )
        assert done.returncode == 0, done.stderr
        saved.append(files(out / "model"))
    assert "tokenizer_config.json" in saved[0] and saved[0] == saved[1]
