"""What `make gpu-check` (bench/gpu_check.py) measures, section by section, and the shapes and sizes it measures them
at: each section takes a `Run` and a scratch folder and returns its cell of gpu_check.json."""

from __future__ import annotations

import argparse
import functools
import itertools
import math
import time
from pathlib import Path

SHAPES = {
    "gpt2-124m": ("gpt2", {"n_layer": 12, "n_head": 12, "n_embd": 768, "n_positions": 1024, "vocab_size": 50257}),
    "opt-125m": (
        "opt",
        {
            "num_hidden_layers": 12,
            "num_attention_heads": 12,
            "hidden_size": 768,
            "ffn_dim": 3072,
            "word_embed_proj_dim": 768,
            "max_position_embeddings": 2048,
            "vocab_size": 50272,
        },
    ),
    "gpt-neo-1.3b": (
        "gpt_neo",
        {
            "num_layers": 24,
            "num_heads": 16,
            "hidden_size": 2048,
            "max_position_embeddings": 2048,
            "window_size": 256,
            "attention_types": [[["global", "local"], 12]],
            "vocab_size": 50257,
        },
    ),
}
LARGE = ("gpt2", {"n_layer": 36, "n_head": 20, "n_embd": 1280, "n_positions": 1024, "vocab_size": 50257})
TINY = {
    "gpt2": {"n_layer": 2, "n_head": 2, "n_embd": 32, "n_positions": 128, "vocab_size": 512},
    "opt": {
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "hidden_size": 32,
        "ffn_dim": 64,
        "word_embed_proj_dim": 32,
        "max_position_embeddings": 128,
        "vocab_size": 512,
    },
    "gpt_neo": {
        "num_layers": 2,
        "num_heads": 2,
        "hidden_size": 32,
        "max_position_embeddings": 128,
        "window_size": 8,
        "attention_types": [[["global", "local"], 1]],
        "vocab_size": 512,
    },
}
BF16_LOSS_TOLERANCE = 0.01  # relative, first step of the same rows and weights
INTENSITY = 0.025


class Run:
    """The sizes of one check: the paper's on a GPU, tiny ones for the CPU mode."""

    def __init__(self, tiny: bool, device: str, out: Path, budget_s: float) -> None:
        self.tiny, self.device, self.out, self.deadline = tiny, device, out, time.monotonic() + budget_s
        self.block, self.train_batch, self.steps = (32, 4, 4) if tiny else (512, 8, 10)
        self.sample_batches, self.new_tokens = ((4, 8), 4) if tiny else ((64, 256), 32)
        self.texts = make_texts(64 if tiny else 512)

    def shapes(self) -> dict:
        return {name: (kind, TINY[kind] if self.tiny else arch) for name, (kind, arch) in SHAPES.items()}

    def sync(self) -> None:
        import torch

        if self.device == "cuda":
            torch.cuda.synchronize()

    def reset_memory(self) -> None:
        import torch

        if self.device == "cuda":
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()

    def peak_gb(self) -> float | None:
        import torch

        return torch.cuda.max_memory_allocated() / 1e9 if self.device == "cuda" else None


def make_texts(n: int) -> list[str]:
    """Word-salad texts of 40 words from a fixed list: random weights make any text as good as another."""
    import numpy as np

    rng = np.random.default_rng(0)
    words = [f"w{chr(97 + i % 26)}{chr(97 + i // 26 % 26)}" for i in range(400)]
    return [" ".join(rng.choice(words, 40)) for _ in range(n)]


def checkpoint(root: Path, kind: str, arch: dict, texts: list[str]) -> Path:
    """A random-weight model of `kind` and shape `arch` saved with a small byte-level tokenizer (the model's
    vocabulary may be larger: sampled ids are never decoded here)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from studies.families import make_tokenizer

    folder = root / f"{kind}-{arch.get('n_layer', arch.get('num_layers', arch.get('num_hidden_layers')))}"
    if folder.exists():
        return folder
    tokenizer = make_tokenizer("opt" if kind == "opt" else "gpt2", texts, 300)
    config = AutoConfig.for_model(
        kind, **arch, bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id
    )
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def parameters(folder: Path) -> int:
    from transformers import AutoConfig, AutoModelForCausalLM

    with __import__("torch").device("meta"):
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(folder))
    return sum(p.numel() for p in model.parameters())


def training_rows(run: Run, root: Path, vocab: int) -> Path:
    """steps x batch rows of random ids, as the perturb stage writes augment rows (no perturbation)."""
    import numpy as np

    from workflow_lib.files import write_parquet
    from workflow_lib.perturb.synonym_table import SynonymTable
    from workflow_lib.perturb.training_data import perturb_blocks

    path = root / f"rows-{vocab}.parquet"
    if not path.exists():
        rng = np.random.default_rng(0)
        blocks = rng.integers(0, min(vocab, 50000), (run.steps * run.train_batch, run.block))
        empty = SynonymTable.from_rows(vocab, [], [], [])
        write_parquet(perturb_blocks(blocks, "augment", "insertion", 0.0, empty, 1, 0, "k"), path)
    return path


def train_settings(run: Run, precision: str) -> dict:
    return {
        "learning_rate": 1e-4,
        "lr_scheduler": "constant",
        "warmup_steps": 0,
        "weight_decay": 0.0,
        "batch_size": run.train_batch,
        "gradient_accumulation_steps": 1,
        "epochs": 1,
        "max_length": run.block + 8,
        "max_grad_norm": 1.0,
        "mixed_precision": "bf16" if precision == "bf16" else "no",
        "gradient_checkpointing": False,
        "checkpoint_every": 10**9,
        "eval_every": 10**9,
        "log_every": 1,
        "select_best": False,
        "select_by": "nll",
        "validation": False,
        "gpus": 1 if run.device == "cuda" else 0,
        "seed": 0,
    }


def fresh_accelerate() -> None:
    """Forget accelerate's process-wide state, so that the next trainer may choose another mixed precision (as each
    train job, a process of its own, does)."""
    from accelerate.state import AcceleratorState

    AcceleratorState._reset_state(reset_partial_state=True)


def ours(run: Run, folder: Path, rows: Path, precision: str, work: Path) -> dict:
    """The workflow's trainer (as a train job runs it): its logged tokens/s (median after the first step), losses."""
    import csv
    import shutil
    import statistics

    from workflow_lib.train.trainer import train

    shutil.rmtree(work, ignore_errors=True)
    args = argparse.Namespace(
        train=str(rows),
        validation=None,
        tokenizer=str(folder),
        model_key="check",
        resume_dir=str(work / "resume"),
        output=str(work / "model"),
    )
    fresh_accelerate()
    run.reset_memory()
    train(args, train_settings(run, precision), {"source": "hf", "name": str(folder)}, {"loss": "mle"})
    with open(work / "model" / "train_log.csv") as handle:
        log = [r for r in csv.DictReader(handle) if r.get("tokens_per_s")]
    rates = [float(r["tokens_per_s"]) for r in log]
    return {
        "tokens_per_s": statistics.median(rates[1:] or rates),
        "losses": [float(r["loss"]) for r in log],
        "peak_gb": run.peak_gb(),
    }


def hf_trainer(run: Run, folder: Path, precision: str, work: Path) -> dict:
    """Hugging Face's `Trainer` on the same model, shapes and precision: tokens/s from its step-end times."""
    import statistics

    import torch
    from transformers import AutoModelForCausalLM, Trainer, TrainerCallback, TrainingArguments

    generator = torch.Generator().manual_seed(0)
    vocab = min(AutoModelForCausalLM.from_pretrained(folder).config.vocab_size, 50000)
    ids = torch.randint(0, vocab, (run.steps * run.train_batch, run.block), generator=generator)
    rows = [{"input_ids": row, "labels": row} for row in ids]
    times: list[float] = []

    class Clock(TrainerCallback):
        def on_step_end(self, *_, **__):
            run.sync()
            times.append(time.perf_counter())

    args = TrainingArguments(
        output_dir=str(work),
        per_device_train_batch_size=run.train_batch,
        max_steps=run.steps,
        learning_rate=1e-4,
        lr_scheduler_type="constant",
        logging_steps=10**6,
        save_strategy="no",
        report_to=[],
        seed=0,
        bf16=precision == "bf16",
        use_cpu=run.device != "cuda",
        disable_tqdm=True,
        dataloader_num_workers=0,
    )
    fresh_accelerate()
    run.reset_memory()
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    Trainer(model=model, args=args, train_dataset=rows, callbacks=[Clock()]).train()
    gaps = [b - a for a, b in itertools.pairwise(times[1:])] or [times[-1] - times[0]]
    return {"tokens_per_s": run.train_batch * (run.block - 1) / statistics.median(gaps), "peak_gb": run.peak_gb()}


def training(run: Run, root: Path, peaks: dict) -> dict:
    from workflow_lib.cost.training import ADAM_BYTES_PER_PARAM

    results = {}
    for name, (kind, arch) in run.shapes().items():
        folder = checkpoint(root, kind, arch, run.texts)
        params = parameters(folder)
        rows = training_rows(run, root, arch["vocab_size"])
        for precision in ("bf16", "fp32"):
            if time.monotonic() > run.deadline:
                results[f"{name} {precision}"] = {"skipped": "past --budget-s"}
                continue
            mine = ours(run, folder, rows, precision, root / "ours")
            theirs = hf_trainer(run, folder, precision, root / "hf")
            peak = peaks[precision] if run.device == "cuda" else peaks["fp32"]
            results[f"{name} {precision}"] = {
                "parameters": params,
                "tokens_per_s": round(mine["tokens_per_s"], 1),
                "hf_trainer_tokens_per_s": round(theirs["tokens_per_s"], 1),
                "vs_hf_trainer": round(mine["tokens_per_s"] / theirs["tokens_per_s"], 3),
                "mfu": round(6 * params * mine["tokens_per_s"] / peak, 3),
                "hf_trainer_mfu": round(6 * params * theirs["tokens_per_s"] / peak, 3),
                "peak_gb": mine["peak_gb"],
                "hf_trainer_peak_gb": theirs["peak_gb"],
                "predicted_gb": round(params * ADAM_BYTES_PER_PARAM / 1e9, 3),
                "first_loss": mine["losses"][0],
            }
    return results


def continuations(sampler, model, tokenizer, rows: list[str], table, new_tokens: int, intensity: float, mode: str):
    """The workflow's sampler on one batch of `rows`, insertion at `intensity` (as a sample job calls it)."""
    import numpy as np

    perturbation = {"strategy": "insertion", "intensity": intensity}
    ids = np.arange(len(rows))
    out = sampler.generate(
        model, tokenizer, rows, ids, 1, new_tokens, perturbation, table, seed=1, mode=mode, batch_size=len(rows)
    )
    return out["continuation_ids"]


def profile_ops(run: Run, name: str, call) -> None:
    """torch.profiler's top operators of one warm `call` (by self device time on a GPU, CPU time on a CPU),
    written to `name` under the check's --out, beside gpu_check.md."""
    from torch.profiler import ProfilerActivity, profile

    call()
    run.sync()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if run.device == "cuda" else [])
    with profile(activities=activities) as recorded:
        call()
        run.sync()
    key = "self_cuda_time_total" if run.device == "cuda" else "self_cpu_time_total"
    ops = recorded.key_averages()
    run.out.mkdir(parents=True, exist_ok=True)
    (run.out / name).write_text(
        ops.table(sort_by=key, row_limit=20, max_name_column_width=60)
        + "\n"
        + ops.table(sort_by="cpu_time_total", row_limit=20, max_name_column_width=60)
    )


def sampling(run: Run, root: Path) -> dict:
    """tokens/s and peak memory of the workflow's modes against HF `generate` (ancestral: do_sample, top_k 0), on
    GPT-2 124M's shape, 20-word prompts; cached insertion both ways (`loops.Cached.split_insertions`: the inserting
    rows in a pass of their own, the default, or one pass of two slots for every row), so that this run says
    which a GPU should take; the same seed's samples twice, to compare."""
    import numpy as np
    import torch
    from transformers import AutoTokenizer

    from workflow_lib.perturb.synonyms import distributional_synonyms
    from workflow_lib.sample import sampler
    from workflow_lib.sample.loops import Cached

    class Split(Cached):
        split_insertions = True

    class OnePass(Cached):
        split_insertions = False

    modes = {"intensity 0": (0.0, "exact"), "exact": (INTENSITY, "exact")}
    modes |= {"cached split": (INTENSITY, "check-split"), "cached one pass": (INTENSITY, "check-one-pass")}
    kind, arch = run.shapes()["gpt2-124m"]
    folder = checkpoint(root, kind, arch, run.texts)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    tokenizer.pad_token = tokenizer.pad_token or tokenizer.eos_token  # for HF generate's padded batch
    blocks = np.array([ids[:32] for ids in tokenizer(run.texts)["input_ids"] if len(ids) >= 32])
    table = distributional_synonyms(blocks, arch["vocab_size"], special_ids=tokenizer.all_special_ids, min_count=1)
    prompts = [" ".join(text.split()[:20]) for text in run.texts]
    results: dict = {"same_seed_same_tokens": True}
    results["prompt_tokens"] = float(np.mean([len(ids) for ids in tokenizer(prompts)["input_ids"]]))
    sampler.SAMPLERS.update({"check-split": Split, "check-one-pass": OnePass})
    try:
        for precision in ("fp32", "bf16"):
            model = sampler.load_model(str(folder), run.device, precision)
            for batch in run.sample_batches:
                if time.monotonic() > run.deadline:
                    results[f"{precision} batch {batch}"] = {"skipped": "past --budget-s"}
                    continue
                rows = (prompts * (batch // len(prompts) + 1))[:batch]

                cell = {}
                for name, (intensity, mode) in modes.items():
                    run.reset_memory()
                    start = time.perf_counter()
                    ids = continuations(sampler, model, tokenizer, rows, table, run.new_tokens, intensity, mode)
                    run.sync()
                    seconds = time.perf_counter() - start
                    cell[name] = {"tokens_per_s": round(batch * run.new_tokens / seconds, 1), "peak_gb": run.peak_gb()}
                    if name == "exact" and batch == run.sample_batches[0]:
                        results["same_seed_same_tokens"] &= bool(
                            np.array_equal(
                                ids,
                                continuations(sampler, model, tokenizer, rows, table, run.new_tokens, intensity, mode),
                            )
                        )
                tokenizer.padding_side = "left"
                encoded = tokenizer(rows, return_tensors="pt", padding=True).to(run.device)
                run.reset_memory()
                with torch.no_grad():
                    start = time.perf_counter()
                    model.generate(
                        **encoded, do_sample=True, top_k=0, top_p=1.0, temperature=1.0, max_new_tokens=run.new_tokens,
                        min_new_tokens=run.new_tokens, pad_token_id=tokenizer.pad_token_id,
                    )  # fmt: skip
                    run.sync()
                hf = batch * run.new_tokens / (time.perf_counter() - start)
                cell["hf generate"] = {"tokens_per_s": round(hf, 1), "peak_gb": run.peak_gb()}
                for name in modes:
                    cell[name]["vs_generate"] = round(cell[name]["tokens_per_s"] / hf, 3)
                results[f"{precision} batch {batch}"] = cell
            if time.monotonic() < run.deadline:  # where the time goes: bf16 ran slower than fp32 on an H200
                rows = (prompts * (run.sample_batches[0] // len(prompts) + 1))[: run.sample_batches[0]]
                call = functools.partial(
                    continuations, sampler, model, tokenizer, rows, table, run.new_tokens, 0.0, "exact"
                )
                profile_ops(run, f"sampling_profile_{precision}.txt", call)
            del model
    finally:
        for name in ("check-split", "check-one-pass"):
            sampler.SAMPLERS.pop(name)
    return results


def precision_error(run: Run, root: Path) -> dict:
    """bench/precision.py's TV between the float32 and bfloat16 next-token laws, on the GPU: the default study's tiny
    GPT-2 trained (300 steps; peaked laws move most) and GPT-2 124M's random shape."""
    from precision import law_tv, summary, train_tiny

    from workflow_lib.data.builtin_corpus import build_grammar

    grammar = build_grammar(seed=1234)
    texts = grammar.generate("train", n_docs=60 if run.tiny else 1500, sentences_per_doc=20, seed=1234)
    held_out = [" ".join(t.split()[:40]) for t in grammar.generate("test", n_docs=50, sentences_per_doc=4, seed=1234)]
    fresh_accelerate()
    trained = train_tiny(root / "tiny", texts, 3 if run.tiny else 300)
    kind, arch = run.shapes()["gpt2-124m"]
    return {
        "tiny-gpt2-trained": summary(law_tv(trained, held_out, device=run.device)),
        "gpt2-124m-random": summary(law_tv(checkpoint(root, kind, arch, run.texts), held_out, device=run.device)),
    }


def featurisation(run: Run, root: Path) -> dict:
    """texts/s of `features.featurize` (as a features job runs it, float32, batch 32, 256 tokens at most) with
    gpt2-large's shape and with GPT-2 124M's as an LM featuriser."""
    from workflow_lib.evaluate.features import featurize

    shapes = {"gpt2-large": ("gpt2", TINY["gpt2"] if run.tiny else LARGE[1]), "gpt2-124m": run.shapes()["gpt2-124m"]}
    texts = run.texts[: 64 if run.tiny else 512]
    results = {}
    for name, (kind, arch) in shapes.items():
        folder = checkpoint(root, kind, arch, run.texts)
        featurize(texts[:32], str(folder), device=run.device)  # warm-up: load, kernels
        run.reset_memory()
        start = time.perf_counter()
        features = featurize(texts, str(folder), device=run.device)
        run.sync()
        import numpy as np

        if not np.isfinite(features).all():
            raise FloatingPointError(f"{name}: non-finite features")
        from transformers import AutoTokenizer

        lengths = [
            len(ids)
            for ids in AutoTokenizer.from_pretrained(folder)(texts, truncation=True, max_length=256)["input_ids"]
        ]
        results[name] = {
            "texts_per_s": round(len(texts) / (time.perf_counter() - start), 1),
            "peak_gb": run.peak_gb(),
            "parameters": parameters(folder),
            "tokens_per_text": float(np.mean(lengths)),  # featurize's truncation
        }
    return results


def correctness(run: Run, root: Path) -> dict:
    """Two short trainings of GPT-2 124M's shape with deterministic algorithms: finite, equal losses; the bf16
    first-step loss within BF16_LOSS_TOLERANCE of fp32's."""
    import torch

    kind, arch = run.shapes()["gpt2-124m"]
    folder = checkpoint(root, kind, arch, run.texts)
    rows = training_rows(run, root, arch["vocab_size"])
    torch.use_deterministic_algorithms(True)
    try:
        first, second = (ours(run, folder, rows, "fp32", root / f"det{i}")["losses"] for i in range(2))
    finally:
        torch.use_deterministic_algorithms(False)
    bf16 = ours(run, folder, rows, "bf16", root / "bf16")["losses"]
    gap = abs(bf16[0] - first[0]) / abs(first[0])
    return {
        "losses_finite": all(math.isfinite(x) for x in first + second + bf16),
        "deterministic_losses_equal": first == second,
        "losses": first,
        "bf16_first_loss_relative_gap": round(gap, 5),
        "bf16_within_tolerance": gap <= BF16_LOSS_TOLERANCE,
    }
