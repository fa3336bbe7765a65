"""The lab's figure: per prefix family, the trained models' max pairwise TV, the `unseen` premise class's
U_base(delta) and U_perturb(delta), and the trained models' TV to the true law (docs/theory.md, "The theory lab").
"""

from __future__ import annotations

import numpy as np
import polars as pl

from workflow_lib.lab.bounds import UNPERTURBED
from workflow_lib.lab.premise_views import sups_frame

FAMILY_NOTES = {
    "composition": "classes changed into held-out compositions",
    "synonym": "words replaced by unseen same-class synonyms",
}


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
