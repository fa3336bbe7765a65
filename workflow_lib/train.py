"""Training one model on one perturbed training set with one objective.

Run by rules/train.smk as `accelerate launch ... -m workflow_lib.train`, in run_clm_no_trainer's idiom:
`Accelerator` owns devices, mixed precision and gradient accumulation; `save_state`/`load_state` make a
killed or preempted job resume where it stopped. The step itself (forward, gather the targets' logits,
objective, backward, clip, step) fits on one screen in `train`.

Both kinds of perturbed rows reduce to one batch layout: padded `input_ids` plus flat (row, position,
target id) triples. `augment` rows are ordinary sequences (every next token is a target); `prefix` rows
carry their own targets (Algorithm 1). Logits are computed only at target positions, from the base model's
hidden states and the output embedding.
"""

from __future__ import annotations

import argparse
import csv
import json
import logging
import math
import os
import shutil
import signal
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from workflow_lib.cli import StageError, parse_json_arg, run

log = logging.getLogger("workflow_lib.train")


# ---- data ----------------------------------------------------------------------------------------------------


@dataclass
class Ragged:
    """Variable-length int lists as one flat array plus offsets (row i is values[offsets[i]:offsets[i+1]])."""

    values: np.ndarray
    offsets: np.ndarray

    @classmethod
    def from_arrow(cls, column) -> "Ragged":
        column = column.combine_chunks()
        return cls(column.values.to_numpy(zero_copy_only=False), column.offsets.to_numpy().astype(np.int64))

    def row(self, i: int) -> np.ndarray:
        return self.values[self.offsets[i] : self.offsets[i + 1]]

    def __len__(self) -> int:
        return len(self.offsets) - 1


class TrainingRows(torch.utils.data.Dataset):
    """Rows of a perturbed Parquet (or plain token blocks): input ids and, in prefix mode, explicit targets."""

    def __init__(self, path: str, max_length: int):
        import pyarrow.parquet as pq

        table = pq.read_table(path)
        self.inputs = Ragged.from_arrow(table.column("input_ids"))
        self.prefix_mode = "target_positions" in table.column_names
        if self.prefix_mode:
            self.positions = Ragged.from_arrow(table.column("target_positions"))
            self.targets = Ragged.from_arrow(table.column("target_ids"))
        self.max_length = max_length

    def __len__(self) -> int:
        return len(self.inputs)

    def __getitem__(self, i: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        ids = self.inputs.row(i)[: self.max_length]
        if self.prefix_mode:
            pos, tgt = self.positions.row(i), self.targets.row(i)
            keep = pos < len(ids)  # a truncated row loses the targets past max_length
            return ids, pos[keep], tgt[keep]
        return ids, np.arange(len(ids) - 1), ids[1:]


def collate(rows, pad_id: int) -> dict[str, torch.Tensor]:
    """Right-padded input_ids and attention_mask [B, L], flat targets: batch row, position, id [N]."""
    width = max(len(ids) for ids, _, _ in rows)
    input_ids = np.full((len(rows), width), pad_id, dtype=np.int64)
    mask = np.zeros((len(rows), width), dtype=np.int64)
    for b, (ids, _, _) in enumerate(rows):
        input_ids[b, : len(ids)] = ids
        mask[b, : len(ids)] = 1
    return {
        "input_ids": torch.from_numpy(input_ids),
        "attention_mask": torch.from_numpy(mask),
        "target_row": torch.from_numpy(np.concatenate([np.full(len(p), b) for b, (_, p, _) in enumerate(rows)]).astype(np.int64)),
        "target_pos": torch.from_numpy(np.concatenate([p for _, p, _ in rows]).astype(np.int64)),
        "target_ids": torch.from_numpy(np.concatenate([t for _, _, t in rows]).astype(np.int64)),
    }


class EpochShuffle(torch.utils.data.Sampler):
    """A permutation per epoch from (seed, epoch) alone, so a resumed run sees the same order."""

    def __init__(self, n: int, seed: int):
        self.n, self.seed, self.epoch = n, seed, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self):
        return iter(np.random.default_rng([self.seed, self.epoch]).permutation(self.n).tolist())

    def __len__(self) -> int:
        return self.n


# ---- model ---------------------------------------------------------------------------------------------------


def build_model(key: str, spec: dict, tokenizer, settings: dict):
    """A scratch GPT-2 from `architecture`, or a pretrained hub model (or local folder)."""
    from transformers import GPT2Config, GPT2LMHeadModel

    from workflow_lib.models import load_pretrained

    if spec["source"] == "scratch":
        arch = dict(spec.get("architecture", {}))
        config = GPT2Config(vocab_size=len(tokenizer), bos_token_id=tokenizer.bos_token_id,
                            eos_token_id=tokenizer.eos_token_id, **arch)
        model = GPT2LMHeadModel(config)
    else:
        model = load_pretrained(key, spec)
        if model.get_input_embeddings().weight.shape[0] < len(tokenizer):
            model.resize_token_embeddings(len(tokenizer))
    if settings["gradient_checkpointing"]:
        model.gradient_checkpointing_enable()
    return model


def target_logits(model, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """Logits [N, V] at the target positions only: base-model hidden states, gathered, through the head."""
    hidden = model.base_model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).last_hidden_state
    return model.get_output_embeddings()(hidden[batch["target_row"], batch["target_pos"]])


def resolve_precision(requested: str) -> str:
    """`auto`: bf16 where the GPU has it (the paper's models train in bf16 on GPUs), full precision on a CPU."""
    if requested != "auto":
        return requested
    return "bf16" if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else "no"


def check_settings(settings: dict, n_rows: int, n_processes: int) -> None:
    """Hyperparameters that can only be checked against the data: before any step, naming the key."""
    per_step = settings["batch_size"] * n_processes
    if n_rows < per_step:
        raise StageError(f"training.batch_size = {settings['batch_size']} (x {n_processes} processes) is larger than "
                         f"the training data ({n_rows} rows); lower it or add data")


# ---- training ------------------------------------------------------------------------------------------------


def evaluate(model, loader, accelerator) -> float:
    """Mean NLL per target token on a loader (the unperturbed validation blocks)."""
    model.eval()
    total, count = torch.zeros((), device=accelerator.device), torch.zeros((), device=accelerator.device)
    with torch.no_grad():
        for batch in loader:
            logits = target_logits(model, batch)
            total += torch.nn.functional.cross_entropy(logits.float(), batch["target_ids"], reduction="sum")
            count += len(batch["target_ids"])
    model.train()
    total, count = accelerator.reduce(total), accelerator.reduce(count)
    return float(total / count.clamp(min=1))


def train(args, settings: dict, model_spec: dict, objective: dict) -> None:
    from accelerate import Accelerator
    from accelerate.utils import set_seed
    from tqdm import tqdm
    from transformers import AutoTokenizer, get_scheduler

    from workflow_lib import objectives

    loss_fn = objectives.get(objective["loss"])
    loss_params = {k: v for k, v in objective.items() if k != "loss"}
    accelerator = Accelerator(mixed_precision=resolve_precision(settings["mixed_precision"]),
                              gradient_accumulation_steps=settings["gradient_accumulation_steps"])
    set_seed(settings["seed"])
    tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    data = TrainingRows(args.train, settings["max_length"])
    check_settings(settings, len(data), accelerator.num_processes)
    sampler = EpochShuffle(len(data), settings["seed"])
    # Own generators: a DataLoader draws a base seed from the global RNG whenever it starts an epoch, which
    # would shift the dropout masks of a resumed run.
    loader = torch.utils.data.DataLoader(data, batch_size=settings["batch_size"], sampler=sampler, drop_last=True,
                                         collate_fn=lambda rows: collate(rows, pad_id), generator=torch.Generator())
    val_loader = None
    if args.validation:
        val = TrainingRows(args.validation, settings["max_length"])
        val_loader = torch.utils.data.DataLoader(val, batch_size=settings["batch_size"], generator=torch.Generator(),
                                                 collate_fn=lambda rows: collate(rows, pad_id))

    model = build_model(args.model_key, model_spec, tokenizer, settings)
    if objective["loss"] == "emo":
        loss_params["cost_embedding"] = objectives.cost_embedding_of(model).to(accelerator.device)
    decay = [p for n, p in model.named_parameters() if not any(k in n for k in ("bias", "ln", "norm"))]
    no_decay = [p for n, p in model.named_parameters() if any(k in n for k in ("bias", "ln", "norm"))]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": settings["weight_decay"]},
                                   {"params": no_decay, "weight_decay": 0.0}], lr=settings["learning_rate"])
    steps_per_epoch = math.ceil(len(loader) / (settings["gradient_accumulation_steps"] * accelerator.num_processes))
    total_steps = settings["epochs"] * steps_per_epoch
    scheduler = get_scheduler(settings["lr_scheduler"], optimizer, num_warmup_steps=settings["warmup_steps"],
                              num_training_steps=total_steps)
    model, optimizer, loader, scheduler = accelerator.prepare(model, optimizer, loader, scheduler)
    if val_loader is not None:
        val_loader = accelerator.prepare(val_loader)

    resume = Path(args.resume_dir)
    step, best = 0, {"loss": math.inf, "step": None}
    log_rows: list[dict] = []
    state_file = resume / "trainer_state.json"
    if state_file.exists():  # a killed or preempted run: continue exactly where the last checkpoint was
        accelerator.load_state(str(resume / "state"))
        saved = json.loads(state_file.read_text())
        step, best, log_rows = saved["step"], saved["best"], saved["log"]
        log.info("resuming from step %d of %d", step, total_steps)

    stop_after = int(os.environ.get("PERTURBED_LM_KILL_AT_STEP", "0"))  # tests: SIGKILL ourselves here
    progress = tqdm(total=total_steps, initial=step, desc="train", disable=not accelerator.is_main_process, mininterval=2)
    model.train()
    window_tokens, window_start = 0, time.perf_counter()
    while step < total_steps:
        epoch, done_in_epoch = divmod(step, steps_per_epoch)
        sampler.set_epoch(epoch)
        batches = accelerator.skip_first_batches(loader, done_in_epoch * settings["gradient_accumulation_steps"])
        for batch in batches:
            with accelerator.accumulate(model):
                loss = loss_fn(target_logits(model, batch), batch["target_ids"], **loss_params)
                accelerator.backward(loss)
                if accelerator.sync_gradients and settings["max_grad_norm"]:
                    accelerator.clip_grad_norm_(model.parameters(), settings["max_grad_norm"])
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad()
            window_tokens += len(batch["target_ids"]) * accelerator.num_processes
            if not accelerator.sync_gradients:
                continue
            step += 1
            progress.update(1)
            row = {"step": step, "epoch": epoch, "loss": float(loss.detach()), "lr": scheduler.get_last_lr()[0]}
            if step % settings["log_every"] == 0 or step == total_steps:
                row["tokens_per_s"] = window_tokens / (time.perf_counter() - window_start)
                window_tokens, window_start = 0, time.perf_counter()
            if val_loader is not None and (step % settings["eval_every"] == 0 or step == total_steps):
                row["validation_loss"] = evaluate(model, val_loader, accelerator)
                if settings["select_best"] and row["validation_loss"] < best["loss"]:
                    best = {"loss": row["validation_loss"], "step": step}
                    save_model(accelerator, model, tokenizer, resume / "best")
            log_rows.append(row)
            if step % settings["checkpoint_every"] == 0 and step < total_steps:
                save_checkpoint(accelerator, resume, step, best, log_rows)
            if step == stop_after:
                os.kill(os.getpid(), signal.SIGKILL)
            if step >= total_steps:
                break
    progress.close()
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        write_outputs(args.output, accelerator, model, tokenizer, resume, log_rows, best, settings)
        shutil.rmtree(resume, ignore_errors=True)


def save_model(accelerator, model, tokenizer, folder: Path) -> None:
    if accelerator.is_main_process:
        tmp = folder.with_name(folder.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        accelerator.unwrap_model(model).save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        shutil.rmtree(folder, ignore_errors=True)
        os.replace(tmp, folder)


def save_checkpoint(accelerator, resume: Path, step: int, best: dict, log_rows: list[dict]) -> None:
    """Model, optimizer, scheduler and RNG states, then the step: the state file is written last, so a kill
    during a save leaves the previous complete checkpoint in charge."""
    tmp = resume / "state.tmp"
    accelerator.save_state(str(tmp))
    if accelerator.is_main_process:
        shutil.rmtree(resume / "state", ignore_errors=True)
        os.replace(tmp, resume / "state")
        (resume / "trainer_state.json.tmp").write_text(json.dumps({"step": step, "best": best, "log": log_rows}))
        os.replace(resume / "trainer_state.json.tmp", resume / "trainer_state.json")
    accelerator.wait_for_everyone()


def write_outputs(output: str, accelerator, model, tokenizer, resume: Path, log_rows, best, settings) -> None:
    """The final (or best) model in safetensors, its tokenizer, train_log.csv and a summary, atomically."""
    from workflow_lib.files import atomic_path

    with atomic_path(output) as tmp:
        if settings["select_best"] and best["step"] is not None:
            shutil.copytree(resume / "best", tmp)
        else:
            accelerator.unwrap_model(model).save_pretrained(tmp, safe_serialization=True)
            tokenizer.save_pretrained(tmp)
        fields = ["step", "epoch", "loss", "lr", "tokens_per_s", "validation_loss"]
        with open(tmp / "train_log.csv", "w", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=fields)
            writer.writeheader()
            writer.writerows(log_rows)
        (tmp / "train_summary.json").write_text(json.dumps({"settings": settings, "steps": len(log_rows), "best": best,
                                                            "final_loss": log_rows[-1]["loss"] if log_rows else None},
                                                           indent=2, sort_keys=True))


def main() -> None:
    parser = argparse.ArgumentParser(prog="accelerate launch -m workflow_lib.train")
    parser.add_argument("--train", required=True, help="perturbed training Parquet")
    parser.add_argument("--validation", help="token blocks for validation loss")
    parser.add_argument("--tokenizer", required=True)
    parser.add_argument("--model-key", required=True)
    parser.add_argument("--model", required=True, help="JSON: the model's config section")
    parser.add_argument("--objective", required=True, help="JSON: loss name and its parameters")
    parser.add_argument("--settings", required=True, help="JSON: the training section (merged with the model's)")
    parser.add_argument("--resume-dir", required=True, help="checkpoints; kept when the job fails")
    parser.add_argument("--output", required=True)
    args = parser.parse_args()
    train(args, parse_json_arg(args.settings, "training"), parse_json_arg(args.model, f"models.{args.model_key}"),
          parse_json_arg(args.objective, "objectives"))


if __name__ == "__main__":
    run(main)
