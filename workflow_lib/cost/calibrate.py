"""Measure this machine (one CPU thread, as the study's CPU jobs run, or its GPU) for the cost model.

Each number replaces an assumption of `devices.Device` with a measurement of known size: forward and training
FLOP/s of a GPT-2-shaped model, the per-layer overhead of a one-token forward, the bytes/s of a cached decoding
step, the load speed of a saved checkpoint, MAUVE's k-means time per point per bucket, and each rule's fixed cost
(a fresh interpreter importing what the rule's job imports). The result is a device's overrides, saved as JSON
and used by `make estimate` for jobs that hold no GPU (`--cpu local`).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time

# What each rule's job does before its first FLOP: import its module and the libraries its main() imports lazily,
# then load a checkpoint and its tokenizer (a one-layer model saved in `{folder}`), as the job loads its own.
_CAUSAL = (
    "from transformers import AutoModelForCausalLM, AutoTokenizer; import pyarrow.parquet; "
    "AutoTokenizer.from_pretrained({folder!r}); AutoModelForCausalLM.from_pretrained({folder!r})"
)
_ENCODER = (
    "from transformers import AutoModel, AutoTokenizer; import pyarrow.parquet; "
    "AutoTokenizer.from_pretrained({folder!r}); AutoModel.from_pretrained({folder!r})"
)
RULE_IMPORTS = {
    "train": "import workflow_lib.train.trainer, accelerate; accelerate.Accelerator(cpu=True); " + _CAUSAL,
    "sample": "import workflow_lib.sample.sampler; " + _CAUSAL,
    "sample_features": "import workflow_lib.evaluate.features, polars; " + _ENCODER,
    "evaluate": "import workflow_lib.evaluate.metrics, mauve, polars, pyarrow.parquet",
    "perplexity": "import workflow_lib.evaluate.perplexity; " + _CAUSAL,
    "features": "import workflow_lib.evaluate.features; " + _ENCODER,
    "extrapolation": "import workflow_lib.evaluate.extrapolation, workflow_lib.sample.sampler; " + _CAUSAL,
}
MAX_SHAPE_PARAMS = 50e6  # the study's own models are timed up to this size (a CPU step of more takes seconds)


def best_of(fn, repeats: int = 3) -> float:
    fn()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def import_seconds(statement: str, repeats: int = 2) -> float:
    """Wall time of a fresh interpreter running `statement` (the best of `repeats`)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", statement], check=True, env=env, capture_output=True)
        times.append(time.perf_counter() - start)
    return min(times)


def calibrate(
    name: str = "local",
    log=print,
    rules: tuple[str, ...] = tuple(RULE_IMPORTS),
    config: dict | None = None,
    workdir=None,
) -> dict:
    """This machine's device overrides: {name, source, peak_fp32, mfu_forward, mfu_train, ...}. With a config, the
    training step and forward pass of each of its models up to MAX_SHAPE_PARAMS are timed too, at the study's batch
    and lengths (`shape_rates`): small models reach a fraction of a large one's FLOP/s, which one size cannot show."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    from workflow_lib.cost.shapes import from_config
    from workflow_lib.evaluate.metrics import mauve_score

    cuda = torch.cuda.is_available()
    device = "cuda" if cuda else "cpu"
    if not cuda:
        torch.set_num_threads(1)  # the study's CPU jobs run one thread each (OMP_NUM_THREADS=1)

    def sync():
        if cuda:
            torch.cuda.synchronize()

    def gpt2(**arch):
        torch.manual_seed(0)
        return GPT2LMHeadModel(GPT2Config(**arch, bos_token_id=0, eos_token_id=0, loss_type="ForCausalLM")).to(device)

    arch = {"n_layer": 4, "n_head": 4, "n_embd": 256, "n_positions": 128, "vocab_size": 4096}
    shape = from_config(arch)
    batch, length = 8, 128
    ids = torch.randint(0, arch["vocab_size"], (batch, length), device=device)
    model = gpt2(**arch)

    def forward_pass():
        with torch.no_grad():
            model(input_ids=ids)
        sync()

    flops_forward = batch * length * (2 * shape.matmul_params + 4 * shape.n_layer * shape.d_model * length)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)  # as the trainer's (float32 weights)

    def step():
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        sync()

    # Interleaved, the best of each: MFU is their ratio, so a busy spell of the machine (another job on a core)
    # must not fall on one of the two only (measured 2.08 once, with mypy beside the suite, from 3 forwards first).
    forward = train = float("inf")
    for _ in range(5):
        forward, train = min(forward, best_of(forward_pass, 1)), min(train, best_of(step, 1))
    flops_train = batch * length * (6 * shape.matmul_params + 12 * shape.n_layer * shape.d_model * length)
    log(f"forward {flops_forward / forward / 1e9:.1f} GFLOP/s, training {flops_train / train / 1e9:.1f} GFLOP/s")

    small = gpt2(n_layer=8, n_head=2, n_embd=32, n_positions=64, vocab_size=256)
    one = torch.zeros((1, 1), dtype=torch.long, device=device)
    with torch.no_grad():
        layer = best_of(lambda: (small(input_ids=one), sync()), 20) / 8
    wide_arch = {"n_layer": 4, "n_head": 8, "n_embd": 768, "n_positions": 64, "vocab_size": 16384}
    wide = gpt2(**wide_arch)
    with torch.no_grad():
        decode = best_of(lambda: (wide(input_ids=one), sync()), 5) - 4 * layer  # the reads, less the dispatch
    decode_bytes = from_config(wide_arch).params * 4
    log(f"{layer * 1e3:.3f} ms per layer per call; a one-token step reads {decode_bytes / decode / 1e9:.1f} GB/s")

    with tempfile.TemporaryDirectory() as folder:
        wide.save_pretrained(folder)
        load = best_of(lambda: GPT2LMHeadModel.from_pretrained(folder), 2)
    log(f"checkpoint load {decode_bytes / load / 1e9:.2f} GB/s")

    import numpy as np

    rng = np.random.default_rng(0)
    n, buckets = 400, 40
    p, q = rng.normal(size=(n, 384)).astype(np.float32), rng.normal(0.3, 1, size=(n, 384)).astype(np.float32)
    settings = {
        "num_buckets": buckets,
        "kmeans_num_redo": 5,
        "kmeans_max_iter": 500,
        "discretization": 25,
        "scaling": 5,
    }
    mauve = best_of(lambda: mauve_score(p, q, settings, 1), 1) / (2 * n * buckets * 5)
    log(f"MAUVE {mauve * 1e6:.2f} us per point per bucket per clustering")

    from workflow_lib.data.tokenization import train_bpe

    with tempfile.TemporaryDirectory() as folder:
        tokenizer = train_bpe(["a tiny corpus for a tiny tokenizer"] * 10, 260)
        gpt2(n_layer=1, n_head=1, n_embd=8, n_positions=64, vocab_size=len(tokenizer)).save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        fixed = {rule: round(import_seconds(RULE_IMPORTS[rule].format(folder=folder)), 2) for rule in rules}
    log("fixed cost per job (imports): " + ", ".join(f"{r} {s:.2f} s" for r, s in fixed.items()))
    shape_rates = study_shape_rates(config, workdir, gpt2, sync, log) if config else {}
    memory = (
        torch.cuda.get_device_properties(0).total_memory
        if cuda
        else os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    ) / 1e9
    return {
        "name": name,
        "source": f"calibrated on this machine ({torch.cuda.get_device_name(0) if cuda else 'one CPU thread'})",
        "peak_half": 0.0,
        "peak_fp32": flops_forward / forward,
        "mfu_forward": 1.0,
        "mfu_train": round(forward / flops_forward * flops_train / train, 3),
        "memory_gb": round(memory, 1),
        "bandwidth": decode_bytes / decode,
        "bandwidth_use": 1.0,
        "layer_overhead_s": layer,
        "load_bytes_per_s": decode_bytes / load,
        "mauve_s": mauve,
        "fixed_s": fixed,
        "has_bf16": False,
        "shape_rates": shape_rates,
    }


def study_shape_rates(config: dict, workdir, gpt2, sync, log) -> dict:
    """{shape key: {"train": FLOP/s, "forward": FLOP/s}} of the config's models up to MAX_SHAPE_PARAMS."""
    from workflow_lib.cost.shapes import model_shape

    rates = {}
    for key in config["models"]:
        shape = model_shape(config, key, workdir)
        if shape is None or shape.params > MAX_SHAPE_PARAMS or shape.key in rates:
            continue
        rates[shape.key] = shape_rates(shape, config, gpt2, sync)
        log(
            f"models.{key} ({shape.key}): training {rates[shape.key]['train'] / 1e9:.1f} GFLOP/s, forward "
            f"{rates[shape.key]['forward'] / 1e9:.1f} GFLOP/s"
        )
    return rates


def shape_rates(shape, config: dict, gpt2, sync) -> dict:
    """A GPT-2 of the shape (dropout as GPT-2's): a training step of training.batch_size rows of
    tokenize.block_size tokens, and a forward pass of sampling.batch_size rows (at most 256) of 32 tokens."""
    import torch

    # A gated MLP's three matrices as a GPT-2 MLP of the same FLOPs (its inner width 1.5x).
    model = gpt2(
        n_layer=shape.n_layer,
        n_head=max(1, shape.d_model // 64),
        n_embd=shape.d_model,
        n_inner=shape.d_ffn * 3 // 2 if shape.gated else shape.d_ffn,
        n_positions=max(shape.context, 256),
        vocab_size=shape.vocab,
    )
    batch, length = config["training"]["batch_size"], config["tokenize"]["block_size"]
    ids = torch.randint(0, shape.vocab, (batch, length), device=model.device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)  # as the trainer's (float32 weights)

    def step():
        model(input_ids=ids, labels=ids).loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        sync()

    train = best_of(step)
    rows = min(config["sampling"]["batch_size"], 256)
    prompt = torch.randint(0, shape.vocab, (rows, 32), device=model.device)
    model.eval()
    with torch.no_grad():
        forward = best_of(lambda: (model(input_ids=prompt), sync()))
    return {
        "train": batch * length * (6 * shape.matmul_params + 12 * shape.n_layer * shape.d_model * length) / train,
        "forward": rows * 32 * (2 * shape.matmul_params + 4 * shape.n_layer * shape.d_model * 32) / forward,
    }
