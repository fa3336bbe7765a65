"""What `trainer.train` does at each optimizer step, one function a part: the step itself (forward, gather the targets'
logits, objective, backward, clip, step), its log row, validation, and at the end the written model; the checkpoint
folder (saving, resuming, its lock) is workflow_lib/train/checkpoints.py's.

The parts share two objects: `TrainingRun`, set up once and only read afterwards, and `RunState`, what a checkpoint
keeps besides accelerate's own state. A resumed run reads a RunState back from disk, so all that decides the rest of a
run is in one of the two.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import shutil
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from workflow_lib.cli import StageError
from workflow_lib.files import replace_folder
from workflow_lib.train.batches import TrainingRows, collate
from workflow_lib.train.checkpoints import BEST, CURRENT

if TYPE_CHECKING:
    from accelerate import Accelerator

# The arguments of TargetLogits.forward: the part of a collated batch that goes into the model (the rest is targets).
MODEL_INPUTS = ("input_ids", "attention_mask", "target_row", "target_pos", "noise_mask")


@dataclass
class TrainingRun:
    """The job's arguments and everything prepared from them before the first step: read, never changed, by the loop."""

    args: argparse.Namespace
    settings: dict
    model_spec: dict
    objective: dict
    accelerator: Accelerator
    tokenizer: Any
    pad_id: int
    loader: Any  # the prepared DataLoader of the training rows
    validation: TrainingRows | None
    lm: Any  # the causal LM itself: what is saved, and whose parameters' dtype is reported
    model: Any  # TargetLogits(lm) as accelerate prepared it: what the step calls
    optimizer: Any
    scheduler: Any
    loss_fn: Callable[..., torch.Tensor]
    loss_params: dict
    steps_per_epoch: int  # optimizer steps
    total_steps: int
    resume: Path  # the checkpoint folder (--resume-dir)
    mark: str  # fingerprint(): which run a checkpoint belongs to
    adapters: Any = None  # training.lora: the PeftModel around lm (train/lora.py); None: every parameter trains
    neftune: dict | None = None  # NEFTune's noise against the embeddings when this job started (perturb.embedding)

    @property
    def global_batch(self) -> int:
        """Rows per optimizer step over all processes and accumulated micro-batches."""
        settings = self.settings
        return settings["batch_size"] * self.accelerator.num_processes * settings["gradient_accumulation_steps"]


@dataclass
class RunState:
    """What changes from step to step and a checkpoint keeps (trainer_state.json), besides accelerate's state."""

    step: int = 0
    best: dict = field(default_factory=lambda: {"loss": math.inf, "step": None})
    log: list[dict] = field(default_factory=list)  # the rows of train_log.csv so far
    checkpoint_step: int | None = None  # the last complete checkpoint, named when the run diverges
    tracker_runs: dict = field(default_factory=dict)  # tracker name -> its run's id, continued on resuming


@dataclass
class Throughput:
    """Target tokens per second since the last reading: a row shows it every log_every steps."""

    tokens: int = 0
    start: float = field(default_factory=time.perf_counter)

    def read(self) -> float:
        """The rate since the last reading, and start a new window."""
        rate = self.tokens / (time.perf_counter() - self.start)
        self.tokens, self.start = 0, time.perf_counter()
        return rate


def epoch_batches(run: TrainingRun, step: int) -> Iterable[dict[str, torch.Tensor]]:
    """The batches of the epoch that `step` is in, from the first one not yet trained: a resumed run skips the ones
    before its checkpoint, so it sees the same batches in the same order as an uninterrupted run."""
    epoch, done_in_epoch = divmod(step, run.steps_per_epoch)
    # The prepared loader sets its sampler's epoch from its own counter whenever a pass starts, and
    # skip_first_batches copies that counter: set it, not only the sampler's, or every epoch replays epoch 0.
    run.loader.set_epoch(epoch)
    return run.accelerator.skip_first_batches(run.loader, done_in_epoch * run.settings["gradient_accumulation_steps"])


def train_step(run: TrainingRun, state: RunState, batch: dict[str, torch.Tensor]) -> tuple[float, torch.Tensor | None]:
    """One micro-batch: forward, objective, backward, and at the last micro-batch of an optimizer step also clip and
    step (accelerate's accumulate() decides which). Returns the loss averaged over the processes, the same value on
    every process so that a NaN stops them all at once, and at an optimizer step the gradient norm before clipping."""
    accelerator, grad_norm = run.accelerator, None
    with accelerator.accumulate(run.model):
        loss = run.loss_fn(run.model(**{k: batch[k] for k in MODEL_INPUTS}), batch["target_ids"], **run.loss_params)
        mean_loss = float(accelerator.reduce(loss.detach(), "mean"))
        if not math.isfinite(mean_loss):
            raise diverged(run, state, f"{run.objective['loss']} loss", mean_loss, state.step + 1)
        accelerator.backward(loss)
        if accelerator.sync_gradients:  # max_grad_norm 0: no clipping (inf scales by exactly 1), the norm only
            grad_norm = accelerator.clip_grad_norm_(run.model.parameters(), run.settings["max_grad_norm"] or math.inf)
        run.optimizer.step()
        run.scheduler.step()
        run.optimizer.zero_grad()
    return mean_loss, grad_norm


def step_row(run: TrainingRun, step: int, epoch: int, loss: float, grad_norm: Any, window: Throughput) -> dict:
    """The step's row of train_log.csv (and of the trackers), before validation adds its columns."""
    row = {
        "step": step,
        "epoch": epoch,
        "loss": loss,
        "lr": run.scheduler.get_last_lr()[0],
        "grad_norm": float(grad_norm),
    }
    if step % run.settings["log_every"] == 0 or step == run.total_steps:
        row["tokens_per_s"] = window.read()
    return row


def validation_due(run: TrainingRun, step: int) -> bool:
    """Every eval_every steps (0: at the end of each epoch) and at the last step, where there is validation data."""
    every = run.settings["eval_every"] or run.steps_per_epoch
    return run.validation is not None and (step % every == 0 or step == run.total_steps)


def validate(run: TrainingRun, state: RunState, row: dict) -> None:
    """Validation NLL and objective loss into the step's row; with select_best, a new best model replaces the kept one.
    A non-finite loss stops the run here, before a checkpoint could keep the diverged weights."""
    assert run.validation is not None
    settings = run.settings
    losses = validation_losses(
        run.model, run.validation, run.pad_id, settings["batch_size"], run.accelerator, run.loss_fn, run.loss_params
    )
    row["validation_loss"], row["validation_objective"] = losses["nll"], losses["objective"]
    if not math.isfinite(losses["nll"] + losses["objective"]):
        raise diverged(run, state, "validation loss", losses["nll"] + losses["objective"], state.step)
    if settings["select_best"] and losses[settings["select_by"]] < state.best["loss"]:
        state.best = {"loss": losses[settings["select_by"]], "step": state.step, "by": settings["select_by"]}
        if run.adapters is not None:  # the adapters alone: write_outputs merges the best ones at the end
            save_best_adapter(run)
        else:
            save_model(run.accelerator, run.model, run.tokenizer, run.resume / BEST)


def validation_losses(
    model, data: TrainingRows, pad_id: int, batch_size: int, accelerator, loss_fn, loss_params
) -> dict:
    """NLL and the training objective's own loss per target token on the (unperturbed) validation rows.

    Process i takes rows i, i + N, ... and the sums are reduced, so the value does not depend on the number of
    processes (accelerate's sharding would repeat rows to even out the shards). The unwrapped module runs the
    forward: DistributedDataParallel's forward is a collective, and the shards may differ by a batch."""
    module = accelerator.unwrap_model(model)
    rows = list(range(accelerator.process_index, len(data), accelerator.num_processes))
    sums = torch.zeros(3, dtype=torch.float64, device=accelerator.device)  # nll, objective, targets
    module.eval()
    with torch.no_grad():
        for start in range(0, len(rows), batch_size):
            batch = {
                k: v.to(accelerator.device)
                for k, v in collate([data[i] for i in rows[start : start + batch_size]], pad_id).items()
            }
            logits, targets = module(**{k: batch[k] for k in MODEL_INPUTS}).float(), batch["target_ids"]
            sums += torch.stack(
                [
                    torch.nn.functional.cross_entropy(logits, targets, reduction="sum").double(),
                    loss_fn(logits, targets, **loss_params).double() * len(targets),
                    torch.tensor(len(targets), dtype=torch.float64, device=accelerator.device),
                ]
            )
    module.train()
    sums = accelerator.reduce(sums, "sum")
    return {"nll": float(sums[0] / sums[2].clamp(min=1)), "objective": float(sums[1] / sums[2].clamp(min=1))}


def diverged(run: TrainingRun, state: RunState, what: str, value: float, step: int) -> StageError:
    """The error that stops a diverged run: where it happened, what is kept, what to check."""
    settings, model_spec, resume = run.settings, run.model_spec, run.resume
    kept = (
        f"the last good checkpoint is {resume / CURRENT} (step {state.checkpoint_step}); a rerun with the same "
        f"settings resumes from it, with other settings it starts afresh"
        if state.checkpoint_step
        else f"no checkpoint was written yet (training.checkpoint_every = {settings['checkpoint_every']})"
    )
    dtype = (
        f"models.{run.args.model_key}.load_dtype = {model_spec.get('load_dtype', 'float32')}; "
        if model_spec["source"] == "hf"
        else ""
    )
    return StageError(
        f"models.{run.args.model_key}: training diverged: the {what} is {value} at step {step} of {run.total_steps}; "
        f"no model is written, {kept}. Check training.learning_rate = {settings['learning_rate']}, "
        f"training.mixed_precision = {settings['mixed_precision']} (fp16 overflows; use bf16 or no), "
        f"{dtype}training.max_grad_norm = {settings['max_grad_norm']} (0 = no clipping), and the training data."
    )


def checkpoint_due(run: TrainingRun, step: int) -> bool:
    """Every checkpoint_every steps, but not at the last step: the model written next makes that one useless."""
    return step % run.settings["checkpoint_every"] == 0 and step < run.total_steps


def save_model(accelerator, model, tokenizer, folder: Path) -> None:
    """The LM in safetensors with its tokenizer, replacing `folder` only once complete (the main process writes)."""
    from workflow_lib.data.tokenization import save_tokenizer

    if accelerator.is_main_process:
        tmp = folder.with_name(folder.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        accelerator.unwrap_model(model).lm.save_pretrained(tmp, safe_serialization=True)
        save_tokenizer(tokenizer, tmp)
        replace_folder(tmp, folder)


def save_best_adapter(run: TrainingRun) -> None:
    """select_best with LoRA: the best step's adapters into the checkpoints' `best` folder, replacing it once complete."""
    from workflow_lib.train import lora

    if run.accelerator.is_main_process:
        folder = run.resume / BEST
        tmp = folder.with_name(folder.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        lora.save_adapter(run.adapters, tmp)
        replace_folder(tmp, folder)


def write_outputs(run: TrainingRun, state: RunState, ran: dict) -> None:
    """The final (or best) model in safetensors, its tokenizer, train_log.csv and a summary of what ran, atomically.
    With LoRA the model is the merged one, its adapters in `adapter/` beside it (train/lora.py `write_merged`)."""
    from workflow_lib.data.tokenization import save_tokenizer
    from workflow_lib.files import atomic_path

    settings, best = run.settings, state.best
    selected = settings["select_best"] and best["step"] is not None
    with atomic_path(run.args.output) as tmp:
        if run.adapters is not None:
            from workflow_lib.train import lora

            ran = {**ran, "lora": lora.described(run.adapters)}
            lora.write_merged(run.adapters, tmp, run.resume / BEST if selected else None)
            save_tokenizer(run.tokenizer, tmp)
        elif selected:
            shutil.copytree(run.resume / BEST, tmp)
        else:
            run.accelerator.unwrap_model(run.model).lm.save_pretrained(tmp, safe_serialization=True)
            save_tokenizer(run.tokenizer, tmp)
        fields = ["step", "epoch", "loss", "lr", "grad_norm", "tokens_per_s", "validation_loss", "validation_objective"]
        with open(tmp / "train_log.csv", "w", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=fields)
            writer.writeheader()
            writer.writerows(state.log)
        (tmp / "train_summary.json").write_text(
            json.dumps(
                {
                    "settings": settings,
                    "ran": ran,
                    "steps": len(state.log),
                    "best": best,
                    "final_loss": state.log[-1]["loss"] if state.log else None,
                },
                indent=2,
                sort_keys=True,
            )
        )
