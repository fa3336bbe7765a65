"""The trained models' side of the lab: U(delta) measured descriptively, the TV to the truth, and T's constants.

The trained models of a group disagree on the support itself, so they are not a pair of the class in U's
definition (paper lines 351-379): their largest pairwise TV on a delta set is reported as what it is, their
disagreement, with its growth from delta 0, and never marked against a bound. Their perturbed laws are Monte Carlo
averages over T's draws, which bias every TV upward (Jensen): the table gives the same U computed from half the
draws, so the reader sees how far the estimate still moves. One exact inequality is asserted, not reported: with
common random numbers a pair's TV on a row is at most twice the share of draws that changed the row's words plus
the pair's TV on its support prefix; a violation is a bug.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import polars as pl

from workflow_lib.cli import StageError

UNPERTURBED = "none"
TOLERANCE = 1e-12  # slack for float round-off in the consistency assertion
CONSTANTS = ("alpha", "alpha_proposition", "C", "C_proposition", "C_rows")
COLUMNS = [
    "family",
    "perturbation",
    "delta",
    "n_prefixes",
    "n_models",
    "n_pairs",
    "draws",
    "U_max",
    "U_mean",
    "U_growth",
    "U_max_half_draws",
    "support_disagreement",
    "tv_truth_mean",
    "tv_truth_2se",
    "truth_other_mass",
    *CONSTANTS,
    "C_draws",
]


def fold(laws: np.ndarray, single: np.ndarray) -> np.ndarray:
    """Laws [..., W+1] on the cells of `single` [W]: the mass of words not spelled as one token moves into
    the last ("other") cell and their word cells become 0."""
    laws = np.array(laws, dtype=np.float64)
    multi = np.flatnonzero(~np.asarray(single, dtype=bool))
    if multi.size:
        laws[..., -1] += laws[..., multi].sum(axis=-1)
        laws[..., multi] = 0.0
    return laws


def coarse_truth(truth: np.ndarray, single: np.ndarray) -> np.ndarray:
    """The true law [R, W] on the models' cells [R, W+1] (see `fold`)."""
    truth = np.asarray(truth, dtype=np.float64)
    return fold(np.concatenate([truth, np.zeros(truth.shape[:-1] + (1,))], axis=-1), single)


def pairwise_tv(laws: np.ndarray) -> np.ndarray:
    """TV of every unordered model pair (i < j, in np.triu_indices order) on every row: [M, R, C] ->
    [M (M - 1) / 2, R]."""
    laws = np.asarray(laws, dtype=np.float64)
    first, second = np.triu_indices(laws.shape[0], k=1)
    return 0.5 * np.abs(laws[first] - laws[second]).sum(axis=-1)


def check_models(
    models: Sequence[Mapping], names: Sequence[str], rows: int | None = None, words: int | None = None
) -> list[str]:
    """Refuse laws the table cannot read: non-finite or not probability vectors, R / W / perturbation
    lists that differ between models, fewer than two models. Returns the perturbation names."""
    if len(models) < 2:
        raise StageError(
            f"laws of {len(models)} model(s) ({', '.join(names) or 'none'}): the pairwise TV needs at least 2 models"
        )
    first = [str(p) for p in np.asarray(models[0]["perturbations"]).ravel()]
    for model, name in zip(models, names):
        laws = np.asarray(model["laws"], dtype=np.float64)
        perturbations = [str(p) for p in np.asarray(model["perturbations"]).ravel()]
        single = np.asarray(model["single"]).ravel()
        if laws.ndim != 3:
            raise StageError(f"{name}: laws has shape {laws.shape}, expected [perturbations, rows, words + 1]")
        if not np.isfinite(laws).all():
            raise StageError(f"{name}: laws has {int((~np.isfinite(laws)).sum())} non-finite values (NaN or inf)")
        if (laws < -1e-9).any() or np.abs(laws.sum(-1) - 1).max() > 1e-4:
            raise StageError(
                f"{name}: laws are not probability vectors (min {laws.min():.3g}, sums within "
                f"[{laws.sum(-1).min():.6f}, {laws.sum(-1).max():.6f}])"
            )
        if perturbations != first:
            raise StageError(f"{name}: perturbations {perturbations} differ from {names[0]}'s {first}")
        if len(set(perturbations)) != len(perturbations) or laws.shape[0] != len(perturbations):
            raise StageError(f"{name}: laws has {laws.shape[0]} perturbations for the names {perturbations}")
        if laws.shape[2] != single.size + 1:
            raise StageError(f"{name}: laws has {laws.shape[2]} cells, expected {single.size} words + 1 'other'")
        expected_rows = rows if rows is not None else np.asarray(models[0]["laws"]).shape[1]
        expected_words = words if words is not None else np.asarray(models[0]["single"]).size
        if laws.shape[1] != expected_rows or single.size != expected_words:
            raise StageError(
                f"{name}: laws for {laws.shape[1]} rows and {single.size} words, expected "
                f"{expected_rows} rows and {expected_words} words (the prefixes and {names[0]})"
            )
    return first


def _prefix_arrays(prefixes: pl.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Truth [R, W] in `row` order and, per row, the row of its paired support prefix (same family and
    base, delta 0)."""
    frame = prefixes.sort("row")
    if frame["row"].to_list() != list(range(frame.height)):
        raise StageError("prefixes: `row` must number the rows 0..R-1 once each")
    if frame.height == 0 or frame["truth"].list.len().n_unique() != 1:
        raise StageError("prefixes: truth must be one list of W word probabilities per row, the same W in every row")
    truth = np.array(frame["truth"].to_list(), dtype=np.float64)
    if not np.isfinite(truth).all():
        bad = frame["row"].to_numpy()[~np.isfinite(truth).all(axis=1)]
        raise StageError(f"prefixes: truth has non-finite values (NaN, inf or null) in rows {bad[:10].tolist()}")
    support = frame.filter(pl.col("delta") == 0).select("family", "base", pl.col("row").alias("base_row"))
    if support.select("family", "base").is_duplicated().any():
        raise StageError("prefixes: a (family, base) has more than one delta-0 row")
    paired = frame.join(support, on=["family", "base"], how="left").sort("row")
    if paired["base_row"].null_count():
        missing = paired.filter(pl.col("base_row").is_null()).select("family", "base").unique().rows()[:5]
        raise StageError(f"prefixes: no delta-0 support prefix for (family, base) {missing}")
    return truth, paired["base_row"].to_numpy()


def uncertainty_table(
    prefixes: pl.DataFrame,
    models: Sequence[Mapping],
    constants: Mapping[tuple, Mapping],
    draws: int,
    names: Sequence[str] | None = None,
) -> pl.DataFrame:
    """One row per (family, perturbation, delta): the models' largest and mean pairwise TV over the rows and pairs,
    its growth from delta 0, the same from half the draws, their TV to the coarsened truth, and T's constants.

    `models`: npz-like mappings with `laws` [P, R, W+1] (and `laws_half`, the average of the first half of the
    draws), `perturbations` [P], `single` [W]; laws and truth are folded onto the words all models spell as one
    token. `constants`: {(perturbation, family, delta): {alpha, alpha_proposition, C, C_proposition, C_rows}}."""
    names = list(names or [str(np.asarray(m.get("label", f"model {i}"))) for i, m in enumerate(models)])
    truth, base_row = _prefix_arrays(prefixes)
    perturbations = check_models(models, names, rows=truth.shape[0], words=truth.shape[1])
    single = np.logical_and.reduce([np.asarray(m["single"], dtype=bool).ravel() for m in models])
    laws = np.stack([fold(m["laws"], single) for m in models])  # [M, P, R, W+1]
    half = np.stack([fold(m["laws_half"], single) for m in models]) if all("laws_half" in m for m in models) else None
    target = coarse_truth(truth, single)
    frame = prefixes.sort("row")
    families, deltas = frame["family"].to_numpy(), frame["delta"].to_numpy()
    order = sorted(perturbations, key=lambda p: (p != UNPERTURBED, perturbations.index(p)))
    differs = _differs(models, names, perturbations, truth.shape[0])
    records = []
    for p in order:
        at = perturbations.index(p)
        tv = pairwise_tv(laws[:, at])  # [pairs, R]
        tv_half = None if half is None else pairwise_tv(half[:, at])
        tv_truth = 0.5 * np.abs(laws[:, at] - target).sum(-1)  # [M, R]
        if differs is not None:
            assert_coupling(tv, tv[:, base_row], differs[at], p)
        for family in sorted(set(families)):
            start = None
            for delta in sorted(set(deltas[families == family])):
                idx = np.flatnonzero((families == family) & (deltas == delta))
                per_row = tv_truth[:, idx].mean(0)
                u_max = float(tv[:, idx].max())
                start = u_max if start is None else start
                rec = {
                    "family": family,
                    "perturbation": p,
                    "delta": int(delta),
                    "n_prefixes": idx.size,
                    "n_models": len(models),
                    "n_pairs": tv.shape[0],
                    "draws": 1 if p == UNPERTURBED else draws,
                    "U_max": u_max,
                    "U_mean": float(tv[:, idx].mean()),
                    "U_growth": u_max - start,
                    "U_max_half_draws": None if tv_half is None or p == UNPERTURBED else float(tv_half[:, idx].max()),
                    "support_disagreement": float(tv[:, base_row[idx]].max()),
                    "tv_truth_mean": float(tv_truth[:, idx].mean()),
                    "tv_truth_2se": 2 * per_row.std(ddof=1) / np.sqrt(idx.size) if idx.size > 1 else None,
                    "truth_other_mass": float(target[idx, -1].mean()),
                    "C_draws": None if differs is None or p == UNPERTURBED else float(differs[at, idx].max()),
                    **dict.fromkeys(CONSTANTS),
                }
                if p != UNPERTURBED:
                    key = (p, family, int(delta))
                    if key not in constants:
                        raise StageError(f"no constants of T for perturbation {p!r}, family {family!r}, delta {delta}")
                    rec |= {c: None if constants[key][c] is None else float(constants[key][c]) for c in CONSTANTS}
                records.append(rec)
    records.sort(key=lambda r: (r["family"], order.index(r["perturbation"]), r["delta"]))
    schema = {c: pl.Float64 for c in COLUMNS} | {
        "family": pl.Utf8,
        "perturbation": pl.Utf8,
        "delta": pl.Int64,
        "n_prefixes": pl.Int64,
        "n_models": pl.Int64,
        "n_pairs": pl.Int64,
        "draws": pl.Int64,
    }
    return pl.DataFrame(records, schema=schema, orient="row").select(COLUMNS)


def assert_coupling(tv: np.ndarray, tv_base: np.ndarray, share: np.ndarray, perturbation: str) -> None:
    """An internal consistency check, not a finding: a row and its support prefix share every draw of T, and where
    their perturbed words coincide a model sees the same input, so TV_X'(P, P') <= 2 share + TV_X0(P, P') holds for
    any models, pair by pair and row by row. A violation means the laws or the draws are wrong."""
    excess = tv - (2 * share[None, :] + tv_base)
    if (excess > TOLERANCE).any():
        pair, row = np.unravel_index(int(np.argmax(excess)), excess.shape)
        raise StageError(
            f"lab: perturbation {perturbation!r}: the coupling inequality fails at row {row}, pair {pair} "
            f"(TV {tv[pair, row]:.6f} > 2 x {share[row]:.6f} + {tv_base[pair, row]:.6f}); the laws and "
            "their draws are inconsistent, which is a bug"
        )


def _differs(models: Sequence[Mapping], names: Sequence[str], perturbations: list[str], rows: int) -> np.ndarray | None:
    """The draws' coupling shares [P, R] (None where the files predate them); every model must have the same."""
    if not all("differs" in m for m in models):
        return None
    first = np.asarray(models[0]["differs"], dtype=float)
    if first.shape != (len(perturbations), rows):
        raise StageError(f"{names[0]}: differs has shape {first.shape}, expected {(len(perturbations), rows)}")
    for name, m in zip(names[1:], models[1:]):
        if not np.array_equal(np.asarray(m["differs"], dtype=float), first):
            raise StageError(
                f"{name}: its perturbation draws differ from {names[0]}'s; the laws of a group must come "
                "from the same lab settings (seed, last, draws, perturbations)"
            )
    return first
