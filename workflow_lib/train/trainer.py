"""Training one model on one perturbed training set with one objective.

Run by rules/train.smk as `python -m workflow_lib.train.trainer` (one process) or `accelerate launch --multi_gpu ...
-m workflow_lib.train.trainer` (N), in run_clm_no_trainer's idiom:
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
import hashlib
import json
import logging
import math
import os
import shutil
import signal
import time
from pathlib import Path

import torch

from workflow_lib.cli import StageError, parse_json_arg, run
from workflow_lib.train.batches import EpochShuffle, TrainingRows, collate

log = logging.getLogger("workflow_lib.train.trainer")
logging.getLogger("accelerate").setLevel(logging.WARNING)  # its per-file checkpoint messages bury ours
logging.getLogger("accelerate.utils.other").setLevel(
    logging.ERROR
)  # "Removed shared tensor" (tied heads) per checkpoint


# ---- model ---------------------------------------------------------------------------------------------------


def build_model(key: str, spec: dict, tokenizer, settings: dict):
    """A scratch GPT-2 from `architecture`, or a pretrained hub model (or local folder) in `load_dtype`."""
    from transformers import GPT2Config, GPT2LMHeadModel

    from workflow_lib.models import load_pretrained

    if spec["source"] == "scratch":
        arch = dict(spec.get("architecture", {}))
        config = GPT2Config(
            vocab_size=len(tokenizer), bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id, **arch
        )
        model = GPT2LMHeadModel(config)
    else:
        model = load_pretrained(key, spec)
        if model.get_input_embeddings().weight.shape[0] < len(tokenizer):
            model.resize_token_embeddings(len(tokenizer))
    # The step computes logits as output_embeddings(hidden states); a family that transforms them further would
    # train a different model than it samples from.
    for attribute in ("final_logit_softcapping", "logit_scale"):
        if getattr(model.config, attribute, None) not in (None, 1, 1.0):
            raise StageError(
                f"models.{key}: {model.config.model_type} post-processes its logits ({attribute}); "
                "its training step is not supported"
            )
    if settings["gradient_checkpointing"]:
        model.gradient_checkpointing_enable()
    return model


def target_logits(model, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """Logits [N, V] at the target positions only: base-model hidden states, gathered, through the head."""
    hidden = model.base_model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).last_hidden_state
    return model.get_output_embeddings()(hidden[batch["target_row"], batch["target_pos"]])


class TargetLogits(torch.nn.Module):
    """The causal LM with a forward that returns the logits at the target positions only.

    The step calls this module's forward as accelerate prepared it, never the LM's parts directly: with several
    processes the prepared module is DistributedDataParallel, whose forward arms the gradient all-reduce, and
    with mixed precision the prepared forward is the one that runs under autocast."""

    def __init__(self, lm):
        super().__init__()
        self.lm = lm

    def forward(self, input_ids, attention_mask, target_row, target_pos):
        return target_logits(
            self.lm,
            {
                "input_ids": input_ids,
                "attention_mask": attention_mask,
                "target_row": target_row,
                "target_pos": target_pos,
            },
        )


MODEL_INPUTS = ("input_ids", "attention_mask", "target_row", "target_pos")


def resolve_precision(requested: str) -> str:
    """`auto`: bf16 where the GPU has it, full precision on a CPU (the paper states no precision: a workflow
    choice, docs/method.md §3)."""
    if requested != "auto":
        return requested
    return "bf16" if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else "no"


def check_settings(settings: dict, n_rows: int, n_processes: int) -> None:
    """Hyperparameters that can only be checked against the data: before any step, naming the key."""
    per_step = settings["batch_size"] * n_processes
    if n_rows < per_step:
        raise StageError(
            f"training.batch_size = {settings['batch_size']} (x {n_processes} processes) is larger than "
            f"the training data ({n_rows} rows); lower it or add data"
        )


def fingerprint(args, settings: dict, model_spec: dict, objective: dict, n_processes: int) -> str:
    """What a checkpoint was made with: a rerun resumes only a checkpoint of the same run, never one left by a
    failed run with other settings, data or number of processes."""
    files = [(f, os.stat(f).st_size, os.stat(f).st_mtime_ns) for f in (args.train, args.validation) if f]
    text = json.dumps([settings, model_spec, objective, n_processes, files], sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


# ---- training ------------------------------------------------------------------------------------------------


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


def diverged(
    key: str,
    what: str,
    value: float,
    step: int,
    total: int,
    resume: Path,
    checkpoint_step: int | None,
    settings: dict,
    model_spec: dict,
) -> StageError:
    """The error that stops a diverged run: where it happened, what is kept, what to check."""
    kept = (
        f"the last good checkpoint is {resume / 'state'} (step {checkpoint_step}); a rerun with the same settings "
        f"resumes from it, with other settings it starts afresh"
        if checkpoint_step
        else f"no checkpoint was written yet (training.checkpoint_every = {settings['checkpoint_every']})"
    )
    dtype = (
        f"models.{key}.load_dtype = {model_spec.get('load_dtype', 'float32')}; " if model_spec["source"] == "hf" else ""
    )
    return StageError(
        f"models.{key}: training diverged: the {what} is {value} at step {step} of {total}; no model is written, {kept}. "
        f"Check training.learning_rate = {settings['learning_rate']}, training.mixed_precision = {settings['mixed_precision']} "
        f"(fp16 overflows; use bf16 or no), {dtype}training.max_grad_norm = {settings['max_grad_norm']} (0 = no clipping), "
        "and the training data."
    )


def train(args, settings: dict, model_spec: dict, objective: dict) -> None:
    from accelerate import Accelerator
    from accelerate.utils import set_seed
    from tqdm import tqdm
    from transformers import AutoTokenizer, get_scheduler

    from workflow_lib.train import objectives

    loss_fn = objectives.get(objective["loss"])
    loss_params = {k: v for k, v in objective.items() if k != "loss"}
    # cpu=True without CUDA: several processes (accelerate launch --multi_gpu) then form a gloo group instead of
    # each training alone on all of the data.
    from accelerate import PartialState

    from workflow_lib.train import tracking

    tracked = tracking.settings_from_env()
    run = tracking.run_name(args.output)
    on_main = PartialState(cpu=not torch.cuda.is_available()).is_main_process
    accelerator = Accelerator(
        cpu=not torch.cuda.is_available(),
        mixed_precision=resolve_precision(settings["mixed_precision"]),
        gradient_accumulation_steps=settings["gradient_accumulation_steps"],
        log_with=tracking.trackers(tracked["report_to"], tracked["dir"], run)
        if on_main and tracked["report_to"]
        else None,
    )
    n_proc, accum = accelerator.num_processes, settings["gradient_accumulation_steps"]
    global_batch = settings["batch_size"] * n_proc * accum
    if not accelerator.is_main_process:  # one copy of the progress messages in the log; errors from every process
        logging.getLogger("workflow_lib").setLevel(logging.WARNING)
    if n_proc > 1 and not torch.cuda.is_available() and accelerator.is_main_process:
        log.warning(
            "training.gpus = %d but there is no CUDA device: %d CPU processes (gloo) train data-parallel",
            settings["gpus"],
            n_proc,
        )
    set_seed(settings["seed"])  # the same on every process: a scratch model starts from the same weights everywhere
    tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    data = TrainingRows(args.train, settings["max_length"])
    check_settings(settings, len(data), n_proc)
    sampler = EpochShuffle(len(data), settings["seed"])
    # Own generators: a DataLoader draws a base seed from the global RNG whenever it starts an epoch, which
    # would shift the dropout masks of a resumed run. Prepared, process i takes batches i, i + N, ... of each
    # epoch's permutation, so N processes at batch b see the rows one process sees at batch N x b.
    loader = accelerator.prepare(
        torch.utils.data.DataLoader(
            data,
            batch_size=settings["batch_size"],
            sampler=sampler,
            drop_last=True,
            collate_fn=lambda rows: collate(rows, pad_id),
            generator=torch.Generator(),
        )
    )
    validation = TrainingRows(args.validation, settings["max_length"]) if args.validation else None

    lm = build_model(args.model_key, model_spec, tokenizer, settings)
    if objective["loss"] == "emo":
        loss_params["cost_embedding"] = objectives.cost_embedding_of(lm).to(accelerator.device)
    decay = [p for n, p in lm.named_parameters() if not any(k in n for k in ("bias", "ln", "norm"))]
    no_decay = [p for n, p in lm.named_parameters() if any(k in n for k in ("bias", "ln", "norm"))]
    # The fused kernel (HF Trainer's default optimizer too) updates every tensor in one pass: on SmolLM2 on one CPU
    # thread its step takes a quarter of the per-tensor loop's (0.16 s against 0.63 s, a sixth of a training step).
    # Only on float32 master weights: on float16 ones the loop's eps underflows to the NaN that stops the run,
    # naming load_dtype (diverged(); docs/usage.md, "Training"), where the fused kernel's float32 arithmetic goes on.
    fused = accelerator.device.type in ("cpu", "cuda") and all(p.dtype == torch.float32 for p in lm.parameters())
    optimizer = torch.optim.AdamW(
        [{"params": decay, "weight_decay": settings["weight_decay"]}, {"params": no_decay, "weight_decay": 0.0}],
        lr=settings["learning_rate"],
        fused=fused,
    )
    steps_per_epoch = math.ceil(len(loader) / accum)  # optimizer steps; len(loader) is this process's shard
    total_steps = settings["epochs"] * steps_per_epoch
    # A prepared scheduler steps once per process at every optimizer step (as in run_clm_no_trainer), so it is sized
    # in process-steps: the linear schedule then reaches 0 at the last step whatever the number of processes.
    scheduler = get_scheduler(
        settings["lr_scheduler"],
        optimizer,
        num_warmup_steps=settings["warmup_steps"] * n_proc,
        num_training_steps=total_steps * n_proc,
    )
    model, optimizer, scheduler = accelerator.prepare(TargetLogits(lm), optimizer, scheduler)
    set_seed(settings["seed"], device_specific=True)  # dropout: independent masks on each process

    resume = Path(args.resume_dir)
    step, best, checkpoint_step = 0, {"loss": math.inf, "step": None}, None
    log_rows: list[dict] = []
    state_file = resume / "trainer_state.json"
    mark = fingerprint(args, settings, model_spec, objective, n_proc)
    saved = json.loads(state_file.read_text()) if state_file.exists() else None
    accelerator.wait_for_everyone()
    if saved is not None and saved.get("fingerprint") != mark:
        log.warning("discarding the checkpoint in %s: it was made with other settings, data or processes", resume)
        if accelerator.is_main_process:
            shutil.rmtree(resume)
        saved = None
        accelerator.wait_for_everyone()
    if saved is not None:  # a killed or preempted run: continue exactly where the last checkpoint was
        accelerator.load_state(str(resume / "state"))
        step, best, log_rows = saved["step"], saved["best"], saved["log"]
        checkpoint_step = step
        log.info("resuming from step %d of %d", step, total_steps)

    if tracked["report_to"]:
        accelerator.init_trackers(tracking.PROJECT, config=tracking.run_config(settings, model_spec, objective, run))
    log.info(
        "%d optimizer steps (%d per epoch): %d process(es) x batch %d x accumulation %d = global batch %d; "
        "mixed precision %s; master weights %s",
        total_steps,
        steps_per_epoch,
        n_proc,
        settings["batch_size"],
        accum,
        global_batch,
        accelerator.mixed_precision,
        next(lm.parameters()).dtype,
    )
    stop_after = int(os.environ.get("PERTURBED_LM_KILL_AT_STEP", "0"))  # tests: SIGKILL ourselves here
    progress = tqdm(
        total=total_steps, initial=step, desc="train", disable=not accelerator.is_main_process, mininterval=2
    )
    model.train()
    window_tokens, window_start = 0, time.perf_counter()
    while step < total_steps:
        epoch, done_in_epoch = divmod(step, steps_per_epoch)
        # The prepared loader sets its sampler's epoch from its own counter whenever a pass starts, and
        # skip_first_batches copies that counter: set it, not only the sampler's, or every epoch replays epoch 0.
        loader.set_epoch(epoch)
        for batch in accelerator.skip_first_batches(loader, done_in_epoch * accum):
            with accelerator.accumulate(model):
                loss = loss_fn(model(**{k: batch[k] for k in MODEL_INPUTS}), batch["target_ids"], **loss_params)
                mean_loss = float(accelerator.reduce(loss.detach(), "mean"))  # every process sees the same value
                if not math.isfinite(mean_loss):
                    raise diverged(
                        args.model_key,
                        f"{objective['loss']} loss",
                        mean_loss,
                        step + 1,
                        total_steps,
                        resume,
                        checkpoint_step,
                        settings,
                        model_spec,
                    )
                accelerator.backward(loss)
                if accelerator.sync_gradients:  # max_grad_norm 0: no clipping (inf scales by exactly 1), the norm only
                    grad_norm = accelerator.clip_grad_norm_(model.parameters(), settings["max_grad_norm"] or math.inf)
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad()
            window_tokens += len(batch["target_ids"]) * n_proc
            if not accelerator.sync_gradients:
                continue
            step += 1
            progress.update(1)
            row = {
                "step": step,
                "epoch": epoch,
                "loss": mean_loss,
                "lr": scheduler.get_last_lr()[0],
                "grad_norm": float(grad_norm),
            }
            if step % settings["log_every"] == 0 or step == total_steps:
                row["tokens_per_s"] = window_tokens / (time.perf_counter() - window_start)
                window_tokens, window_start = 0, time.perf_counter()
            every = settings["eval_every"] or steps_per_epoch  # 0: at the end of each epoch
            if validation is not None and (step % every == 0 or step == total_steps):
                losses = validation_losses(
                    model, validation, pad_id, settings["batch_size"], accelerator, loss_fn, loss_params
                )
                row["validation_loss"], row["validation_objective"] = losses["nll"], losses["objective"]
                if not math.isfinite(losses["nll"] + losses["objective"]):
                    raise diverged(
                        args.model_key,
                        "validation loss",
                        losses["nll"] + losses["objective"],
                        step,
                        total_steps,
                        resume,
                        checkpoint_step,
                        settings,
                        model_spec,
                    )
                if settings["select_best"] and losses[settings["select_by"]] < best["loss"]:
                    best = {"loss": losses[settings["select_by"]], "step": step, "by": settings["select_by"]}
                    save_model(accelerator, model, tokenizer, resume / "best")
            log_rows.append(row)
            accelerator.log(tracking.logged(row), step=step)  # main process only; no tracker: nothing
            if step % settings["checkpoint_every"] == 0 and step < total_steps:
                save_checkpoint(accelerator, resume, step, best, log_rows, mark)
                checkpoint_step = step
            if step == stop_after:
                os.kill(os.getpid(), signal.SIGKILL)
            if step >= total_steps:
                break
    progress.close()
    for tracker in accelerator.trackers:  # flush and close the runs (end_training would also end the process group)
        tracker.finish()
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        ran = {
            "processes": n_proc,
            "distributed": str(accelerator.distributed_type).split(".")[-1],
            "device": accelerator.device.type,
            "mixed_precision": accelerator.mixed_precision,
            "master_weights": str(next(lm.parameters()).dtype).replace("torch.", ""),
            "global_batch": global_batch,
            "steps_per_epoch": steps_per_epoch,
        }
        write_outputs(args.output, accelerator, model, tokenizer, resume, log_rows, best, settings, ran)
        shutil.rmtree(resume, ignore_errors=True)
    accelerator.wait_for_everyone()


def save_model(accelerator, model, tokenizer, folder: Path) -> None:
    from workflow_lib.data.tokenization import save_tokenizer

    if accelerator.is_main_process:
        tmp = folder.with_name(folder.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        accelerator.unwrap_model(model).lm.save_pretrained(tmp, safe_serialization=True)
        save_tokenizer(tokenizer, tmp)
        shutil.rmtree(folder, ignore_errors=True)
        os.replace(tmp, folder)


def save_checkpoint(accelerator, resume: Path, step: int, best: dict, log_rows: list[dict], mark: str) -> None:
    """Model, optimizer, scheduler and every process's RNG states, then the step: the state file is written last, so
    a kill during a save leaves the previous complete checkpoint in charge."""
    tmp = resume / "state.tmp"
    accelerator.save_state(str(tmp))
    accelerator.wait_for_everyone()  # every process has written its RNG state before the folder moves
    if accelerator.is_main_process:
        shutil.rmtree(resume / "state", ignore_errors=True)
        os.replace(tmp, resume / "state")
        (resume / "trainer_state.json.tmp").write_text(
            json.dumps({"step": step, "best": best, "log": log_rows, "fingerprint": mark})
        )
        os.replace(resume / "trainer_state.json.tmp", resume / "trainer_state.json")
    accelerator.wait_for_everyone()


def write_outputs(
    output: str, accelerator, model, tokenizer, resume: Path, log_rows, best, settings, ran: dict
) -> None:
    """The final (or best) model in safetensors, its tokenizer, train_log.csv and a summary of what ran, atomically."""
    from workflow_lib.data.tokenization import save_tokenizer
    from workflow_lib.files import atomic_path

    with atomic_path(output) as tmp:
        if settings["select_best"] and best["step"] is not None:
            shutil.copytree(resume / "best", tmp)
        else:
            accelerator.unwrap_model(model).lm.save_pretrained(tmp, safe_serialization=True)
            save_tokenizer(tokenizer, tmp)
        fields = ["step", "epoch", "loss", "lr", "grad_norm", "tokens_per_s", "validation_loss", "validation_objective"]
        with open(tmp / "train_log.csv", "w", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=fields)
            writer.writeheader()
            writer.writerows(log_rows)
        (tmp / "train_summary.json").write_text(
            json.dumps(
                {
                    "settings": settings,
                    "ran": ran,
                    "steps": len(log_rows),
                    "best": best,
                    "final_loss": log_rows[-1]["loss"] if log_rows else None,
                },
                indent=2,
                sort_keys=True,
            )
        )


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m workflow_lib.train.trainer")
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
    train(
        args,
        parse_json_arg(args.settings, "training"),
        parse_json_arg(args.model, f"models.{args.model_key}"),
        parse_json_arg(args.objective, "objectives"),
    )


if __name__ == "__main__":
    run(main)
