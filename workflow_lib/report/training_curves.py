"""Training curves: the training loss (the objective's own) and the validation NLL of one (model, dataset)'s model
folders against step, from each folder's train_log.csv; each training condition in its style of every report figure
(report.figure_styles). docs/output.md, "The report".
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import NamedTuple

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import polars as pl

from workflow_lib.plotting import MAX_LINES, PANEL_SIZE, _save, empty_panel, legend_below, split_panels
from workflow_lib.report.conditions import parse_model_dir
from workflow_lib.report.figure_styles import (
    TRAINING_LEGEND,
    Perturbation,
    describe,
    perturbation_style,
    training_condition,
    with_repeat,
)


class Series(NamedTuple):
    """One model folder's lines: its panel group (objective; and its training seed where the objective has more
    folders than a panel holds), legend label and style."""

    group: tuple
    label: str
    style: dict


def _markevery(n: int, i: int, lines: int) -> tuple[int, int]:
    """About eight markers per line, each line's shifted so that markers of overlapping lines do not stack."""
    every = max(1, n // 8)
    return (i * every // max(1, lines)) % every, every


LOG_SCHEMA = {
    "step": pl.Int64,
    "epoch": pl.Float64,
    "loss": pl.Float64,
    "lr": pl.Float64,
    "grad_norm": pl.Float64,
    "tokens_per_s": pl.Float64,
    "validation_loss": pl.Float64,
    "validation_objective": pl.Float64,
}


def read_train_log(model_dir: str) -> pl.DataFrame:
    path = Path(model_dir) / "train_log.csv"
    if not path.exists():
        raise FileNotFoundError(f"{path}: no training log in this model folder")
    return pl.read_csv(path, schema_overrides=LOG_SCHEMA)


def training_curves(model_dirs: list[str], stem: str) -> None:
    """Training loss (the objective's own) and validation NLL per token against step, one line per model
    folder (training condition, seed) of one (model, dataset): one column of panels per objective (training
    loss on top, validation below); an objective with more than MAX_LINES folders gets a column per training seed. Every
    validation panel shares its y axis (NLL compares across objectives); a training panel shares its only with
    its own objective's (each objective has its own loss). A folder whose log has no validation rows is named
    in its validation panel."""
    dirs = sorted(model_dirs)
    conditions = [parse_model_dir(d) or {"model": "?", "dataset": "?", "objective": d} for d in dirs]
    known = [c for c in conditions if "train_intensity" in c]
    varying = [
        f for f, among in (("train_mode", known), ("copies", known), ("seed", known)) if len({c[f] for c in among}) > 1
    ]

    # An objective with more folders than a panel holds gets a panel per training seed (its conditions side by side
    # on the same data order) rather than arbitrary cuts; split_panels still cuts a seed's panel that is too full.
    folders = Counter(c["objective"] for c in conditions)
    by_seed = "seed" in varying

    def line(c: dict) -> Series:
        if "train_intensity" not in c:
            return Series((c["objective"],), c["objective"], perturbation_style(Perturbation("none", 0.0)))
        style = perturbation_style(Perturbation.of(c, "train"))
        if varying:  # several lines of one condition (seeds, training modes): dashes from the seed or the mode
            style = with_repeat(style, int(c["seed"]) if varying == ["seed"] else describe(c, varying))
        seed = (f"seed {c['seed']}",) if by_seed and folders[c["objective"]] > MAX_LINES else ()
        return Series((c["objective"], *seed), training_condition(c, varying), style)

    logs = {d: read_train_log(d) for d in dirs}
    rank = {d: float(c.get("train_intensity", 0)) for d, c in zip(dirs, conditions)}
    series = sorted(
        ((line(c), d) for d, c in zip(dirs, conditions)), key=lambda s: (s[0].group, rank[s[1]], s[0].label, s[1])
    )
    panels = split_panels(series, lambda s: s[0].group)
    # Per-step losses are noisy enough to hide one line behind another: a centred moving average when a log
    # is long, the same window for every line.
    window = max(1, max((log.height for log in logs.values()), default=0) // 50)
    n = max(1, len(panels))
    fig, axes = plt.subplots(
        2,
        n,
        figsize=(max(PANEL_SIZE[0] * n, 6.0), 2 * PANEL_SIZE[1] + 1.2),
        squeeze=False,
        sharex=True,
        layout="constrained",
    )
    for ax in axes[1][1:]:  # validation NLL compares across objectives: one scale
        ax.sharey(axes[1][0])
    for panel, train_ax, valid_ax in zip(panels, axes[0], axes[1]):
        same_objective = [ax for p, ax in zip(panels, axes[0]) if p.group[0] == panel.group[0]]
        if train_ax is not same_objective[0]:
            train_ax.sharey(same_objective[0])
        without_validation = []
        for i, (ln, d) in enumerate(panel.items):
            log_i = logs[d]
            style = ln.style | {"linewidth": 1.2, "markersize": 4}
            loss = log_i["loss"].rolling_mean(window, center=True, min_samples=1)
            train_ax.plot(
                log_i["step"].to_list(),
                loss.to_list(),
                markevery=_markevery(log_i.height, i, len(panel.items)),
                label=ln.label,
                **style,
            )
            valid = log_i.filter(pl.col("validation_loss").is_not_null())
            if valid.height:
                valid_ax.plot(
                    valid["step"].to_list(),
                    valid["validation_loss"].to_list(),
                    markevery=_markevery(valid.height, i, len(panel.items)),
                    label=ln.label,
                    **style,
                )
            else:
                without_validation.append(ln.label)
        train_ax.set_title(panel.title(", ".join(panel.group)), fontsize=10)
        valid_ax.set_xlabel("step", fontsize=9)
        valid_ax.ticklabel_format(axis="y", useOffset=False)  # "+5.65" above the axis reads as a value
        if len(without_validation) == len(panel.items):
            empty_panel(valid_ax, "no validation loss in these logs\n(trained without a validation split)")
        elif without_validation:
            valid_ax.text(
                0.98,
                0.98,
                "no validation rows:\n" + "\n".join(without_validation),
                transform=valid_ax.transAxes,
                ha="right",
                va="top",
                fontsize=7,
            )
        for ax in (train_ax, valid_ax):
            ax.tick_params(labelsize=8)
    smoothing = f"\n(moving average over {window} steps)" if window > 1 else ""
    axes[0][0].set_ylabel(f"training loss (the objective's own){smoothing}", fontsize=9)
    axes[1][0].set_ylabel("validation NLL per token", fontsize=9)
    first = conditions[0] if conditions else {"model": "?", "dataset": "?"}
    fig.suptitle(f"{first['model']} on {first['dataset']}", fontsize=11)
    order = [s[0].label for s in sorted(series, key=lambda s: (rank[s[1]], s[0].label))]
    legend_below(fig, axes[0], TRAINING_LEGEND, list(dict.fromkeys(order)), under=axes[1])
    _save(fig, stem)
    plt.close(fig)
