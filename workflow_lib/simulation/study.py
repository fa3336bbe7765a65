"""The simulation study of the paper (Section 4, Supplement "Details on simulation studies"): the fits of one
vocabulary size, the `simulation_fit` rule's command.

Per replication, a bigram truth and its training data; per synonym rule (`oracle`, `empirical`) and intensity, a
perturbed copy (m = 2) and a neural bigram fitted to both; the `shrinkage` control (simulation.regulariser); and
per fit the MAE readings against the truth, the held-out log-loss and the unseen pairs the copy reaches. The
summary is its own module (simulation.summary), so that a change to the summary reruns no fit. What each step
computes and why: docs/method.md §5; the streams, readings and what they leave: docs/theory.md, "The simulation
study".
"""

from __future__ import annotations

import argparse
import logging
import time
from typing import cast

import numpy as np

from workflow_lib.cli import StageError, parse_json_arg, run
from workflow_lib.files import write_parquet
from workflow_lib.perturb.perturber import perturb
from workflow_lib.perturb.synonym_table import SynonymTable, _row_keys

log = logging.getLogger("workflow_lib.simulation.study")
SYNONYM_RULES = ("oracle", "empirical")
CONTROL = "shrinkage"  # the arm of the regulariser control (no synonyms, no intensity)
TRUTH, INIT, TRAIN, PERTURB, HELDOUT = 0, 1, 2, 3, 4  # stream ids under (seed, V, replication)
# Pairs x vocabulary entries of one chunk of models trained together: keeps every [B, pairs, V] tensor small
# enough to be reused by the allocator instead of being page-faulted in at every step.
CHUNK_ELEMENTS = 2_000_000


def stream(seed: int, vocab_size: int, replication: int, kind: int, *extra: int) -> np.random.SeedSequence:
    return np.random.SeedSequence([seed, vocab_size, replication, kind, *extra])


def intensity_key(intensity: float) -> int:
    return round(intensity * 1_000_000)


def sample_truth(
    vocab_size: int, n_sequences: int, seq_len: int, concentration: float, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """(M [V, V], sequences [n, L]): Dirichlet rows, uniform first tokens, then L-1 bigram steps."""
    M = rng.dirichlet(np.full(vocab_size, concentration), size=vocab_size)
    return M, sample_sequences(M, n_sequences, seq_len, rng)


def sample_sequences(M: np.ndarray, n_sequences: int, seq_len: int, rng: np.random.Generator) -> np.ndarray:
    """n sequences [n, L] of the bigram M: uniform first tokens, then L-1 steps."""
    vocab_size = M.shape[0]
    cumulative = np.cumsum(M, axis=1)
    x = np.empty((n_sequences, seq_len), dtype=np.int64)
    x[:, 0] = rng.integers(vocab_size, size=n_sequences)
    for t in range(1, seq_len):  # vectorised over sequences: inverse CDF of each row
        u = rng.random(n_sequences)
        x[:, t] = np.minimum((cumulative[x[:, t - 1]] < u[:, None]).sum(1), vocab_size - 1)
    return x


def empirical_bigram(x: np.ndarray, vocab_size: int) -> np.ndarray:
    """Row-normalised counts of the training pairs; rows of unseen tokens are zero."""
    counts = pair_counts(x, vocab_size).astype(np.float64)
    totals = counts.sum(1, keepdims=True)
    return np.divide(counts, totals, out=np.zeros_like(counts), where=totals > 0)


def pair_counts(x: np.ndarray, vocab_size: int) -> np.ndarray:
    return np.bincount((x[:, :-1] * vocab_size + x[:, 1:]).ravel(), minlength=vocab_size * vocab_size).reshape(
        vocab_size, vocab_size
    )


def synonym_table(P: np.ndarray, x: np.ndarray, threshold_factor: float) -> SynonymTable:
    """The synonym sets S_t of every occurrence X_t, t = 2..L-1, laid out for the shared perturber.

    Occurrence k is (sequence k // (L-2), position 1 + k % (L-2)); its candidates are those v with
    P[prev, v] > c/V and P[v, next] > c/V, weighted by P[prev, v]. Memory: [occurrences, V] booleans.
    """
    V = P.shape[0]
    threshold = threshold_factor / V
    prev, nxt = x[:, :-2].ravel(), x[:, 2:].ravel()
    allowed = (P[prev] > threshold) & (P[:, nxt].T > threshold)
    rows, candidates = np.nonzero(allowed)  # row-major: grouped by occurrence, as the table wants
    offsets = np.zeros(len(prev) + 1, dtype=np.int64)
    np.cumsum(allowed.sum(1), out=offsets[1:])
    keys = _row_keys(rows, P[prev[rows], candidates], offsets)
    return SynonymTable(len(prev), offsets, candidates.astype(np.int64), keys)


def perturbed_copy(x: np.ndarray, table: SynonymTable, intensity: float, rng: np.random.Generator):
    """Copy 2 of the conditioning tokens x[:, :-1] and the counts (eligible, replaced, changed): a replaced
    token may be replaced by itself (it can be in its own set), `changed` counts the others."""
    occurrences = np.arange(table.vocab_size, dtype=np.int64)
    result = perturb(occurrences, np.array([0, table.vocab_size]), "replacement", intensity, table, rng)
    cond = x[:, :-1].copy()
    middle = cond[:, 1:].copy().ravel()
    changed = int((middle[result.picked] != result.values[result.picked]).sum())
    middle[result.picked] = result.values[result.picked]
    cond[:, 1:] = middle.reshape(len(x), -1)
    eligible = int((np.diff(table.offsets) > 0).sum())
    return cond, eligible, len(result.picked), changed


def unseen_pairs_reached(copy: np.ndarray, x: np.ndarray, vocab_size: int) -> int:
    """How many cells (a, b) never observed as a pair of D the perturbed copy holds as training pairs.

    The copy trains on (copy[:, t], x[:, t + 1]): a replacement of X_t by v adds the pair (v, X_{t+1}) and leaves
    the target of the pair before it (X_t) as it was, so (X_{t-1}, v) is never a training pair. With `empirical`
    synonyms, v needs P_D(X_{t+1} | v) > c/|V| > 0, i.e. (v, X_{t+1}) in D: the count is 0 by construction
    (tests/simulation/test_simulation_reach.py measures it); with `oracle` synonyms it need not be.
    """
    seen = pair_counts(x, vocab_size).ravel() > 0
    cells = np.unique(copy * vocab_size + x[:, 1:])
    return int((~seen[cells]).sum())


def mae_readings(M_hat: np.ndarray, M: np.ndarray, x: np.ndarray) -> dict:
    """The three MAE readings of one estimate and the uniform predictor's, with the cell counts."""
    V = M.shape[0]
    seen_pairs = pair_counts(x, V) > 0
    unseen_rows = ~cast(np.ndarray, seen_pairs.any(1))
    error, uniform = np.abs(M_hat - M), np.abs(1.0 / V - M)
    out: dict[str, int | float | None] = {
        "n_unseen_rows": int(unseen_rows.sum()),
        "n_unseen_pairs": int((~seen_pairs).sum()),
    }
    for name, cells in (
        ("unseen_rows", np.broadcast_to(unseen_rows[:, None], M.shape)),
        ("unseen_pairs", ~seen_pairs),
        ("all", np.ones_like(seen_pairs)),
    ):
        empty = not cells.any()
        out[f"mae_{name}"] = None if empty else float(error[cells].mean())
        out[f"uniform_{name}"] = None if empty else float(uniform[cells].mean())
    return out


def units_of(original: np.ndarray, copy: np.ndarray, x: np.ndarray, batch_unit: str):
    """(cond, target) [U, P] of D plus its copy: sequences (P = L-1 pairs) or single pairs (P = 1)."""
    cond = np.concatenate([original, copy])
    target = np.concatenate([x[:, 1:], x[:, 1:]])
    if batch_unit == "pairs":
        return cond.reshape(-1, 1), target.reshape(-1, 1)
    return cond, target


def fit_vocabulary(vocab_size: int, settings: dict, threads: int | None = None, chunk: int | None = None) -> list[dict]:
    """Every replication x synonym rule x intensity of one vocabulary size, one row per fit, and with
    `shrinkage` one row per replication for the control arm (the intensity-0 fit shrunk, no training of its own).

    The fits train together in chunks of `chunk` models (default: as many as keep the logits of one step
    near CHUNK_ELEMENTS floats); chunk=1 trains them one by one, with the same results.
    """
    import torch

    from workflow_lib.simulation.model import ModelSettings, train_bigrams
    from workflow_lib.simulation.regulariser import heldout_nll, heldout_pairs, shrink, tune_shrinkage

    if threads:
        torch.set_num_threads(threads)
    V, seed = vocab_size, settings["seed"]
    rules, intensities = settings["synonyms"], sorted(settings["intensities"])
    if intensities[0] != 0:
        raise StageError("simulation.intensities must contain 0, the baseline every difference is taken against")
    unknown = sorted(set(rules) - set(SYNONYM_RULES))
    if unknown:
        raise StageError(f"simulation.synonyms: unknown rule(s) {unknown}; allowed: {', '.join(SYNONYM_RULES)}")
    model = ModelSettings.from_config(settings)
    jobs, rows = [], []  # jobs: (row index, replication, cond, target)
    truths = {}
    for rep in range(settings["replications"]):
        M, x = sample_truth(
            V,
            settings["n_sequences"],
            settings["seq_len"],
            settings["dirichlet"],
            np.random.default_rng(stream(seed, V, rep, TRUTH)),
        )
        heldout = sample_sequences(
            M, settings["heldout_sequences"], settings["seq_len"], np.random.default_rng(stream(seed, V, rep, HELDOUT))
        )
        truths[rep] = (M, x, heldout_pairs(heldout))
        original = x[:, :-1]
        conditions = [("none", 0.0, original, 0, 0, 0, 0.0)]
        for rule in rules:
            P = M if rule == "oracle" else empirical_bigram(x, V)
            table = synonym_table(P, x, settings["threshold_factor"])
            mean_candidates = float(np.diff(table.offsets).mean())
            for alpha in intensities[1:]:
                rng = np.random.default_rng(stream(seed, V, rep, PERTURB, intensity_key(alpha)))
                copy, eligible, replaced, changed = perturbed_copy(x, table, alpha, rng)
                conditions.append((rule, alpha, copy, eligible, replaced, changed, mean_candidates))
        unseen_rows = ~cast(np.ndarray, pair_counts(x, V).any(1))
        for rule, alpha, copy, eligible, replaced, changed, mean_candidates in conditions:
            cond, target = units_of(original, copy, x, settings["batch_unit"])
            new_rows = int(unseen_rows[np.unique(copy)].sum())
            reached = unseen_pairs_reached(copy, x, V)
            rows.append(
                {
                    "vocab_size": V,
                    "replication": rep,
                    "arm": rule,
                    "intensity": float(alpha),
                    "n_eligible": eligible,
                    "n_replaced": replaced,
                    "n_changed": changed,
                    "n_unseen_rows_perturbed": new_rows,
                    "n_unseen_pairs_reached": reached,
                    "mean_synonyms": mean_candidates,
                }
            )
            jobs.append((len(rows) - 1, rep, cond, target))

    units, pairs = jobs[0][2].shape
    per_step = V * (min(model.batch_size, units) * pairs if model.dropout_masks == "pair" else V)  # logits of one model
    chunk = chunk or max(1, CHUNK_ELEMENTS // per_step)
    started = time.perf_counter()
    controls = []
    for first in range(0, len(jobs), chunk):
        part = jobs[first : first + chunk]
        M_hat = train_bigrams(
            np.stack([j[2] for j in part]),
            np.stack([j[3] for j in part]),
            V,
            model,
            [stream(seed, V, j[1], INIT) for j in part],
            [stream(seed, V, j[1], TRAIN) for j in part],
        )
        for (index, rep, _, _), estimate in zip(part, M_hat):
            M, x, (held_cond, held_target) = truths[rep]
            rows[index].update(mae_readings(estimate, M, x), heldout_nll=heldout_nll(estimate, held_cond, held_target))
            if settings["shrinkage"] and rows[index]["arm"] == "none":
                lam = tune_shrinkage(estimate, held_cond, held_target)
                shrunk = shrink(estimate, lam)
                controls.append(
                    {
                        "vocab_size": V,
                        "replication": rep,
                        "arm": CONTROL,
                        "shrinkage": lam,
                        **mae_readings(shrunk, M, x),
                        "heldout_nll": heldout_nll(shrunk, held_cond, held_target),
                    }
                )
        log.info("V=%d: %d/%d fits done (%.1fs)", V, first + len(part), len(jobs), time.perf_counter() - started)
    return expand_baseline(rows, rules) + sorted(controls, key=lambda r: r["replication"])


def expand_baseline(rows: list[dict], rules: list[str]) -> list[dict]:
    """The intensity-0 fit (D twice) is the same for every synonym rule: one row per rule, so each rule's
    curve starts from it. Sorted by (arm, intensity, replication)."""
    out = []
    for row in rows:
        for rule in rules if row["arm"] == "none" else [row["arm"]]:
            out.append({**row, "arm": rule})
    return sorted(out, key=lambda r: (r["arm"], r["intensity"], r["replication"]))


COLUMNS = {
    "vocab_size": "Int32",
    "replication": "Int32",
    "arm": "String",  # a synonym rule (oracle, empirical) at an intensity, or the control (shrinkage)
    "intensity": "Float64",  # null for the control
    "shrinkage": "Float64",  # the control's lambda; null for a perturbation arm
    "heldout_nll": "Float64",
    "mae_unseen_rows": "Float64",
    "mae_unseen_pairs": "Float64",
    "mae_all": "Float64",
    "uniform_unseen_rows": "Float64",
    "uniform_unseen_pairs": "Float64",
    "uniform_all": "Float64",
    "n_unseen_rows": "Int32",
    "n_unseen_pairs": "Int32",
    "n_eligible": "Int32",
    "n_replaced": "Int32",
    "n_changed": "Int32",
    "n_unseen_rows_perturbed": "Int32",
    "n_unseen_pairs_reached": "Int32",  # unseen cells of D that the perturbed copy holds as training pairs
    "mean_synonyms": "Float64",
}


def results_table(rows: list[dict]):
    import polars as pl

    return pl.DataFrame(rows, schema={k: getattr(pl, v) for k, v in COLUMNS.items()})


def main() -> None:
    parser = argparse.ArgumentParser(description="Simulation study (paper Section 4): the fits of one |V|")
    sub = parser.add_subparsers(dest="command", required=True)
    fit = sub.add_parser("fit", help="all replications, rules and intensities of one vocabulary size")
    fit.add_argument("--vocab-size", type=int, required=True)
    fit.add_argument("--settings", required=True, help="the simulation config section as JSON (seed resolved)")
    fit.add_argument("--threads", type=int, default=None)
    fit.add_argument("--output", required=True)
    args = parser.parse_args()
    settings = parse_json_arg(args.settings, "--settings")
    log.info("simulation V=%d settings %s", args.vocab_size, settings)
    write_parquet(results_table(fit_vocabulary(args.vocab_size, settings, args.threads)), args.output)


if __name__ == "__main__":
    run(main)
