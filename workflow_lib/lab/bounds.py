"""The lab's numbers: U(delta), the TV to the truth, and the bounds, from the models' laws on every prefix.

See lab.report for what the table reports; everything here works on arrays of laws.
"""

from __future__ import annotations

from typing import Callable, Mapping, Sequence

import numpy as np
import polars as pl

from workflow_lib.cli import StageError

UNPERTURBED = "none"
TOLERANCE = 1e-12  # slack for float round-off in every "respects" check

# constants(q0, family, beta, last, delta) -> (alpha, C), or {(perturbation, family, delta): (alpha, C)}.
Constants = Callable[..., object] | Mapping[tuple, object]
COLUMNS = ["family", "perturbation", "delta", "n_prefixes", "n_models", "n_pairs", "U_max", "U_mean", "U_base",
           "slack", "tv_truth_mean", "tv_truth_2se", "truth_other_mass", "alpha", "C", "C_draws", "bound_robust",
           "bound_contraction", "bound_triangle", "violations_triangle", "respects_robust", "respects_triangle",
           "respects_contraction"]


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


def _constants_of(constants: Constants, specs: Mapping[str, dict], perturbation: str, family: str,
                  delta: int) -> tuple[float, float]:
    if isinstance(constants, Mapping):
        value = constants.get((perturbation, family, delta))
        if value is None:
            raise StageError(f"no bound constants (alpha, C) for perturbation {perturbation!r}, family {family!r}, "
                             f"delta {delta}")
    else:
        if perturbation not in specs:
            raise StageError(f"perturbation {perturbation!r} of the laws has no spec in the settings "
                             f"(specs for: {sorted(specs)})")
        spec = specs[perturbation]
        if missing := {"q0", "beta", "last"} - set(spec):
            raise StageError(f"perturbation {perturbation!r}: its spec lacks {sorted(missing)}")
        value = constants(spec["q0"], family, float(spec["beta"]), int(spec["last"]), int(delta))
    if isinstance(value, Mapping):
        value = (value["alpha"], value["C"])
    alpha, c = (float(v) for v in value)
    return alpha, c


def check_models(models: Sequence[Mapping], names: Sequence[str], rows: int | None = None,
                 words: int | None = None) -> list[str]:
    """Refuse laws the table cannot read: non-finite or not probability vectors, R / W / perturbation
    lists that differ between models, fewer than two models. Returns the perturbation names."""
    if len(models) < 2:
        raise StageError(f"laws of {len(models)} model(s) ({', '.join(names) or 'none'}): the pairwise TV needs "
                         "at least 2 models")
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
            raise StageError(f"{name}: laws are not probability vectors (min {laws.min():.3g}, sums within "
                             f"[{laws.sum(-1).min():.6f}, {laws.sum(-1).max():.6f}])")
        if perturbations != first:
            raise StageError(f"{name}: perturbations {perturbations} differ from {names[0]}'s {first}")
        if len(set(perturbations)) != len(perturbations) or laws.shape[0] != len(perturbations):
            raise StageError(f"{name}: laws has {laws.shape[0]} perturbations for the names {perturbations}")
        if laws.shape[2] != single.size + 1:
            raise StageError(f"{name}: laws has {laws.shape[2]} cells, expected {single.size} words + 1 'other'")
        expected_rows = rows if rows is not None else np.asarray(models[0]["laws"]).shape[1]
        expected_words = words if words is not None else np.asarray(models[0]["single"]).size
        if laws.shape[1] != expected_rows or single.size != expected_words:
            raise StageError(f"{name}: laws for {laws.shape[1]} rows and {single.size} words, expected "
                             f"{expected_rows} rows and {expected_words} words (the prefixes and {names[0]})")
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


def uncertainty_table(prefixes: pl.DataFrame, models: Sequence[Mapping], specs: Mapping[str, dict],
                      constants: Constants, names: Sequence[str] | None = None) -> pl.DataFrame:
    """One row per (family, perturbation, delta): the measured U (max and mean pairwise TV over rows and
    model pairs), TV to the coarsened truth, the bound constants and each bound with whether U respects it.

    `models`: npz-like mappings with `laws` [P, R, W+1], `perturbations` [P], `single` [W]. Every model's laws
    and the truth are folded onto the words all models spell as one token. `constants`: a callable
    (q0, family, beta, last, delta) -> (alpha, C) or a dict {(perturbation, family, delta): (alpha, C)}.
    """
    names = list(names or [str(np.asarray(m.get("label", f"model {i}"))) for i, m in enumerate(models)])
    truth, base_row = _prefix_arrays(prefixes)
    perturbations = check_models(models, names, rows=truth.shape[0], words=truth.shape[1])
    single = np.logical_and.reduce([np.asarray(m["single"], dtype=bool).ravel() for m in models])
    laws = np.stack([fold(m["laws"], single) for m in models])  # [M, P, R, W+1]
    target = coarse_truth(truth, single)
    frame = prefixes.sort("row")
    families, deltas = frame["family"].to_numpy(), frame["delta"].to_numpy()
    order = sorted(perturbations, key=lambda p: (p != UNPERTURBED, perturbations.index(p)))
    # The share of T's draws in which a row's perturbed words differ from its support prefix's (written by
    # lab_laws, the same for every model): with common random numbers, a pair's TV on a row is at most twice it
    # plus the pair's TV on the support prefix, exactly, so the triangle check below cannot fail by Monte Carlo.
    differs = _differs(models, names, perturbations, truth.shape[0])
    measured = {}
    for p in order:
        tv = pairwise_tv(laws[:, perturbations.index(p)])  # [pairs, R]
        tv_truth = 0.5 * np.abs(laws[:, perturbations.index(p)] - target).sum(-1)  # [M, R]
        measured[p] = tv, tv[:, base_row], tv_truth  # tv[:, base_row]: each row's pair TV on its support prefix
    records = []
    for family in sorted(set(families)):
        for p in order:
            tv, tv_base, tv_truth = measured[p]
            for delta in sorted(set(deltas[families == family])):
                idx = np.flatnonzero((families == family) & (deltas == delta))
                per_row = tv_truth[:, idx].mean(0)
                rec = {"family": family, "perturbation": p, "delta": int(delta), "n_prefixes": idx.size,
                       "n_models": len(models), "n_pairs": tv.shape[0], "U_max": tv[:, idx].max(),
                       "U_mean": tv[:, idx].mean(), "tv_truth_mean": tv_truth[:, idx].mean(),
                       "tv_truth_2se": 2 * per_row.std(ddof=1) / np.sqrt(idx.size) if idx.size > 1 else None,
                       "truth_other_mass": target[idx, -1].mean(), "slack": tv_base[:, idx].max(),
                       "alpha": None, "C": None, "C_draws": None, "bound_robust": None, "bound_triangle": None,
                       "violations_triangle": None}
                if p != UNPERTURBED:
                    alpha, c = _constants_of(constants, specs, p, family, int(delta))
                    coupling = c if differs is None else differs[perturbations.index(p), idx]
                    rec |= {"alpha": alpha, "C": c, "C_draws": np.max(coupling), "bound_robust": 2 * c,
                            "bound_triangle": (2 * coupling + tv_base[:, idx]).max(),
                            "violations_triangle": int((tv[:, idx] > 2 * coupling + tv_base[:, idx] + TOLERANCE).sum())}
                records.append(rec)
    schema = {"family": pl.Utf8, "perturbation": pl.Utf8, "delta": pl.Int64, "n_prefixes": pl.Int64,
              "n_models": pl.Int64, "n_pairs": pl.Int64, "U_max": pl.Float64, "U_mean": pl.Float64,
              "tv_truth_mean": pl.Float64, "tv_truth_2se": pl.Float64, "truth_other_mass": pl.Float64,
              "slack": pl.Float64, "alpha": pl.Float64, "C": pl.Float64, "C_draws": pl.Float64, "bound_robust": pl.Float64,
              "bound_triangle": pl.Float64, "violations_triangle": pl.Int64}
    table = pl.DataFrame(records, schema=schema, orient="row")
    base = table.filter(pl.col("perturbation") == UNPERTURBED).select("family", "delta", pl.col("U_max").alias("U_base"))
    table = table.join(base, on=["family", "delta"], how="left", maintain_order="left")
    perturbed = pl.col("perturbation") != UNPERTURBED
    table = table.with_columns(
        bound_contraction=pl.when(perturbed).then(2 * pl.col("alpha") * pl.col("U_base")),
        respects_robust=pl.when(perturbed).then(pl.col("U_max") <= pl.col("bound_robust") + TOLERANCE),
        respects_triangle=pl.when(perturbed).then(pl.col("violations_triangle") == 0))
    table = table.with_columns(
        respects_contraction=pl.when(perturbed & pl.col("bound_contraction").is_not_null())
        .then(pl.col("U_max") <= pl.col("bound_contraction") + TOLERANCE))
    return table.select(COLUMNS)


def _differs(models: Sequence[Mapping], names: Sequence[str], perturbations: list[str], rows: int) -> np.ndarray | None:
    """The draws' coupling shares [P, R] (None where the files predate them); every model must have the same."""
    if not all("differs" in m for m in models):
        return None
    first = np.asarray(models[0]["differs"], dtype=float)
    if first.shape != (len(perturbations), rows):
        raise StageError(f"{names[0]}: differs has shape {first.shape}, expected {(len(perturbations), rows)}")
    for name, m in zip(names[1:], models[1:]):
        if not np.array_equal(np.asarray(m["differs"], dtype=float), first):
            raise StageError(f"{name}: its perturbation draws differ from {names[0]}'s; the laws of a group must come "
                             "from the same lab settings (seed, last, draws, perturbations)")
    return first
