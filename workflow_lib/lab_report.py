"""Reading the theory lab: the extrapolation uncertainty U(delta) of a group of models, measured against the
paper's bounds (REFERENCE.md section 7) on the builtin grammar, whose true next-word law is known.

U_P(delta) is a sup over prefixes within Hamming distance delta of the support and over model pairs that
agree on the support. Here the sup runs over the prefix rows of one (family, delta) and over every pair of
the trained models, so U_max is an estimate of U from below. The trained models do not agree exactly on
the support, so beside the robustness bound 2 C_{T,delta} (which presumes they do) the table carries the
bound that holds for any pair by the triangle inequality:
TV_X'(P, P') <= TV(P(.|X'), P(.|X0)) + TV_X0(P, P') + TV(P'(.|X0), P'(.|X')) <= 2 C + TV_X0(P, P'),
X0 the support prefix the row was made from (its `base`). All TVs are on the models' cells: the words the
tokenizer spells as one token, and one "other" cell for the rest; coarsening never increases a TV, so the
bounds hold on these cells too.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import Callable, Mapping, Sequence

import numpy as np
import polars as pl

from workflow_lib.cli import StageError, parse_json_arg, run
from workflow_lib.files import atomic_path

log = logging.getLogger("workflow_lib.lab_report")

UNPERTURBED = "none"
TOLERANCE = 1e-12  # slack for float round-off in every "respects" check
FAMILY_NOTES = {"composition": "classes changed into held-out compositions",
                "synonym": "words replaced by unseen same-class synonyms"}

# constants(q0, family, beta, last, delta) -> (alpha, C), or {(perturbation, family, delta): (alpha, C)}.
Constants = Callable[..., object] | Mapping[tuple, object]


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


COLUMNS = ["family", "perturbation", "delta", "n_prefixes", "n_models", "n_pairs", "U_max", "U_mean", "U_base",
           "slack", "tv_truth_mean", "tv_truth_2se", "truth_other_mass", "alpha", "C", "C_draws", "bound_robust",
           "bound_contraction", "bound_triangle", "violations_triangle", "respects_robust", "respects_triangle",
           "respects_contraction"]


def _num(value, digits: int = 3) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def _check(respects, count=None) -> str:
    if respects is None:
        return "—"
    return "yes" if respects else ("no" if count is None else f"no ({count})")


def _violations(part: pl.DataFrame, respects: str, bound: str, name: str) -> str:
    """Where U_max exceeds a bound. Delta 0 is left out of the bare 2C: the theorem presumes models that agree
    on the support, so any disagreement there exceeds 2C = 0; the support slack measures it instead."""
    if respects == "respects_robust":
        part = part.filter(pl.col("delta") > 0)
    broken = part.filter(~pl.col(respects))
    if not broken.height:
        return f"{name} respected at every delta" + (" > 0" if respects == "respects_robust" else "")
    return f"{name} violated at " + "; ".join(
        f"delta={r['delta']}: U={r['U_max']:.3f} > {name}={r[bound]:.3f}"
        + (f" ({r['violations_triangle']} row/pairs)" if respects == "respects_triangle" else "")
        for r in broken.iter_rows(named=True))


def _findings(table: pl.DataFrame) -> list[str]:
    """Plain sentences read off the table, one bullet per (family, perturbation)."""
    lines = []
    for (family, p), part in table.group_by(["family", "perturbation"], maintain_order=True):
        part = part.sort("delta")
        first, last = part.row(0, named=True), part.row(-1, named=True)
        truth = (f"TV to the truth goes from {first['tv_truth_mean']:.3f} at delta={first['delta']} to "
                 f"{last['tv_truth_mean']:.3f} at delta={last['delta']}.")
        if p == UNPERTURBED:
            lines.append(f"- **{family} prefixes, no perturbation**: U_base goes from {first['U_max']:.3f} at "
                         f"delta={first['delta']} to {last['U_max']:.3f} at delta={last['delta']}; {truth}")
            continue
        outside = part.filter(pl.col("delta") > 0)
        if outside.height and (outside["C"] == 0).all():
            theory = ("C = 0 at every delta > 0, so Assumption SP_perturb holds and U_perturb(delta) should equal "
                      "the models' disagreement on the paired support prefixes; it differs from it by at most "
                      f"{(part['U_max'] - part['slack']).abs().max():.3f}.")
        else:
            theory = "C > 0 off the support, so Assumption SP_perturb fails and only the robustness bound applies."
        compared = outside.filter(pl.col("U_base").is_not_null())
        versus = (f" U_perturb is below U_base at {(compared['U_max'] < compared['U_base']).sum()} of "
                  f"{compared.height} deltas > 0 (mean U_perturb − U_base "
                  f"{(compared['U_max'] - compared['U_base']).mean():+.3f})." if compared.height else "")
        lines.append(f"- **{family} prefixes, perturbation {p}**: {theory} "
                     f"{_violations(part, 'respects_robust', 'bound_robust', '2C')} (the models disagree by "
                     f"{first['slack']:.3f} on the support itself); "
                     f"{_violations(part, 'respects_triangle', 'bound_triangle', '2Ĉ + slack')}; "
                     f"{_violations(part, 'respects_contraction', 'bound_contraction', '2αU_base')}.{versus} {truth}")
    return lines


def markdown(table: pl.DataFrame) -> str:
    """The table for the summary (3 decimals) and the findings read off it."""
    n_models = table["n_models"].max() if table.height else 0
    head = ["family", "perturbation", "δ", "prefixes", "U_max", "U_mean", "U_base", "support slack", "2C", "Ĉ",
            "2αU_base", "2Ĉ + slack", "TV truth ± 2SE", "≤ 2C", "≤ 2Ĉ + slack (violations)", "≤ 2αU_base"]
    md = [f"Extrapolation uncertainty on the synthetic grammar: max / mean pairwise TV over {n_models} models "
          "(U_max estimates U from below); support slack = the same pairs' max TV on the paired delta-0 "
          "prefixes; Ĉ = the largest share of T's draws that left a prefix different from its support prefix "
          "(C's Monte Carlo counterpart); 2Ĉ + slack = the bound, with Ĉ for C, that holds exactly for models "
          "that do not agree on the support, pair by pair and prefix by prefix.",
          "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in table.iter_rows(named=True):
        truth = _num(r["tv_truth_mean"]) + ("" if r["tv_truth_2se"] is None else f" ± {r['tv_truth_2se']:.3f}")
        cells = [r["family"], r["perturbation"], str(r["delta"]), str(r["n_prefixes"]), _num(r["U_max"]),
                 _num(r["U_mean"]), _num(r["U_base"]), _num(r["slack"]), _num(r["bound_robust"]), _num(r["C_draws"]),
                 _num(r["bound_contraction"]), _num(r["bound_triangle"]), truth, _check(r["respects_robust"]),
                 _check(r["respects_triangle"], r["violations_triangle"]), _check(r["respects_contraction"])]
        md.append("| " + " | ".join(cells) + " |")
    return "\n".join([*md, "", *_findings(table)]) + "\n"


def _legend_grid(fig, axes, columns: int) -> None:
    """One legend below the panels: a column per kind of line (measured, 2C, ...), a row per perturbation."""
    from matplotlib.lines import Line2D

    entries = {}
    for ax in np.ravel(axes):
        for handle, label in zip(*ax.get_legend_handles_labels()):
            entries.setdefault(label, handle)
    kinds = [[(h, lab) for lab, h in entries.items() if lab.startswith(prefix)] for prefix in LEGEND_KINDS[:columns]]
    rows = max(len(k) for k in kinds)
    blank = (Line2D([], [], linestyle="none"), "")
    # Bounds exist for perturbed lines only: pad their columns at the top, so each row is one perturbation.
    handles, labels = zip(*[entry for kind in kinds for entry in [blank] * (rows - len(kind)) + kind])
    fig.legend(handles, labels, loc="outside lower center", ncol=len(kinds), fontsize=7, frameon=False)


LEGEND_KINDS = ["U_", "2C, ", "2Ĉ + slack", "2α"]


def figure(table: pl.DataFrame, stem: str) -> None:
    """One column of panels per prefix family. Top: measured U_max against delta per perturbation ("none" is
    U_base) with each perturbation's robustness bound 2C (dashed), the bound 2C + support slack that holds for
    models that disagree on the support (dash-dot) and the contraction bound 2 alpha U_base (dotted); bounds
    above 1 are drawn at 1 (a TV never exceeds 1). Bottom: TV to the truth, mean ± 2 SE over prefixes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from workflow_lib.figures import _save
    from workflow_lib.lm_figures import MARKERS, _empty

    families = sorted(set(table["family"].to_list())) or ["(none)"]
    perturbations = list(dict.fromkeys(table["perturbation"].to_list()))
    colors = ["black", "dimgray", "darkgray"]
    style = {p: dict(marker=MARKERS[i % len(MARKERS)], color=colors[i % len(colors)]) for i, p in enumerate(perturbations)}
    n_models = table["n_models"].max() if table.height else 0
    fig, axes = plt.subplots(2, len(families), figsize=(max(4.8 * len(families), 7.0), 7.6), squeeze=False,
                             sharey="row", layout="constrained")
    for col, family in enumerate(families):
        top, bottom = axes[0][col], axes[1][col]
        part = table.filter(pl.col("family") == family)
        if not part.height:
            _empty(top, "no prefixes")
            _empty(bottom, "no prefixes")
            continue
        holding = [p for (p,), g in part.filter((pl.col("delta") > 0) & pl.col("C").is_not_null())
                   .group_by("perturbation", maintain_order=True) if (g["C"] == 0).all()]
        note = FAMILY_NOTES.get(family, "")
        top.set_title(f"{family} prefixes" + (f"\n({note})" if note else "")
                      + f"\nSP_perturb (C = 0) holds for T: {', '.join(holding) or 'none of them'}", fontsize=9)
        for p in perturbations:
            line = part.filter(pl.col("perturbation") == p).sort("delta")
            x = line["delta"].to_list()
            name = "U_base (no perturbation)" if p == UNPERTURBED else f"U_perturb, T = {p}"
            # The unperturbed line is wider with larger markers, drawn first: a perturbed line on top of it
            # leaves it visible around its edges.
            size = dict(linewidth=2.6, markersize=8) if p == UNPERTURBED else dict(linewidth=1.4, markersize=5)
            top.plot(x, line["U_max"].to_list(), linestyle="-", label=name, **size, **style[p])
            bottom.errorbar(x, line["tv_truth_mean"].to_list(), yerr=[e or 0.0 for e in line["tv_truth_2se"].to_list()],
                            linestyle="-", capsize=2, label=name, **size, **style[p])
            if p == UNPERTURBED:
                continue
            faint = dict(markerfacecolor="white", markersize=5, linewidth=1.0, **style[p])
            for column, label, linestyle in (("bound_robust", f"2C, T = {p}", "--"),
                                             ("bound_triangle", f"2Ĉ + slack, T = {p}", "-."),
                                             ("bound_contraction", f"2α·U_base, T = {p}", ":")):
                if line[column].null_count() < line.height:
                    top.plot(x, np.minimum(line[column].fill_null(np.nan).to_numpy(), 1.0), linestyle=linestyle,
                             label=label, **faint)
        ticks = sorted(set(part["delta"].to_list()))
        for ax in (top, bottom):
            ax.set_xticks(ticks)
            ax.set_ylim(-0.02, 1.05)
            ax.tick_params(labelsize=8)
        bottom.set_xlabel("δ: Hamming distance to the training support", fontsize=9)
        if col == 0:
            top.set_ylabel(f"max pairwise TV over {n_models} models\n(estimate of U from below; bounds capped at 1)",
                           fontsize=8)
            bottom.set_ylabel("TV to the true next-word law\n(mean over prefixes and models, ± 2 SE)", fontsize=8)
    fig.suptitle("Extrapolation uncertainty U(δ) on the synthetic grammar: measured against the bounds "
                 "(slack: the pair's TV on the paired support prefix)", fontsize=9)
    if table.height:
        _legend_grid(fig, axes, len(LEGEND_KINDS))
    _save(fig, stem)
    plt.close(fig)


def settings_specs(settings: Mapping) -> dict[str, dict]:
    """Perturbation name -> {q0, beta, last} from the lab settings: either that mapping itself or
    {"perturbations": {name: {q0, beta[, last]}}, "last": l} (the rule's settings; a spec's own `last` wins)."""
    if "perturbations" not in settings:
        return dict(settings)
    shared = {"last": settings["last"]} if "last" in settings else {}
    return {name: {**shared, **spec} for name, spec in settings["perturbations"].items()}


def _read_model(path: str) -> dict:
    with np.load(path, allow_pickle=False) as data:
        missing = {"laws", "perturbations", "single"} - set(data.files)
        if missing:
            raise StageError(f"{path}: missing arrays {sorted(missing)}")
        label = str(data["label"][()]) if "label" in data.files else Path(path).stem
        model = {"laws": data["laws"], "perturbations": data["perturbations"], "single": data["single"], "label": label}
        if "differs" in data.files:  # the draws' coupling shares (lab_laws): the exact triangle check uses them
            model["differs"] = data["differs"]
        return model


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m workflow_lib.lab_report")
    parser.add_argument("--prefixes", required=True,
                        help="the lab's prefixes Parquet (row, family, delta, base, text, truth)")
    parser.add_argument("--laws", nargs="+", required=True, help="one .npz per model of the group")
    parser.add_argument("--settings", required=True, help="JSON: perturbation name -> {q0, beta, last}")
    parser.add_argument("--csv", required=True)
    parser.add_argument("--markdown", required=True)
    parser.add_argument("--figure", required=True, help="writes STEM.png and STEM.pdf")
    args = parser.parse_args()
    settings = parse_json_arg(args.settings, "lab_report --settings")
    specs = settings_specs(settings)
    prefixes = pl.read_parquet(args.prefixes)
    missing = {"row", "family", "delta", "base", "truth"} - set(prefixes.columns)
    if missing:
        raise StageError(f"{args.prefixes}: missing columns {sorted(missing)}")
    models = [_read_model(path) for path in args.laws]
    check_models(models, args.laws, rows=prefixes.height, words=prefixes["truth"].list.len().max())
    from workflow_lib.lab import bound_constants

    try:
        table = uncertainty_table(prefixes, models, specs, bound_constants, names=args.laws)
    except StageError as error:
        raise StageError(str(error).replace("prefixes:", f"{args.prefixes}:", 1)) from error
    with atomic_path(args.csv) as tmp:
        table.write_csv(tmp)
    with atomic_path(args.markdown) as tmp:
        tmp.write_text(markdown(table))
    figure(table, args.figure)
    perturbed = table.filter(pl.col("perturbation") != UNPERTURBED)
    log.info("theory lab: %d models, %d prefixes; 2C violated at %d of %d (perturbation, family, delta), "
             "triangle bound at %d (%d row/pairs)", len(models), prefixes.height, (~perturbed["respects_robust"]).sum(),
             perturbed.height, (~perturbed["respects_triangle"]).sum(), perturbed["violations_triangle"].sum())


if __name__ == "__main__":
    run(main)
