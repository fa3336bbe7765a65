"""Training with a perturbation of the embedding space (Algorithm 1 with T on embeddings; NEFTune): the noise reaches
the positions the data lists and nothing before them, only in training mode, the run learns, and a killed run
resumes to the same weights (the noise's generator is restored with the checkpoint)."""

from __future__ import annotations

import numpy as np
import pyarrow.compute as pc
import pytest
import test_train as base  # the trainer's tests: their data, settings and kill harness (tests/train/ is on sys.path)
import torch
from safetensors.torch import load_file

from workflow_lib.files import read_parquet, write_parquet
from workflow_lib.perturb.synonym_table import SynonymTable
from workflow_lib.perturb.training_data import perturb_blocks
from workflow_lib.train.batches import TrainingRows, collate
from workflow_lib.train.forward import TargetLogits
from workflow_lib.train.trainer import train

SETTINGS = {**base.SETTINGS, "epochs": 3}
MODEL = base.MODEL
NOISE = {"strategy": "embedding-noise", "noise": "gaussian", "scale": 1.0}
NEFTUNE = {"strategy": "neftune", "neftune_alpha": 5.0}
fresh_accelerator_state = base.fresh_accelerator_state  # autouse: each train() is a job of its own
memorisable = base.data  # the trainer's tests' set: tokenizer, blocks, validation rows


@pytest.fixture(scope="module")
def data(memorisable):
    """The trainer's tests' folder, with the same blocks perturbed in the embedding space beside its own files."""
    rows = read_parquet(memorisable / "augment.parquet")
    originals = rows.filter(pc.equal(rows.column("copy"), 0)).column("input_ids").to_pylist()
    blocks = np.array(originals)
    table = SynonymTable.from_rows(int(blocks.max()) + 1, [], [], [])
    write_parquet(perturb_blocks(blocks, "augment", "insertion", 0.0, table, 1, 0, "k"), memorisable / "plain.parquet")
    for name, strategy, alpha, settings in (
        ("embedding-noise", "embedding-noise", 0.3, NOISE),
        ("neftune", "neftune", 1.0, NEFTUNE),
    ):
        rows = perturb_blocks(blocks, "augment", strategy, alpha, table, 1, 0, "k", embedding=settings)
        write_parquet(rows, memorisable / f"{name}.parquet")
    return memorisable


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


def test_both_strategies_learn_and_train_otherwise_than_without_noise(data, tmp_path):
    history = {}
    for name in ("plain", "embedding-noise", "neftune"):
        train(base.args_for(data, tmp_path / name, f"{name}.parquet"), dict(SETTINGS), MODEL, {"loss": "mle"})
        history[name] = base.losses(tmp_path / name)
        assert np.mean(history[name][-3:]) < np.mean(history[name][:3])
    assert history["embedding-noise"] != history["plain"] and history["neftune"] != history["plain"]
    # NEFTune's noise against the embeddings, recorded for the report's design-range check (report.design_range)
    from workflow_lib.report.design_range import neftune_record

    assert neftune_record(str(tmp_path / "plain" / "model")) is None
    assert neftune_record(str(tmp_path / "embedding-noise" / "model")) is None
    record = neftune_record(str(tmp_path / "neftune" / "model"))
    weights = load_file(tmp_path / "neftune" / "model" / "model.safetensors")
    wte = next(v for k, v in weights.items() if k.endswith("wte.weight"))
    assert record["width"] == wte.shape[1] and record["alpha"] == NEFTUNE["neftune_alpha"]
    assert record["noise_rms"] == pytest.approx(5.0 / np.sqrt(3 * record["length"] * record["width"]))
    assert record["ratio_end"] == pytest.approx(record["noise_rms"] / wte.float().pow(2).mean().sqrt().item(), rel=1e-5)
    assert record["ratio"] != record["ratio_end"]  # the embeddings moved during training


@pytest.mark.parametrize("name", ["embedding-noise", "neftune"])
def test_a_killed_run_resumes_to_the_same_weights(data, tmp_path, name):
    train_file = f"{name}.parquet"
    whole = base.run_cli(data, tmp_path / "whole", base.KILLED_SETTINGS, train_file)
    assert whole.returncode == 0, whole.stderr
    base.run_cli_killed_after_a_checkpoint(data, tmp_path / "killed", train_file)
    resumed = base.run_cli(data, tmp_path / "killed", base.KILLED_SETTINGS, train_file)
    assert resumed.returncode == 0 and "resuming from step" in resumed.stderr, resumed.stderr
    a = load_file(tmp_path / "whole" / "model" / "model.safetensors")
    b = load_file(tmp_path / "killed" / "model" / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
