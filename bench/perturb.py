"""Benchmark of the perturber on a WikiText-2-train-sized token stream (about 2.4M tokens), one core.

Tokens: WikiText-2 raw valid+test from ../shared/data through a BPE trained on them, repeated to 2.4M tokens
(otherwise the builtin corpus), cut into 256-token blocks; synonyms: the distributional table of that
stream. Each strategy at the paper's intensity 0.025 runs through the vectorised perturber (numpy, and
torch on the CPU) and through the per-token Python loop of tests/support/reference_perturb.py (on a 100k-token
slice, scaled). Last line: `perturb: {json}`.

    python bench/perturb.py
"""

from __future__ import annotations

import json
import os
import random
import time

os.environ.setdefault("RAYON_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
if hasattr(os, "sched_setaffinity"):
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})

import numpy as np
from shared import REPO, best_of

WIKI = REPO.parent / "shared" / "data" / "wikitext-2-raw"
TARGET_TOKENS = 2_400_000
INTENSITY = 0.025


def token_stream() -> tuple[np.ndarray, list[int], str]:
    from workflow_lib.data.tokenization import token_ids, train_bpe

    if (WIKI / "wiki.test.raw").exists():
        from workflow_lib.data.readers import read_rows

        rows = read_rows("wikitext", [str(WIKI / "wiki.valid.raw"), str(WIKI / "wiki.test.raw")])[0]
        source = "wikitext-2-raw valid+test, BPE 8192, repeated"
    else:
        from workflow_lib.data.builtin_corpus import build_grammar

        rows = build_grammar(seed=1).generate("train", n_docs=3000, sentences_per_doc=20, seed=1)
        source = "builtin corpus, BPE 8192, repeated"
    tokenizer = train_bpe(rows, 8192)
    ids, _ = token_ids(tokenizer, rows)
    reps = -(-TARGET_TOKENS // len(ids))
    return np.tile(ids, reps)[:TARGET_TOKENS].astype(np.int32), sorted(set(tokenizer.all_special_ids)), source


def main() -> None:
    import torch

    from support.reference_perturb import perturb_loop
    from workflow_lib.perturb.perturber import STRATEGIES, perturb
    from workflow_lib.perturb.synonyms import distributional_synonyms

    torch.set_num_threads(1)
    stream, special, source = token_stream()
    blocks = stream[: len(stream) // 256 * 256].reshape(-1, 256)
    values, offsets = blocks.reshape(-1), np.arange(0, blocks.size + 1, 256, dtype=np.int64)
    start = time.perf_counter()
    table = distributional_synonyms(blocks, 8192, k=10, special_ids=special)
    table_seconds = time.perf_counter() - start
    torch_table = table.to("cpu")
    t_values, t_offsets = torch.from_numpy(values), torch.from_numpy(offsets)

    # The loop reference on a slice: python lists and a dict of candidates, as a plain implementation has.
    slice_blocks = blocks[: 100_000 // 256]
    seqs = slice_blocks.tolist()
    np_offsets, cands, keys = table.offsets, table.candidates, table.keys
    candidates = {}
    for t in np.flatnonzero(np.diff(np_offsets) > 0):
        lo, hi = np_offsets[t], np_offsets[t + 1]
        candidates[int(t)] = (cands[lo:hi].tolist(), np.diff(np.concatenate([[0.0], keys[lo:hi] - t])).tolist())

    result = {
        "source": source,
        "tokens": int(values.size),
        "intensity": INTENSITY,
        "synonym_table_seconds": round(table_seconds, 2),
    }
    rates, speedups = {}, {}
    for strategy in STRATEGIES:
        rng = np.random.default_rng(0)
        t_np = best_of(lambda: perturb(values, offsets, strategy, INTENSITY, table, rng, special))  # noqa: B023 - run at once
        gen = torch.Generator().manual_seed(0)
        t_torch = best_of(lambda: perturb(t_values, t_offsets, strategy, INTENSITY, torch_table, gen, special))  # noqa: B023
        t_loop = best_of(
            lambda: perturb_loop(seqs, strategy, INTENSITY, candidates, random.Random(0), set(special)),  # noqa: B023
            1,
        )
        loop_rate = slice_blocks.size / t_loop
        rates[strategy] = {
            "numpy_tokens_per_s": round(values.size / t_np),
            "torch_cpu_tokens_per_s": round(values.size / t_torch),
            "loop_tokens_per_s": round(loop_rate),
        }
        speedups[strategy] = round(values.size / t_np / loop_rate, 1)
    result["tokens_per_s"] = rates
    result["speedup_vs_loop"] = speedups
    result["targets"] = {"tokens_per_s": 5_000_000, "speedup_vs_loop": 50}
    for strategy in STRATEGIES:
        print(
            f"{strategy:12s} numpy {rates[strategy]['numpy_tokens_per_s'] / 1e6:6.1f}M tok/s  "
            f"torch-cpu {rates[strategy]['torch_cpu_tokens_per_s'] / 1e6:6.1f}M tok/s  "
            f"loop {rates[strategy]['loop_tokens_per_s'] / 1e6:6.2f}M tok/s  speedup {speedups[strategy]}x"
        )
    print("perturb: " + json.dumps(result))


if __name__ == "__main__":
    main()
