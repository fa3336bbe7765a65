"""The simulation study's figure (the paper's Figure 2), from the summary table."""

from __future__ import annotations

from workflow_lib.figures import _save

STYLES = {"oracle": ("-", "o", "black"), "empirical": ("--", "s", "dimgray")}
READING_TITLES = {"unseen_rows": "(a) unseen rows", "unseen_pairs": "(b) unseen pairs"}


def simulation_figure(summary, path_stem: str) -> None:
    """Paper Figure 2 and its second reading: MAE against perturbation intensity, mean +- 2 SE.

    `summary`: the polars table of workflow_lib.simulation.summary.summarize. One column of panels per
    vocabulary size; top row reading (a), bottom row reading (b); one line per synonym rule; the dotted line
    is the uniform predictor 1/|V| on the same cells. (a): rows of tokens never seen as the first element of a
    training pair; (b): pairs never seen. A panel whose reading is empty says so in text.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    vocab_sizes = sorted(summary["vocab_size"].unique().to_list())
    rules = sorted(summary["synonyms"].unique().to_list())
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
                ax.text(0.5, 0.5, f"no token unseen as a\nfirst element in any of\n{reps} replications:\n"
                        "reading (a) is empty", ha="center", va="center", transform=ax.transAxes, fontsize=9)
                ax.set_xticks([])
                ax.set_yticks([])
                continue
            for rule in rules:
                line = panel.filter(panel["synonyms"] == rule).sort("intensity")
                style, marker, color = STYLES.get(rule, (":", "^", "gray"))
                ax.errorbar(line["intensity"].to_list(), line[f"mae_{reading}_mean"].to_list(),
                            yerr=[0.0 if e is None else e for e in line[f"mae_{reading}_2se"].to_list()],
                            linestyle=style, marker=marker, color=color, markersize=4, capsize=2, linewidth=1.2,
                            label=rule)
            uniform = panel[f"uniform_{reading}_mean"].drop_nulls()
            if len(uniform):
                ax.axhline(uniform[0], linestyle=":", color="gray", linewidth=1.0, label="uniform 1/|V|")
            if reading == "unseen_rows":
                reps, total = panel["n_unseen_rows_reps"].max(), panel["replications"].max()
                rows = panel["n_unseen_rows_mean"].max()
                ax.text(0.98, 0.98, f"{rows:.1f} unseen rows on avg.\nin {reps}/{total} replications", fontsize=7,
                        ha="right", va="top", transform=ax.transAxes)
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
        fig.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, 0.955), ncol=len(labels), fontsize=9,
                   frameon=False)
    fig.suptitle("MAE of the estimated transition matrix against the truth (mean ± 2 SE)", fontsize=11, y=0.995)
    fig.tight_layout(rect=(0, 0, 1, 0.91))
    _save(fig, path_stem)
    plt.close(fig)
