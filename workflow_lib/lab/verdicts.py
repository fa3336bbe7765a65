"""The `lab` rule: T's exact constants, the premise-meeting model classes and the trained models' disagreement, as
tables (CSV and the summary's Markdown), generated findings, and one figure.

What each number is, with the paper's line that defines it, is in docs/theory.md, "The theory lab". In short:
- T's constants: alpha(T) and C_{T,delta} = eta_T(delta) exactly for the T that runs (lab.perturbation), beside the
  Proposition's values, upper bounds that hold only when T perturbs every position (l = L) or the prefixes differ inside T's
  window only.
- Premise classes (lab.premise, lab.theorems): U_base(delta) and U_perturb(delta) of model classes whose pairs agree
  on the support, exactly, as sups over every prefix within delta; each theorem's verdict from those sups; the
  lab's rows beside them as a descriptive sample.
- Trained models (lab.bounds): their pairwise TV, reported descriptively; they disagree on the support, so no
  bound is marked for them.
All TVs of trained models are on the models' cells: the words the tokenizer spells as one token, and one "other"
cell for the rest.
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import cast

import numpy as np
import polars as pl

from workflow_lib.cli import StageError, parse_json_arg, run
from workflow_lib.files import atomic_path
from workflow_lib.lab import perturbation
from workflow_lib.lab.bounds import UNPERTURBED, check_models, uncertainty_table

log = logging.getLogger("workflow_lib.lab.verdicts")
FAMILY_NOTES = {
    "composition": "classes changed into held-out compositions",
    "synonym": "words replaced by unseen same-class synonyms",
}


def _num(value, digits: int = 3) -> str:
    return "—" if value is None or (isinstance(value, float) and np.isnan(value)) else f"{value:.{digits}f}"


def _row(cells) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


def _table(head: list[str], rows: list[list]) -> list[str]:
    return [_row(head), "|" + "---|" * len(head), *(_row(r) for r in rows)]


def constants_frame(premise: pl.DataFrame) -> pl.DataFrame:
    """T's constants per (T, family, delta), one copy (they do not depend on the model class)."""
    return premise.filter(pl.col("class") == premise["class"][0]).select(
        "perturbation",
        "q0",
        "beta",
        "last",
        "family",
        "delta",
        "alpha",
        "alpha_proposition",
        "C",
        "C_proposition",
        "C_rows",
    )


def constants_of(premise: pl.DataFrame) -> dict[tuple, dict]:
    return {(r["perturbation"], r["family"], r["delta"]): r for r in constants_frame(premise).iter_rows(named=True)}


def sups_frame(premise: pl.DataFrame) -> pl.DataFrame:
    """One row per (class, T, delta): the sups and verdicts, which the premise table repeats for every family."""
    return premise.unique(subset=["class", "perturbation", "delta"], keep="first", maintain_order=True)


def _span(values: pl.Series) -> str:
    low, high = cast(float, values.min()), cast(float, values.max())
    return f"{low:.3f}" if abs(high - low) < 5e-4 else f"{low:.3f} to {high:.3f}"


def _by_delta(labels: list[str], deltas: list[int]) -> str:
    """'holds' when every delta reads the same, else 'holds (delta 1, 2), vacuous (delta 4)'."""
    groups = {label: [d for d, lab in zip(deltas, labels) if lab == label] for label in dict.fromkeys(labels)}
    if len(groups) == 1:
        return labels[0]
    return ", ".join(f"{label} (delta {', '.join(map(str, ds))})" for label, ds in groups.items())


def _extrapolability(verdict: str, sp: str) -> str:
    """Extrapolability's conclusion with its premise: a verdict only where SP_perturb holds (else the cell already
    says 'not applicable')."""
    return f"{verdict}, SP_perturb holds" if sp == "holds" else verdict


def _rows_sample(premise: pl.DataFrame, cls: str, name: str, delta: int) -> str:
    part = premise.filter((pl.col("class") == cls) & (pl.col("perturbation") == name) & (pl.col("delta") == delta))
    return "; ".join(
        f"{r['family']} {r['U_base_rows']:.3f} / {r['U_perturb_rows']:.3f}"
        for r in part.sort("family").iter_rows(named=True)
    )


def _contraction_findings(premise: pl.DataFrame, length: int) -> str:
    """Where alpha(T) < 1/2 starts, from the code's exact alpha, and the gains the exact sups show where the bound
    is vacuous (it is sufficient for a gain, not necessary)."""
    exact_beta, prop_beta = perturbation.contraction_betas(length)
    gains = [
        f"class `{r['class']}`, T = {r['perturbation']}: U_perturb^inf = {r['U_perturb_inf']:.3f} < U_base^inf = "
        f"{r['U_base_inf']:.3f} at alpha = {r['alpha']:.3f}"
        for r in sups_frame(premise)
        .unique(subset=["class", "perturbation"], keep="first", maintain_order=True)
        .iter_rows(named=True)
        if r["admissible"] and 2 * r["alpha"] >= 1 and r["U_perturb_inf"] < r["U_base_inf"] - 5e-4
    ]
    return (
        f"- The Contractivity bound 2 alpha U_base^inf is below U_base^inf only where alpha(T) < 1/2: with l < L "
        f"never (alpha = 1); with l = L = {length}, uniform replacement has the exact alpha = 1 - beta^L < 1/2 for "
        f"beta > {exact_beta:.4f} (the Proposition's bound (1 - beta) L < 1/2 asks beta > {prop_beta:.4f}). The "
        "bound is sufficient for a gain, not necessary: "
        + ("; ".join(gains) + "." if gains else "no admissible class here gains where the bound is vacuous.")
    )


def findings(trained: pl.DataFrame, premise: pl.DataFrame, length: int) -> list[str]:
    """Plain sentences read off the tables; every number is one the tables hold or one the code computes from
    the lab's settings (the beta where alpha(T) = 1/2)."""
    lines = []
    consts = constants_frame(premise).filter(pl.col("delta") > 0)
    for (name,), part in consts.group_by("perturbation", maintain_order=True):
        r = part.row(0, named=True)
        worst = cast(float, part["C_rows"].max())
        if r["q0"] == "uniform":
            lines.append(
                f"- **T = {name}** (uniform replacement of the last {r['last']} of {length} words, beta = {r['beta']}): "
                f"alpha(T) = {r['alpha']:.3f} and C = {_span(part['C'])} for delta >= 1, exactly; the Proposition states "
                f"alpha <= {r['alpha_proposition']:.3f} and C = {_span(part['C_proposition'])}. On the lab's rows, whose "
                f"changes lie inside the window, TV(T(.|X'), T(.|X0)) is at most {worst:.3f}."
            )
        else:
            kept = (
                "0 exactly where every change keeps its class"
                if r["beta"] >= 1
                else "at most 1 - beta^m (m changes; a bound, not the value) where every change keeps its class"
            )
            lines.append(
                f"- **T = {name}** (class replacement, beta = {r['beta']}): alpha(T) = {r['alpha']:.0f} and "
                f"C = {cast(float, part['C'].max()):.0f} for delta >= 1 (a changed function word or a held-out class "
                f"sequence is never restored); on the rows TV(T(.|X'), T(.|X0)) is {kept}, else 1 (max {worst:.3g})."
            )
    lines.append(_contraction_findings(premise, length))
    sups = sups_frame(premise)
    for (cls, name), part in sups.group_by(["class", "perturbation"], maintain_order=True):
        off = part.filter(pl.col("delta") > 0).sort("delta")
        if not off.height:
            continue
        g, deltas = off.row(0, named=True), off["delta"].to_list()
        rows_top = cast(
            float, premise.filter((pl.col("class") == cls) & (pl.col("perturbation") == name))["U_perturb_rows"].max()
        )
        if g["admissible"]:
            reach = (
                f"U_perturb(delta) = {', '.join(f'{u:.3f}' for u in off['U_perturb'])} at delta = "
                f"{', '.join(map(str, deltas))} (attained by {off['worst_prefix'][-1]}); on the lab's rows "
                f"U_perturb reaches {rows_top:.3f}"
            )
        else:
            reach = (
                "T moves a support prefix off the support with positive probability, so no two distinct members "
                "agree on the support once perturbed: the sup runs over a member paired with itself, and "
                "U_perturb(delta) = 0 at every delta"
            )
        extrapolability = [_extrapolability(v, sp) for v, sp in zip(off["extrapolability"], off["sp_perturb"])]
        lines.append(
            f"- **Premise class `{cls}`, T = {name}**, sups over every prefix within delta: U_base(delta) = "
            f"{_span(off['U_base'])} for delta >= 1; {reach}. Robustness (2C): "
            f"{_by_delta(off['robustness'].to_list(), deltas)}; with the Proposition's C: "
            f"{_by_delta(off['robustness_proposition'].to_list(), deltas)}; Extrapolability (U_perturb = 0): "
            f"{_by_delta(extrapolability, deltas)}; "
            f"Contractivity (Assumption UI holds: every base pair agrees on the support): U_perturb^inf = "
            f"{g['U_perturb_inf']:.3f} against 2 alpha U_base^inf = {2 * g['alpha'] * g['U_base_inf']:.3f}, "
            f"{g['contraction']}; with the Proposition's alpha: {g['contraction_proposition']}."
        )
    for (family, name), part in trained.group_by(["family", "perturbation"], maintain_order=True):
        part = part.sort("delta")
        first, last = part.row(0, named=True), part.row(-1, named=True)
        mc = (
            ""
            if last["U_max_half_draws"] is None
            else f"; from half of the {last['draws']} draws U_max at delta = {last['delta']} would be "
            f"{last['U_max_half_draws']:.3f}"
        )
        lines.append(
            f"- **Trained models, {family} rows, T = {name}**: the {first['n_models']} models disagree by "
            f"{first['U_max']:.3f} (max TV) on the support and by {last['U_max']:.3f} at delta = {last['delta']} "
            f"(growth {last['U_growth']:+.3f}){mc}; TV to the truth {first['tv_truth_mean']:.3f} -> "
            f"{last['tv_truth_mean']:.3f}. They do not agree on the support, so this is not U of any class."
        )
    return lines


def _premise_rows(premise: pl.DataFrame) -> list[list]:
    """The sups' rows off the support (delta 0 holds U = 0 by definition)."""
    rows = []
    for r in sups_frame(premise).filter(pl.col("delta") > 0).iter_rows(named=True):
        u_perturb = _num(r["U_perturb"]) + ("" if r["admissible"] else " (self-pairs only)")
        rows.append(
            [
                r["class"],
                r["perturbation"],
                r["delta"],
                _num(r["U_base"]),
                u_perturb,
                r["worst_prefix"],
                _rows_sample(premise, r["class"], r["perturbation"], r["delta"]),
                _num(2 * r["C"]),
                r["robustness"],
                r["robustness_proposition"],
                r["sp_perturb"],
                r["extrapolability"],
            ]
        )
    return rows


def _global_rows(premise: pl.DataFrame) -> list[list]:
    """One row per (class, T): the global uncertainties and the Contractivity verdicts."""
    sups = sups_frame(premise).unique(subset=["class", "perturbation"], keep="first", maintain_order=True)
    return [
        [
            r["class"],
            r["perturbation"],
            _num(r["U_base_inf"]),
            _num(r["U_perturb_inf"]),
            _num(r["alpha"]),
            _num(2 * r["alpha"] * r["U_base_inf"]),
            r["contraction"],
            _num(r["alpha_proposition"]),
            r["contraction_proposition"],
        ]
        for r in sups.iter_rows(named=True)
    ]


def markdown(trained: pl.DataFrame, premise: pl.DataFrame, length: int) -> str:
    """The summary's lab section: T's constants, the premise classes, the trained models, and the findings."""
    consts = constants_frame(premise)
    md = [
        (
            "**T's constants**, exact for the T that runs (alpha, C) beside the Proposition's statement (Prop.); "
            "C on rows: the largest TV(T(.|X'), T(.|X0)) between a row and its own support prefix."
        ),
        "",
    ]
    md += _table(
        ["T", "l", "family", "δ", "α", "α (Prop.)", "C", "C (Prop.)", "C on rows"],
        [
            [
                r["perturbation"],
                r["last"],
                r["family"],
                r["delta"],
                _num(r["alpha"]),
                _num(r["alpha_proposition"]),
                _num(r["C"]),
                _num(r["C_proposition"]),
                _num(r["C_rows"]),
            ]
            for r in consts.iter_rows(named=True)
        ],
    )
    md += [
        "",
        (
            "**Model classes that meet the premise** (pairs agree on the support; docs/theory.md, 'The theory lab'): "
            "U_base(δ) and U_perturb(δ), exact sups over every prefix within δ of the support, the prefix that attains "
            "them, and each theorem's verdict from them. 'On the lab's rows' is a descriptive sample, U_base / "
            "U_perturb at the rows of each family at exactly δ, not U. Extrapolability: whether U_perturb(δ) = 0, "
            "beside its premise SP_perturb; 'self-pairs only': no two distinct members agree on the support once "
            "perturbed."
        ),
        "",
    ]
    md += _table(
        [
            "class",
            "T",
            "δ",
            "U_base(δ)",
            "U_perturb(δ)",
            "attained at",
            "on the lab's rows",
            "2C",
            "robustness",
            "robustness (Prop.'s C)",
            "SP_perturb",
            "extrapolability",
        ],
        _premise_rows(premise),
    )
    md += [
        "",
        (
            "**Global uncertainties and Contractivity** (U^∞ = U(L): no prefix lies farther than L from the "
            "support; Assumption UI holds for both classes)."
        ),
        "",
    ]
    md += _table(
        [
            "class",
            "T",
            "U_base^∞",
            "U_perturb^∞",
            "α",
            "2α U_base^∞",
            "contraction",
            "α (Prop.)",
            "contraction (Prop.'s α)",
        ],
        _global_rows(premise),
    )
    md += [
        "",
        (
            "**Trained models, descriptive**: max / mean pairwise TV over the group on each delta set (not U: the "
            "models disagree on the support), its growth from delta 0, the max from half the draws (Monte Carlo "
            "check), and the TV to the true law. Ĉ: the largest share, over the set's rows, of T's draws in which a "
            "row's perturbed words differ from its support prefix's (the two share T's keys); a pair's TV on a row "
            "exceeds its TV on the support prefix by at most twice that share (asserted)."
        ),
        "",
    ]
    md += _table(
        [
            "family",
            "T",
            "δ",
            "prefixes",
            "draws",
            "U_max",
            "U_mean",
            "growth",
            "U_max (half draws)",
            "support disagreement",
            "Ĉ",
            "TV truth ± 2SE",
        ],
        [
            [
                r["family"],
                r["perturbation"],
                r["delta"],
                r["n_prefixes"],
                r["draws"],
                _num(r["U_max"]),
                _num(r["U_mean"]),
                _num(r["U_growth"]),
                _num(r["U_max_half_draws"]),
                _num(r["support_disagreement"]),
                _num(r["C_draws"]),
                _num(r["tv_truth_mean"]) + ("" if r["tv_truth_2se"] is None else f" ± {r['tv_truth_2se']:.3f}"),
            ]
            for r in trained.iter_rows(named=True)
        ],
    )
    return "\n".join([*md, "", *findings(trained, premise, length)]) + "\n"


def _label(name: str) -> str:
    return "no perturbation" if name == UNPERTURBED else f"T = {name}"


def figure(trained: pl.DataFrame, premise: pl.DataFrame, stem: str) -> None:
    """A column per prefix family. Top: the trained models' max pairwise TV against delta, per T ("none": no
    perturbation). Middle: the `unseen` premise class, U_base(delta) and U_perturb(delta) per T, the exact sups over
    every prefix within delta (lines), and U_perturb on the lab's rows of the column's family (circles). Bottom: the
    trained models' TV to the true law, mean ± 2 SE. At most five lines a panel."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from workflow_lib.plotting import _save, empty_panel, legend_below, line_style

    families = sorted(set(trained["family"].to_list()) | set(premise["family"].to_list())) or ["(none)"]
    names = list(dict.fromkeys([UNPERTURBED, *trained["perturbation"].to_list(), *premise["perturbation"].to_list()]))
    style = {name: line_style(i) for i, name in enumerate(names)}
    fig, axes = plt.subplots(
        3,
        len(families),
        figsize=(max(4.6 * len(families), 7.0), 9.0),
        squeeze=False,
        sharey="row",
        layout="constrained",
    )
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
            label = _label(name)
            top.plot(line["delta"].to_list(), line["U_max"].to_list(), label=label, **style[name])
            bottom.errorbar(
                line["delta"].to_list(),
                line["tv_truth_mean"].to_list(),
                capsize=2,
                label=label,
                yerr=[e or 0.0 for e in line["tv_truth_2se"].to_list()],
                **style[name],
            )
        rows = cls.filter(pl.col("family") == family)
        sups = sups_frame(cls).filter(pl.col("delta").is_in(rows["delta"].unique().to_list()))
        drawn: dict[str, list[float]] = {}
        hidden: list[list[str]] = []
        lines = {UNPERTURBED: sups.group_by("delta").agg(pl.col("U_base").max()).sort("delta").rename({"U_base": "U"})}
        lines |= {
            name: sups.filter(pl.col("perturbation") == name).sort("delta").rename({"U_perturb": "U"})
            for name in dict.fromkeys(rows["perturbation"].to_list())
        }
        samples = {UNPERTURBED: rows.group_by("delta").agg(pl.col("U_base_rows").max().alias("rows")).sort("delta")}
        samples |= {
            name: rows.filter(pl.col("perturbation") == name).sort("delta").rename({"U_perturb_rows": "rows"})
            for name in lines
            if name != UNPERTURBED
        }
        for name, line in lines.items() if rows.height else ():
            x, sup = line["delta"].to_list(), line["U"].to_list()
            # A line drawn over an equal one hides it: the panel names the T's that coincide, so none seems missing.
            same = next((group for group in hidden if np.allclose(drawn[group[0]], sup)), None)
            if same is None:
                hidden.append([name])
            else:
                same.append(name)
            drawn[name] = sup
            middle.plot(x, sup, label=_label(name), **style[name])
            middle.plot(
                samples[name]["delta"].to_list(),
                samples[name]["rows"].to_list(),
                linestyle="none",
                marker="o",
                markerfacecolor="none",
                color=style[name]["color"],
                label="_rows",
            )
        notes = ["\n".join(_label(name) for name in group) for group in hidden if len(group) > 1]
        if notes:
            middle.text(
                0.35,
                0.5,
                "equal, drawn over each other:\n" + "\n\n".join(notes),
                transform=middle.transAxes,
                fontsize=7,
                va="center",
                in_layout=False,
            )
        if not rows.height:
            empty_panel(middle, "no premise class")
        for ax in (top, middle, bottom):
            ax.set_xticks(sorted(set(part["delta"].to_list()) | set(rows["delta"].to_list())))
            ax.set_ylim(-0.02, 1.02)
            ax.tick_params(labelsize=8)
        bottom.set_xlabel("δ: Hamming distance to the training support", fontsize=9)
        if col == 0:
            top.set_ylabel("trained models:\nmax pairwise TV (not U)", fontsize=8)
            middle.set_ylabel(
                "premise class 'unseen': U(δ),\nsup over every prefix (lines);\non the lab's rows (circles)", fontsize=8
            )
            bottom.set_ylabel("trained models: TV to the\ntrue law (mean ± 2 SE)", fontsize=8)
    fig.suptitle(
        "Theory lab on the synthetic grammar: trained models (descriptive) and a model class that meets "
        "the theorems' premise",
        fontsize=9,
    )
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
    parser = argparse.ArgumentParser(prog="python -m workflow_lib.lab.verdicts")
    parser.add_argument(
        "--prefixes", required=True, help="the lab's prefixes Parquet (row, family, delta, base, ids, truth)"
    )
    parser.add_argument("--laws", nargs="+", required=True, help="one .npz per model of the group")
    parser.add_argument("--builtin", required=True, help="JSON: the builtin dataset's grammar settings")
    parser.add_argument(
        "--settings",
        required=True,
        help="JSON: perturbations {name: {q0, beta}}, last, length, draws, premise_draws, seed",
    )
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
    check_models(models, args.laws, rows=prefixes.height, words=cast(int | None, prefixes["truth"].list.len().max()))
    from workflow_lib.lab import prefix_sets
    from workflow_lib.lab.laws import grammar_of
    from workflow_lib.lab.theorems import premise_table

    grammar = grammar_of(parse_json_arg(args.builtin, "lab --builtin"))
    lex = prefix_sets.lexicon(grammar, settings["seed"])
    premise = premise_table(
        grammar, lex, prefixes, specs, settings["length"], settings["seed"], settings["premise_draws"]
    )
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
    log.info(
        "theory lab: %d models, %d prefixes; premise-class verdicts: %s",
        len(models),
        prefixes.height,
        dict(premise.group_by("robustness").len().iter_rows()),
    )


if __name__ == "__main__":
    run(main)
