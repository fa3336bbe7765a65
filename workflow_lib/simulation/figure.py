"""The simulation study's figure (the paper's Figure 2), from the summary table."""

from __future__ import annotations

from workflow_lib.plotting import _save, assign_styles, empty_panel

# A synonym rule's style is fixed by its place here, whichever rules a study runs (workflow_lib.plotting).
RULE_ORDER = ["oracle", "empirical"]
# The uniform predictor is a reference, not a method: thin, gray, dotted, no markers (gray is no palette colour,
# so it never shares colour and dash pattern with a rule's line).
UNIFORM_STYLE = {"linestyle": ":", "color": "0.45", "linewidth": 1.0}
READING_TITLES = {"unseen_rows": "(a) unseen rows", "unseen_pairs": "(b) unseen pairs"}


def simulation_figure(summary, path_stem: str) -> None:
    """Paper Figure 2 and its second reading: MAE against perturbation intensity, mean +- 2 SE.

    `summary`: the polars table of workflow_lib.simulation.summary.summarize. One column of panels per
    vocabulary size; top row reading (a), bottom row reading (b); one line per synonym rule (at most two, in
    the colour-blind-safe styles of workflow_lib.plotting); the gray dotted line is the uniform predictor 1/|V|
    on the same cells. (a): rows of tokens never seen as the first element of a training pair; (b): pairs never
    seen. A panel whose reading is empty says so in text.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    vocab_sizes = sorted(summary["vocab_size"].unique().to_list())
    present = set(summary["synonyms"].unique().to_list())
    rules = [r for r in RULE_ORDER if r in present] + sorted(present - set(RULE_ORDER))
    styles = assign_styles([rules], RULE_ORDER)
    fig, axes = plt.subplots(2, len(vocab_sizes), figsize=(3.1 * len(vocab_sizes), 5.6), squeeze=False)
    for col, V in enumerate(vocab_sizes):
        panel = summary.filter(summary["vocab_size"] == V)
        for row, reading in enumerate(READING_TITLES):
            ax = axes[row][col]
            ax.set_title(f"|V| = {V}" if row == 0 else "", fontsize=10)
            if col == 0:
                ax.set_ylabel(f"MAE, {READING_TITLES[reading]}", fontsize=8)
            if panel[f"mae_{reading}_mean"].is_null().all():
                reps = panel["replications"].max()
                empty_panel(
                    ax, f"no token unseen as a\nfirst element in any of\n{reps} replications:\nreading (a) is empty"
                )
                continue
            for rule in rules:
                line = panel.filter(panel["synonyms"] == rule).sort("intensity")
                ax.errorbar(
                    line["intensity"].to_list(),
                    line[f"mae_{reading}_mean"].to_list(),
                    yerr=[0.0 if e is None else e for e in line[f"mae_{reading}_2se"].to_list()],
                    markersize=4,
                    capsize=2,
                    linewidth=1.2,
                    label=rule,
                    **styles[rule],
                )
            uniform = panel[f"uniform_{reading}_mean"].drop_nulls()
            if len(uniform):
                ax.axhline(uniform[0], label="uniform 1/|V|", **UNIFORM_STYLE)
            if reading == "unseen_rows":
                reps, total = panel["n_unseen_rows_reps"].max(), panel["replications"].max()
                rows = panel["n_unseen_rows_mean"].max()
                ax.text(
                    0.98,
                    0.98,
                    f"{rows:.1f} unseen rows on avg.\nin {reps}/{total} replications",
                    fontsize=7,
                    ha="right",
                    va="top",
                    transform=ax.transAxes,
                )
            ax.tick_params(labelsize=8)
            if row == 1:
                ax.set_xlabel("perturbation intensity α", fontsize=9)
    handles, labels = [], []
    for ax in axes.ravel():
        for h, lab in zip(*ax.get_legend_handles_labels()):
            if lab not in labels:
                handles.append(h)
                labels.append(lab)
    if handles:
        fig.legend(
            handles,
            labels,
            loc="upper center",
            bbox_to_anchor=(0.5, 0.955),
            ncol=len(labels),
            fontsize=9,
            frameon=False,
        )
    fig.suptitle("MAE of the estimated transition matrix against the truth (mean ± 2 SE)", fontsize=11, y=0.995)
    fig.tight_layout(rect=(0, 0, 1, 0.91))
    _save(fig, path_stem)
    plt.close(fig)
