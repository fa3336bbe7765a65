"""Benchmark of the simulation study: the paper's full grid, batched, against the same fits one by one.

    .venv/bin/python bench/simulation.py [--replications 100] [--sequential-reps 1]

The grid is the schema's defaults (the paper: |V| in 50..800, 7 intensities, 100 replications) with oracle
synonyms only, as the paper runs it (the schema's default adds the empirical rule since issue 52; `make
simulation` times the study with both rules and the shrinkage control: docs/benchmarks.md), trained as `snakemake --cores 2` trains it: one single-threaded `simulation_fit` job per |V| on
each core (fit_vocabulary, models in chunks). Training the same 3,500 fits one by one would take far too
long, so the sequential time is estimated: for every |V| the first `--sequential-reps` replications (all
their intensities) are fitted with chunk=1 and their time per fit is scaled to the grid's fit count; those
fits are also compared with the batched ones (they must agree). Times are CPU seconds of the single-threaded
workers, which a busy shared machine does not inflate; `full_grid_seconds` is the wall time they give on two
idle cores (each |V| job to the least loaded core, longest first), the measured wall time is reported too.
The last line is `simulation: {json}`.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import time

import shared  # noqa: F401 - the repository on sys.path
import torch

from workflow_lib.config import load_schema
from workflow_lib.simulation.study import fit_vocabulary

CORES = 2
MAE_COLUMNS = ("mae_unseen_rows", "mae_unseen_pairs", "mae_all")


def paper_settings() -> tuple[dict, list[int]]:
    props = load_schema()["properties"]["simulation"]["properties"]
    settings = {k: v["default"] for k, v in props.items() if k not in ("enabled", "vocab_sizes")}
    settings["seed"] = 42
    settings["synonyms"] = ["oracle"]  # the paper's arm alone: the grid the numbers in docs/benchmarks.md were taken on
    return settings, props["vocab_sizes"]["default"]


def max_difference(batched: list[dict], sequential: list[dict]) -> float:
    index = {(r["arm"], r["intensity"], r["replication"]): r for r in batched}
    worst = 0.0
    for row in sequential:
        other = index[(row["arm"], row["intensity"], row["replication"])]
        for column in MAE_COLUMNS:
            if row[column] is not None:
                worst = max(worst, abs(row[column] - other[column]))
    return worst


def run_task(task):
    """One pool task: ("batched" | "sequential" | "naive", V, settings) -> (rows, wall seconds, CPU seconds)."""
    kind, V, settings = task
    if kind == "naive":
        return None, None, naive_fit_seconds(V, settings)
    wall, cpu = time.perf_counter(), time.process_time()
    rows = fit_vocabulary(V, settings, 1, chunk=1 if kind == "sequential" else None)
    return rows, time.perf_counter() - wall, time.process_time() - cpu


def naive_fit_seconds(V: int, settings: dict, fits: int = 2) -> float:
    """CPU seconds per fit of the textbook implementation, for context: an nn.Module, autograd cross-entropy
    and torch.optim.Adam, one fit at a time, on data of the grid's shape (random pairs: the cost does not
    depend on them)."""
    from torch import nn

    pairs = 2 * settings["n_sequences"] * (settings["seq_len"] - 1)
    gen = torch.Generator().manual_seed(0)
    cond, target = torch.randint(V, (pairs,), generator=gen), torch.randint(V, (pairs,), generator=gen)
    start = time.process_time()
    for _ in range(fits):
        d, h = settings["embedding_dim"], settings["hidden_dim"]
        model = nn.Sequential(
            nn.Embedding(V, d), nn.Linear(d, h), nn.ReLU(), nn.Dropout(settings["dropout"]), nn.Linear(h, V)
        )
        optimizer = torch.optim.Adam(model.parameters(), lr=settings["lr"], weight_decay=settings["weight_decay"])
        for _ in range(settings["epochs"]):
            order = torch.randperm(pairs, generator=gen)
            for first in range(0, pairs, settings["batch_size"]):
                batch = order[first : first + settings["batch_size"]]
                loss = nn.functional.cross_entropy(model(cond[batch]), target[batch])
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
    return (time.process_time() - start) / fits


def product_floor_seconds(vocab_sizes: list[int], settings: dict, fits_per_vocab: int) -> dict:
    """CPU seconds the grid's three matrix products per step would take alone (nothing else of a step), at the
    rates this core reaches for their shapes: a lower bound for any fp32 implementation with per-pair dropout."""
    torch.set_num_threads(1)
    pairs, h = settings["batch_size"], settings["hidden_dim"]
    steps = settings["epochs"] * -(-2 * settings["n_sequences"] * (settings["seq_len"] - 1) // pairs)
    total, rates = 0.0, {}
    for V in vocab_sizes:
        B = 8
        hid, W2, grad = torch.randn(B, pairs, h), torch.randn(B, h, V), torch.randn(B, pairs, V)
        products = (
            lambda hid=hid, W2=W2: torch.bmm(hid, W2),
            lambda hid=hid, grad=grad: torch.bmm(hid.transpose(1, 2), grad),
            lambda grad=grad, W2=W2: torch.bmm(grad, W2.transpose(1, 2)),
        )
        seconds = 0.0
        for product in products:
            product()
            start, n = time.perf_counter(), 20
            for _ in range(n):
                product()
            seconds += (time.perf_counter() - start) / (n * B)
        rates[str(V)] = round(3 * pairs * h * V / seconds / 1e9, 1)
        total += seconds * steps * fits_per_vocab
    return {
        "cpu_seconds": round(total, 1),
        "seconds_on_cores": round(total / CORES, 1),
        "gmac_per_second_per_core": rates,
    }


def makespan(seconds: list[float], cores: int) -> float:
    """Wall time of jobs of these lengths on `cores` idle cores, longest first to the least loaded core."""
    loads = [0.0] * cores
    for s in sorted(seconds, reverse=True):
        loads[loads.index(min(loads))] += s
    return max(loads)


def single_threaded() -> None:
    torch.set_num_threads(1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replications", type=int, default=100)
    parser.add_argument("--sequential-reps", type=int, default=1)
    args = parser.parse_args()
    settings, vocab_sizes = paper_settings()
    settings["replications"] = args.replications
    fits_per_vocab = args.replications * (1 + len(settings["synonyms"]) * (len(settings["intensities"]) - 1))
    order = sorted(vocab_sizes, reverse=True)  # longest jobs first, as a scheduler would
    sample = {**settings, "replications": args.sequential_reps}
    with multiprocessing.get_context("spawn").Pool(CORES, initializer=single_threaded) as pool:
        start = time.perf_counter()
        batched = dict(zip(order, pool.map(run_task, [("batched", V, settings) for V in order], chunksize=1)))
        full = time.perf_counter() - start
        one_by_one = dict(zip(order, pool.map(run_task, [("sequential", V, sample) for V in order], chunksize=1)))
        naive = dict(zip(order, pool.map(run_task, [("naive", V, settings) for V in order], chunksize=1)))

    floor = product_floor_seconds(vocab_sizes, settings, fits_per_vocab)
    per_fit, difference, fits_timed = {}, 0.0, 0
    for V in vocab_sizes:
        rows, _, cpu = one_by_one[V]
        n = len({(r["intensity"], r["replication"]) for r in rows})
        fits_timed += n
        per_fit[V] = cpu / n
        difference = max(difference, max_difference(batched[V][0], rows))
        print(
            f"|V|={V:4d}  batched {batched[V][2]:7.1f} CPU s for {fits_per_vocab} fits "
            f"({batched[V][2] / fits_per_vocab:.3f}s per fit)   one by one {per_fit[V]:.3f} CPU s per fit",
            flush=True,
        )
    batched_cpu = {V: batched[V][2] for V in vocab_sizes}
    sequential_cpu = sum(per_fit[V] * fits_per_vocab for V in vocab_sizes)
    idle = makespan(list(batched_cpu.values()), CORES)
    result = {
        "grid": {
            "vocab_sizes": vocab_sizes,
            "intensities": settings["intensities"],
            "replications": args.replications,
            "synonyms": settings["synonyms"],
            "fits": fits_per_vocab * len(vocab_sizes),
        },
        "cores": CORES,
        "layout": "one single-threaded process per core, one |V| job at a time (as snakemake --cores 2)",
        # CPU seconds do not depend on what else runs on the machine; the wall time below does.
        "full_grid_seconds": round(idle, 1),
        "full_grid_seconds_is": "the 2-core wall time from the measured CPU time of each |V| job (longest first)",
        "full_grid_wall_seconds_measured": round(full, 1),
        "load_average_at_end": round(os.getloadavg()[0], 2),
        "batched_cpu_seconds": round(sum(batched_cpu.values()), 1),
        "batched_cpu_seconds_per_vocab": {str(V): round(batched_cpu[V], 1) for V in vocab_sizes},
        "sequential_cpu_seconds_estimated": round(sequential_cpu, 1),
        "sequential_seconds_estimated_from": f"{fits_timed} fits",
        "sequential_cpu_seconds_per_fit": {str(V): round(per_fit[V], 3) for V in vocab_sizes},
        "speedup_vs_sequential": round(sequential_cpu / sum(batched_cpu.values()), 2),
        "naive_autograd_cpu_seconds_per_fit": {str(V): round(naive[V][2], 3) for V in vocab_sizes},
        "speedup_vs_naive_autograd_sequential": round(
            sum(naive[V][2] * fits_per_vocab for V in vocab_sizes) / sum(batched_cpu.values()), 2
        ),
        "matrix_products_alone": floor,
        "max_abs_mae_difference_batched_vs_sequential": float(f"{difference:.2e}"),
        "targets": {"full_grid_seconds": 300, "speedup_vs_sequential": 10},
    }
    print("simulation: " + json.dumps(result))


if __name__ == "__main__":
    main()
