"""The extrapolation figure: each perturbed condition's exact TV to the true next-word law minus its unperturbed
model's (report.differences), with its interval, on in-support, reachable and out-of-support prefixes.

A dot-and-interval plot: one row of panels per builtin eval set, one column per place of the perturbation (training
only, sampling only, both; a place with more than five conditions is cut into panels of at most five), the objectives
on the y axis, each condition a point in its style of every report figure (report.figure_styles), and a line at 0 (no
change). Every panel shares the x axis: a +0.01 effect reads alike in each. The absolute TVs (0.3-0.55 in the default
study) would hide these effects on one axis; the tables keep them. docs/output.md, "The report".
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import polars as pl

from workflow_lib.plotting import _save, legend_below, split_panels
from workflow_lib.report.conditions import shown_objective
from workflow_lib.report.differences import SIDES, baseline_differences
from workflow_lib.report.figure_styles import Perturbation, pair_style

PANEL = (3.0, 0.5)  # inches: a panel's width, and its height per objective (plus 1.2 for its title and axis)


def condition_label(row: dict) -> str:
    """A perturbed condition as the figure's legend names it: its perturbation ('insertion 0.025 (oracle)'), both
    sides' when training and sampling differ."""
    train, test = Perturbation.of(row, "train"), Perturbation.of(row, "test")
    if train.none or test.none or train[:3] == test[:3]:
        return (test if train.none else train if test.none else test).label()
    return f"training {train.label()}, sampling {test.label()}"


def _interval_note(differences: pl.DataFrame) -> str:
    paired = differences["paired"].sum() if differences.height else 0
    if paired == differences.height:
        return "intervals: paired 95% over prompts (contrasts.csv)"
    if paired == 0:
        return "intervals: ± 2 SE of a difference of independent means (unpaired: wider than a paired interval)"
    return (
        f"intervals: paired 95% over prompts (contrasts.csv) for {paired} of {differences.height}; "
        "dashed: ± 2 SE of a difference of independent means"
    )


def extrapolation_figure(
    frame: pl.DataFrame, stem: str, intensity: float | None = None, contrasts: pl.DataFrame | None = None
) -> None:
    """TV to the true law, each perturbed condition minus its baseline (the same objective and eval set unperturbed),
    with the paired interval of `contrasts` (results/report/contrasts.csv) where it has the pair, else an unpaired
    ± 2 SE (dashed). `intensity`: the headline intensity, which names the contrasts' pairs."""
    tv = shown_objective(frame.filter(pl.col("tv_mean").is_not_null()))
    differences = baseline_differences(tv, "tv", contrasts, 0.025 if intensity is None else intensity)
    differences = differences.with_columns(
        pl.Series("label", [condition_label(r) for r in differences.iter_rows(named=True)], dtype=pl.Utf8)
    )
    laws = {r["eval_set"]: r["tv_law"] for r in tv.select("eval_set", "tv_law").unique().iter_rows(named=True)}
    eval_sets = sorted(set(differences["eval_set"].to_list())) or ["(none)"]
    objectives = sorted(set(differences["objective"].to_list()), reverse=True)  # top to bottom: a to z
    styles = {
        r["label"]: pair_style(Perturbation.of(r, "train"), Perturbation.of(r, "test"))
        for r in differences.rows(named=True)
    }
    # Each eval set's panels: (place, part) -> that panel's conditions in a fixed order.
    ordered = sorted(set(differences.select("side", "label").iter_rows()), key=lambda r: (SIDES.index(r[0]), r[1]))
    rows = {}
    for es in eval_sets:
        present = set(differences.filter(pl.col("eval_set") == es).select("side", "label").iter_rows())
        panels = split_panels([r for r in ordered if r in present], lambda r: r[0])
        rows[es] = {(p.group, p.part): (p.parts, [label for _, label in p.items]) for p in panels}
    columns = sorted({key for panels in rows.values() for key in panels}, key=lambda k: (SIDES.index(k[0]), k[1]))
    columns = columns or [(SIDES[2], 1)]
    height = PANEL[1] * max(1, len(objectives)) + 1.2
    fig, axes = plt.subplots(
        len(eval_sets),
        len(columns),
        figsize=(max(PANEL[0] * len(columns), 5.0), height * len(eval_sets) + 0.8),
        squeeze=False,
        sharex=True,
        sharey=True,
        layout="constrained",
    )
    for r, es in enumerate(eval_sets):
        for c, key in enumerate(columns):
            ax = axes[r][c]
            parts, labels = rows.get(es, {}).get(key, (1, []))
            place, part = key
            title = place + (f" ({part}/{parts})" if parts > 1 else "") + f"\n{es}"
            title += f" ({laws[es]})" if es in laws else ""
            ax.set_title(title, fontsize=9)
            ax.axvline(0.0, color="0.45", linewidth=0.8, zorder=0)
            if not labels:
                ax.text(
                    0.5, 0.5, "no such condition here", ha="center", va="center", transform=ax.transAxes, fontsize=8
                )
            sub = differences.filter((pl.col("eval_set") == es) & (pl.col("side") == place))
            for i, label in enumerate(labels):
                offset = (i - (len(labels) - 1) / 2) * min(0.18, 0.7 / max(1, len(labels)))
                points = sub.filter(pl.col("label") == label)
                y = [objectives.index(o) + offset for o in points["objective"].to_list()]
                x = np.asarray(points["difference"].to_list(), dtype=float)
                low, high = (np.asarray(points[k].to_list(), dtype=float) for k in ("low", "high"))
                drawn = ax.errorbar(
                    x,
                    y,
                    xerr=[x - low, high - x],
                    capsize=2,
                    markersize=5,
                    linestyle="none",
                    label=label,
                    **{k: v for k, v in styles[label].items() if k != "linestyle"},
                )
                unpaired = ~np.asarray(points["paired"].to_list(), dtype=bool)
                if unpaired.any():
                    for collection in drawn.lines[2]:
                        collection.set_linestyles(["--" if u else "-" for u in unpaired])
            ax.set_yticks(range(len(objectives)), objectives, fontsize=8)
            ax.set_ylim(-0.6, len(objectives) - 0.4)
            ax.tick_params(axis="x", labelsize=8)
            if r == len(eval_sets) - 1:
                ax.set_xlabel("TV to the true law minus no perturbation's\n(lower is better; 0: no change)", fontsize=8)
    fig.suptitle(
        "TV to the true next-word law: each condition minus its unperturbed model\n" + _interval_note(differences),
        fontsize=9,
    )
    legend_below(fig, axes, "perturbation", [label for _, label in ordered])
    _save(fig, stem)
    plt.close(fig)
