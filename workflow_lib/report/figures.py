"""Figures of the language-model study, from the tidy metrics table of workflow_lib.report.collect.collect, and the
training curves of the model folders.

Each function writes STEM.png and STEM.pdf (plotting._save: deterministic files). A condition's colour and marker come
from report.figure_styles, a function of the condition alone, so a condition looks the same in every panel and figure
and keeps its look when a study adds a condition. Panels whose values compare share their axes, points sit at their
condition's own x value, legends sit below the panels, and a figure with nothing to show says so in its panel rather
than plotting zeros. Where MAUVE is refused (report.resolution) a figure shows what the study did measure: the exact
TV to the true law where the eval set has it, else ROUGE-1, its axis naming the metric and which way is better. What
each figure shows: docs/output.md, "The report".
"""

from __future__ import annotations

import logging
from typing import NamedTuple

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import matplotlib.ticker
import numpy as np
import polars as pl

from workflow_lib.comparisons import mode_label
from workflow_lib.constants import PAPER_STRATEGY, UNTRAINED
from workflow_lib.layout import REPORT_FIGURES
from workflow_lib.metric_registry import BY_NAME
from workflow_lib.plotting import PANEL_SIZE, Panel, _save, bar_style, empty_panel, legend_below, split_panels
from workflow_lib.report.conditions import ABLATION, ablation_frame, shown_objective
from workflow_lib.report.difference_figure import extrapolation_figure
from workflow_lib.report.figure_styles import Perturbation, describe, sweep_style, with_repeat
from workflow_lib.report.resolution import MAUVE, refusal_label, refused, resolved
from workflow_lib.report.training_curves import read_train_log, training_curves  # noqa: F401 (build.py reads them here)
from workflow_lib.sample.modes import get as get_mode

log = logging.getLogger("workflow_lib.report.figures")

# Condition fields that split lines or bar groups when a study has more than one value of them.
SHARED_FIELDS = ["model", "decoder", "train_mode", "copies", "seed"]
TRAIN_FIELDS = ["train_strategy", "train_synonyms"]
TEST_FIELDS = ["test_strategy", "test_synonyms", "test_mode"]


class Line(NamedTuple):
    """One series of a line figure: its panel group (objective and model), legend label, style and points."""

    group: tuple
    label: str
    style: dict
    x: list
    y: list
    err: list


def _err(values):
    return [0.0 if v is None or (isinstance(v, float) and np.isnan(v)) else v for v in values]


def _varying(frame: pl.DataFrame, fields: list[str]) -> list[str]:
    return [f for f in fields if frame[f].n_unique() > 1]


def axis_label(metric: str) -> str:
    """A metric as an axis names it, with which way is better."""
    m = BY_NAME[metric]
    return f"{m.label} ({'lower' if m.lower_is_better else 'higher'} is better)"


def measured_metric(frame: pl.DataFrame) -> str:
    """What a figure shows where MAUVE is refused: the exact TV to the true law where these rows have it, else
    ROUGE-1."""
    return "tv" if "tv_mean" in frame.columns and frame["tv_mean"].drop_nulls().len() else "rouge1"


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
    """[below, above] ± err bar lengths cut at the metric's range `bounds` (MAUVE, TV and ROUGE lie in [0, 1]: a bar
    past 1 would show values the metric cannot take)."""
    y, err = np.asarray(y, dtype=float), np.asarray(_err(err), dtype=float)
    return [np.minimum(err, np.maximum(y - bounds[0], 0.0)), np.minimum(err, np.maximum(bounds[1] - y, 0.0))]


def _draw_lines(ax, lines: list[Line]) -> None:
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
            **line.style,
        )


def _ablation_arms(frame: pl.DataFrame, intensity: float) -> tuple[pl.DataFrame, str | None]:
    """Insertion's four ablation arms at `intensity`, and the one sampling mode every label shares when it is not
    Algorithm 2's law (None otherwise)."""
    arms = ablation_frame(frame, intensity)
    arms = arms.filter(pl.col("strategy") == PAPER_STRATEGY)  # the paper's; the ablation table shows every strategy
    # A study that samples its perturbed arms in two modes names them "Both (exact)", "Both (cached, persistent
    # perturbation)": its bar groups would not be the four conditions, so they are left out here (the ablation table
    # shows every mode). One that samples them in `cached` alone keeps the four bars, and its title says so.
    modes = set(arms.filter(pl.col("test_intensity") > 0)["test_mode"].to_list())
    single = modes.pop() if len(modes) == 1 and not get_mode(next(iter(modes))).algorithm2 else None
    if single is not None:  # one mode that is not Algorithm 2's law, named in every label: the title says it once
        arms = arms.with_columns(pl.col("condition").str.replace(f" ({mode_label(single)})", "", literal=True))
    return arms.filter(pl.col("condition").is_in(ABLATION)), single


def _refused_note(metric: str, rows: pl.DataFrame) -> str:
    """A title's second line when a panel shows another metric than MAUVE: why MAUVE is not shown."""
    return "" if metric == MAUVE else "\n" + refusal_label(rows).replace(":\n", ": ").split("\n")[0]


def _complete(frame: pl.DataFrame, metric: str, group_keys: list[str]) -> pl.DataFrame:
    """The rows with a value of `metric` in bar groups that have all four arms."""
    frame = frame.filter(pl.col(f"{metric}_mean").is_not_null())
    complete = (
        frame.group_by([*group_keys, "eval_set"])
        .agg(pl.col("condition").n_unique().alias("n"))
        .filter(pl.col("n") == len(ABLATION))
    )
    return frame.join(complete, on=[*group_keys, "eval_set"])


def ablation_figure(frame: pl.DataFrame, stem: str, intensity: float = 0.025, contrasts=None) -> None:
    """NoPerturb / TrainPerturb / TestPerturb / Both of insertion at the headline intensity (mean ± 2 SE), one panel
    per eval set, one bar group per (model, objective, and decoder / seed / training mode where the study has
    several) that has all four conditions. Bars: a colour and a hatch per condition. A panel shows MAUVE; where
    every MAUVE cell of its eval set is refused, the exact TV to the true law (or ROUGE-1: measured_metric)."""
    arms, single = _ablation_arms(frame, intensity)
    shown = shown_objective(arms)
    group_keys = ["model", "objective", *_varying(shown, SHARED_FIELDS[1:])] if shown.height else ["model", "objective"]
    eval_sets = sorted(set(shown["eval_set"].to_list())) or ["(none)"]
    panels = []  # (eval set, metric, rows, why empty)
    for es in eval_sets:
        sub = shown.filter(pl.col("eval_set") == es)
        bars = _complete(resolved(sub), MAUVE, group_keys)  # a refused cell is no bar (report.resolution)
        metric = MAUVE
        if not bars.height and refused(sub).height:
            metric = measured_metric(sub)
            bars = _complete(sub, metric, group_keys)
        why = refusal_label(sub) if refused(sub).height and metric == MAUVE else "no ablation in this study"
        panels.append((es, metric, bars, why))
    if any(bars.height for _, _, bars, _ in panels):  # an eval set without the four arms gets no panel
        panels = [panel for panel in panels if panel[2].height]
    eval_sets = [es for es, *_ in panels]
    most = max((bars.select(group_keys).unique().height for *_, bars, _ in panels), default=1)
    width = max(4.6, 1.2 * most + 0.8)  # room for each group's tick label
    fig, axes = plt.subplots(
        1,
        len(eval_sets),
        figsize=(width * len(eval_sets), 3.8 + 0.3 * (len(group_keys) - 2)),
        squeeze=False,
        layout="constrained",
    )
    for metric in {metric for _, metric, *_ in panels}:  # one scale per metric shown
        _share([ax for ax, (_, m, *_) in zip(axes[0], panels) if m == metric], y=True)
    tops = {  # a metric other than MAUVE: its axis up to a quarter above its highest bar, so its bars differ visibly
        metric: max(float((sub[f"{metric}_mean"] + sub[f"{metric}_2se"].fill_null(0)).max() or 0.8) for sub in subs)  # type: ignore[arg-type]
        for metric in {m for _, m, *_ in panels}
        for subs in [[sub for _, m, sub, _ in panels if m == metric]]
    }
    for ax, (es, metric, sub, why) in zip(axes[0], panels):
        groups = sub.select(group_keys).unique().sort(group_keys).rows(named=True)
        if not groups:
            empty_panel(ax, why)
            ax.set_title(es, fontsize=9)
            continue
        bar_width = 0.8 / len(ABLATION)
        for i, condition in enumerate(ABLATION):
            means, errs = [], []
            for group in groups:
                hit = sub.filter(
                    pl.all_horizontal([pl.col(k) == v for k, v in group.items()]) & (pl.col("condition") == condition)
                )
                if hit.height > 1:  # several synonym sources or sampling modes of one arm: their mean
                    log.info("ablation %s %s: mean of %d conditions", es, condition, hit.height)
                means.append(hit[f"{metric}_mean"].mean())
                errs.append(hit[f"{metric}_2se"].mean())
            ax.bar(
                np.arange(len(groups)) + (i - 1.5) * bar_width,
                means,
                bar_width,
                yerr=_bounded(means, errs),
                capsize=2,
                error_kw={"ecolor": "black", "linewidth": 1.0},
                label=condition,
                **bar_style(i),
            )
        ax.set_xticks(
            np.arange(len(groups)),
            ["\n".join([g["model"], g["objective"], *describe(g, group_keys[2:]).split(", ")]).strip() for g in groups],
            fontsize=8,
        )
        ax.set_ylabel(axis_label(metric), fontsize=9)
        ax.set_title(es + _refused_note(metric, frame.filter(pl.col("eval_set") == es)), fontsize=9)
        ax.set_ylim(0, 1.05 if metric == MAUVE else min(1.05, 1.25 * tops[metric]))
    if single is not None:
        fig.suptitle(f"sampled in mode {mode_label(single)}: not Algorithm 2's law", fontsize=9)
    legend_below(fig, axes)
    _save(fig, stem)
    plt.close(fig)


def _sweeps(same: pl.DataFrame, metric: str, groups: list[str]) -> list[Line]:
    """The lines of one eval set's rows trained and sampled at one intensity: one per strategy (and whatever else
    varies) with two perturbed intensities or more, starting at 0 with its unperturbed model."""
    mean, se = f"{metric}_mean", f"{metric}_2se"
    same = same.filter(pl.col(mean).is_not_null())
    perturbed = same.filter((pl.col("train_intensity") > 0) & (pl.col("train_strategy") == pl.col("test_strategy")))
    # What splits lines among the trained models (an untrained model, one per study, has its own seed and mode). Not
    # the seed: the figure's rows are pooled over training seeds (report.seeds.pool_seeds), so a seed left is a
    # condition's only one, and a sweep whose doses have fewer seeds than its baseline is still one line.
    trained = same.filter(~pl.col("objective").str.starts_with(UNTRAINED))  # "untrained (zero-shot)" as shown
    shared = ["objective", *_varying(trained, [f for f in SHARED_FIELDS if f != "seed"])]
    keys = [*shared, "train_strategy", *_varying(perturbed, TRAIN_FIELDS[1:] + TEST_FIELDS[1:])]
    lines = []
    for line in perturbed.select(keys).unique().sort(keys).rows(named=True):
        pts = perturbed.filter(pl.all_horizontal([pl.col(k).eq_missing(v) for k, v in line.items()])).sort(
            "train_intensity"
        )
        if pts.height < 2:
            continue
        x, y, err = (pts[c].to_list() for c in ("train_intensity", mean, se))
        base = same.filter(
            (pl.col("train_intensity") == 0) & pl.all_horizontal([pl.col(k).eq_missing(line[k]) for k in shared])
        )
        if base.height:
            x, y, err = [0.0, *x], [base[mean].mean(), *y], [base[se].mean(), *err]
        first = pts.row(0, named=True)
        extra = describe(line, [k for k in shared if k not in groups])
        style = with_repeat(sweep_style(Perturbation.of(first, "test")), extra)
        label = (f"{extra}, " if extra else "") + Perturbation.of(first, "test").sweep_label()
        lines.append(Line(tuple(line[g] for g in groups), label, style, x, y, err))
    return lines


def intensity_figure(frame: pl.DataFrame, stem: str, intensity: float | None = None, contrasts=None) -> None:
    """A metric against intensity (the same strategy and intensity at training and sampling), ± 2 SE, each sweep one
    line over its intensities, starting at 0 with its unperturbed model; one row of panels per eval set that has a
    sweep (two perturbed intensities or more), one panel per objective, one line per strategy (and decoder, seed,
    ... where the study has several). The metric is MAUVE; where an eval set's MAUVE is refused, the exact TV to the
    true law (or ROUGE-1: measured_metric)."""
    same = frame.filter(pl.col("train_intensity") == pl.col("test_intensity"))
    groups = ["objective", *_varying(same, ["model"])]
    rows: list[list[Panel[tuple | None, Line]]] = []
    shown: list[tuple[str, str]] = []  # (eval set, metric) of each row
    for es in sorted(set(same["eval_set"].to_list())):
        part = same.filter(pl.col("eval_set") == es)
        metric, lines = MAUVE, _sweeps(shown_objective(resolved(part)), MAUVE, groups)
        if not lines and refused(part).height:  # a refused cell is no point (report.resolution)
            metric = measured_metric(part)
            lines = _sweeps(shown_objective(part), metric, groups)
        if lines:  # an eval set the study sweeps on no intensity gets no panel (the paper's sweep is WebText's)
            rows.append(split_panels(lines, lambda line: line.group))
            shown.append((es, metric))
    if not rows:
        rows, shown = [[Panel(None, [])]], [("all eval sets", MAUVE)]
    fig, placed = _grid(rows)
    _share([ax for *_, ax in placed], x=True)
    for metric in {m for _, m in shown}:  # one scale per metric: rows of one metric read alike
        _share([ax for r, _, _, ax in placed if shown[r][1] == metric], y=True)
    ticks = sorted({x for panels in rows for panel in panels for line in panel.items for x in line.x})
    notes = [_refused_note(metric, same.filter(pl.col("eval_set") == es)) for es, metric in shown]
    if len(set(notes)) == 1 and notes[0]:  # every row shows another metric for one reason: said once, above
        fig.suptitle(notes[0].strip(), fontsize=9)
        notes = [""] * len(notes)
    order = []
    for r, col, panel, ax in placed:
        es, metric = shown[r]
        if not panel.items:
            empty_panel(ax, "fewer than two perturbed intensities\nin this study")
            ax.set_title(es, fontsize=9)
            continue
        _draw_lines(ax, panel.items)
        order += [line.label for line in panel.items]
        scale = _intensity_axis(ax, ticks)
        ax.set_title(panel.title(", ".join(map(str, panel.group))) + f"\n{es}{notes[r]}", fontsize=9)
        ax.set_xlabel("intensity α (training = sampling)" + scale, fontsize=8)
        if col == 0 or metric != shown[r - 1][1]:
            ax.set_ylabel(axis_label(metric), fontsize=8)
        ax.tick_params(labelsize=8)
    legend_below(
        fig,
        [ax for *_, ax in placed],
        "perturbation at training and sampling (at 0: the unperturbed model)",
        list(dict.fromkeys(order)),
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


FIGURES = dict(zip(REPORT_FIGURES, (ablation_figure, intensity_figure, extrapolation_figure), strict=True))
