"""`make gpu-check`: prove and measure the workflow's CUDA path on one GPU in a few minutes, before a study relies on it.

On a CUDA machine with this repository and the packages the jobs import (torch, transformers, accelerate, numpy,
scipy, pyarrow, pyyaml, tqdm: no Snakemake, polars or network needed), it measures, on random-weight models of the
paper's shapes, and writes `gpu_check.json` and `gpu_check.md` under --out:
- peaks: this card's bf16 and fp32 `torch.mm` FLOP/s, measured in the same run (the denominators of every MFU);
- training: the workflow's trainer against Hugging Face's `Trainer` (GPT-2 124M, OPT-125M, GPT-Neo-1.3B; bf16
  autocast and fp32): tokens/s, MFU (6 x parameters x tokens/s over the measured peak), peak memory against the cost
  model's prediction (weights, gradients and AdamW states: 16 bytes a parameter, activations left out);
- sampling: intensity 0, `cached` insertion (0.025; the inserting rows in a pass of their own, and one pass of two
  slots for every row: which a GPU should use) and `exact` against HF `generate` at batch 64 and 256, fp32 and
  bf16 (GPT-2 124M): tokens/s and peak memory; the bf16 law error of bench/precision.py, on the GPU;
- featurisation: texts/s of gpt2-large's shape and of an LM featuriser of GPT-2 124M's;
- the cost model: the device's datasheet assumptions (MFU, bandwidth use) beside what this run measured, and each
  measured rule's predicted/measured time;
- correctness: two short trainings' losses finite and equal (deterministic algorithms on), the same seed's samples
  the same tokens, the bf16 loss within 1% of the fp32 one.
A section that raises is recorded as FAILED with its error, the others still run, and the exit status is 1. The
default study end to end is not run: the wheels of polars' runtime and of faiss (mauve-text's k-means) alone are
69 MiB, past the device tool's 64 MiB carry limit, before Snakemake's (docs/benchmarks.md, "The GPU check"). --tiny runs
every section on tiny shapes (the test suite runs it on the CPU, so the script cannot rot); on a CPU without --tiny
it refuses, as the shapes above take hours there.

    python bench/gpu_check.py --out DIR [--tiny] [--budget-s 420]

The whole check is DEVICE_COMMAND on a machine lent for a few minutes (this repository is all that travels).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path

# One call of the device tool: python3 there holds torch, transformers, accelerate, numpy, scipy, pyarrow, pyyaml.
DEVICE_COMMAND = (
    "nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv; "
    "HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1 python3 bench/gpu_check.py --out $OUT --budget-s 420"
)
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # deterministic cuBLAS, set before CUDA starts
sys.path.insert(0, str(Path(__file__).resolve().parent))
import shared  # noqa: F401  (the repository and its test support on sys.path)
from gpu_measures import (
    LARGE,
    TINY,
    Run,
    correctness,
    featurisation,
    precision_error,
    sampling,
    training,
)


# The paper's shapes (their hub configs' structure), random weights; --tiny keeps each family at 2 layers.
def matmul_peaks(run: Run) -> dict:
    """bf16 and fp32 `torch.mm` FLOP/s (best of 5 after a warm-up; TF32 off, as torch leaves it)."""
    import torch

    size = 256 if run.tiny else 8192
    peaks = {}
    for name, dtype in (("bf16", torch.bfloat16), ("fp32", torch.float32)):
        a = torch.randn(size, size, device=run.device, dtype=dtype)
        b = torch.randn(size, size, device=run.device, dtype=dtype)
        torch.mm(a, b)
        run.sync()
        best = math.inf
        for _ in range(5):
            start = time.perf_counter()
            torch.mm(a, b)
            run.sync()
            best = min(best, time.perf_counter() - start)
        peaks[name] = 2 * size**3 / best
    return peaks


def datasheet(run: Run):
    """The cost model's device for this card (workflow_lib/cost/devices.py), by its name; `cpu` in the CPU mode."""
    import torch

    from workflow_lib.cost.devices import DEVICES

    if run.device != "cuda":
        return DEVICES["cpu"]
    name = torch.cuda.get_device_name(0).lower()
    for key in ("h200", "h100", "a100-80gb", "l40s", "v100"):
        if key.split("-")[0] in name:
            return DEVICES[key]
    return None


def shape_of(kind: str, arch: dict):
    """The cost model's Shape of a family's architecture (no weights needed: the config alone)."""
    from transformers import AutoConfig

    from workflow_lib.cost.shapes import from_config

    return from_config(AutoConfig.for_model(kind, **arch).to_dict())


def predicted_over_measured(dev, run: Run, results: dict) -> dict:
    """The cost model's predicted time over the measured one, for each measured training (a step of `train_batch`
    rows of `block` tokens: compute plus `cost/jobs.py`'s three forward-equivalents of per-layer overhead), sampling
    batch (intensity 0 and cached one pass, `cost/jobs.py`'s decoding step) and featurisation. Pure: a recorded
    gpu_check.json and a device entry are enough (tests/bench/test_h200_calibration.py)."""
    from workflow_lib.cost.jobs import decode_step, forward_flops

    ratios: dict = {}
    for name, (kind, arch) in run.shapes().items():
        shape = shape_of(kind, arch)
        for precision in ("bf16", "fp32"):
            cell = results.get("training", {}).get(f"{name} {precision}", {})
            if "tokens_per_s" in cell:
                per_token = 6 * shape.matmul_params + 12 * shape.n_layer * shape.d_model * run.block
                step_tokens = run.train_batch * run.block
                seconds = step_tokens * per_token / dev.rate("train", precision if dev.has_bf16 else "fp32")
                seconds += 3 * shape.n_layer * dev.layer_overhead_s
                ratios[f"train {name} {precision}"] = round(seconds * cell["tokens_per_s"] / step_tokens, 3)
    shape = shape_of(*run.shapes()["gpt2-124m"])
    prefix = results.get("sampling", {}).get("prompt_tokens", 0.0)  # the prompts' mean tokens, as measured
    for key, cell in results.get("sampling", {}).items():
        if not isinstance(cell, dict) or "cached one pass" not in cell:
            continue
        precision, batch = key.split()[0], int(key.split()[-1])
        for mode, fed in (("intensity 0", 1), ("cached one pass", 2)):  # the cost model's GPU form of cached
            seconds = forward_flops(shape, batch * prefix, prefix) / dev.rate("forward", precision) + sum(
                decode_step(dev, shape, batch, prefix + step, precision, fed) for step in range(1, run.new_tokens)
            )
            seconds += shape.n_layer * dev.layer_overhead_s  # the prompt's forward call
            measured = batch * run.new_tokens / cell[mode]["tokens_per_s"]
            ratios[f"sample {mode} {key}"] = round(seconds / measured, 3)
    for name, cell in results.get("featurisation", {}).items():
        kind, arch = ("gpt2", TINY["gpt2"] if run.tiny else LARGE[1]) if name == "gpt2-large" else run.shapes()[name]
        fshape = shape_of(kind, arch)
        tokens = cell["tokens_per_text"]
        seconds = (
            forward_flops(fshape, tokens, tokens) / dev.rate("forward", "fp32")
            + fshape.n_layer * dev.layer_overhead_s / 32
        )
        ratios[f"features {name}"] = round(seconds / (1 / cell["texts_per_s"]), 3)
    return ratios


def cost_model(run: Run, results: dict) -> dict:
    """The datasheet's assumptions beside this run's measurements, and the predicted/measured time of each measured
    training, sampling batch and featurisation (`predicted_over_measured`)."""
    dev = datasheet(run)
    if dev is None:
        return {"skipped": "no datasheet for this card in workflow_lib/cost/devices.py"}
    out: dict = {
        "device": dev.name,
        "assumed": {
            "mfu_train": dev.mfu_train,
            "mfu_forward": dev.mfu_forward,
            "bandwidth_use": dev.bandwidth_use,
            "layer_overhead_s": dev.layer_overhead_s,
        },
    }
    out["measured_peaks_vs_datasheet"] = {
        "bf16": round(results["peaks"]["bf16"] / dev.peak_half, 3) if dev.peak_half else None,
        "fp32": round(results["peaks"]["fp32"] / dev.peak_fp32, 3),
    }
    out["predicted_over_measured_time"] = predicted_over_measured(dev, run, results)
    shape = shape_of(*run.shapes()["gpt2-124m"])
    # The assumptions as this run measured them: MFU against the datasheet's peak, as the cost model uses them.
    measured: dict = {}
    precision = "bf16" if run.device == "cuda" and dev.has_bf16 else "fp32"
    train = results.get("training", {}).get(f"gpt2-124m {precision}", {})
    if "tokens_per_s" in train:
        measured["mfu_train (gpt2-124m)"] = round(
            6 * train["parameters"] * train["tokens_per_s"] / dev.peak(precision), 3
        )
    large = results.get("featurisation", {}).get("gpt2-large", {})
    if "texts_per_s" in large:
        flops = 2 * large["parameters"] * large["tokens_per_text"] * large["texts_per_s"]
        measured["mfu_forward (gpt2-large features)"] = round(flops / dev.peak_fp32, 3)
    decode = results.get("sampling", {}).get(f"fp32 batch {run.sample_batches[0]}", {}).get("intensity 0", {})
    if "tokens_per_s" in decode:
        step_s = run.sample_batches[0] / decode["tokens_per_s"]
        measured["bandwidth_use (fp32 decoding, weights read a step)"] = round(
            shape.params * 4 / step_s / dev.bandwidth, 3
        )
    out["measured"] = measured
    return out


SECTIONS = ("training", "sampling", "precision", "featurisation", "correctness")


def cell_text(value) -> str:
    """A table cell: numbers to 4 significant digits, a mode's measurements as `tokens/s (x vs generate, GB)`."""
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, dict) and "tokens_per_s" in value:
        parts = [f"x{value['vs_generate']}" if "vs_generate" in value else ""]
        parts += [f"{value['peak_gb']:.2f} GB" if value.get("peak_gb") is not None else ""]
        extra = ", ".join(part for part in parts if part)
        return f"{value['tokens_per_s']:.4g}" + (f" ({extra})" if extra else "")
    if isinstance(value, list):
        return ", ".join(cell_text(v) for v in value[:4]) + (", ..." if len(value) > 4 else "")
    return str(value)


def markdown(results: dict) -> str:
    """gpu_check.json as a page: a section's plain values as a list, its measured cells as one table (a row a cell,
    a column a measurement)."""
    env = results["environment"]
    peaks = results["peaks"]
    lines = [f"# GPU check: {env['device_name']}", "", ", ".join(f"{k} {v}" for k, v in env.items()), ""]
    lines += [
        f"matmul peaks (torch.mm): bf16 {peaks['bf16'] / 1e12:.3g} TFLOP/s, fp32 {peaks['fp32'] / 1e12:.3g} TFLOP/s"
    ]
    lines += [f"failed: {', '.join(results['failed']) or 'nothing'}; {results['seconds']} s", ""]
    for section in (*SECTIONS, "cost_model"):
        value = results.get(section, {})
        lines += [f"## {section}", ""]
        if "FAILED" in value:
            lines += ["FAILED: " + value["FAILED"], "", "```", value["traceback"], "```", ""]
            continue
        lines += [f"- {k}: {cell_text(v)}" for k, v in value.items() if not isinstance(v, dict)]
        cells = {k: v for k, v in value.items() if isinstance(v, dict)}
        if section == "cost_model":  # cells of different keys: one two-column table each
            for name, cell in cells.items():
                lines += ["", f"{name}:", "", "| | |", "|---|---|"]
                lines += [f"| {key} | {cell_text(v)} |" for key, v in cell.items()]
            lines.append("")
            continue
        columns = list(dict.fromkeys(column for cell in cells.values() for column in cell))
        if cells:
            lines += ["", "| | " + " | ".join(columns) + " |", "|---" * (len(columns) + 1) + "|"]
            lines += [
                "| " + " | ".join([name, *(cell_text(cell.get(c, "")) for c in columns)]) + " |"
                for name, cell in cells.items()
            ]
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    import torch
    import transformers

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--tiny", action="store_true", help="tiny shapes (the CPU mode the test suite runs)")
    parser.add_argument("--budget-s", type=float, default=420.0, help="sections past it are skipped, and say so")
    args = parser.parse_args(argv)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cpu" and not args.tiny:
        parser.error("no CUDA device: the paper's shapes take hours on a CPU; --tiny checks the script itself")
    if device == "cpu":
        torch.set_num_threads(1)
    args.out.mkdir(parents=True, exist_ok=True)
    run = Run(args.tiny, device, args.out, args.budget_s)
    start = time.monotonic()
    results: dict = {
        "environment": {
            "device_name": torch.cuda.get_device_name(0) if device == "cuda" else "CPU (one thread)",
            "torch": torch.__version__,
            "cuda": torch.version.cuda,
            "transformers": transformers.__version__,
            "python": sys.version.split()[0],
            "tiny": args.tiny,
        },
        "peaks": matmul_peaks(run),
    }
    failed = []
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        steps = {
            "training": lambda: training(run, root, results["peaks"]),
            "sampling": lambda: sampling(run, root),
            "precision": lambda: precision_error(run, root),
            "featurisation": lambda: featurisation(run, root),
            "correctness": lambda: correctness(run, root),
            "cost_model": lambda: cost_model(run, results),
        }
        for name, step in steps.items():
            began = time.monotonic()
            try:
                results[name] = step()
            except Exception as error:  # noqa: BLE001  (recorded as FAILED; the other sections still run)
                failed.append(name)
                results[name] = {
                    "FAILED": f"{type(error).__name__}: {error}",
                    "traceback": traceback.format_exc(limit=6),
                }
            print(
                f"gpu-check: {name} in {time.monotonic() - began:.1f} s{' FAILED' if name in failed else ''}",
                flush=True,
            )
    checks = results.get("correctness", {})
    for key in ("losses_finite", "deterministic_losses_equal", "bf16_within_tolerance"):
        if checks.get(key) is False:
            failed.append(f"correctness: {key}")
    if results.get("sampling", {}).get("same_seed_same_tokens") is False:
        failed.append("sampling: same_seed_same_tokens")
    results["failed"] = failed
    results["seconds"] = round(time.monotonic() - start, 1)
    (args.out / "gpu_check.json").write_text(json.dumps(results, indent=1, default=str))
    (args.out / "gpu_check.md").write_text(markdown(results))
    print(
        f"gpu-check: {results['seconds']} s; {'FAILED: ' + ', '.join(failed) if failed else 'every check passed'}; {args.out}/gpu_check.md"
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
