"""Benchmark of MAUVE's clustering seeds: the cost of evaluation.mauve.kmeans_seeds 5 against 1, and the spread
of the score over those seeds.

1000 against 1000 random gaussian features of dimension 1024 (q's mean shifted a little from p's), the
library defaults of docs/method.md §4 (PCA to 0.9 explained variance, k-means with 5 restarts and 500
iterations, 25 discretisation points, scaling 5) and num_buckets auto (= 100 by our rule), through
`workflow_lib.evaluate.metrics.mauve_result`, as the evaluate rule calls it; one core (OMP_NUM_THREADS=1). Also times
one PCA fit alone, the part every seed recomputes although it does not depend on the seed. Last line:
`mauve_seeds: {json}`.

    python bench/mauve_seeds.py
"""

from __future__ import annotations

import json
import os
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")  # faiss and BLAS thread pools: one core, as bench/data.py
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")
if hasattr(os, "sched_setaffinity"):
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})

import numpy as np
import shared  # noqa: F401 - the repository on sys.path

N, DIM, SHIFT, BASE_SEED = 1000, 1024, 0.1, 1
SETTINGS = {"num_buckets": "auto", "kmeans_num_redo": 5, "kmeans_max_iter": 500, "discretization": 25, "scaling": 5}


def main() -> None:
    from sklearn.decomposition import PCA
    from sklearn.preprocessing import normalize

    from workflow_lib.evaluate.metrics import mauve_buckets, mauve_result

    rng = np.random.default_rng(0)
    p = rng.normal(size=(N, DIM)).astype(np.float32)
    q = (rng.normal(size=(N, DIM)) + SHIFT).astype(np.float32)

    def seeds(k: int) -> tuple[list[float], float]:
        start = time.perf_counter()
        scores = [float(mauve_result(p, q, SETTINGS, BASE_SEED + i).mauve) for i in range(k)]
        return scores, time.perf_counter() - start

    mauve_result(p[:100], q[:100], SETTINGS, 0)  # warm-up: imports and faiss's first call are not a seed's cost
    one, t_one = seeds(1)
    five, t_five = seeds(5)
    start = time.perf_counter()
    PCA(n_components=None, whiten=False, random_state=BASE_SEED + 1).fit(normalize(np.vstack([q, p]), norm="l2"))
    t_pca = time.perf_counter() - start

    result = {
        "n_p": N,
        "n_q": N,
        "dim": DIM,
        "shift": SHIFT,
        "num_buckets": mauve_buckets(N, N, SETTINGS),
        "seconds_k1": round(t_one, 2),
        "seconds_k5": round(t_five, 2),
        "ratio_k5_k1": round(t_five / t_one, 2),
        "pca_fit_seconds": round(t_pca, 2),
        "mauve_k1": round(one[0], 4),
        "mauve_by_seed_k5": [round(s, 4) for s in five],
        "mauve_mean_k5": round(float(np.mean(five)), 4),
        "mauve_std_k5": round(float(np.std(five, ddof=1)), 4),  # sample std over the 5 clustering seeds
    }
    print(
        f"K=1 {t_one:.2f} s, K=5 {t_five:.2f} s ({t_five / t_one:.2f}x); MAUVE {np.mean(five):.4f} +- "
        f"{np.std(five, ddof=1):.4f} (std over 5 seeds)"
    )
    print("mauve_seeds: " + json.dumps(result))


if __name__ == "__main__":
    main()
