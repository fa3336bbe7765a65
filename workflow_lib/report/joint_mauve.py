"""MAUVE contrasts on one shared quantisation: both conditions' samples and the human text clustered together.

A difference of two separately clustered MAUVE scores is mostly k-means noise, so, as mauve-text's author advises
for comparing two models (mauve-text issue 13), a paired contrast A - B clusters the human references and every
sample of A and B with one fit per clustering seed (`quantise`, on the pooled rows sorted by content:
`content_order`), scores both arms per run and seed from that histogram (`mauve_from_counts`), and tests the mean
difference by swapping a (prompt, run)'s two continuations (report.statistics.permutation_p), with a percentile
bootstrap interval over prompts. The swaps and resamples are seeded by the comparison's identity: a rerun writes the
same bytes. Why, each step, and the null simulation: docs/method.md §4, "MAUVE contrasts on one quantisation".
"""

from __future__ import annotations

import itertools
import logging
from pathlib import Path
from typing import NamedTuple, cast

import numpy as np

from workflow_lib.report.statistics import Estimate, Permutations, bootstrap_indices, permutation_p

log = logging.getLogger("workflow_lib.report.joint_mauve")
# Label arrays of [rows, R, n] drawn at once are bounded by this many elements (a permutation chunk).
CHUNK_ELEMENTS = 1 << 22
EXPLAINED_VARIANCE = 0.9  # mauve-text's kmeans_explained_var default, which the evaluation uses too


class JointMauve(NamedTuple):
    """Per-run MAUVE of A and B on the shared quantisation, the contrast's estimate and the bucket count."""

    a: np.ndarray
    b: np.ndarray
    estimate: Estimate
    buckets: int


def content_order(data: np.ndarray) -> np.ndarray:
    """The permutation that sorts the rows of [N, d] by their contents alone, so that the same rows in any order are
    sorted into the same array (equal rows are interchangeable): by a fixed projection (each row's own pairwise sum,
    so the same row gives the same key wherever it stands; features that differ by rounding keep their order), ties
    broken by the rows' bytes."""
    data = np.ascontiguousarray(data, dtype=np.float64)
    direction = np.random.default_rng(0).standard_normal(data.shape[1])
    by_bytes = np.argsort(data.view(np.dtype((np.void, 8 * data.shape[1]))).ravel(), kind="stable")
    byte_rank = np.empty(len(data), dtype=np.int64)
    byte_rank[by_bytes] = np.arange(len(data))
    return np.lexsort((byte_rank, (data * direction).sum(axis=1)))


def quantise(blocks: list[np.ndarray], buckets: int, settings: dict, seed: int) -> list[np.ndarray]:
    """Bucket labels of every row of every block, from one fit on all blocks stacked: mauve-text's quantisation
    (cluster_feats: l2 normalisation, PCA to 90% of the variance, faiss k-means), which reports only histograms.
    The fit reads the rows sorted by content (`content_order`), not in the blocks' order: faiss draws its starting
    centroids by position, so a fit on the stacked order would change when rows move between blocks. Sorted, a row's
    label depends only on the pooled rows, whichever block holds each: swapping rows between blocks swaps their
    labels and nothing else, the premise of joint_contrast's permutation test."""
    import faiss
    from sklearn.decomposition import PCA
    from sklearn.preprocessing import normalize

    data = normalize(np.vstack(blocks).astype(np.float64), norm="l2", axis=1)
    order = content_order(data)
    data = data[order]
    pca = PCA(n_components=None, whiten=False, random_state=seed + 1).fit(data)
    keep = int(np.argmax(np.cumsum(pca.explained_variance_ratio_) >= EXPLAINED_VARIANCE)) + 1
    data = np.ascontiguousarray(pca.transform(data)[:, :keep], dtype=np.float32)
    kmeans = faiss.Kmeans(
        data.shape[1],
        buckets,
        niter=settings["kmeans_max_iter"],
        verbose=False,
        nredo=settings["kmeans_num_redo"],
        update_index=True,
        seed=seed + 2,
    )
    kmeans.train(data)
    labels = np.empty(len(order), dtype=np.int64)
    labels[order] = kmeans.index.search(data, 1)[1].reshape(-1)
    bounds = np.cumsum([0, *(len(b) for b in blocks)])
    return [labels[lo:hi] for lo, hi in itertools.pairwise(bounds)]


def mauve_from_counts(p_counts: np.ndarray, q_counts: np.ndarray, discretization: int, scaling: float) -> np.ndarray:
    """MAUVE of histogram pairs [..., K] (counts or laws), as mauve-text computes it from its histograms: the
    divergence curve at `discretization` mixture weights w in [1e-6, 1 - 1e-6] with its two extreme points,
    (exp(-c KL(q || r_w)), exp(-c KL(p || r_w))) for r_w = w p + (1 - w) q, and the mean of the areas under it
    taken along x and along y (sklearn's trapezoid `auc`). Returns [...]."""
    p = np.asarray(p_counts, dtype=np.float64)
    q = np.asarray(q_counts, dtype=np.float64)
    p, q = np.broadcast_arrays(p / p.sum(-1, keepdims=True), q / q.sum(-1, keepdims=True))
    w = np.linspace(1e-6, 1 - 1e-6, discretization)[:, None]  # [D, 1]
    r = w * p[..., None, :] + (1 - w) * q[..., None, :]  # [..., D, K]; r > 0 wherever p or q is

    def kl(a):  # KL(a || r_w) over the buckets a holds mass in
        a = a[..., None, :]
        return np.where(a > 0, a * np.log(np.where(a > 0, a, 1.0) / np.where(a > 0, r, 1.0)), 0.0).sum(-1)

    shape = p.shape[:-1]
    x = np.concatenate([np.ones((*shape, 1)), np.exp(-scaling * kl(q)), np.zeros((*shape, 1))], axis=-1)
    y = np.concatenate([np.zeros((*shape, 1)), np.exp(-scaling * kl(p)), np.ones((*shape, 1))], axis=-1)

    def area(u, v):  # the trapezoid area under v(u), u sorted ascending
        order = np.argsort(u, axis=-1, kind="stable")
        u, v = np.take_along_axis(u, order, -1), np.take_along_axis(v, order, -1)
        return (np.diff(u, axis=-1) * (v[..., 1:] + v[..., :-1]) / 2).sum(-1)

    return 0.5 * (area(x, y) + area(y, x))


def _counts(labels: np.ndarray, buckets: int) -> np.ndarray:
    """[..., n] bucket labels -> [..., buckets] counts, one bincount for all leading indices."""
    lead = labels.shape[:-1]
    groups = np.arange(int(np.prod(lead)), dtype=np.int64).reshape(*lead, 1)
    flat = (groups * buckets + labels).ravel()
    return np.bincount(flat, minlength=groups.size * buckets).reshape(*lead, buckets)


def joint_contrast(
    human: np.ndarray,
    a: np.ndarray,
    b: np.ndarray,
    settings: dict,
    seeds: list[int],
    resamples: int,
    identity: str,
    buckets: int,
    interval: bool = True,
) -> JointMauve:
    """MAUVE(human, A) - MAUVE(human, B) on shared quantisations (module docstring), one per clustering seed, averaged.

    human [n, d]: the references of the n shared prompts; a, b [R, n, d]: the two conditions' samples of those
    prompts in R shared runs, row i of every run the continuation of prompt i. `settings`: evaluation.mauve
    (kmeans_num_redo, kmeans_max_iter, discretization, scaling). `seeds`: the clustering seeds; each gives one joint
    quantisation, and a swap moves a continuation's bucket in all of them. `resamples`:
    B, for both the permutation p and the bootstrap interval. `interval=False`: no interval (low, high None), for
    simulations of the p alone (bench/null_studies.py), where the interval is most of the cost."""
    runs, n = a.shape[:2]
    if b.shape[:2] != (runs, n) or len(human) != n:
        raise ValueError(
            f"joint MAUVE: {len(human)} references, A {a.shape[:2]}, B {b.shape[:2]} (runs, prompts) differ"
        )
    blocks = [human, a.reshape(runs * n, -1), b.reshape(runs * n, -1)]
    labels = [quantise(blocks, buckets, settings, seed) for seed in seeds]
    k = len(seeds)
    h = np.stack([x[0] for x in labels])  # [K, n]
    flat_a, flat_b = np.stack([x[1] for x in labels]), np.stack([x[2] for x in labels])  # [K, R n]

    def score(h_labels, a_labels, b_labels):  # [rows, K, n], [rows, K, R, n] x 2 -> (MAUVE A, MAUVE B) [rows, K, R]
        hc = _counts(h_labels, buckets)[:, :, None, :]
        mauve = [
            mauve_from_counts(hc, _counts(x, buckets), settings["discretization"], settings["scaling"])
            for x in (a_labels, b_labels)
        ]
        return mauve[0], mauve[1]

    ma, mb = (x[0].mean(0) for x in score(h[None], flat_a.reshape(1, k, runs, n), flat_b.reshape(1, k, runs, n)))
    observed = float((ma - mb).mean())
    units = runs * n  # one swap unit per (run, prompt)
    permutations = Permutations(units, resamples, identity, max(units, CHUNK_ELEMENTS // k))

    def swapped(masks: np.ndarray, rows: np.ndarray) -> np.ndarray:  # [L, R n] masks -> [L, 1] statistics
        swap = masks.astype(bool)[:, None, :]
        sa, sb = score(
            np.broadcast_to(h, (len(masks), k, n)),
            np.where(swap, flat_b, flat_a).reshape(-1, k, runs, n),
            np.where(swap, flat_a, flat_b).reshape(-1, k, runs, n),
        )
        return (sa - sb).mean((1, 2))[:, None]

    p = float(permutation_p(swapped, 1, permutations)[0])
    untested = permutations.untested()
    if not interval:
        if not np.isfinite(observed):
            raise ValueError("joint MAUVE: a non-finite score; no estimate is made")
        return JointMauve(ma, mb, Estimate(observed, None, None, None if untested else p, n, untested), buckets)
    la, lb = flat_a.reshape(k, runs, n), flat_b.reshape(k, runs, n)
    chunk = max(1, CHUNK_ELEMENTS // (k * units))
    batches: list[np.ndarray] = []
    for start in range(0, resamples, chunk):
        idx = bootstrap_indices(n, min(chunk, resamples - start), identity, start)  # [rows, n]
        ba, bb = score(
            h[:, idx].transpose(1, 0, 2), la[:, :, idx].transpose(2, 0, 1, 3), lb[:, :, idx].transpose(2, 0, 1, 3)
        )
        batches.append((ba - bb).mean((1, 2)))
    replicates = np.concatenate(batches)
    if not (np.isfinite(observed) and np.isfinite(replicates).all()):
        raise ValueError("joint MAUVE: a non-finite score; no estimate is made")
    low, high = np.quantile(replicates, [0.025, 0.975])
    return JointMauve(
        ma, mb, Estimate(observed, float(low), float(high), None if untested else p, n, untested), buckets
    )


# ---- one designed MAUVE contrast as a job ----------------------------------------------------------------


def aligned(human: np.ndarray, prompt_ids: np.ndarray, a, b) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(human [n, d], a [R, n, d], b [R, n, d], runs) over the runs both feature tables have and the prompts every
    one of those runs has on both sides. `a`, `b`: pyarrow tables (prompt_id, run, features); `human`: the eval
    set's reference features, row k the prompt `prompt_ids[k]`."""
    import polars as pl

    frames = [cast(pl.DataFrame, pl.from_arrow(t.select(["prompt_id", "run"]))).with_row_index("row") for t in (a, b)]
    runs = np.intersect1d(frames[0]["run"].unique().to_numpy(), frames[1]["run"].unique().to_numpy())
    both = frames[0].join(frames[1], on=["prompt_id", "run"], suffix="_b").filter(pl.col("run").is_in(runs.tolist()))
    complete = both.group_by("prompt_id").len().filter(pl.col("len") == len(runs))["prompt_id"]
    both = both.filter(pl.col("prompt_id").is_in(complete.implode())).sort(["run", "prompt_id"])
    n = complete.len()
    where = {int(p): k for k, p in enumerate(prompt_ids)}
    prompts = both["prompt_id"].to_numpy()[:n]
    if n == 0 or any(int(p) not in where for p in prompts):
        raise ValueError(f"joint MAUVE: {n} prompts shared by every run of both sides, or a prompt without a reference")

    def matrix(table, rows):
        values = table.column("features").combine_chunks()
        flat = np.asarray(values.values, dtype=np.float32).reshape(len(table), values.type.list_size)
        return flat[rows].reshape(len(runs), n, -1)

    return (
        human[[where[int(p)] for p in prompts]],
        matrix(a, both["row"].to_numpy()),
        matrix(b, both["row_b"].to_numpy()),
        runs,
    )


def main() -> None:
    import argparse
    import json

    from workflow_lib.cli import StageError, parse_json_arg
    from workflow_lib.evaluate.metrics import KMEANS_SEEDS, mauve_buckets
    from workflow_lib.files import read_parquet, write_json

    parser = argparse.ArgumentParser(prog="python -m workflow_lib.report.joint_mauve")
    parser.add_argument("--a", required=True, help="metrics JSON of condition A")
    parser.add_argument("--b", required=True, help="metrics JSON of condition B")
    parser.add_argument("--features-a", required=True, help="A's per-sample features (the evaluate job's)")
    parser.add_argument("--features-b", required=True, help="B's per-sample features")
    parser.add_argument("--human", required=True, help="the eval set's reference features (.npy)")
    parser.add_argument("--prompts", required=True, help="the eval set's prompts (their order is the features' rows)")
    parser.add_argument("--settings", required=True, help="JSON: the evaluation settings (mauve, seed)")
    parser.add_argument("--resamples", type=int, required=True, help="permutations and bootstrap resamples (B)")
    parser.add_argument("--identity", required=True, help="the comparison's identity, which seeds its draws")
    parser.add_argument("--output", required=True)
    args = parser.parse_args()
    settings = parse_json_arg(args.settings, "evaluation")
    status = {
        side: json.loads(Path(path).read_text()).get("mauve_status") for side, path in (("A", args.a), ("B", args.b))
    }
    result = {"a": args.a, "b": args.b, "identity": args.identity, "resamples": args.resamples}
    if any(status.values()):  # MAUVE that cannot resolve takes no part in any test (report.resolution)
        result |= {"status": "; ".join(f"{side}: {s}" for side, s in status.items() if s)}
        log.warning("no MAUVE contrast: %s", result["status"])
    else:
        human, a, b, runs = aligned(
            np.load(args.human),
            read_parquet(args.prompts, columns=["prompt_id"]).column(0).to_numpy(),
            read_parquet(args.features_a),
            read_parquet(args.features_b),
        )
        buckets = mauve_buckets(a.shape[1], a.shape[1], settings["mauve"])
        try:
            seeds = [settings["seed"] + k for k in range(settings["mauve"].get("kmeans_seeds", KMEANS_SEEDS))]
            joint = joint_contrast(human, a, b, settings["mauve"], seeds, args.resamples, args.identity, buckets)
        except ValueError as error:
            raise StageError(f"{args.a} vs {args.b}: {error}") from error
        result |= {
            "status": None,
            "runs": runs.tolist(),
            "kmeans_seeds": seeds,
            "mauve_a": joint.a.tolist(),
            "mauve_b": joint.b.tolist(),
            "buckets": buckets,
            **joint.estimate._asdict(),
        }
        log.info(
            "MAUVE A - B = %+.4f [%.4f, %.4f], permutation p %.4g, on one quantisation of %d buckets (%d prompts, "
            "%d runs)",
            joint.estimate.difference,
            joint.estimate.low,
            joint.estimate.high,
            joint.estimate.p,
            buckets,
            a.shape[1],
            len(runs),
        )
    write_json(result, args.output)


if __name__ == "__main__":
    from workflow_lib.cli import run

    run(main)
