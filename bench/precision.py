"""How far `sampling.precision: bf16` moves the next-token law from the float32 law that fp32 sampling draws from.

Models: the default study's tiny GPT-2 trained for `--steps` steps on the builtin corpus (a trained model has the
peaked laws that bf16 rounding moves most), and the tiny random checkpoints of every family the tests use
(studies/families.py: GPT-2, OPT, GPT-Neo, Llama, GPT-NeoX, saved as their hub originals). For each model, the
law at every position of 200 held-out texts, computed with the weights in float32 (as `load_model(...,
"fp32")`) and in bfloat16 (as `load_model(..., "bf16")`); TV = 0.5 sum |p32 - p16|. Last line:
`precision: {json}`.

    python bench/precision.py [--steps 300] [--texts 200] [--model gpt2 ...]
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import numpy as np
from shared import TINY


def law_tv(folder: Path | str, texts: list[str], max_length: int = 64, device: str = "cpu") -> np.ndarray:
    """TV between the float32 and bfloat16 next-token laws at every real position of `texts`, computed on `device`
    (bench/gpu_check.py runs it on the GPU)."""
    import torch
    from transformers import AutoTokenizer

    from workflow_lib.sample.sampler import load_model

    tokenizer = AutoTokenizer.from_pretrained(folder)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    batch = tokenizer(texts, return_tensors="pt", padding=True, truncation=True, max_length=max_length).to(device)
    laws = []
    for precision in ("fp32", "bf16"):
        model = load_model(str(folder), device, precision)
        with torch.no_grad():
            laws.append(torch.softmax(model(**batch).logits.double(), dim=-1))
    tv = 0.5 * (laws[0] - laws[1]).abs().sum(-1)
    return tv[batch["attention_mask"].bool()].cpu().numpy()


def train_tiny(root: Path, texts: list[str], steps: int) -> Path:
    import argparse as ap

    from workflow_lib.data.tokenization import group_blocks, token_ids, train_bpe
    from workflow_lib.files import write_parquet
    from workflow_lib.perturb.synonym_table import SynonymTable
    from workflow_lib.perturb.training_data import perturb_blocks
    from workflow_lib.train.trainer import train

    tokenizer = train_bpe(texts, 512)
    tokenizer.save_pretrained(root / "tok")
    blocks = group_blocks(token_ids(tokenizer, texts)[0], 128)[: steps * 16]  # augment: D plus one copy
    empty = SynonymTable.from_rows(len(tokenizer), [], [], [])
    write_parquet(perturb_blocks(blocks, "augment", "insertion", 0.0, empty, 1, 0, "k"), root / "train.parquet")
    settings = {
        "learning_rate": 2e-3,
        "lr_scheduler": "linear",
        "warmup_steps": 20,
        "weight_decay": 0.0,
        "batch_size": 32,
        "gradient_accumulation_steps": 1,
        "epochs": 1,
        "max_length": 144,
        "max_grad_norm": 1.0,
        "mixed_precision": "no",
        "gradient_checkpointing": False,
        "checkpoint_every": 10**9,
        "eval_every": 10**9,
        "log_every": 50,
        "select_best": False,
        "select_by": "nll",
        "validation": False,
        "gpus": 0,
        "seed": 0,
    }
    args = ap.Namespace(
        train=str(root / "train.parquet"),
        validation=None,
        tokenizer=str(root / "tok"),
        model_key="tiny",
        resume_dir=str(root / "resume"),
        output=str(root / "trained"),
    )
    train(
        args,
        settings,
        {"source": "scratch", "architecture": TINY},
        {"loss": "mle"},
    )
    return root / "trained"


def summary(tv: np.ndarray) -> dict:
    return {
        "positions": int(tv.size),
        "mean": float(tv.mean()),
        "median": float(np.median(tv)),
        "p99": float(np.quantile(tv, 0.99)),
        "max": float(tv.max()),
    }


def main() -> None:
    import torch

    from studies.families import FAMILIES, make_checkpoint
    from workflow_lib.data.builtin_corpus import build_grammar

    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--texts", type=int, default=200)
    parser.add_argument("--model", action="append", default=[], help="also a hub id or local folder (e.g. gpt2)")
    opts = parser.parse_args()
    torch.set_num_threads(2)
    grammar = build_grammar(seed=1234)
    train_texts = grammar.generate("train", n_docs=1500, sentences_per_doc=20, seed=1234)
    held_out = [
        " ".join(t.split()[:40]) for t in grammar.generate("test", n_docs=opts.texts, sentences_per_doc=4, seed=1234)
    ]
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        results["tiny-gpt2-trained"] = summary(law_tv(train_tiny(root, train_texts, opts.steps), held_out))
        for family in FAMILIES:
            results[f"{family}-random"] = summary(
                law_tv(make_checkpoint(root / "hub", family, train_texts[:400]), held_out)
            )
        for name in opts.model:
            results[name] = summary(law_tv(name, held_out))
    for name, r in results.items():
        print(
            f"{name:>20}: TV mean {r['mean']:.4f}, median {r['median']:.4f}, p99 {r['p99']:.4f}, max {r['max']:.4f} "
            f"over {r['positions']} positions"
        )
    print("precision: " + json.dumps(results))


if __name__ == "__main__":
    main()
