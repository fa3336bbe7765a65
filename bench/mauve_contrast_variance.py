"""How much of a paired MAUVE contrast is clustering noise: separate quantisations (each score its own k-means, as
the per-condition evaluation does) against one shared quantisation of the human text and both conditions
(workflow_lib.report.joint_mauve), on a finished study's samples.

For each designed MAUVE contrast of the study, the contrast (mean over runs of MAUVE_A - MAUVE_B) is computed under
`--seeds` k-means seeds both ways; the standard deviation over seeds is the clustering part of the contrast's
variance (the samples are fixed). Also printed: the paired t's p over runs (separate, seed 0) and the permutation p
(joint, seed 0).

    python bench/mauve_contrast_variance.py --results results [--seeds 10] [--pairs 6]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import shared  # noqa: F401 - the repository on sys.path

from workflow_lib.comparisons import pairs
from workflow_lib.evaluate.metrics import featurize, mauve_buckets, mauve_score
from workflow_lib.layout import parse
from workflow_lib.report.contrasts import conditions
from workflow_lib.report.joint_mauve import _counts, joint_contrast, mauve_from_counts, quantise
from workflow_lib.report.statistics import paired_t


def sample_features(results: Path, metrics_path: str, settings: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(prompt ids, runs, features) of the samples behind a metrics file, featurised as the evaluation does."""
    import polars as pl

    located = parse(metrics_path)
    samples = results.parent / located.moved("samples")
    eval_set = located.eval_set
    prompts = pl.read_parquet(results / "prompts" / f"{eval_set}.parquet")
    frame = (
        pl.read_parquet(samples).join(prompts.select("prompt_id", "prefix"), on="prompt_id").sort(["run", "prompt_id"])
    )
    texts = (frame["prefix"] + frame["text"]).to_list()
    return (
        frame["prompt_id"].to_numpy(),
        frame["run"].to_numpy(),
        featurize(texts, settings["featuriser"], settings["max_text_length"], 32),
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--results", default="results")
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--pairs", type=int, default=6, help="the first N designed MAUVE contrasts")
    parser.add_argument("--intensity", type=float, default=0.025)
    args = parser.parse_args()
    results = Path(args.results)
    paths = [str(p) for p in sorted((results / "metrics").rglob("*.json"))]
    designed = [p for p in pairs(conditions(paths), args.intensity) if p["kind"] == "metrics"][: args.pairs]
    settings = json.loads(Path(paths[0]).read_text())["settings"]
    mauve = settings["mauve"]
    print(
        f"| pair | n | runs | buckets | SD over {args.seeds} seeds, separate | SD, joint | ratio | paired-t p (separate) | "
        "permutation p (joint) |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    ratios = []
    for pair in designed:
        start = time.perf_counter()
        eval_set = pair["eval_set"]
        prompts_table = __import__("polars").read_parquet(results / "prompts" / f"{eval_set}.parquet")
        human_all = np.load(results / "features" / settings["featuriser"] / f"{eval_set}.npy")
        (pa_, ra, fa), (pb, rb, fb) = (sample_features(results, pair[k], settings) for k in ("path_a", "path_b"))
        runs = np.unique(ra)
        n = len(pa_) // len(runs)
        assert (pa_ == pb).all() and (ra == rb).all()
        order = {int(p): k for k, p in enumerate(prompts_table["prompt_id"].to_list())}
        human = human_all[[order[int(p)] for p in pa_[:n]]]
        a, b = fa.reshape(len(runs), n, -1), fb.reshape(len(runs), n, -1)
        buckets = mauve_buckets(n, n, mauve)
        separate, joint = [], []
        for seed in range(args.seeds):
            sa = [mauve_score(human, a[r], mauve, seed) for r in range(len(runs))]
            sb = [mauve_score(human, b[r], mauve, seed) for r in range(len(runs))]
            separate.append((np.mean(sa) - np.mean(sb), sa, sb))
            h, la, lb = quantise(
                [human, a.reshape(len(runs) * n, -1), b.reshape(len(runs) * n, -1)], buckets, mauve, seed
            )
            hc = _counts(h, buckets)
            ja = mauve_from_counts(
                hc, _counts(la.reshape(len(runs), n), buckets), mauve["discretization"], mauve["scaling"]
            )
            jb = mauve_from_counts(
                hc, _counts(lb.reshape(len(runs), n), buckets), mauve["discretization"], mauve["scaling"]
            )
            joint.append(float((ja - jb).mean()))
        sd_separate, sd_joint = np.std([s[0] for s in separate], ddof=1), np.std(joint, ddof=1)
        t = paired_t(separate[0][1], separate[0][2])
        perm = joint_contrast(
            human, a, b, mauve, [0], 2000, "bench|" + pair["path_a"] + pair["path_b"], buckets
        ).estimate
        ratios.append(sd_separate / sd_joint)
        label = f"{pair['family']}, {pair['objective']}: {pair['a']} vs {pair['b']} ({eval_set})"
        print(
            f"| {label} | {n} | {len(runs)} | {buckets} | {sd_separate:.4f} | {sd_joint:.4f} | {sd_separate / sd_joint:.1f} | "
            f"{'—' if t.p is None else f'{t.p:.3f}'} | {perm.p:.4f} |  ({time.perf_counter() - start:.0f} s)",
            flush=True,
        )
    print(
        f"\nmedian ratio of the clustering SD, separate / joint: {np.median(ratios):.1f} over {len(ratios)} contrasts"
    )


if __name__ == "__main__":
    main()
