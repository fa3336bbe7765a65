"""Benchmark of perturbed sampling and MAUVE scoring.

The default study's tiny GPT-2 architecture (or GPT-2 small with --model gpt2) on builtin-corpus prompts
(20 words), one batch, 80 new tokens: unperturbed Hugging Face `generate` with its key/value cache against
our `exact` (Algorithm 2: a fresh perturbation every step, the unperturbed key/value cache reused up to each
row's first edit, `reuse.py`), `exact_full` (the same draws, every step's whole perturbed batch recomputed:
`loops.Recompute`, as `exact` ran before issue 35) and `cached` modes at insertion intensity 0.025, and against
intensity-0 sampling (`loops.Ancestral`, both modes: a key/value cache, as `generate`), same prompts, same
batch. `exact_fed`: the token positions (padding included) each `exact` loop feeds the model and the share of rows
and tokens the two draw alike (untimed). `intensity0_as_uncached` is the share of intensity-0 rows (and
tokens) equal to those of exact mode's uncached loop (`cache_fits` switched off, untimed): the two logits differ by
float32 rounding, so a uniform that close to a CDF bound may draw another token of the same law, and the row goes
on from another prefix. `intensity0_near_bound` is the share of row-steps (and of batch steps with any such row)
whose uniform lies within 4e-6 (normalised) of a CDF bound of its token: the draws a cache may change, which the
former checked cache recomputed without it. Then MAUVE on 1000 texts: MiniLM features and the MAUVE computation,
per 1000 texts. Last line: `sample: {json}`.

    python bench/sample.py [--batch 100] [--device cpu|cuda] [--model tiny|gpt2] [--precision fp32|bf16]
    OMP_NUM_THREADS=1 python bench/sample.py --batch 150   # a default-study sample job (one thread, one batch)
    python bench/sample.py --near-bound --vocab 50257      # only the near-bound share, GPT-2's vocabulary size
    python bench/sample.py --near-bound --vocab 50257 --init-std 0.5   # ... with sharper (random) laws
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
from shared import GPT2_SMALL, TINY

NEAR_BOUND = 4e-6  # the former checked cache's CDF tolerance


def near_bound_margins(logits, u, decoder=None):
    """Per row: how far `draw`'s uniform lies from the CDF bounds of the token it selects, normalised."""
    import torch

    from workflow_lib.sample.decoding import decoded_probs

    cdf = decoded_probs(logits, decoder).cumsum(-1)
    target = u * cdf[:, -1]
    token = torch.searchsorted(cdf, target[:, None], right=True).clamp(max=cdf.shape[-1] - 1)
    upper = cdf.gather(1, token)[:, 0]
    lower = torch.where(token[:, 0] > 0, cdf.gather(1, (token - 1).clamp(min=0))[:, 0], 0.0)
    return torch.minimum(target - lower, upper - target) / cdf[:, -1]


def near_bound_share(sample) -> dict:
    """Runs `sample()` (intensity 0) with every draw's margin recorded: the share of row-steps within NEAR_BOUND
    of a bound, and of steps where some row is (a step the former checked cache recomputed)."""
    from workflow_lib.sample import steps

    margins, draw = [], steps.draw

    def recording(logits, u, decoder=None):
        margins.append(near_bound_margins(logits, u, decoder))
        return draw(logits, u, decoder=decoder)

    steps.draw = recording  # the draw of every mode's loop
    try:
        sample()
    finally:
        steps.draw = draw
    near = [(m <= NEAR_BOUND) for m in margins]
    return {
        "row_steps": round(float(sum(n.sum() for n in near) / sum(n.numel() for n in near)), 4),
        "steps_with_any_row": round(sum(bool(n.any()) for n in near) / len(near), 4),
    }


def fed_positions(model, sample):
    """`sample()`'s result and the token positions (padding included) it feeds the model, over all its calls."""
    fed, forward = [0], model.forward

    def counting(*args, **kwargs):
        fed[0] += kwargs["input_ids"].numel()
        return forward(*args, **kwargs)

    model.forward = counting
    try:
        out = sample()
    finally:
        model.forward = forward
    return out, fed[0]


def main() -> None:
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    from workflow_lib.data.builtin_corpus import build_grammar
    from workflow_lib.data.prompts import make_prompts
    from workflow_lib.data.tokenization import group_blocks, token_ids, train_bpe
    from workflow_lib.models import use_in_place_activations
    from workflow_lib.perturb.synonyms import distributional_synonyms
    from workflow_lib.sample import reuse, sampler
    from workflow_lib.sample.sampler import generate

    parser = argparse.ArgumentParser()
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--new-tokens", type=int, default=80)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--model", choices=["tiny", "gpt2"], default="tiny")
    parser.add_argument("--precision", choices=["fp32", "bf16"], default="fp32", help="as sampling.precision")
    parser.add_argument("--vocab", type=int, help="the model's vocabulary size (default: the tokenizer's, 512)")
    parser.add_argument("--init-std", type=float, default=0.02, help="the random weights' std (GPT-2's 0.02)")
    parser.add_argument("--near-bound", action="store_true", help="only the share of draws near a CDF bound")
    opts = parser.parse_args()

    grammar = build_grammar(seed=1234)
    texts = grammar.generate("train", n_docs=1000, sentences_per_doc=20, seed=1234)
    tokenizer = train_bpe(texts, 512)
    ids, _ = token_ids(tokenizer, texts)
    table = distributional_synonyms(
        group_blocks(ids, 128), len(tokenizer), special_ids=tokenizer.all_special_ids, min_count=2
    )
    test = grammar.generate("test", n_docs=max(opts.batch, 1000), sentences_per_doc=20, seed=1234)
    frame, _ = make_prompts(test, None, max_prompts=max(opts.batch, 1000))
    prompts = frame["prefix"].to_list()[: opts.batch]

    torch.manual_seed(0)
    arch = TINY if opts.model == "tiny" else GPT2_SMALL
    config = GPT2Config(vocab_size=opts.vocab or len(tokenizer), initializer_range=opts.init_std, **arch)
    model = GPT2LMHeadModel(config).to(opts.device).eval()
    if opts.precision == "bf16":
        model = model.to(torch.bfloat16)
    # As a sample job loads it (sampler.load_model): GPT-2's GELU in place under no_grad, the same floats. Every
    # sampler below, Hugging Face's generate included, runs this one model.
    model = use_in_place_activations(model)
    n_tokens = opts.batch * opts.new_tokens

    def intensity0(**kw):
        return generate(
            model,
            tokenizer,
            prompts,
            np.arange(opts.batch),
            1,
            opts.new_tokens,
            {"strategy": "insertion", "intensity": 0.0},
            table,
            seed=1,
            mode="exact",
            batch_size=opts.batch,
            **kw,
        )["continuation_ids"]

    near_bound = near_bound_share(intensity0)
    if opts.near_bound:
        print(
            "sample: "
            + json.dumps(
                {
                    "device": opts.device,
                    "model": opts.model,
                    "vocab": config.vocab_size,
                    "init_std": opts.init_std,
                    "batch": opts.batch,
                    "new_tokens": opts.new_tokens,
                    "tolerance": NEAR_BOUND,
                    "intensity0_near_bound": near_bound,
                }
            )
        )
        return

    def timed(fn) -> float:
        fn()  # warm-up
        if opts.device == "cuda":
            torch.cuda.synchronize()
        best = float("inf")
        for _ in range(2):
            start = time.perf_counter()
            fn()
            if opts.device == "cuda":
                torch.cuda.synchronize()
            best = min(best, time.perf_counter() - start)
        return n_tokens / best

    tokenizer.padding_side = "left"
    batch = tokenizer(prompts, return_tensors="pt", padding=True).to(opts.device)

    def hf_generate():
        with torch.no_grad():
            model.generate(
                **batch,
                do_sample=True,
                top_k=0,
                top_p=1.0,
                temperature=1.0,
                max_new_tokens=opts.new_tokens,
                min_new_tokens=opts.new_tokens,
                pad_token_id=tokenizer.pad_token_id,
            )

    pert = {"strategy": "insertion", "intensity": 0.025}

    def perturbed(mode: str):
        return generate(
            model,
            tokenizer,
            prompts,
            np.arange(opts.batch),
            1,
            opts.new_tokens,
            pert,
            table,
            seed=1,
            mode=mode,
            batch_size=opts.batch,
        )["continuation_ids"]

    def exact_full():
        fits = reuse.reuse_fits
        reuse.reuse_fits = lambda *args: False  # the full recompute of every step, as exact ran before issue 35
        try:
            return perturbed("exact")
        finally:
            reuse.reuse_fits = fits

    rates = {"hf_generate": timed(hf_generate)}
    for mode in ("exact", "cached"):
        rates[mode] = timed(lambda mode=mode: perturbed(mode))
    rates["exact_full"] = timed(exact_full)
    (reusing, fed), (full, fed_full) = (
        fed_positions(model, lambda: perturbed("exact")),
        fed_positions(model, exact_full),
    )
    same = reusing == full
    exact_fed = {
        "exact": fed,
        "exact_full": fed_full,
        "ratio": round(fed / fed_full, 3),
        "same_draws": {"rows": round(float(same.all(1).mean()), 4), "tokens": round(float(same.mean()), 4)},
    }
    rates["intensity0"] = timed(intensity0)
    with_cache = intensity0()
    fits = sampler.cache_fits
    sampler.cache_fits = lambda *args: False  # exact mode's uncached loop: the whole batch recomputed at every step
    try:
        same = intensity0() == with_cache  # a row that drew another token goes on from another prefix
    finally:
        sampler.cache_fits = fits
    as_uncached = {"rows": round(float(same.all(1).mean()), 4), "tokens": round(float(same.mean()), 4)}

    from workflow_lib.evaluate.features import featurize
    from workflow_lib.evaluate.metrics import mauve_score

    human = frame["reference"].to_list()[:1000]
    other = test[:1000]
    start = time.perf_counter()
    p = featurize(human, "minilm", 256, 64)
    q = featurize([" ".join(t.split()[:100]) for t in other], "minilm", 256, 64)
    feature_seconds = (time.perf_counter() - start) / 2
    start = time.perf_counter()
    mauve_score(
        p,
        q,
        {"num_buckets": "auto", "kmeans_num_redo": 5, "kmeans_max_iter": 500, "discretization": 25, "scaling": 5},
        1,
    )
    mauve_seconds = time.perf_counter() - start

    result = {
        "device": opts.device,
        "model": opts.model,
        "precision": opts.precision,
        "batch": opts.batch,
        "new_tokens": opts.new_tokens,
        "tokens_per_s": {k: round(v, 1) for k, v in rates.items()},
        "exact_vs_generate": round(rates["exact"] / rates["hf_generate"], 3),
        "exact_vs_exact_full": round(rates["exact"] / rates["exact_full"], 3),
        "exact_fed": exact_fed,
        "cached_vs_generate": round(rates["cached"] / rates["hf_generate"], 3),
        "intensity0_vs_generate": round(rates["intensity0"] / rates["hf_generate"], 3),
        "intensity0_as_uncached": as_uncached,
        "intensity0_near_bound": near_bound,
        "mauve_per_1000_texts_seconds": {
            "minilm_features": round(feature_seconds, 2),
            "mauve": round(mauve_seconds, 2),
        },
        "targets": {
            "intensity0_vs_generate": ">= 0.8",
            "cached_vs_generate": ">= 0.8",
            "exact_vs_generate": ">= 0.1",
            "exact_vs_exact_full": ">= 1.4",
        },
    }
    print(
        f"HF generate {rates['hf_generate']:,.0f} tok/s, exact {rates['exact']:,.0f} tok/s "
        f"(full recompute {rates['exact_full']:,.0f} tok/s), "
        f"cached {rates['cached']:,.0f} tok/s, intensity 0 {rates['intensity0']:,.0f} tok/s "
        f"({as_uncached['rows']:.1%} of its rows as the uncached loop's)"
    )
    print("sample: " + json.dumps(result))


if __name__ == "__main__":
    main()
