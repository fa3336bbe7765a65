"""The simulation study's figure (the paper's Figure 2), from the summary table."""

from __future__ import annotations

import math
from typing import Any

from workflow_lib.plotting import _save, assign_styles, empty_panel

# A synonym rule's style is fixed by its place here, whichever rules a study runs (workflow_lib.plotting); the
# control is third, so its colour (blue) is its own whichever rules run.
RULE_ORDER = ["oracle", "empirical"]
CONTROL = "shrinkage"
CONTROL_LABEL = "shrinkage to uniform (λ tuned)"
# The uniform predictor is a reference, not a method: thin, gray, dotted, no markers (gray is no palette colour,
# so it never shares colour and dash pattern with a rule's line).
UNIFORM_STYLE = {"linestyle": ":", "color": "0.45", "linewidth": 1.0}
UNIFORM_LABEL = "uniform 1/|V|"
READING_TITLES = {"unseen_rows": "(a) unseen rows", "unseen_pairs": "(b) unseen pairs"}
LOG_LOSS = "heldout_nll"  # a third row where the fits have it: held-out log-loss, the uniform predictor's log |V|
LOG_LOSS_TITLE = "held-out log-loss (nats)"
# The uniform line is drawn when it lies within this many data ranges of the data; farther, it would squash the
# curves into a band, so the panel names its value at the edge instead.
OFF_SCALE_RANGES = 2.0
# The rules' points are drawn this far apart on the alpha axis, so that their error bars do not hide each other.
DODGE = 0.012


def uniform_reference(ax, value: float, extent: list[float]) -> None:
    """The uniform predictor's MAE: a gray dotted line, or, when it is far off the data's range, a gray note at
    the panel's edge with its value (so the curves keep a readable scale)."""
    low, high = (min(extent), max(extent)) if extent else (value, value)
    span = max(high - low, 1e-12)
    if low - OFF_SCALE_RANGES * span <= value <= high + OFF_SCALE_RANGES * span:
        ax.axhline(value, label=UNIFORM_LABEL, **UNIFORM_STYLE)
        return
    above = value > high
    # Headroom (or footroom) for the note, so it never covers a curve.
    ax.set_ylim(low - (0.08 if above else 0.35) * span, high + (0.35 if above else 0.08) * span)
    ax.text(
        0.5,
        0.97 if above else 0.03,
        f"{'↑' if above else '↓'} {UNIFORM_LABEL} = {value:.4f}\n(off this panel's scale)",
        fontsize=7,
        color=UNIFORM_STYLE["color"],
        ha="center",
        va="top" if above else "bottom",
        transform=ax.transAxes,
    )
    ax.plot([], [], label=UNIFORM_LABEL, **UNIFORM_STYLE)  # the legend entry all the same


def simulation_figure(summary, path_stem: str) -> None:
    """Paper Figure 2 and its second reading: MAE against perturbation intensity, mean +- 2 SE.

    `summary`: the polars table of workflow_lib.simulation.summary.summarize. One column of panels per
    vocabulary size; top row reading (a), bottom row reading (b); one line per synonym rule (at most two, in
    the colour-blind-safe styles of workflow_lib.plotting); the shrinkage control, which has no intensity, as a
    horizontal line (its style's colour and dash-dot, no marker) with a light band of ±2 SE; the gray dotted
    line is the uniform predictor 1/|V| on the same cells, or, where it lies far off the panel's data, a gray
    note of its value at the panel's edge. At most four lines a panel; the rules' points are dodged by DODGE on
    the alpha axis. (a): rows of tokens never seen as the first element of a training pair; (b): pairs never
    seen. A panel whose reading is empty says so in text. Where the summary has the held-out log-loss, a third row
    shows it per rule with log |V| (the uniform predictor's) as the reference; the control is left out there, its
    lambda being chosen on those same held-out pairs.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    vocab_sizes = sorted(summary["vocab_size"].unique().to_list())
    present = set(summary["arm"].unique().to_list()) - {CONTROL}
    rules = [r for r in RULE_ORDER if r in present] + sorted(present - set(RULE_ORDER))
    styles = assign_styles([[*rules, CONTROL]], [*RULE_ORDER, CONTROL])
    readings = list(READING_TITLES)
    if f"{LOG_LOSS}_mean" in summary.columns and summary[f"{LOG_LOSS}_mean"].drop_nulls().len():
        readings.append(LOG_LOSS)
    height = 2.8 * len(readings)
    fig, axes = plt.subplots(len(readings), len(vocab_sizes), figsize=(3.1 * len(vocab_sizes), height), squeeze=False)
    for col, V in enumerate(vocab_sizes):
        panel = summary.filter(summary["vocab_size"] == V)
        for row, reading in enumerate(readings):
            ax = axes[row][col]
            ax.set_title(f"|V| = {V}" if row == 0 else "", fontsize=10)
            score = LOG_LOSS if reading == LOG_LOSS else f"mae_{reading}"
            if col == 0:
                ylabel = LOG_LOSS_TITLE if reading == LOG_LOSS else f"MAE, {READING_TITLES[reading]}"
                ax.set_ylabel(ylabel, fontsize=8)
            if panel[f"{score}_mean"].is_null().all():
                reps = panel["replications"].max()
                empty_panel(
                    ax, f"no token unseen as a\nfirst element in any of\n{reps} replications:\nreading (a) is empty"
                )
                continue
            extent = []  # every plotted mean +- 2 SE: the panel's data range
            for i, rule in enumerate(rules):
                line = panel.filter(panel["arm"] == rule).sort("intensity")
                dodge = (i - (len(rules) - 1) / 2) * DODGE
                means = line[f"{score}_mean"].to_list()
                errors = [0.0 if e is None else e for e in line[f"{score}_2se"].to_list()]
                extent += [m + sign * e for m, e in zip(means, errors) if m is not None for sign in (-1, 1)]
                ax.errorbar(
                    [x + dodge for x in line["intensity"].to_list()],
                    means,
                    yerr=errors,
                    markersize=4,
                    capsize=2,
                    linewidth=1.2,
                    label=rule,
                    **styles[rule],
                )
            control = panel.filter(panel["arm"] == CONTROL)
            if reading != LOG_LOSS and control.height and control[f"{score}_mean"][0] is not None:
                mean, band = control[f"{score}_mean"][0], control[f"{score}_2se"][0] or 0.0
                color = styles[CONTROL]["color"]
                ax.axhline(mean, color=color, linestyle="-.", linewidth=1.2, label=CONTROL_LABEL)
                ax.axhspan(mean - band, mean + band, color=color, alpha=0.12, linewidth=0)
                extent += [mean - band, mean + band]
            if reading == LOG_LOSS:
                uniform_reference(ax, math.log(V), extent)
            elif len(uniform := panel[f"uniform_{reading}_mean"].drop_nulls()):
                uniform_reference(ax, uniform[0], extent)
            if reading == "unseen_rows":  # how many rows the reading averages over: under the panel, off the data
                reps, total = panel["n_unseen_rows_reps"].max(), panel["replications"].max()
                rows = panel["n_unseen_rows_mean"].max()
                ax.set_xlabel(f"{rows:.1f} unseen rows on avg. in {reps}/{total} replications", fontsize=7)
            ax.tick_params(labelsize=8)
            if row == len(readings) - 1:
                ax.set_xlabel("perturbation intensity α", fontsize=9)
    entries: dict[str, Any] = {}
    for ax in axes.ravel():
        for h, lab in zip(*ax.get_legend_handles_labels()):
            entries.setdefault(lab, h)
    rank = {lab: i for i, lab in enumerate([*rules, CONTROL_LABEL, UNIFORM_LABEL])}
    labels = sorted(entries, key=lambda lab: rank.get(lab, len(rank)))
    handles = [entries[lab] for lab in labels]
    if handles:
        fig.legend(
            handles,
            labels,
            loc="upper center",
            bbox_to_anchor=(0.5, 1 - 0.25 / height),
            ncol=len(labels),
            fontsize=9,
            frameon=False,
        )
    title = "MAE of the estimated transition matrix against the truth"
    if LOG_LOSS in readings:
        title = "MAE against the truth and held-out log-loss"
    fig.suptitle(f"{title} (mean ± 2 SE)", fontsize=11, y=0.995)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.5 / height))  # room for the title and the legend: half an inch
    _save(fig, path_stem)
    plt.close(fig)
