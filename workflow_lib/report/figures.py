"""Figures of the language-model study, from the tidy metrics table of workflow_lib.report.collect.collect, and the
training curves of the model folders.

Each function writes STEM.png and STEM.pdf (figures._save: deterministic files) and is readable in black and
white: hatches, markers and line styles carry the distinctions, not colour. Points sit at their condition's
own x value; legends sit below the panels, never over the data. A figure with nothing to show for a
configuration says so in its panel rather than plotting zeros.
"""

from __future__ import annotations

import logging
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.ticker  # noqa: E402
import numpy as np  # noqa: E402
import polars as pl  # noqa: E402

from workflow_lib.figures import _save
from workflow_lib.report.conditions import ABLATION, ablation_frame, parse_model_dir, shown_objective

log = logging.getLogger("workflow_lib.report.figures")

HATCHES = ["", "//", "\\\\", "xx"]
LINES = ["-", "--", ":", "-."]
MARKERS = ["o", "s", "^", "D", "v", "P"]
# Condition fields that split lines or bar groups when a study has more than one value of them.
SHARED_FIELDS = ["model", "decoder", "train_mode", "copies", "seed"]
TRAIN_FIELDS = ["train_strategy", "train_synonyms"]
TEST_FIELDS = ["test_strategy", "test_synonyms", "test_mode"]


def _style(i: int) -> dict:
    """The i-th of 24 black-and-white line styles (4 dash patterns x 6 markers)."""
    # (i + i // 4) mod 6 runs through all six markers for each dash pattern, and neighbours differ in both.
    return dict(linestyle=LINES[i % len(LINES)], marker=MARKERS[(i + i // len(LINES)) % len(MARKERS)], color="black")


def _empty(ax, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, fontsize=9)
    ax.set_xticks([])
    ax.set_yticks([])


def _err(values):
    return [0.0 if v is None or (isinstance(v, float) and np.isnan(v)) else v for v in values]


def _varying(frame: pl.DataFrame, fields: list[str]) -> list[str]:
    return [f for f in fields if frame[f].n_unique() > 1]


def _describe(row: dict, fields: list[str]) -> str:
    """The fields' values for a label ('none' of an unperturbed side left out)."""
    names = {"seed": "seed ", "decoder": "decoder ", "copies": "m="}
    return ", ".join(f"{names.get(f, '')}{row[f]}" for f in fields if row[f] != "none")


def _legend_below(fig, axes) -> None:
    """One legend for the figure, below its panels (the figure grows to hold it; constrained layout)."""
    handles, labels = [], []
    for ax in np.ravel(axes):
        for handle, label in zip(*ax.get_legend_handles_labels()):
            if label not in labels:
                handles.append(handle)
                labels.append(label)
    if handles:
        # As many columns as the figure's width holds (an entry: ~0.6 in of handle, ~0.055 in per character).
        width = 0.6 + 0.055 * max(len(label) for label in labels)
        ncol = max(1, min(len(labels), int(fig.get_figwidth() // width)))
        fig.legend(handles, labels, loc="outside lower center", ncol=ncol, fontsize=7, frameon=False)


def ablation_figure(frame: pl.DataFrame, stem: str, intensity: float = 0.025) -> None:
    """MAUVE (mean ± 2 SE) of NoPerturb / TrainPerturb / TestPerturb / Both at the headline intensity, one
    panel per eval set, one bar group per (model, objective, and decoder / seed / training mode where the
    study has several) that has all four conditions."""
    frame = shown_objective(ablation_frame(frame, intensity).filter(pl.col("mauve_mean").is_not_null()))
    group_keys = ["model", "objective", *_varying(frame, SHARED_FIELDS[1:])]
    complete = frame.group_by([*group_keys, "eval_set"]).agg(pl.col("condition").n_unique().alias("n")).filter(pl.col("n") == 4)
    frame = frame.join(complete, on=[*group_keys, "eval_set"])
    eval_sets = sorted(set(frame["eval_set"].to_list())) or ["(none)"]
    most = max((frame.filter(pl.col("eval_set") == es).select(group_keys).unique().height for es in eval_sets), default=1)
    width = max(4.6, 1.2 * most + 0.8)  # room for each group's tick label
    fig, axes = plt.subplots(1, len(eval_sets), figsize=(width * len(eval_sets), 3.8 + 0.3 * (len(group_keys) - 2)),
                             squeeze=False, layout="constrained")
    for ax, es in zip(axes[0], eval_sets):
        sub = frame.filter(pl.col("eval_set") == es)
        groups = sub.select(group_keys).unique().sort(group_keys).rows(named=True)
        if not groups:
            _empty(ax, "no ablation in this study")
            continue
        width = 0.8 / len(ABLATION)
        for i, condition in enumerate(ABLATION):
            means, errs = [], []
            for group in groups:
                hit = sub.filter(pl.all_horizontal([pl.col(k) == v for k, v in group.items()]) & (pl.col("condition") == condition))
                if hit.height > 1:  # several synonym sources or sampling modes of one arm: their mean
                    log.info("ablation %s %s: mean of %d conditions", es, condition, hit.height)
                means.append(hit["mauve_mean"].mean())
                errs.append(hit["mauve_2se"].mean())
            ax.bar(np.arange(len(groups)) + (i - 1.5) * width, means, width, yerr=_err(errs), capsize=2,
                   color="white", edgecolor="black", hatch=HATCHES[i], label=condition)
        ax.set_xticks(np.arange(len(groups)), ["\n".join([g["model"], g["objective"], *_describe(g, group_keys[2:]).split(", ")]).strip()
                                               for g in groups], fontsize=8)
        ax.set_ylabel("MAUVE")
        ax.set_title(es)
        ax.set_ylim(0, 1.05)
    _legend_below(fig, axes)
    _save(fig, stem)
    plt.close(fig)


def intensity_figure(frame: pl.DataFrame, stem: str, intensity: float | None = None) -> None:
    """MAUVE against intensity (the same strategy and intensity at training and sampling) on a log axis,
    ± 2 SE; the unperturbed model is the gray horizontal line of the same dash pattern."""
    same = shown_objective(frame.filter((pl.col("train_intensity") == pl.col("test_intensity")) & pl.col("mauve_mean").is_not_null()))
    perturbed = same.filter((pl.col("train_intensity") > 0) & (pl.col("train_strategy") == pl.col("test_strategy")))
    eval_sets = sorted(set(same["eval_set"].to_list())) or ["(none)"]
    fig, axes = plt.subplots(1, len(eval_sets), figsize=(4.6 * len(eval_sets), 3.8), squeeze=False, layout="constrained")
    for ax, es in zip(axes[0], eval_sets):
        sub = perturbed.filter(pl.col("eval_set") == es)
        shared = ["objective", *_varying(same.filter(pl.col("eval_set") == es), SHARED_FIELDS)]
        keys = [*shared, "train_strategy", *_varying(sub, TRAIN_FIELDS[1:] + TEST_FIELDS[1:])]
        drawn = False
        for i, line in enumerate(sub.select(keys).unique().sort(keys).rows(named=True)):
            pts = sub.filter(pl.all_horizontal([pl.col(k) == v for k, v in line.items()])).sort("train_intensity")
            if pts.height < 2:
                continue
            style = _style(i)
            ax.errorbar(pts["train_intensity"].to_list(), pts["mauve_mean"].to_list(), yerr=_err(pts["mauve_2se"].to_list()),
                        capsize=2, label=_describe(line, keys), **style)
            base = same.filter((pl.col("eval_set") == es) & (pl.col("train_intensity") == 0)
                               & pl.all_horizontal([pl.col(k) == line[k] for k in shared]))
            if base.height:
                ax.axhline(base["mauve_mean"].mean(), linestyle=style["linestyle"], color="gray", linewidth=0.8)
            drawn = True
        if not drawn:
            _empty(ax, "fewer than two perturbed intensities\nin this study")
            continue
        ax.set_xscale("log")
        # Ticks at the measured intensities only: a sweep spans less than a decade or two, where the log
        # axis' default minor labels overlap.
        ticks = sorted(set(sub["train_intensity"].to_list()))
        ax.set_xticks(ticks, [f"{t:g}" for t in ticks])
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.set_xlabel("intensity α (training = sampling)")
        ax.set_ylabel("MAUVE")
        ax.set_title(f"{es} (gray: unperturbed)")
    _legend_below(fig, axes)
    _save(fig, stem)
    plt.close(fig)


def _intensity_axis(ax, values: list[float]) -> None:
    """x ticks at the measured intensities. Linear while they are evenly spread; a sweep over a decade or
    more gets a symlog axis (linear up to the smallest positive value, so 0 keeps its place)."""
    ticks = sorted(set(values))
    positive = [t for t in ticks if t > 0]
    if len(positive) > 1 and positive[-1] / positive[0] >= 8:
        ax.set_xscale("symlog", linthresh=positive[0], linscale=0.5)
    ax.set_xticks(ticks, [f"{t:g}" for t in ticks])
    ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())


def extrapolation_figure(frame: pl.DataFrame, stem: str, intensity: float | None = None) -> None:
    """Exact TV to the true next-word law on in-support vs out-of-support prefixes, against the sampling
    intensity (each point at its own intensity); one line per (objective, training intensity, and whatever
    else varies). The point at sampling intensity 0 is shared by every sampling strategy's line."""
    sub = shown_objective(frame.filter(pl.col("tv_mean").is_not_null()))
    laws = sorted(set(sub["eval_set"].to_list())) or ["(none)"]
    fig, axes = plt.subplots(1, len(laws), figsize=(4.6 * len(laws), 3.8), squeeze=False, sharey=True, layout="constrained")
    for ax, es in zip(axes[0], laws):
        part = sub.filter(pl.col("eval_set") == es)
        if not part.height:
            _empty(ax, "no builtin eval set in this study")
            continue
        fixed = ["objective", "train_intensity", *_varying(part, SHARED_FIELDS),
                 *_varying(part.filter(pl.col("train_intensity") > 0), TRAIN_FIELDS)]
        sampled = part.filter(pl.col("test_intensity") > 0)
        test_keys = _varying(sampled, TEST_FIELDS)
        lines = []
        for base in part.select(fixed).unique().sort(fixed).rows(named=True):
            mine = sampled.filter(pl.all_horizontal([pl.col(k) == v for k, v in base.items()]))
            variants = mine.select(test_keys).unique().sort(test_keys).rows(named=True) if test_keys and mine.height else [{}]
            lines += [(base, variant) for variant in variants]
        for i, (base, variant) in enumerate(lines):
            at_base = part.filter(pl.all_horizontal([pl.col(k) == v for k, v in base.items()]))
            pts = at_base.filter((pl.col("test_intensity") == 0)
                                 | pl.all_horizontal([pl.lit(True), *[pl.col(k) == v for k, v in variant.items()]])).sort("test_intensity")
            label = f"{base['objective']}, train α={base['train_intensity']:g}"
            extra = "; ".join(x for x in (_describe(base, fixed[2:]), variant and "test " + _describe(variant, test_keys)) if x)
            ax.errorbar(pts["test_intensity"].to_list(), pts["tv_mean"].to_list(), yerr=_err(pts["tv_2se"].to_list()),
                        capsize=2, label=label + (f" ({extra})" if extra else ""), **_style(i))
        _intensity_axis(ax, part["test_intensity"].to_list())
        ax.set_xlabel("sampling intensity α")
        ax.set_ylabel("TV to the true next-word law")
        ax.set_title(f"{es} ({part['tv_law'][0]})")
    _legend_below(fig, axes)
    _save(fig, stem)
    plt.close(fig)


FIGURES = {"ablation": ablation_figure, "intensity": intensity_figure, "extrapolation": extrapolation_figure}


def _markevery(n: int, i: int, lines: int) -> tuple[int, int]:
    """About eight markers per line, each line's shifted so that markers of overlapping lines do not stack."""
    every = max(1, n // 8)
    return (i * every // max(1, lines)) % every, every


LOG_SCHEMA = {"step": pl.Int64, "epoch": pl.Float64, "loss": pl.Float64, "lr": pl.Float64, "tokens_per_s": pl.Float64,
              "validation_loss": pl.Float64, "validation_objective": pl.Float64}


def read_train_log(model_dir: str) -> pl.DataFrame:
    path = Path(model_dir) / "train_log.csv"
    if not path.exists():
        raise FileNotFoundError(f"{path}: no training log in this model folder")
    return pl.read_csv(path, schema_overrides=LOG_SCHEMA)


def training_curves(model_dirs: list[str], stem: str) -> None:
    """Training loss (the objective's own) and validation NLL per token against step, one line per model
    folder (objective, training condition, seed) of one (model, dataset). A folder whose log has no
    validation rows is named in the validation panel."""
    dirs = sorted(model_dirs)
    conditions = [parse_model_dir(d) or {"model": "?", "dataset": "?", "objective": d} for d in dirs]
    known = [c for c in conditions if "train_intensity" in c]
    perturbed = [c for c in known if float(c["train_intensity"]) > 0]
    varying = [f for f, among in (("train_synonyms", perturbed), ("train_mode", known), ("copies", known), ("seed", known))
               if len({c[f] for c in among}) > 1]

    def label(c: dict) -> str:
        if "train_intensity" not in c:
            return c["objective"]
        condition = "no perturbation" if float(c["train_intensity"]) == 0 else f"{c['train_strategy']} {c['train_intensity']}"
        extra = ", ".join(f"m={c[f]}" if f == "copies" else f"seed {c[f]}" if f == "seed" else c[f]
                          for f in varying if c[f] != "none")
        return f"{c['objective']}, {condition}" + (f" ({extra})" if extra else "")

    logs = [read_train_log(d) for d in dirs]
    # Per-step losses are noisy enough to hide one line behind another: a centred moving average when a log
    # is long, the same window for every line.
    window = max(1, max((log.height for log in logs), default=0) // 50)
    fig, (train_ax, valid_ax) = plt.subplots(1, 2, figsize=(9.5, 4.0), layout="constrained")
    without_validation = []
    for i, (log_i, c) in enumerate(zip(logs, conditions)):
        style = _style(i) | {"linewidth": 1.0, "markersize": 4}
        loss = log_i["loss"].rolling_mean(window, center=True, min_samples=1)
        train_ax.plot(log_i["step"].to_list(), loss.to_list(), markevery=_markevery(log_i.height, i, len(logs)), label=label(c), **style)
        valid = log_i.filter(pl.col("validation_loss").is_not_null())
        if valid.height:
            valid_ax.plot(valid["step"].to_list(), valid["validation_loss"].to_list(),
                          markevery=_markevery(valid.height, i, len(logs)), **style)
        else:
            without_validation.append(label(c))
    smoothing = f"\n(moving average over {window} steps)" if window > 1 else ""
    train_ax.set(xlabel="step", ylabel="training loss (the objective's own)")
    train_ax.set_title(f"(a) training loss{smoothing}", fontsize=10)
    valid_ax.set(xlabel="step", ylabel="validation NLL per token")
    valid_ax.ticklabel_format(axis="y", useOffset=False)  # "+5.65" above the axis reads as a value
    valid_ax.set_title("(b) validation loss" + ("\n" if smoothing else ""), fontsize=10)
    if len(without_validation) == len(dirs):
        _empty(valid_ax, "no validation loss in these logs\n(training ran without a validation split)")
    elif without_validation:
        valid_ax.text(0.98, 0.98, "no validation rows:\n" + "\n".join(without_validation), transform=valid_ax.transAxes,
                      ha="right", va="top", fontsize=7)
    first = conditions[0] if conditions else {"model": "?", "dataset": "?"}
    fig.suptitle(f"{first['model']} on {first['dataset']}", fontsize=11)
    _legend_below(fig, [train_ax])
    _save(fig, stem)
    plt.close(fig)
