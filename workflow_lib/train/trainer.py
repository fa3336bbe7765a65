"""Training one model on one perturbed training set with one objective (the `train` rule).

Run as `python -m workflow_lib.train.trainer` (one process) or under `accelerate launch --multi_gpu` (N), in
run_clm_no_trainer's idiom: `Accelerator` owns devices, mixed precision and gradient accumulation, and
`save_state`/`load_state` make a killed job resume where it stopped. `train` reads as its steps: set up, resume, the
loop (train/loop.py), finish. Both modes' rows reduce to one batch layout, padded `input_ids` plus flat (row,
position, target id) triples: `augment` rows are ordinary sequences, `prefix` rows carry their own targets; logits
are computed only at the target positions (train/forward.py). docs/usage.md, "Training"; docs/method.md §3.
"""

from __future__ import annotations

import argparse
import logging
import math
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from workflow_lib.cli import StageError, parse_json_arg, run
from workflow_lib.perturb.strategies import get as get_strategy
from workflow_lib.train import checkpoints
from workflow_lib.train.batches import EpochShuffle, TrainingRows, check_context, collate
from workflow_lib.train.forward import TargetLogits
from workflow_lib.train.loop import (
    RunState,
    Throughput,
    TrainingRun,
    checkpoint_due,
    epoch_batches,
    step_row,
    train_step,
    validate,
    validation_due,
    write_outputs,
)

if TYPE_CHECKING:
    from accelerate import Accelerator

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


# ---- training ------------------------------------------------------------------------------------------------


def train(args: argparse.Namespace, settings: dict, model_spec: dict, objective: dict) -> None:
    """Train one model: set up, resume from a checkpoint of the same run if one is left, take the optimizer steps
    (each logged; validated every eval_every and checkpointed every checkpoint_every steps), write the model. The
    checkpoint folder is held (locked) for the whole run, and what a killed run left in it is cleared first."""
    from accelerate import PartialState

    main = PartialState(cpu=not torch.cuda.is_available()).is_main_process
    resume = Path(args.resume_dir)
    with checkpoints.checkpoint_lock(resume, main):  # before anything reads or writes the folder, until it is removed
        if main:
            checkpoints.remove_stale(resume, args.output)
        run = set_up(args, settings, model_spec, objective)
        state = resume_or_start(run)
        take_steps(run, state)
        finish(run, state)


def take_steps(run: TrainingRun, state: RunState) -> None:
    """The optimizer steps from `state.step` to the last one: each logged, validated every eval_every and
    checkpointed every checkpoint_every steps."""
    from tqdm import tqdm

    from workflow_lib.train import tracking

    start_tracking(run, state)
    progress = tqdm(
        total=run.total_steps,
        initial=state.step,
        desc="train",
        disable=not run.accelerator.is_main_process,
        mininterval=2,
    )
    run.model.train()
    window = Throughput()
    while state.step < run.total_steps:
        epoch = state.step // run.steps_per_epoch
        for batch in epoch_batches(run, state.step):
            loss, grad_norm = train_step(run, state, batch)
            window.tokens += len(batch["target_ids"]) * run.accelerator.num_processes
            if not run.accelerator.sync_gradients:
                continue  # a micro-batch of gradient accumulation: no optimizer step yet
            state.step += 1
            progress.update(1)
            row = step_row(run, state.step, epoch, loss, grad_norm, window)
            if validation_due(run, state.step):
                validate(run, state, row)
            state.log.append(row)
            run.accelerator.log(tracking.logged(row), step=state.step)  # main process only; no tracker: nothing
            if checkpoint_due(run, state.step):
                checkpoints.save_checkpoint(run, state)
            if state.step >= run.total_steps:
                break
    progress.close()


def set_up(args: argparse.Namespace, settings: dict, model_spec: dict, objective: dict) -> TrainingRun:
    """Devices, data, model, optimizer and schedule, in the order that draws the same random numbers on every run:
    the global seed before the model is built (the same weights on every process), then a per-process seed for
    dropout. A rerun of the same job therefore starts from the same weights and masks."""
    from accelerate.utils import set_seed
    from transformers import AutoTokenizer, get_scheduler

    from workflow_lib.train import lora, objectives

    loss_fn = objectives.get(objective["loss"])
    loss_params = {k: v for k, v in objective.items() if k != "loss"}
    accelerator = make_accelerator(settings, args.output)
    n_proc = accelerator.num_processes
    set_seed(settings["seed"])  # the same on every process: a scratch model starts from the same weights everywhere
    tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    loader = make_loader(args.train, settings, accelerator, pad_id)
    validation = TrainingRows(args.validation, settings["max_length"]) if args.validation else None

    lm = build_model(args.model_key, model_spec, tokenizer, settings)
    check_context(lm, settings, [loader.dataset, *([validation] if validation else [])])
    if objective["loss"] == "emo":
        loss_params["cost_embedding"] = objectives.cost_embedding_of(lm).to(accelerator.device)
    adapted = lora.add_adapters(lm, settings, args.model_key) if settings.get("lora") else None  # lm frozen
    optimizer = make_optimizer(lm, settings, accelerator.device.type)
    steps_per_epoch = math.ceil(len(loader) / settings["gradient_accumulation_steps"])  # len: this process's shard
    total_steps = settings["epochs"] * steps_per_epoch
    # A prepared scheduler steps once per process at every optimizer step (as in run_clm_no_trainer), so it is sized
    # in process-steps: the linear schedule then reaches 0 at the last step whatever the number of processes.
    scheduler = get_scheduler(
        settings["lr_scheduler"],
        optimizer,
        num_warmup_steps=settings["warmup_steps"] * n_proc,
        num_training_steps=total_steps * n_proc,
    )
    embedding = loader.dataset.embedding  # an embedding-space perturbation, which the data names
    neftune = None
    if embedding is not None:
        from workflow_lib.perturb.embedding import activate

        activate(lm, embedding)  # NEFTune's hook on the input embeddings (none for embedding-noise)
        neftune = neftune_start(lm, embedding, loader.dataset)
    model, optimizer, scheduler = accelerator.prepare(TargetLogits(lm, embedding), optimizer, scheduler)
    set_seed(settings["seed"], device_specific=True)  # dropout: independent masks on each process
    return TrainingRun(
        args=args,
        settings=settings,
        model_spec=model_spec,
        objective=objective,
        accelerator=accelerator,
        tokenizer=tokenizer,
        pad_id=pad_id,
        loader=loader,
        validation=validation,
        lm=lm,
        model=model,
        optimizer=optimizer,
        scheduler=scheduler,
        loss_fn=loss_fn,
        loss_params=loss_params,
        steps_per_epoch=steps_per_epoch,
        total_steps=total_steps,
        resume=Path(args.resume_dir),
        mark=checkpoints.fingerprint(
            args, settings, model_spec, objective, n_proc, adapted and lora.described(adapted)
        ),
        adapters=adapted,
        neftune=neftune,
    )


def neftune_start(lm, embedding: dict, rows) -> dict | None:
    """NEFTune's noise against the embeddings before this job's first step, at the longest (padded) row."""
    if not get_strategy(embedding["strategy"]).hooked:
        return None
    from workflow_lib.perturb.embedding import neftune_scale

    offsets = rows.inputs.offsets
    length = min(rows.max_length, int((offsets[1:] - offsets[:-1]).max()))
    return neftune_scale(lm, embedding["neftune_alpha"], length)


def make_accelerator(settings: dict, output: str) -> Accelerator:
    """The Accelerator that owns devices, mixed precision, gradient accumulation and the trackers (main process only).
    cpu=True without CUDA: several processes (accelerate launch --multi_gpu) then form a gloo group instead of each
    training alone on all of the data."""
    from accelerate import Accelerator, PartialState

    from workflow_lib.train import tracking

    tracked = tracking.settings_from_env()
    on_main = PartialState(cpu=not torch.cuda.is_available()).is_main_process
    accelerator = Accelerator(
        cpu=not torch.cuda.is_available(),
        mixed_precision=resolve_precision(settings["mixed_precision"]),
        gradient_accumulation_steps=settings["gradient_accumulation_steps"],
        log_with=tracking.trackers(tracked["report_to"], tracked["dir"], tracking.run_name(output))
        if on_main and tracked["report_to"]
        else None,
    )
    n_proc = accelerator.num_processes
    if not accelerator.is_main_process:  # one copy of the progress messages in the log; errors from every process
        logging.getLogger("workflow_lib").setLevel(logging.WARNING)
    if n_proc > 1 and not torch.cuda.is_available() and accelerator.is_main_process:
        log.warning(
            "training.gpus = %d but there is no CUDA device: %d CPU processes (gloo) train data-parallel",
            settings["gpus"],
            n_proc,
        )
    return accelerator


def make_loader(path: str, settings: dict, accelerator: Accelerator, pad_id: int) -> Any:
    """The prepared DataLoader of the training rows, checked against the batch size first.

    Own generators: a DataLoader draws a base seed from the global RNG whenever it starts an epoch, which would shift
    the dropout masks of a resumed run. Prepared, process i takes batches i, i + N, ... of each epoch's permutation,
    so N processes at batch b see the rows one process sees at batch N x b."""
    data = TrainingRows(path, settings["max_length"])
    check_settings(settings, len(data), accelerator.num_processes)
    return accelerator.prepare(
        torch.utils.data.DataLoader(
            data,
            batch_size=settings["batch_size"],
            sampler=EpochShuffle(len(data), settings["seed"]),
            drop_last=True,
            collate_fn=lambda rows: collate(rows, pad_id),
            generator=torch.Generator(),
        )
    )


def make_optimizer(lm, settings: dict, device_type: str) -> torch.optim.Optimizer:
    """AdamW with weight decay on the weight matrices only (not biases or norms).

    The fused kernel (HF Trainer's default optimizer too) updates every tensor in one pass: on SmolLM2 on one CPU
    thread its step takes a quarter of the per-tensor loop's (0.16 s against 0.63 s, a sixth of a training step).
    Only on float32 master weights: on float16 ones the loop's eps underflows to the NaN that stops the run,
    naming load_dtype (diverged(); docs/usage.md, "Training"), where the fused kernel's float32 arithmetic goes on."""
    trained = [(n, p) for n, p in lm.named_parameters() if p.requires_grad]  # with LoRA: the adapters alone
    decay = [p for n, p in trained if not any(k in n for k in ("bias", "ln", "norm"))]
    no_decay = [p for n, p in trained if any(k in n for k in ("bias", "ln", "norm"))]
    fused = device_type in ("cpu", "cuda") and all(p.dtype == torch.float32 for _, p in trained)
    return torch.optim.AdamW(
        [{"params": decay, "weight_decay": settings["weight_decay"]}, {"params": no_decay, "weight_decay": 0.0}],
        lr=settings["learning_rate"],
        fused=fused,
    )


def resume_or_start(run: TrainingRun) -> RunState:
    """Continue exactly where the newest loadable checkpoint of this same run stopped (a killed or preempted job), or
    start at step 0. The main process chooses (checkpoints.choose: a damaged checkpoint falls back to the previous
    one, one made with other settings, data or processes is deleted), every process loads what it chose."""
    from accelerate.utils import broadcast_object_list

    accelerator = run.accelerator
    chosen = [checkpoints.choose(run.resume, run.mark) if accelerator.is_main_process else None]
    folder_and_saved = broadcast_object_list(chosen)[0]
    if folder_and_saved is None:
        return RunState()
    folder, saved = folder_and_saved
    accelerator.load_state(str(folder))
    log.info("resuming from step %d of %d (%s)", saved["step"], run.total_steps, folder)
    return RunState(
        step=saved["step"],
        best=saved["best"],
        log=saved["log"],
        checkpoint_step=saved["step"],
        tracker_runs=saved.get("tracker_runs", {}),
    )


def start_tracking(run: TrainingRun, state: RunState) -> None:
    """Open the trackers' runs (training.report_to), continuing those of the checkpoint resumed, and log what the
    steps will be."""
    from workflow_lib.train import tracking

    settings, accelerator = run.settings, run.accelerator
    if tracking.settings_from_env()["report_to"] and accelerator.is_main_process:
        tracking.resume(accelerator.log_with, state.tracker_runs)
        run_config = tracking.run_config(settings, run.model_spec, run.objective, tracking.run_name(run.args.output))
        accelerator.init_trackers(tracking.PROJECT, config=run_config)
        state.tracker_runs = tracking.run_ids(accelerator.trackers)
    log.info(
        "%d optimizer steps (%d per epoch): %d process(es) x batch %d x accumulation %d = global batch %d; "
        "mixed precision %s; master weights %s",
        run.total_steps,
        run.steps_per_epoch,
        accelerator.num_processes,
        settings["batch_size"],
        settings["gradient_accumulation_steps"],
        run.global_batch,
        accelerator.mixed_precision,
        next(run.lm.parameters()).dtype,
    )


def finish(run: TrainingRun, state: RunState) -> None:
    """Close the trackers, write the model and its logs from the main process, and delete the checkpoints."""
    accelerator = run.accelerator
    for tracker in accelerator.trackers:  # flush and close the runs (end_training would also end the process group)
        tracker.finish()
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        ran = {
            "processes": accelerator.num_processes,
            "distributed": str(accelerator.distributed_type).split(".")[-1],
            "device": accelerator.device.type,
            "mixed_precision": accelerator.mixed_precision,
            "master_weights": str(next(run.lm.parameters()).dtype).replace("torch.", ""),
            "global_batch": run.global_batch,
            "steps_per_epoch": run.steps_per_epoch,
        }
        if run.neftune is not None:  # its noise against the embeddings when the job started and at its end
            from workflow_lib.perturb.embedding import neftune_scale

            end = neftune_scale(run.lm, run.neftune["alpha"], run.neftune["length"])
            ran["neftune"] = {**run.neftune, "ratio_end": end["ratio"]}
        if getattr(run.loader.dataset, "realised", None) is not None:  # the report's "Perturbation realised"
            ran["realised"] = run.loader.dataset.realised
        write_outputs(run, state, ran)
        shutil.rmtree(run.resume, ignore_errors=True)
    accelerator.wait_for_everyone()


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
