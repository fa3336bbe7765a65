"""The trainer: every objective learns, a killed run resumes to the same weights, bad settings fail early."""

from __future__ import annotations

import argparse
import csv
import json
import re
import signal
import subprocess
import time

import numpy as np
import pyarrow as pa
import pytest
import torch
from safetensors.torch import load_file

from support.trainer_runs import trainer_command
from workflow_lib.cli import StageError
from workflow_lib.config import PREDEFINED_OBJECTIVES
from workflow_lib.data.tokenization import train_bpe
from workflow_lib.files import write_parquet
from workflow_lib.perturb.synonym_table import SynonymTable
from workflow_lib.perturb.training_data import perturb_blocks
from workflow_lib.train.batches import TrainingRows, collate
from workflow_lib.train.trainer import train

SETTINGS = {
    "learning_rate": 3e-3,
    "lr_scheduler": "constant",
    "warmup_steps": 0,
    "weight_decay": 0.0,
    "batch_size": 8,
    "gradient_accumulation_steps": 1,
    "epochs": 6,
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


@pytest.fixture(autouse=True)
def fresh_accelerator_state():
    """Each train() here is a job of its own: accelerate's process-wide state (its precision) must not carry over."""
    from accelerate.state import AcceleratorState

    AcceleratorState._reset_state(reset_partial_state=True)
    yield


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
    return argparse.Namespace(
        train=str(data / train_file),
        validation=str(data / "val.parquet"),
        tokenizer=str(data / "tok"),
        model_key="tiny",
        resume_dir=str(out / resume),
        output=str(out / "model"),
    )


def losses(out) -> list[float]:
    with open(out / "model" / "train_log.csv") as handle:
        return [float(r["loss"]) for r in csv.DictReader(handle)]


@pytest.mark.parametrize("objective", sorted(PREDEFINED_OBJECTIVES) + ["alpha_power"])
def test_every_objective_learns_a_memorisable_set(data, tmp_path, objective):
    spec = PREDEFINED_OBJECTIVES.get(objective, {"loss": "alpha_power", "alpha": 3.0})
    train(args_for(data, tmp_path), dict(SETTINGS), MODEL, dict(spec))
    history = losses(tmp_path)
    if objective == "dft":  # its loss sg(p) NLL rises as p does from 0: what must fall is the NLL itself
        with open(tmp_path / "model" / "train_log.csv") as handle:
            nll = [float(r["validation_loss"]) for r in csv.DictReader(handle) if r["validation_loss"]]
        assert nll[-1] < 0.5 * nll[0]
    else:
        assert np.mean(history[-5:]) < np.mean(history[:5]) - 0.1 * abs(np.mean(history[:5]))
    summary = json.loads((tmp_path / "model" / "train_summary.json").read_text())
    assert summary["steps"] == len(history)
    assert (tmp_path / "model" / "model.safetensors").exists() and (tmp_path / "model" / "tokenizer.json").exists()
    assert not (tmp_path / "resume").exists()  # checkpoints are removed once the model is written


def test_prefix_mode_trains_from_explicit_targets(data, tmp_path):
    rows = TrainingRows(str(data / "prefix.parquet"), 64)
    batch = collate([rows[0], rows[1]], pad_id=0)
    assert len(batch["target_ids"]) == len(rows[0][2]) + len(rows[1][2])
    assert (batch["input_ids"][batch["target_row"], batch["target_pos"] + 1] != 0).all()
    train(args_for(data, tmp_path, "prefix.parquet"), dict(SETTINGS), MODEL, {"loss": "mle"})
    history = losses(tmp_path)
    assert np.mean(history[-5:]) < np.mean(history[:5])


def cli_command(data, out, settings=None, train_file="augment.parquet") -> list[str]:
    return trainer_command(
        data, out, model=MODEL, settings=settings or {**SETTINGS, "epochs": 2}, train_file=train_file
    )


def run_cli(data, out, settings=None, train_file="augment.parquet"):
    return subprocess.run(cli_command(data, out, settings, train_file), capture_output=True, text=True, timeout=300)


# 48 steps, a checkpoint every 5: a kill at the first checkpoint leaves some seconds of training to land in.
KILLED_SETTINGS = {**SETTINGS, "epochs": 4}


def run_cli_killed_after_a_checkpoint(data, out, train_file="augment.parquet") -> int:
    """A preemption from outside: start the CLI, SIGKILL it as soon as its first checkpoint is on disk, and return
    the step that checkpoint holds. Asserts that the kill, not the end of training, stopped it."""
    out.mkdir(parents=True, exist_ok=True)
    state = out / "resume" / "state" / "trainer_state.json"  # a complete checkpoint's marker, written last
    with open(out / "killed.log", "w") as stderr:  # a file, not a pipe nobody reads while it runs
        command = cli_command(data, out, KILLED_SETTINGS, train_file)
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=stderr)
        deadline = time.monotonic() + 300
        while not state.exists() and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.005)
        process.send_signal(signal.SIGKILL)  # nothing, if it has already ended: then the next assertion fails
        returncode = process.wait(timeout=60)
    assert returncode == -signal.SIGKILL, (out / "killed.log").read_text()[-3000:]
    assert not (out / "model").exists()  # killed before the end
    step = json.loads(state.read_text())["step"]
    assert 5 <= step < 48 and step % 5 == 0
    return step


def test_killed_run_resumes_to_the_same_weights(data, tmp_path):
    whole = run_cli(data, tmp_path / "whole", KILLED_SETTINGS)
    assert whole.returncode == 0, whole.stderr
    step = run_cli_killed_after_a_checkpoint(data, tmp_path / "killed")
    resumed = run_cli(data, tmp_path / "killed", KILLED_SETTINGS)
    assert resumed.returncode == 0, resumed.stderr
    assert f"resuming from step {step} of 48" in resumed.stderr
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

    from workflow_lib.train.batches import TrainingRows, collate
    from workflow_lib.train.forward import target_logits

    model = AutoModelForCausalLM.from_pretrained(tmp_path / "model").eval()
    batch = collate([TrainingRows(str(data / "val.parquet"), 64)[i] for i in range(8)], 0)
    with torch.no_grad():
        loss = torch.nn.functional.cross_entropy(target_logits(model, batch), batch["target_ids"])
    assert float(loss) == pytest.approx(summary["best"]["loss"], rel=1e-4)


def test_bf16_training_runs_the_forward_under_autocast_on_fp32_master_weights(data, tmp_path, monkeypatch):
    from workflow_lib.train import trainer

    seen: list[torch.dtype] = []
    build = trainer.build_model

    def hooked(*args, **kwargs):
        model = build(*args, **kwargs)
        model.transformer.h[0].mlp.c_fc.register_forward_hook(lambda module, inputs, out: seen.append(out.dtype))
        return model

    monkeypatch.setattr(trainer, "build_model", hooked)
    train(args_for(data, tmp_path), {**SETTINGS, "mixed_precision": "bf16", "epochs": 1}, MODEL, {"loss": "mle"})
    assert seen and set(seen) == {torch.bfloat16}  # every forward of the step (and of validation) ran in bf16
    summary = json.loads((tmp_path / "model" / "train_summary.json").read_text())
    assert summary["ran"]["mixed_precision"] == "bf16" and summary["ran"]["master_weights"] == "float32"
    weights = load_file(tmp_path / "model" / "model.safetensors")
    assert all(w.dtype == torch.float32 for w in weights.values())


def test_a_diverging_run_stops_naming_the_model_step_and_last_checkpoint(data, tmp_path):
    settings = {**SETTINGS, "learning_rate": 1e30, "checkpoint_every": 1, "lr_scheduler": "constant"}
    with pytest.raises(StageError) as error:
        train(args_for(data, tmp_path), settings, MODEL, {"loss": "mle"})
    message = str(error.value)
    step = int(re.search(r"is (?:nan|inf) at step (\d+) of", message).group(1))
    assert message.startswith("models.tiny: training diverged") and "training.learning_rate = 1e+30" in message
    assert f"step {step - 1})" in message and str(tmp_path / "resume" / "state") in message
    assert not (tmp_path / "model").exists()  # nothing that looks like a result
    assert json.loads((tmp_path / "resume" / "state" / "trainer_state.json").read_text())["step"] == step - 1


def test_every_epoch_draws_its_own_order(data, tmp_path, monkeypatch):
    from workflow_lib.train import batches

    epochs: list[int] = []
    original = batches.EpochShuffle.__iter__
    monkeypatch.setattr(batches.EpochShuffle, "__iter__", lambda self: (epochs.append(self.epoch), original(self))[1])
    train(args_for(data, tmp_path), {**SETTINGS, "epochs": 3, "validation": False}, MODEL, {"loss": "mle"})
    assert epochs == [0, 1, 2]


def test_the_linear_schedule_ends_at_zero_and_eval_every_0_validates_at_epoch_ends(data, tmp_path):
    settings = {**SETTINGS, "lr_scheduler": "linear", "epochs": 3, "eval_every": 0}
    train(args_for(data, tmp_path), settings, MODEL, {"loss": "brier"})
    with open(tmp_path / "model" / "train_log.csv") as handle:
        rows = list(csv.DictReader(handle))
    per_epoch = len(rows) // 3
    assert float(rows[-1]["lr"]) == 0.0 and float(rows[-2]["lr"]) > 0
    assert [int(r["step"]) for r in rows if r["validation_loss"]] == [per_epoch, 2 * per_epoch, 3 * per_epoch]
    # the objective's own validation loss is logged beside the NLL (Brier's is negative, NLL's positive)
    assert all(float(r["validation_objective"]) < 0 < float(r["validation_loss"]) for r in rows if r["validation_loss"])


def test_select_by_objective_keeps_the_lowest_objective_loss(data, tmp_path):
    settings = {
        **SETTINGS,
        "select_best": True,
        "select_by": "objective",
        "eval_every": 3,
        "learning_rate": 3e-2,
        "epochs": 4,
    }
    train(args_for(data, tmp_path), settings, MODEL, {"loss": "brier"})
    with open(tmp_path / "model" / "train_log.csv") as handle:
        rows = [r for r in csv.DictReader(handle) if r["validation_objective"]]
    best_row = min(rows, key=lambda r: float(r["validation_objective"]))
    summary = json.loads((tmp_path / "model" / "train_summary.json").read_text())
    assert summary["best"] == {
        "loss": pytest.approx(float(best_row["validation_objective"])),
        "step": int(best_row["step"]),
        "by": "objective",
    }


def test_a_checkpoint_of_other_settings_is_not_resumed(data, tmp_path):
    run_cli_killed_after_a_checkpoint(data, tmp_path)
    other = run_cli(data, tmp_path, settings={**SETTINGS, "epochs": 2, "learning_rate": 1e-3})
    assert other.returncode == 0, other.stderr
    assert "discarding the checkpoint" in other.stderr and "resuming" not in other.stderr
    run_cli(data, tmp_path / "fresh", settings={**SETTINGS, "epochs": 2, "learning_rate": 1e-3})
    assert losses(tmp_path) == losses(tmp_path / "fresh")


def test_float16_master_weights_diverge_and_stop_the_run(data, tmp_path):
    """OPT-125M is saved in float16: trained on float16 master weights (load_dtype: float16), AdamW's eps underflows
    and the first zero gradient makes a NaN weight. The run must stop, not write a model; in float32 it trains."""
    from transformers import AutoTokenizer

    from studies.families import make_checkpoint

    texts = [" the cat sat on the mat .", " a dog ran in the park .", " the bird sang a song ."] * 40
    folder = make_checkpoint(tmp_path / "hub", "opt", texts)
    ids = np.concatenate(AutoTokenizer.from_pretrained(folder)(texts)["input_ids"])
    blocks = ids[: len(ids) // 16 * 16].reshape(-1, 16)
    write_parquet(pa.table({"input_ids": pa.array(blocks.tolist(), pa.list_(pa.int32()))}), tmp_path / "opt.parquet")
    args = argparse.Namespace(
        train=str(tmp_path / "opt.parquet"),
        validation=None,
        tokenizer=str(folder),
        model_key="opt",
        resume_dir=str(tmp_path / "resume"),
        output=str(tmp_path / "model"),
    )
    spec = {"source": "hf", "name": str(folder), "load_dtype": "float16"}
    settings = {**SETTINGS, "learning_rate": 5e-5, "validation": False, "epochs": 1}
    with pytest.raises(
        StageError,
        match=r"models.opt: training diverged: the mle loss is nan at step \d+ .*"
        r"models.opt.load_dtype = float16",
    ):
        train(args, settings, spec, {"loss": "mle"})
    assert not (tmp_path / "model").exists()
    train(args, settings, {**spec, "load_dtype": "float32"}, {"loss": "mle"})
    assert np.isfinite(losses(tmp_path)).all()
