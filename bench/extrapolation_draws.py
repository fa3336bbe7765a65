"""Benchmark of the exact TV's Monte Carlo bias against the number of perturbation draws (issue 32, item 4).

The extrapolation job compares the truth with the mean of `draws` draws of the perturbed next-word law
P(. | X~); TV is convex, so that TV overestimates the TV of the perturbed law itself, by an amount that shrinks
with the draws. For each condition this computes every draw's law once (MAX_DRAWS draws, keyed as the job keys them,
so the job's first D draws are these draws' first D), then for D = 1, 2, 4, ..., MAX_DRAWS:

- `tv_first`: the TV of the first D draws' mean, which the job reports at `draws: D`;
- `tv_expected`: the mean of that TV over the MAX_DRAWS / D disjoint runs of D draws (E TV(D), less noisy);
- `split_half`: the job's `tv_bias_estimate` at D (the halves' TV, averaged, less the TV of all D), on the first D
  draws, and `split_half_expected`, its mean over the disjoint runs of D draws;
- `bias_vs_max`: tv_expected(D) - tv_first(MAX_DRAWS), the bias left at D up to the (small) bias at MAX_DRAWS;
- `mc_sd`: the standard deviation of tv_first over those disjoint runs (the Monte Carlo noise of one job's value);
- `cross_fit`: the cross-fitted TV of the first D draws (each half's excess over the truth on the cells where the
  other half exceeds it, averaged over both halves), at most the perturbed law's TV in expectation, and its mean
  over the disjoint runs.

It reads a default-study run (`--results`: a results/ folder of `config.yaml`'s study: models, prompts, synonyms);
one core. Prints one table per condition, the seconds per draw, and last `extrapolation_draws: {json}`.

    python bench/extrapolation_draws.py --results /path/to/results [--max-draws 128]
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
if hasattr(os, "sched_setaffinity"):
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})

import numpy as np
from shared import REPO

MODEL = "models/tiny/synthetic/{}/{}/augment-m1/{}/seed42"
NONE, PERTURB, PERTURB_04 = (
    ("none", "none-0"),
    ("distributional", "insertion-0.025"),
    ("distributional", "insertion-0.4"),
)
# (label, model, eval set, test insertion intensity): sampling-perturbed conditions of the default study
CONDITIONS = [
    ("mle NoPerturb model, TestPerturb", MODEL.format("mle", *NONE), "synthetic-test", 0.025),
    ("mle Perturb 0.025, test", MODEL.format("mle", *PERTURB), "synthetic-test", 0.025),
    ("mle Perturb 0.025, ood", MODEL.format("mle", *PERTURB), "synthetic-ood", 0.025),
    ("mle Perturb 0.4, test", MODEL.format("mle", *PERTURB_04), "synthetic-test", 0.4),
    ("brier Perturb 0.025, test", MODEL.format("brier", *PERTURB), "synthetic-test", 0.025),
]
LAW = {"synthetic-test": "in_support", "synthetic-ood": "ood"}


def bias_statistics(runs: np.ndarray, truth: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """runs [R, D, n, C] -> three [R]: each run's TV, split-half excess and cross-fitted TV, mean over prefixes, as
    the job computes them from the two halves of its D draws."""
    from workflow_lib.evaluate.extrapolation import monte_carlo_bias

    halves = runs.reshape(runs.shape[0], 2, runs.shape[1] // 2, *runs.shape[2:]).mean(2)
    return tuple(np.array(v) for v in zip(*(tuple(x.mean() for x in monte_carlo_bias(h, truth)) for h in halves)))


def measure(results: Path, model_dir: str, eval_set: str, intensity: float, max_draws: int, seed: int, grammar) -> dict:
    import pyarrow.parquet as pq
    import torch
    from transformers import AutoTokenizer

    from workflow_lib.evaluate.extrapolation import coarsened_laws, total_variation
    from workflow_lib.perturb.synonym_table import SynonymTable
    from workflow_lib.sample.sampler import load_model

    torch.set_num_threads(1)
    path = str(results / model_dir)
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = load_model(path, "cpu")
    table = SynonymTable.from_arrow(pq.read_table(results / "synonyms/synthetic-bpe/synthetic/distributional.parquet"))
    references = pq.read_table(results / f"prompts/{eval_set}.parquet").column("reference").to_pylist()
    began = time.perf_counter()
    truth, draws, _ = coarsened_laws(
        model,
        tokenizer,
        grammar,
        references,
        LAW[eval_set],
        {"strategy": "insertion", "intensity": intensity},
        table,
        max_draws,
        seed,
        blocks=max_draws,
    )
    seconds = time.perf_counter() - began
    rows = []
    reference = float(total_variation(draws.mean(0), truth).mean())
    for d in (2**k for k in range(int(np.log2(max_draws)) + 1)):
        runs = draws.reshape(max_draws // d, d, *draws.shape[1:])
        tv_runs = total_variation(runs.mean(1), truth).mean(1)
        row = {
            "draws": d,
            "tv_first": float(tv_runs[0]),
            "tv_expected": float(tv_runs.mean()),
            "bias_vs_max": float(tv_runs.mean()) - reference,
            "mc_sd": float(tv_runs.std(ddof=1)) if len(tv_runs) > 1 else None,
        }
        if d > 1:
            _, halves, lower = bias_statistics(runs, truth)
            row |= {
                "split_half": float(halves[0]),
                "split_half_expected": float(halves.mean()),
                "cross_fit": float(lower[0]),
                "cross_fit_expected": float(lower.mean()),
            }
        rows.append(row)
    return {"prefixes": int(truth.shape[0]), "seconds_per_draw": seconds / max_draws, "rows": rows}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--results", type=Path, required=True, help="a results/ folder of config.yaml's default study")
    parser.add_argument("--max-draws", type=int, default=128)
    args = parser.parse_args()
    import yaml

    from workflow_lib.data.builtin_corpus import build_grammar

    config = yaml.safe_load((REPO / "config.yaml").read_text())
    params = {
        k: v for k, v in config["datasets"]["synthetic"]["builtin"].items() if k not in ("docs", "sentences_per_doc")
    }
    grammar = build_grammar(**params)
    out = {}
    for label, model_dir, eval_set, intensity in CONDITIONS:
        result = measure(args.results, model_dir, eval_set, intensity, args.max_draws, config["seed"], grammar)
        out[label] = result
        print(f"\n{label} ({result['prefixes']} prefixes, {result['seconds_per_draw']:.2f} s per draw)")
        print("draws  tv_first  tv_expected  bias_vs_max  mc_sd    split_half  (expected)  cross_fit  (expected)")
        for r in result["rows"]:
            nan = float("nan")
            print(
                f"{r['draws']:5d}  {r['tv_first']:.5f}  {r['tv_expected']:.5f}      {r['bias_vs_max']:.5f}"
                f"      {r['mc_sd'] or nan:.5f}  {r.get('split_half', nan):.5f}     {r.get('split_half_expected', nan):.5f}"
                f"     {r.get('cross_fit', nan):.5f}    {r.get('cross_fit_expected', nan):.5f}"
            )
    print("extrapolation_draws: " + json.dumps(out))


if __name__ == "__main__":
    main()
