"""Figures of the language-model study, from the tidy metrics table of workflow_lib.report.collect.collect, and the
training curves of the model folders.

Each function writes STEM.png and STEM.pdf (plotting._save: deterministic files), its lines styled by
workflow_lib.plotting (at most five a panel, a condition in one style in every panel and figure; a training
condition is named alike in the extrapolation figure and the training curves). Panels whose values compare share
their axes, points sit at their condition's own x value, legends sit below the panels, and a figure with nothing to
show says so in its panel rather than plotting zeros. What each figure shows: docs/output.md, "The report".
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import NamedTuple

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import matplotlib.ticker
import numpy as np
import polars as pl

from workflow_lib.comparisons import mode_label
from workflow_lib.constants import PAPER_STRATEGY
from workflow_lib.layout import REPORT_FIGURES
from workflow_lib.plotting import Panel, _save, assign_styles, bar_style, empty_panel, legend_below, split_panels
from workflow_lib.report.conditions import ABLATION, ablation_frame, parse_model_dir, shown_objective
from workflow_lib.report.resolution import refusal_label, refused, resolved
from workflow_lib.sample.modes import get as get_mode

log = logging.getLogger("workflow_lib.report.figures")

# Condition fields that split lines or bar groups when a study has more than one value of them.
SHARED_FIELDS = ["model", "decoder", "train_mode", "copies", "seed"]
TRAIN_FIELDS = ["train_strategy", "train_synonyms"]
TEST_FIELDS = ["test_strategy", "test_synonyms", "test_mode"]
TRAINING_LEGEND = "training perturbation"
PANEL_SIZE = (3.1, 2.7)  # inches per panel


class Line(NamedTuple):
    """One series of a line figure: its panel group (objective and model), legend label, rank (what orders the
    labels' styles: the training intensity) and points."""

    group: tuple
    label: str
    rank: float
    x: list
    y: list
    err: list


def _err(values):
    return [0.0 if v is None or (isinstance(v, float) and np.isnan(v)) else v for v in values]


def _varying(frame: pl.DataFrame, fields: list[str]) -> list[str]:
    return [f for f in fields if frame[f].n_unique() > 1]


def _describe(row: dict, fields: list[str]) -> str:
    """The fields' values for a label ('none' of an unperturbed side left out)."""
    names = {"seed": "seed ", "decoder": "decoder ", "copies": "m="}
    return ", ".join(f"{names.get(f, '')}{row[f]}" for f in fields if row[f] != "none")


def _training_condition(row: dict, fields: list[str]) -> str:
    """A training condition as every legend of the report names it ('no perturbation', 'insertion 0.025'),
    then the values of `fields` (those that vary in the study)."""
    intensity = float(row["train_intensity"])
    name = "no perturbation" if intensity == 0 else f"{row['train_strategy']} {intensity:g}"
    extra = _describe(row, fields)
    return name + (f" ({extra})" if extra else "")


def _line_styles(panels: list[Panel]) -> dict[str, dict]:
    """label -> style: labels ordered by rank, then name (the same order in every figure that names the same
    training conditions, so the same style), no two alike in a panel (assign_styles)."""
    order = sorted({(line.rank, line.label) for panel in panels for line in panel.items})
    return assign_styles([[line.label for line in panel.items] for panel in panels], [label for _, label in order])


def _grid(rows: list[list[Panel]]):
    """One row of panels per entry of `rows` (an eval set), or a single row when every entry holds one panel.
    Returns the figure and (row entry, grid column, panel, axes) of every panel; spare cells are off."""
    n_cols = max(len(panels) for panels in rows)
    single = n_cols == 1
    shape = (1, len(rows)) if single else (len(rows), n_cols)
    fig, axes = plt.subplots(
        *shape,
        figsize=(max(PANEL_SIZE[0] * shape[1], 5.0), PANEL_SIZE[1] * shape[0] + 0.9),
        squeeze=False,
        layout="constrained",
    )
    placed = []
    for r, panels in enumerate(rows):
        for c in range(n_cols):
            row, col = (0, r) if single else (r, c)
            if c < len(panels):
                placed.append((r, col, panels[c], axes[row][col]))
            elif not single:
                axes[row][col].set_axis_off()
    return fig, placed


def _share(axes: list, x: bool = False, y: bool = False) -> None:
    for ax in axes[1:]:
        if x:
            ax.sharex(axes[0])
        if y:
            ax.sharey(axes[0])


def _bounded(y, err, bounds: tuple[float, float] = (0.0, 1.0)) -> list[np.ndarray]:
    """[below, above] ± err bar lengths cut at the metric's range `bounds` (MAUVE and TV lie in [0, 1]: a bar
    past 1 would show values the metric cannot take)."""
    y, err = np.asarray(y, dtype=float), np.asarray(_err(err), dtype=float)
    return [np.minimum(err, np.maximum(y - bounds[0], 0.0)), np.minimum(err, np.maximum(bounds[1] - y, 0.0))]


def _draw_lines(ax, lines: list[Line], styles: dict[str, dict]) -> None:
    """Each line with its ± 2 SE bars, cut at [0, 1]."""
    for line in lines:
        ax.errorbar(
            line.x,
            line.y,
            yerr=_bounded(line.y, line.err),
            capsize=2,
            markersize=5,
            linewidth=1.3,
            label=line.label,
            **styles[line.label],
        )


def ablation_figure(frame: pl.DataFrame, stem: str, intensity: float = 0.025) -> None:
    """MAUVE (mean ± 2 SE) of NoPerturb / TrainPerturb / TestPerturb / Both of insertion at the headline intensity, one
    panel per eval set, one bar group per (model, objective, and decoder / seed / training mode where the
    study has several) that has all four conditions. Bars: a colour and a hatch per condition."""
    arms = ablation_frame(frame, intensity)
    arms = arms.filter(pl.col("strategy") == PAPER_STRATEGY)  # the paper's; the ablation table shows every strategy
    # A study that samples its perturbed arms in two modes names them "Both (exact)", "Both (cached, persistent
    # perturbation)": its bar groups would not be the four conditions, so they are left out here (the ablation table
    # shows every mode). One that samples them in `cached` alone keeps the four bars, and its title says so.
    modes = set(arms.filter(pl.col("test_intensity") > 0)["test_mode"].to_list())
    single = modes.pop() if len(modes) == 1 and not get_mode(next(iter(modes))).algorithm2 else None
    if single is not None:  # one mode that is not Algorithm 2's law, named in every label: the title says it once
        arms = arms.with_columns(pl.col("condition").str.replace(f" ({mode_label(single)})", "", literal=True))
    arms = arms.filter(pl.col("condition").is_in(ABLATION))
    empty_text = (
        refusal_label(arms) if refused(arms).height and not resolved(arms).height else "no ablation in this study"
    )
    frame = shown_objective(resolved(arms))  # a refused cell is no bar (report.resolution)
    group_keys = ["model", "objective", *_varying(frame, SHARED_FIELDS[1:])]
    complete = (
        frame.group_by([*group_keys, "eval_set"])
        .agg(pl.col("condition").n_unique().alias("n"))
        .filter(pl.col("n") == 4)
    )
    frame = frame.join(complete, on=[*group_keys, "eval_set"])
    eval_sets = sorted(set(frame["eval_set"].to_list())) or ["(none)"]
    most = max(
        (frame.filter(pl.col("eval_set") == es).select(group_keys).unique().height for es in eval_sets), default=1
    )
    width = max(4.6, 1.2 * most + 0.8)  # room for each group's tick label
    fig, axes = plt.subplots(
        1,
        len(eval_sets),
        figsize=(width * len(eval_sets), 3.8 + 0.3 * (len(group_keys) - 2)),
        squeeze=False,
        sharey=True,
        layout="constrained",
    )
    for ax, es in zip(axes[0], eval_sets):
        sub = frame.filter(pl.col("eval_set") == es)
        groups = sub.select(group_keys).unique().sort(group_keys).rows(named=True)
        if not groups:
            empty_panel(ax, empty_text)
            continue
        width = 0.8 / len(ABLATION)
        for i, condition in enumerate(ABLATION):
            means, errs = [], []
            for group in groups:
                hit = sub.filter(
                    pl.all_horizontal([pl.col(k) == v for k, v in group.items()]) & (pl.col("condition") == condition)
                )
                if hit.height > 1:  # several synonym sources or sampling modes of one arm: their mean
                    log.info("ablation %s %s: mean of %d conditions", es, condition, hit.height)
                means.append(hit["mauve_mean"].mean())
                errs.append(hit["mauve_2se"].mean())
            ax.bar(
                np.arange(len(groups)) + (i - 1.5) * width,
                means,
                width,
                yerr=_bounded(means, errs),
                capsize=2,
                error_kw={"ecolor": "black", "linewidth": 1.0},
                label=condition,
                **bar_style(i),
            )
        ax.set_xticks(
            np.arange(len(groups)),
            [
                "\n".join([g["model"], g["objective"], *_describe(g, group_keys[2:]).split(", ")]).strip()
                for g in groups
            ],
            fontsize=8,
        )
        ax.set_ylabel("MAUVE")
        ax.set_title(es)
        ax.set_ylim(0, 1.05)
    if single is not None:
        fig.suptitle(f"sampled in mode {mode_label(single)}: not Algorithm 2's law", fontsize=9)
    legend_below(fig, axes)
    _save(fig, stem)
    plt.close(fig)


def intensity_figure(frame: pl.DataFrame, stem: str, intensity: float | None = None) -> None:
    """MAUVE against intensity (the same strategy and intensity at training and sampling), ± 2 SE, each line
    starting at 0 with its unperturbed model; one row of panels per eval set that has a sweep (two perturbed
    intensities or more), one panel per objective, one line per strategy (and decoder, seed, ... where the study has
    several)."""
    same = frame.filter(pl.col("train_intensity") == pl.col("test_intensity"))
    empty_text = (
        refusal_label(same)
        if refused(same).height and not resolved(same).height
        else "fewer than two perturbed intensities\nin this study"
    )
    same = shown_objective(resolved(same))  # a refused cell is no point (report.resolution)
    perturbed = same.filter((pl.col("train_intensity") > 0) & (pl.col("train_strategy") == pl.col("test_strategy")))
    eval_sets = sorted(set(same["eval_set"].to_list()))
    groups = ["objective", *_varying(same, ["model"])]
    rows: list[list[Panel[tuple | None, Line]]] = []
    shown: list[str] = []
    for es in eval_sets:
        sub = perturbed.filter(pl.col("eval_set") == es)
        shared = ["objective", *_varying(same.filter(pl.col("eval_set") == es), SHARED_FIELDS)]
        keys = [*shared, "train_strategy", *_varying(sub, TRAIN_FIELDS[1:] + TEST_FIELDS[1:])]
        lines = []
        for line in sub.select(keys).unique().sort(keys).rows(named=True):
            pts = sub.filter(pl.all_horizontal([pl.col(k) == v for k, v in line.items()])).sort("train_intensity")
            if pts.height < 2:
                continue
            x, y, err = (pts[c].to_list() for c in ("train_intensity", "mauve_mean", "mauve_2se"))
            base = same.filter(
                (pl.col("eval_set") == es)
                & (pl.col("train_intensity") == 0)
                & pl.all_horizontal([pl.col(k) == line[k] for k in shared])
            )
            if base.height:
                x, y, err = [0.0, *x], [base["mauve_mean"].mean(), *y], [base["mauve_2se"].mean(), *err]
            label = _describe(line, [k for k in keys if k not in groups])
            lines.append(Line(tuple(line[g] for g in groups), label, 0.0, x, y, err))
        if lines:  # an eval set the study sweeps on no intensity gets no panel (the paper's sweep is WebText's)
            rows.append(split_panels(lines, lambda line: line.group))
            shown.append(es)
    if not rows:
        rows, shown = [[Panel(None, [])]], ["all eval sets"]
    fig, placed = _grid(rows)
    styles = _line_styles([panel for panels in rows for panel in panels])
    _share([ax for *_, ax in placed], x=True, y=True)  # one MAUVE scale in the figure: rows read alike
    ticks = sorted({x for panels in rows for panel in panels for line in panel.items for x in line.x})
    for r, col, panel, ax in placed:
        if not panel.items:
            empty_panel(ax, empty_text)
            ax.set_title(shown[r], fontsize=9)
            continue
        _draw_lines(ax, panel.items, styles)
        scale = _intensity_axis(ax, ticks)
        ax.set_title(panel.title(", ".join(map(str, panel.group))) + f"\n{shown[r]}", fontsize=9)
        ax.set_xlabel("intensity α (training = sampling)" + scale, fontsize=8)
        if col == 0:
            ax.set_ylabel("MAUVE")
        ax.tick_params(labelsize=8)
    legend_below(
        fig,
        [ax for *_, ax in placed],
        "perturbation at training and sampling (at 0: the unperturbed model)",
        list(styles),
    )
    _save(fig, stem)
    plt.close(fig)


def _intensity_axis(ax, values: list[float]) -> str:
    """x ticks at the measured intensities. Linear while they are evenly spread; a sweep over a decade or
    more gets a symlog axis (linear up to the smallest positive value, so 0 keeps its place). Returns what the
    axis label must add for a reader to know the scale ('' when linear)."""
    ticks = sorted(set(values))
    positive = [t for t in ticks if t > 0]
    scale = ""
    if len(positive) > 1 and positive[-1] / positive[0] >= 8:
        ax.set_xscale("symlog", linthresh=positive[0], linscale=0.5)
        scale = f"\nlog scale above {positive[0]:g}, linear from 0 to {positive[0]:g}"
    ax.set_xticks(ticks, [f"{t:g}" for t in ticks])
    ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
    if len(ticks) > 4:  # a sweep's labels crowd a panel's width: slanted, they fit
        for label in ax.get_xticklabels():
            label.set(rotation=40, ha="right", rotation_mode="anchor")
    return scale


def extrapolation_figure(frame: pl.DataFrame, stem: str, intensity: float | None = None) -> None:
    """Exact TV to the true next-word law on in-support vs out-of-support prefixes, against the sampling
    intensity (each point at its own intensity): one row of panels per eval set, one panel per objective, one
    line per training condition (and whatever else varies). The point at sampling intensity 0 is shared by every
    sampling strategy's line. Every panel shares both axes: TV compares across objectives and eval sets."""
    sub = shown_objective(frame.filter(pl.col("tv_mean").is_not_null()))
    laws = sorted(set(sub["eval_set"].to_list())) or ["(none)"]
    groups = ["objective", *_varying(sub, ["model"])]
    rows: list[list[Panel[tuple | None, Line]]] = []
    titles = []
    for es in laws:
        part = sub.filter(pl.col("eval_set") == es)
        titles.append(f"{es} ({part['tv_law'][0]})" if part.height else es)
        fixed = list(
            dict.fromkeys(
                [
                    "objective",
                    "train_intensity",
                    "train_strategy",
                    *_varying(part, SHARED_FIELDS),
                    *_varying(part.filter(pl.col("train_intensity") > 0), TRAIN_FIELDS),
                ]
            )
        )
        described = [f for f in fixed if f not in (*groups, "train_intensity", "train_strategy")]
        sampled = part.filter(pl.col("test_intensity") > 0)
        test_keys = _varying(sampled, TEST_FIELDS)
        lines = []
        for base in part.select(fixed).unique().sort(fixed).rows(named=True):
            at_base = part.filter(pl.all_horizontal([pl.col(k) == v for k, v in base.items()]))
            mine = at_base.filter(pl.col("test_intensity") > 0)
            variants = (
                mine.select(test_keys).unique().sort(test_keys).rows(named=True) if test_keys and mine.height else [{}]
            )
            for variant in variants:
                pts = at_base.filter(
                    (pl.col("test_intensity") == 0)
                    | pl.all_horizontal([pl.lit(True), *[pl.col(k) == v for k, v in variant.items()]])
                ).sort("test_intensity")
                label = _training_condition(base, described) + (
                    f", sampling {_describe(variant, test_keys)}" if variant else ""
                )
                lines.append(
                    Line(
                        tuple(base[g] for g in groups),
                        label,
                        base["train_intensity"],
                        *(pts[c].to_list() for c in ("test_intensity", "tv_mean", "tv_2se")),
                    )
                )
        rows.append(split_panels(lines, lambda line: line.group) or [Panel(None, [])])
    fig, placed = _grid(rows)
    styles = _line_styles([panel for panels in rows for panel in panels])
    _share([ax for *_, ax in placed], x=True, y=True)
    ticks = sub["test_intensity"].to_list()
    for r, col, panel, ax in placed:
        if not panel.items:
            empty_panel(ax, "no builtin eval set in this study")
            continue
        _draw_lines(ax, panel.items, styles)
        scale = _intensity_axis(ax, ticks)
        ax.set_title(panel.title(", ".join(map(str, panel.group))) + f"\n{titles[r]}", fontsize=9)
        ax.set_xlabel("sampling intensity α" + scale, fontsize=8)
        if col == 0:
            ax.set_ylabel("TV to the true next-word law", fontsize=9)
        ax.tick_params(labelsize=8)
    legend_below(fig, [ax for *_, ax in placed], TRAINING_LEGEND, list(styles))
    _save(fig, stem)
    plt.close(fig)


FIGURES = dict(zip(REPORT_FIGURES, (ablation_figure, intensity_figure, extrapolation_figure), strict=True))


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
    loss on top, validation below), cut further where an objective has more than five folders. Every
    validation panel shares its y axis (NLL compares across objectives); a training panel shares its only with
    its own objective's (each objective has its own loss). A folder whose log has no validation rows is named
    in its validation panel."""
    dirs = sorted(model_dirs)
    conditions = [parse_model_dir(d) or {"model": "?", "dataset": "?", "objective": d} for d in dirs]
    known = [c for c in conditions if "train_intensity" in c]
    perturbed = [c for c in known if float(c["train_intensity"]) > 0]
    varying = [
        f
        for f, among in (("train_synonyms", perturbed), ("train_mode", known), ("copies", known), ("seed", known))
        if len({c[f] for c in among}) > 1
    ]

    def line(c: dict) -> Line:
        if "train_intensity" not in c:
            return Line((c["objective"],), c["objective"], 0.0, [], [], [])
        return Line((c["objective"],), _training_condition(c, varying), float(c["train_intensity"]), [], [], [])

    logs = {d: read_train_log(d) for d in dirs}
    series = sorted(
        ((line(c), d) for d, c in zip(dirs, conditions)), key=lambda s: (s[0].group, s[0].rank, s[0].label, s[1])
    )
    panels = split_panels(series, lambda s: s[0].group)
    styles = _line_styles([Panel(p.group, [s[0] for s in p.items]) for p in panels])
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
    _share(list(axes[1]), y=True)
    for panel, train_ax, valid_ax in zip(panels, axes[0], axes[1]):
        same_objective = [ax for p, ax in zip(panels, axes[0]) if p.group == panel.group]
        if train_ax is not same_objective[0]:
            train_ax.sharey(same_objective[0])
        without_validation = []
        for i, (ln, d) in enumerate(panel.items):
            log_i = logs[d]
            style = styles[ln.label] | {"linewidth": 1.2, "markersize": 4}
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
        train_ax.set_title(panel.title(panel.group[0]), fontsize=10)
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
    legend_below(fig, axes[0], TRAINING_LEGEND, list(styles), under=axes[1])
    _save(fig, stem)
    plt.close(fig)
