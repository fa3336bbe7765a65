"""Figures of the language-model study, from the tidy metrics table of workflow_lib.report.collect.

Each function writes STEM.png and STEM.pdf (figures._save: deterministic files) and is readable in black and
white: hatches, markers and line styles carry the distinctions, not colour. A figure with nothing to show
for a configuration says so in its panel rather than plotting zeros.
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.ticker  # noqa: E402
import numpy as np  # noqa: E402
import polars as pl  # noqa: E402

from workflow_lib.figures import _save  # noqa: E402

CONDITIONS = ["NoPerturb", "TrainPerturb", "TestPerturb", "Both"]
HATCHES = ["", "//", "\\\\", "xx"]
LINES = ["-", "--", ":", "-."]
MARKERS = ["o", "s", "^", "D", "v", "P"]


def _empty(ax, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, fontsize=9)
    ax.set_xticks([])
    ax.set_yticks([])


def _err(values):
    return [0.0 if v is None or (isinstance(v, float) and np.isnan(v)) else v for v in values]


def ablation_figure(frame: pl.DataFrame, stem: str, intensity: float = 0.025) -> None:
    """MAUVE (mean ± 2 SE) of NoPerturb / TrainPerturb / TestPerturb / Both at the headline intensity, one
    panel per eval set, one bar group per (model, objective) that has all four conditions."""
    from workflow_lib.report import ablation_frame

    frame = ablation_frame(frame, intensity)
    complete = frame.group_by(["model", "objective", "eval_set"]).agg(pl.col("condition").n_unique().alias("n")).filter(pl.col("n") == 4)
    frame = frame.join(complete, on=["model", "objective", "eval_set"])
    eval_sets = sorted(set(frame["eval_set"].to_list())) or ["(none)"]
    fig, axes = plt.subplots(1, len(eval_sets), figsize=(4.2 * len(eval_sets), 3.4), squeeze=False)
    for ax, es in zip(axes[0], eval_sets):
        sub = frame.filter(pl.col("eval_set") == es)
        groups = sub.select("model", "objective").unique().sort(["model", "objective"]).rows()
        if not groups:
            _empty(ax, "no ablation in this study")
            continue
        width = 0.8 / len(CONDITIONS)
        for i, condition in enumerate(CONDITIONS):
            means, errs = [], []
            for model, objective in groups:
                hit = sub.filter((pl.col("model") == model) & (pl.col("objective") == objective) & (pl.col("condition") == condition))
                means.append(hit["mauve_mean"].mean())
                errs.append(hit["mauve_2se"].mean())
            ax.bar(np.arange(len(groups)) + (i - 1.5) * width, means, width, yerr=_err(errs), capsize=2,
                   color="white", edgecolor="black", hatch=HATCHES[i], label=condition)
        ax.set_xticks(np.arange(len(groups)), [f"{m}\n{o}" for m, o in groups], fontsize=8)
        ax.set_ylabel("MAUVE")
        ax.set_title(es)
        ax.set_ylim(0, 1.05)
    axes[0][0].legend(fontsize=7, loc="lower left")
    fig.tight_layout()
    _save(fig, stem)
    plt.close(fig)


def intensity_figure(frame: pl.DataFrame, stem: str, intensity: float | None = None) -> None:
    """MAUVE against intensity (the same at training and sampling) on a log axis, ± 2 SE; the unperturbed
    model is the horizontal line of the same style."""
    same = frame.filter(pl.col("train_intensity") == pl.col("test_intensity"))
    eval_sets = sorted(set(same["eval_set"].to_list())) or ["(none)"]
    fig, axes = plt.subplots(1, len(eval_sets), figsize=(4.2 * len(eval_sets), 3.4), squeeze=False)
    for ax, es in zip(axes[0], eval_sets):
        sub = same.filter(pl.col("eval_set") == es)
        lines = sub.select("model", "objective", "train_strategy").filter(pl.col("train_strategy") != "none").unique().sort(
            ["model", "objective", "train_strategy"]).rows()
        drawn = False
        for i, (model, objective, strategy) in enumerate(lines):
            pts = sub.filter((pl.col("model") == model) & (pl.col("objective") == objective) & (pl.col("train_strategy") == strategy)).sort("train_intensity")
            if pts.height < 2:
                continue
            style = dict(linestyle=LINES[i % len(LINES)], marker=MARKERS[i % len(MARKERS)], color="black")
            ax.errorbar(pts["train_intensity"].to_list(), pts["mauve_mean"].to_list(), yerr=_err(pts["mauve_2se"].to_list()),
                        capsize=2, label=f"{model} {objective} {strategy}", **style)
            base = sub.filter((pl.col("model") == model) & (pl.col("objective") == objective) & (pl.col("train_intensity") == 0))
            if base.height:
                ax.axhline(base["mauve_mean"][0], linestyle=style["linestyle"], color="gray", linewidth=0.8)
            drawn = True
        if not drawn:
            _empty(ax, "fewer than two perturbed intensities\nin this study")
            continue
        ax.set_xscale("log")
        # Ticks at the measured intensities only: a sweep spans less than a decade or two, where the log
        # axis' default minor labels overlap.
        ticks = sorted(set(sub.filter(pl.col("train_intensity") > 0)["train_intensity"].to_list()))
        ax.set_xticks(ticks, [f"{t:g}" for t in ticks])
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.set_xlabel("intensity α (training = sampling)")
        ax.set_ylabel("MAUVE")
        ax.set_title(es)
        ax.legend(fontsize=6)
    fig.tight_layout()
    _save(fig, stem)
    plt.close(fig)


def extrapolation_figure(frame: pl.DataFrame, stem: str, intensity: float | None = None) -> None:
    """Exact TV to the true next-word law on in-support vs out-of-support prefixes, against the test
    intensity; one line per (objective, training intensity)."""
    sub = frame.filter(pl.col("tv_mean").is_not_null())
    laws = sorted(set(sub["eval_set"].to_list())) or ["(none)"]
    fig, axes = plt.subplots(1, len(laws), figsize=(4.2 * len(laws), 3.4), squeeze=False, sharey=True)
    for ax, es in zip(axes[0], laws):
        part = sub.filter(pl.col("eval_set") == es)
        lines = part.select("objective", "train_intensity").unique().sort(["objective", "train_intensity"]).rows()
        if not lines:
            _empty(ax, "no builtin eval set in this study")
            continue
        for i, (objective, train_alpha) in enumerate(lines):
            pts = part.filter((pl.col("objective") == objective) & (pl.col("train_intensity") == train_alpha)).sort("test_intensity")
            ax.errorbar(np.arange(pts.height) if pts.height else [], pts["tv_mean"].to_list(), yerr=_err(pts["tv_2se"].to_list()),
                        capsize=2, color="black", linestyle=LINES[i % len(LINES)], marker=MARKERS[i % len(MARKERS)],
                        label=f"{objective}, train α={train_alpha:g}")
            ax.set_xticks(np.arange(pts.height), [f"{x:g}" for x in pts["test_intensity"].to_list()])
        ax.set_xlabel("sampling intensity α")
        ax.set_ylabel("TV to the true next-word law")
        ax.set_title(f"{es} ({part['tv_law'][0] if part.height else ''})")
        ax.legend(fontsize=6)
    fig.tight_layout()
    _save(fig, stem)
    plt.close(fig)


FIGURES = {"ablation": ablation_figure, "intensity": intensity_figure, "extrapolation": extrapolation_figure}
