"""Benchmark of perturbed sampling and MAUVE scoring.

The default study's tiny GPT-2 architecture (or GPT-2 small with --model gpt2) on builtin-corpus prompts
(20 words), one batch, 80 new tokens: unperturbed Hugging Face `generate` with its key/value cache against
our `exact` (Algorithm 2: a fresh perturbation and a full forward pass every step) and `cached` modes at
insertion intensity 0.025, same prompts, same batch. At intensity 0 both modes sample with a key/value cache
(`loops.sample_ancestral`); `intensity0_cached_vs_uncached` is its speed over exact mode's former uncached
loop (`cache_fits` switched off), timed in the same run, and `intensity0_same_tokens` checks that the two drew
the same tokens. Then MAUVE on 1000 texts: MiniLM features and the MAUVE computation, per 1000 texts. Last
line: `sample: {json}`.

    python bench/sample.py [--batch 100] [--device cpu|cuda] [--model tiny|gpt2] [--precision fp32|bf16]
    OMP_NUM_THREADS=1 python bench/sample.py --batch 150   # a default-study sample job (one thread, one batch)
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

TINY = {"n_layer": 2, "n_head": 2, "n_embd": 64, "n_positions": 256}
GPT2_SMALL = {"n_layer": 12, "n_head": 12, "n_embd": 768, "n_positions": 1024}


def main() -> None:
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    from workflow_lib.data.builtin_corpus import build_grammar
    from workflow_lib.data.prompts import make_prompts
    from workflow_lib.data.tokenization import group_blocks, token_ids, train_bpe
    from workflow_lib.perturb.synonyms import distributional_synonyms
    from workflow_lib.sample import loops
    from workflow_lib.sample.sampler import generate

    parser = argparse.ArgumentParser()
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--new-tokens", type=int, default=80)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--model", choices=["tiny", "gpt2"], default="tiny")
    parser.add_argument("--precision", choices=["fp32", "bf16"], default="fp32", help="as sampling.precision")
    opts = parser.parse_args()

    grammar = build_grammar(seed=1234)
    texts = grammar.generate("train", n_docs=1000, sentences_per_doc=20, seed=1234)
    tokenizer = train_bpe(texts, 512)
    ids, _ = token_ids(tokenizer, texts)
    table = distributional_synonyms(group_blocks(ids, 128), len(tokenizer), special_ids=tokenizer.all_special_ids, min_count=2)
    test = grammar.generate("test", n_docs=max(opts.batch, 1000), sentences_per_doc=20, seed=1234)
    frame, _ = make_prompts(test, None, max_prompts=max(opts.batch, 1000))
    prompts = frame["prefix"].to_list()[: opts.batch]

    torch.manual_seed(0)
    arch = TINY if opts.model == "tiny" else GPT2_SMALL
    model = GPT2LMHeadModel(GPT2Config(vocab_size=len(tokenizer), **arch)).to(opts.device).eval()
    if opts.precision == "bf16":
        model = model.to(torch.bfloat16)
    n_tokens = opts.batch * opts.new_tokens

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
            model.generate(**batch, do_sample=True, top_k=0, top_p=1.0, temperature=1.0, max_new_tokens=opts.new_tokens,
                           min_new_tokens=opts.new_tokens, pad_token_id=tokenizer.pad_token_id)

    pert = {"strategy": "insertion", "intensity": 0.025}
    rates = {"hf_generate": timed(hf_generate)}
    for mode in ("exact", "cached"):
        rates[mode] = timed(lambda: generate(model, tokenizer, prompts, np.arange(opts.batch), 1, opts.new_tokens, pert, table,
                                             seed=1, mode=mode, batch_size=opts.batch))

    def intensity0():
        return generate(model, tokenizer, prompts, np.arange(opts.batch), 1, opts.new_tokens,
                        {"strategy": "insertion", "intensity": 0.0}, table, seed=1, mode="exact",
                        batch_size=opts.batch)["continuation_ids"]

    with_cache = intensity0()
    rates["intensity0_cached"] = timed(intensity0)
    fits = loops.cache_fits
    loops.cache_fits = lambda *args: False  # the former path: the whole batch recomputed at every step
    try:
        same_tokens = bool(np.array_equal(intensity0(), with_cache))
        rates["intensity0_uncached"] = timed(intensity0)
    finally:
        loops.cache_fits = fits

    from workflow_lib.evaluate.metrics import featurize, mauve_score

    human = frame["reference"].to_list()[:1000]
    other = test[:1000]
    start = time.perf_counter()
    p = featurize(human, "minilm", 256, 64)
    q = featurize([" ".join(t.split()[:100]) for t in other], "minilm", 256, 64)
    feature_seconds = (time.perf_counter() - start) / 2
    start = time.perf_counter()
    mauve_score(p, q, {"num_buckets": "auto", "kmeans_num_redo": 5, "kmeans_max_iter": 500, "discretization": 25, "scaling": 5}, 1)
    mauve_seconds = time.perf_counter() - start

    result = {"device": opts.device, "model": opts.model, "precision": opts.precision, "batch": opts.batch, "new_tokens": opts.new_tokens,
              "tokens_per_s": {k: round(v, 1) for k, v in rates.items()},
              "exact_vs_generate": round(rates["exact"] / rates["hf_generate"], 3),
              "cached_vs_generate": round(rates["cached"] / rates["hf_generate"], 3),
              "intensity0_cached_vs_uncached": round(rates["intensity0_cached"] / rates["intensity0_uncached"], 2),
              "intensity0_same_tokens": same_tokens,
              "mauve_per_1000_texts_seconds": {"minilm_features": round(feature_seconds, 2), "mauve": round(mauve_seconds, 2)},
              "targets": {"cached_vs_generate": ">= 0.8", "exact_vs_generate": ">= 0.1"}}
    print(f"HF generate {rates['hf_generate']:,.0f} tok/s, exact {rates['exact']:,.0f} tok/s, cached {rates['cached']:,.0f} tok/s; "
          f"intensity 0: cached {rates['intensity0_cached']:,.0f} tok/s, uncached {rates['intensity0_uncached']:,.0f} tok/s "
          f"(same tokens: {same_tokens})")
    print("sample: " + json.dumps(result))


if __name__ == "__main__":
    main()
