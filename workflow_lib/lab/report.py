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
from typing import Mapping

import numpy as np
import polars as pl

from workflow_lib.cli import StageError, parse_json_arg, run
from workflow_lib.files import atomic_path
from workflow_lib.lab.bounds import UNPERTURBED, check_models, uncertainty_table

log = logging.getLogger("workflow_lib.lab.report")
FAMILY_NOTES = {"composition": "classes changed into held-out compositions",
                "synonym": "words replaced by unseen same-class synonyms"}




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
    from workflow_lib.report.figures import MARKERS, _empty

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
    parser = argparse.ArgumentParser(prog="python -m workflow_lib.lab.report")
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
    from workflow_lib.lab.perturbation import bound_constants

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
