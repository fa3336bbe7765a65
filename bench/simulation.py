"""Benchmark of the simulation study: the paper's full grid, batched, against the same fits one by one.

    .venv/bin/python bench/simulation.py [--replications 100] [--sequential-reps 1]

The grid is the schema's defaults (the paper: |V| in 50..800, 7 intensities, 100 replications, oracle
synonyms), trained as the `simulation_fit` jobs train it (fit_vocabulary, models in chunks). Training the
same 3,500 fits one by one would take far too long, so the sequential time is estimated: for every |V| the
first `--sequential-reps` replications (all their intensities) are fitted with chunk=1 and the time per fit
is scaled to the grid's fit count; those fits are also compared with the batched ones (they must agree).
The last line is `simulation: {json}`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from workflow_lib.config import load_schema  # noqa: E402
from workflow_lib.simulation import fit_vocabulary  # noqa: E402

THREADS = 2
MAE_COLUMNS = ("mae_unseen_rows", "mae_unseen_pairs", "mae_all")


def paper_settings() -> dict:
    props = load_schema()["properties"]["simulation"]["properties"]
    settings = {k: v["default"] for k, v in props.items() if k not in ("enabled", "vocab_sizes")}
    settings["seed"] = 42
    return settings, props["vocab_sizes"]["default"]


def max_difference(batched: list[dict], sequential: list[dict]) -> float:
    index = {(r["synonyms"], r["intensity"], r["replication"]): r for r in batched}
    worst = 0.0
    for row in sequential:
        other = index[(row["synonyms"], row["intensity"], row["replication"])]
        for column in MAE_COLUMNS:
            if row[column] is not None:
                worst = max(worst, abs(row[column] - other[column]))
    return worst


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replications", type=int, default=100)
    parser.add_argument("--sequential-reps", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(THREADS)
    settings, vocab_sizes = paper_settings()
    settings["replications"] = args.replications
    fits_per_vocab = args.replications * (1 + len(settings["synonyms"]) * (len(settings["intensities"]) - 1))

    batched_seconds, sequential_seconds, fits_timed, difference = {}, {}, 0, 0.0
    for V in vocab_sizes:
        start = time.perf_counter()
        batched = fit_vocabulary(V, settings, THREADS)
        batched_seconds[V] = time.perf_counter() - start

        sample = {**settings, "replications": args.sequential_reps}
        start = time.perf_counter()
        one_by_one = fit_vocabulary(V, sample, THREADS, chunk=1)
        elapsed = time.perf_counter() - start
        n = len({(r["intensity"], r["replication"]) for r in one_by_one})
        fits_timed += n
        sequential_seconds[V] = elapsed / n * fits_per_vocab
        difference = max(difference, max_difference(batched, one_by_one))
        print(f"|V|={V:4d}  batched {batched_seconds[V]:7.1f}s for {fits_per_vocab} fits   one by one "
              f"{elapsed / n:6.3f}s per fit -> {sequential_seconds[V]:7.1f}s estimated", flush=True)

    full, sequential = sum(batched_seconds.values()), sum(sequential_seconds.values())
    result = {
        "grid": {"vocab_sizes": vocab_sizes, "intensities": settings["intensities"], "replications": args.replications,
                 "synonyms": settings["synonyms"], "fits": fits_per_vocab * len(vocab_sizes)},
        "threads": THREADS,
        "full_grid_seconds": round(full, 1),
        "batched_seconds_per_vocab": {str(k): round(v, 1) for k, v in batched_seconds.items()},
        "sequential_seconds_estimated": round(sequential, 1),
        "sequential_seconds_estimated_from": f"{fits_timed} fits",
        "sequential_seconds_per_vocab": {str(k): round(v, 1) for k, v in sequential_seconds.items()},
        "speedup_vs_sequential": round(sequential / full, 2),
        "max_abs_mae_difference_batched_vs_sequential": float(np.format_float_scientific(difference, 2)),
        "targets": {"full_grid_seconds": 300, "speedup_vs_sequential": 10},
    }
    print("simulation: " + json.dumps(result))


if __name__ == "__main__":
    main()
