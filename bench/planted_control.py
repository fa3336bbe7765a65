"""The planted control's cost and reach (report/planted.py, docs/benchmarks.md "MAUVE's planted control"): `planted` as
the `planted_control` job calls it, on Gaussian features of SmolLM2's width (576), a tenth of the texts moved by 1
in every coordinate, at two study sizes; one thread.

    OMP_NUM_THREADS=1 python bench/planted_control.py
"""

from __future__ import annotations

import time

import numpy as np
import shared  # noqa: F401  (the repository on sys.path)

from workflow_lib.report.planted import planted

MAUVE = {
    "num_buckets": "auto",
    "max_buckets": 500,
    "kmeans_num_redo": 1,
    "kmeans_max_iter": 50,
    "discretization": 25,
    "scaling": 5,
    "controls": {"planted_fraction": 0.1},
}


def main() -> None:
    for n, k in ((50, 3), (160, 5)):
        rng = np.random.default_rng(0)
        human = rng.normal(size=(n, 576)).astype(np.float32)
        windows = rng.normal(size=(2, n, 576)).astype(np.float32)
        mixed = windows.copy()
        mixed[:, : n // 10] += 1.0
        start = time.perf_counter()
        gap = planted(human, windows, mixed, {"mauve": MAUVE}, list(range(k)), "bench")
        seconds = time.perf_counter() - start
        print(
            f"{n} prompts x {k} k-means seeds: {seconds:.1f} s; gap {gap['gap']:+.3f} [{gap['low']:.3f}, "
            f"{gap['high']:.3f}], p {gap['p']:.2g}, sees {gap['can_see']:.3f}+ ({gap['buckets']} buckets)"
        )


if __name__ == "__main__":
    main()
