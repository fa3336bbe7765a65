"""The `lab` rule: T's exact constants, the premise-meeting model classes and the trained models' disagreement, as
one table each (CSV and the summary's Markdown), generated findings, and one figure.

What each number is, with the paper's line that defines it, is in the README's "The theory lab". In short:
- T's constants: alpha(T) and C_{T,delta} = eta_T(delta) exactly for the T that runs (lab.perturbation), beside the
  Proposition's values, which hold only when T perturbs every position (l = L) or the prefixes differ inside T's
  window only.
- Premise classes (lab.premise): U_base(delta) and U_perturb(delta) of model classes whose pairs agree on the
  support, exact or with two-sided bounds, and where each theorem's bound holds, is vacuous or is violated.
- Trained models (lab.bounds): their pairwise TV, reported descriptively; they disagree on the support, so no
  bound is marked for them.
All TVs of trained models are on the models' cells: the words the tokenizer spells as one token, and one "other"
cell for the rest.
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
    return "—" if value is None or (isinstance(value, float) and np.isnan(value)) else f"{value:.{digits}f}"


def _row(cells) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


def _table(head: list[str], rows: list[list]) -> list[str]:
    return [_row(head), "|" + "---|" * len(head), *(_row(r) for r in rows)]


def constants_frame(premise: pl.DataFrame) -> pl.DataFrame:
    """T's constants per (T, family, delta), one copy (they do not depend on the model class)."""
    return (premise.filter(pl.col("class") == premise["class"][0])
            .select("perturbation", "q0", "beta", "last", "family", "delta", "alpha", "alpha_proposition", "C",
                    "C_proposition", "C_rows"))


def constants_of(premise: pl.DataFrame) -> dict[tuple, dict]:
    return {(r["perturbation"], r["family"], r["delta"]): r for r in constants_frame(premise).iter_rows(named=True)}


def _span(values: pl.Series) -> str:
    low, high = values.min(), values.max()
    return f"{low:.3f}" if abs(high - low) < 5e-4 else f"{low:.3f} to {high:.3f}"


def _interval(low, high) -> str:
    if low is None:
        return "no admissible pair"
    return _num(low) if abs(high - low) < 5e-4 else f"[{low:.3f}, {high:.3f}]"


def findings(trained: pl.DataFrame, premise: pl.DataFrame, length: int) -> list[str]:
    """Plain sentences read off the three tables; every number is one the tables hold."""
    lines = []
    consts = constants_frame(premise).filter(pl.col("delta") > 0)
    for (name,), part in consts.group_by("perturbation", maintain_order=True):
        r = part.row(0, named=True)
        worst = part["C_rows"].max()
        if r["q0"] == "uniform":
            lines.append(
                f"- **T = {name}** (uniform replacement of the last {r['last']} of {length} words, beta = {r['beta']}): "
                f"alpha(T) = {r['alpha']:.3f} and C = {_span(part['C'])} for delta >= 1, exactly; the Proposition states "
                f"alpha <= {r['alpha_proposition']:.3f} and C = {_span(part['C_proposition'])}. On the lab's rows, whose "
                f"changes lie inside the window, TV(T(.|X'), T(.|X0)) is at most {worst:.3f}.")
        else:
            lines.append(f"- **T = {name}** (class replacement, beta = {r['beta']}): alpha(T) = {r['alpha']:.0f} and "
                         f"C = {part['C'].max():.0f} for delta >= 1 (a changed function word or a held-out class "
                         "sequence is never restored); on the rows TV(T(.|X'), T(.|X0)) is 0 exactly where every "
                         f"change keeps its class, else 1 (max {worst:.0f}).")
    beta_needed = 1 - 1 / (2 * length)
    lines.append(f"- A contraction (2 alpha < 1) needs alpha(T) < 1/2: with l < L, never; with l = L = {length}, the "
                 f"Proposition's bound (1 - beta) L < 1/2 asks beta > {beta_needed:.4f}, i.e. nearly every word replaced "
                 "at random.")
    for (cls, name), part in premise.group_by(["class", "perturbation"], maintain_order=True):
        verdicts = {k: sorted(set(part.filter(pl.col("delta") > 0)[k].to_list()))
                    for k in ("robustness", "extrapolability", "contraction")}
        if not part["admissible"].all():
            lines.append(f"- **Premise class `{cls}`, T = {name}**: no pair of its members agrees on the support once "
                         "perturbed (T leaves the set where they agree from support prefixes), so U_perturb is a sup over "
                         "no pairs and no theorem says anything about this class here.")
            continue
        top = part.sort("U_perturb_high", descending=True).row(0, named=True)
        reach = ("is 0 on every row" if top["U_perturb_high"] <= 0 else f"reaches "
                 f"{_interval(top['U_perturb_low'], top['U_perturb_high'])} ({top['family']} rows, delta = {top['delta']})")
        lines.append(f"- **Premise class `{cls}`, T = {name}**: U_base reaches {part['U_base'].max():.3f} on the rows; "
                     f"U_perturb {reach}; globally U_perturb^inf = {top['U_perturb_inf']:.3f} against 2 alpha U_base^inf "
                     f"= {2 * top['alpha'] * top['U_base_inf']:.3f}. Robustness (2C): {', '.join(verdicts['robustness'])}; "
                     f"with the Proposition's C: "
                     f"{', '.join(sorted(set(part['robustness_proposition'].to_list())))}; Extrapolability on rows with "
                     f"T(.|X') = T(.|X0): {', '.join(verdicts['extrapolability'])}; Contractivity (global): "
                     f"{', '.join(verdicts['contraction'])}.")
    for (family, name), part in trained.group_by(["family", "perturbation"], maintain_order=True):
        part = part.sort("delta")
        first, last = part.row(0, named=True), part.row(-1, named=True)
        mc = ("" if last["U_max_half_draws"] is None else
              f"; from half of the {last['draws']} draws U_max at delta = {last['delta']} would be "
              f"{last['U_max_half_draws']:.3f}")
        lines.append(f"- **Trained models, {family} rows, T = {name}**: the {first['n_models']} models disagree by "
                     f"{first['U_max']:.3f} (max TV) on the support and by {last['U_max']:.3f} at delta = {last['delta']} "
                     f"(growth {last['U_growth']:+.3f}){mc}; TV to the truth {first['tv_truth_mean']:.3f} -> "
                     f"{last['tv_truth_mean']:.3f}. They do not agree on the support, so this is not U of any class.")
    return lines


def _premise_rows(premise: pl.DataFrame) -> list[list]:
    """The premise table's rows off the support (delta 0 holds U = 0 by definition); a (class, T) with no
    admissible pair is one row."""
    rows = []
    for (cls, name), part in premise.group_by(["class", "perturbation"], maintain_order=True):
        if not part["admissible"].all():
            rows.append([cls, name, "all", "all", _num(part["U_base"].max()), "no admissible pair", "—", "—", "—", "—",
                         "no admissible pair"])
            continue
        for r in part.filter(pl.col("delta") > 0).iter_rows(named=True):
            rows.append([cls, name, r["family"], r["delta"], _num(r["U_base"]),
                         _interval(r["U_perturb_low"], r["U_perturb_high"]), _num(2 * r["C"]), r["robustness"],
                         r["robustness_proposition"], r["extrapolability"], r["contraction"]])
    return rows


def markdown(trained: pl.DataFrame, premise: pl.DataFrame, length: int) -> str:
    """The summary's lab section: T's constants, the premise classes, the trained models, and the findings."""
    consts = constants_frame(premise)
    md = ["**T's constants**, exact for the T that runs (alpha, C) beside the Proposition's statement (Prop.); "
          "C on rows: the largest TV(T(.|X'), T(.|X0)) between a row and its own support prefix.", ""]
    md += _table(["T", "l", "family", "δ", "α", "α (Prop.)", "C", "C (Prop.)", "C on rows"],
                 [[r["perturbation"], r["last"], r["family"], r["delta"], _num(r["alpha"]), _num(r["alpha_proposition"]),
                   _num(r["C"]), _num(r["C_proposition"]), _num(r["C_rows"])] for r in consts.iter_rows(named=True)])
    md += ["", "**Model classes that meet the premise** (pairs agree on the support; README, 'The theory lab'): U on "
           "the lab's rows, exact or Clopper-Pearson 95% bounds, and each theorem's verdict.", ""]
    md += _table(["class", "T", "family", "δ", "U_base", "U_perturb", "2C", "robustness", "robustness (Prop.'s C)",
                  "extrapolability", "contraction (global)"],
                 _premise_rows(premise))
    md += ["", "**Trained models, descriptive**: max / mean pairwise TV over the group on each delta set (not U: the "
           "models disagree on the support), its growth from delta 0, the max from half the draws (Monte Carlo "
           "check), and the TV to the true law.", ""]
    md += _table(["family", "T", "δ", "prefixes", "draws", "U_max", "U_mean", "growth", "U_max (half draws)",
                  "support disagreement", "Ĉ", "TV truth ± 2SE"],
                 [[r["family"], r["perturbation"], r["delta"], r["n_prefixes"], r["draws"], _num(r["U_max"]),
                   _num(r["U_mean"]), _num(r["U_growth"]), _num(r["U_max_half_draws"]), _num(r["support_disagreement"]),
                   _num(r["C_draws"]), _num(r["tv_truth_mean"]) + ("" if r["tv_truth_2se"] is None
                                                                    else f" ± {r['tv_truth_2se']:.3f}")]
                  for r in trained.iter_rows(named=True)])
    return "\n".join([*md, "", *findings(trained, premise, length)]) + "\n"


def figure(trained: pl.DataFrame, premise: pl.DataFrame, stem: str) -> None:
    """A column per prefix family. Top: the trained models' max pairwise TV against delta, per T ("none": no
    perturbation). Middle: the `unseen` premise class, U_base and U_perturb per T (a band where the draws bound it).
    Bottom: the trained models' TV to the true law, mean ± 2 SE. At most five lines a panel."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from workflow_lib.figures import _save, empty_panel, legend_below, line_style

    families = sorted(set(trained["family"].to_list()) | set(premise["family"].to_list())) or ["(none)"]
    names = list(dict.fromkeys([UNPERTURBED, *trained["perturbation"].to_list(), *premise["perturbation"].to_list()]))
    style = {name: line_style(i) for i, name in enumerate(names)}
    fig, axes = plt.subplots(3, len(families), figsize=(max(4.6 * len(families), 7.0), 9.0), squeeze=False,
                             sharey="row", layout="constrained")
    cls = premise.filter(pl.col("class") == "unseen")
    for col, family in enumerate(families):
        top, middle, bottom = (axes[r][col] for r in range(3))
        note = FAMILY_NOTES.get(family, "")
        top.set_title(f"{family} prefixes" + (f"\n({note})" if note else ""), fontsize=9)
        part = trained.filter(pl.col("family") == family)
        if not part.height:
            empty_panel(top, "no trained models")
            empty_panel(bottom, "no trained models")
        for name in dict.fromkeys(part["perturbation"].to_list()):
            line = part.filter(pl.col("perturbation") == name).sort("delta")
            label = "no perturbation" if name == UNPERTURBED else f"T = {name}"
            top.plot(line["delta"].to_list(), line["U_max"].to_list(), label=label, **style[name])
            bottom.errorbar(line["delta"].to_list(), line["tv_truth_mean"].to_list(), capsize=2, label=label,
                            yerr=[e or 0.0 for e in line["tv_truth_2se"].to_list()], **style[name])
        rows = cls.filter(pl.col("family") == family)
        if rows.height:
            base = rows.group_by("delta").agg(pl.col("U_base").max()).sort("delta")
            middle.plot(base["delta"].to_list(), base["U_base"].to_list(), label="no perturbation", **style[UNPERTURBED])
        drawn, hidden = {}, []
        for name in dict.fromkeys(rows["perturbation"].to_list()):
            line = rows.filter(pl.col("perturbation") == name).sort("delta")
            if line["U_perturb_low"].null_count():
                continue
            x, low, high = line["delta"].to_list(), line["U_perturb_low"].to_list(), line["U_perturb_high"].to_list()
            # A line drawn over an equal one hides it: the panel names the T's that coincide, so none seems missing.
            same = next((group for group in hidden if np.allclose(drawn[group[0]], high)), None)
            if same is None:
                hidden.append([name])
            else:
                same.append(name)
            drawn[name] = high
            middle.plot(x, high, label=f"T = {name}", **style[name])
            middle.fill_between(x, low, high, color=style[name]["color"], alpha=0.2, linewidth=0)
        notes = ["\n".join(f"T = {name}" for name in group) for group in hidden if len(group) > 1]
        if notes:
            middle.text(0.35, 0.5, "equal, drawn over each other:\n" + "\n\n".join(notes), transform=middle.transAxes,
                        fontsize=7, va="center", in_layout=False)
        if not rows.height:
            empty_panel(middle, "no premise class")
        for ax in (top, middle, bottom):
            ax.set_xticks(sorted(set(part["delta"].to_list()) | set(rows["delta"].to_list())))
            ax.set_ylim(-0.02, 1.02)
            ax.tick_params(labelsize=8)
        bottom.set_xlabel("δ: Hamming distance to the training support", fontsize=9)
        if col == 0:
            top.set_ylabel("trained models:\nmax pairwise TV (not U)", fontsize=8)
            middle.set_ylabel("premise class 'unseen':\nU_base, U_perturb (exact)", fontsize=8)
            bottom.set_ylabel("trained models: TV to the\ntrue law (mean ± 2 SE)", fontsize=8)
    fig.suptitle("Theory lab on the synthetic grammar: trained models (descriptive) and a model class that meets "
                 "the theorems' premise", fontsize=9)
    legend_below(fig, axes)
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
        for optional in ("differs", "laws_half"):  # the draws' coupling shares, the half-draws average (lab_laws)
            if optional in data.files:
                model[optional] = data[optional]
        return model


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m workflow_lib.lab.report")
    parser.add_argument("--prefixes", required=True,
                        help="the lab's prefixes Parquet (row, family, delta, base, ids, truth)")
    parser.add_argument("--laws", nargs="+", required=True, help="one .npz per model of the group")
    parser.add_argument("--builtin", required=True, help="JSON: the builtin dataset's grammar settings")
    parser.add_argument("--settings", required=True,
                        help="JSON: perturbations {name: {q0, beta}}, last, length, draws, premise_draws, seed")
    parser.add_argument("--csv", required=True, help="the trained models' table")
    parser.add_argument("--premise", required=True, help="the premise classes' table (CSV)")
    parser.add_argument("--markdown", required=True)
    parser.add_argument("--figure", required=True, help="writes STEM.png and STEM.pdf")
    args = parser.parse_args()
    settings = parse_json_arg(args.settings, "lab --settings")
    if missing := {"perturbations", "last", "length", "draws", "premise_draws", "seed"} - set(settings):
        raise StageError(f"lab --settings lacks {sorted(missing)}")
    specs = settings_specs(settings)
    prefixes = pl.read_parquet(args.prefixes).sort("row")
    missing = {"row", "family", "delta", "base", "ids", "truth"} - set(prefixes.columns)
    if missing:
        raise StageError(f"{args.prefixes}: missing columns {sorted(missing)}")
    models = [_read_model(path) for path in args.laws]
    check_models(models, args.laws, rows=prefixes.height, words=prefixes["truth"].list.len().max())
    from workflow_lib.lab import prefix_sets
    from workflow_lib.lab.laws import grammar_of
    from workflow_lib.lab.premise import premise_table

    grammar = grammar_of(parse_json_arg(args.builtin, "lab --builtin"))
    lex = prefix_sets.lexicon(grammar, settings["seed"])
    premise = premise_table(grammar, lex, prefixes, specs, settings["length"], settings["seed"], settings["premise_draws"])
    try:
        trained = uncertainty_table(prefixes, models, constants_of(premise), settings["draws"], names=args.laws)
    except StageError as error:
        raise StageError(str(error).replace("prefixes:", f"{args.prefixes}:", 1)) from error
    for table, path in ((trained, args.csv), (premise, args.premise)):
        with atomic_path(path) as tmp:
            table.write_csv(tmp)
    with atomic_path(args.markdown) as tmp:
        tmp.write_text(markdown(trained, premise, settings["length"]))
    figure(trained, premise, args.figure)
    log.info("theory lab: %d models, %d prefixes; premise-class verdicts: %s", len(models), prefixes.height,
             dict(premise.group_by("robustness").len().iter_rows()))


if __name__ == "__main__":
    run(main)
