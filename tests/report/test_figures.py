"""The language-model figures put every point at its condition's own x, keep legends off the data, hold at most
five lines a panel told apart by colour and dashes (colour-blind-safe colours), and the training curves show
training and validation loss."""

from __future__ import annotations

import sys

import numpy as np
import polars as pl
import pytest
from matplotlib.colors import to_hex

from workflow_lib import plotting as shared_figures
from workflow_lib.plotting import MAX_LINES, OKABE_ITO, PALETTE, assign_styles, line_style, split_panels
from workflow_lib.report import difference_figure, training_curves
from workflow_lib.report import figures as lm_figures
from workflow_lib.report.collect import SCHEMA
from workflow_lib.report.figure_styles import RESERVED, Perturbation, paper_recipe, perturbation_style


def frame(rows: list[dict]) -> pl.DataFrame:
    """A tidy metrics table (collect.collect's columns) from partial rows: unperturbed defaults."""
    base = {
        "model": "tiny",
        "dataset": "syn",
        "objective": "mle",
        "train_synonyms": "none",
        "train_mode": "augment",
        "copies": 1,
        "train_strategy": "none",
        "train_intensity": 0.0,
        "seed": 1,
        "eval_set": "syn-ood",
        "decoder": "unbiased",
        "test_synonyms": "none",
        "test_strategy": "none",
        "test_intensity": 0.0,
        "test_mode": "exact",
    }
    full = []
    for row in rows:
        row = base | row
        for side in ("train", "test"):
            if row[f"{side}_intensity"] > 0 and row[f"{side}_strategy"] == "none":
                row |= {f"{side}_strategy": "insertion", f"{side}_synonyms": "oracle"}
        full.append(row)
    return pl.DataFrame([{k: r.get(k) for k in SCHEMA} for r in full], schema=SCHEMA, orient="row")


@pytest.fixture
def figures(monkeypatch):
    """The figures the functions save, still open to inspect (plotting._save is where they would be written)."""
    saved = []
    for module in (lm_figures, difference_figure, training_curves):
        monkeypatch.setattr(module, "_save", lambda fig, stem: saved.append(fig))
    return saved


def plotted(ax) -> dict[str, tuple[list, list]]:
    """label -> (x, y) of every errorbar line of a panel."""
    return {c.get_label(): tuple(list(v) for v in c.lines[0].get_data()) for c in ax.containers if hasattr(c, "lines")}


def panel(fig, name: str):
    """The panel whose title's first line is `name` (an objective, a numbered part of one, an eval set)."""
    (ax,) = [ax for ax in fig.axes if ax.get_title().split("\n")[0] == name]
    return ax


def drawn_lines(ax) -> list:
    """Every line a reader sees in a panel: plotted and errorbar lines, reference lines; not the caps of error
    bars (markers without a line)."""
    return [line for line in ax.get_lines() if line.get_linestyle() != "None"]


def assert_legend_clear_of_axes(fig, expect_legend: bool = True) -> None:
    """No legend overlaps any panel of the rendered figure: its plotting area, tick labels, axis labels or title
    (each panel's tight box, measured with the legends hidden, since a panel's box counts its own legend)."""
    # A closed figure's canvas no longer draws (FigureCanvasBase): this lays it out as saving does.
    fig.draw_without_rendering()
    legends = [*fig.legends, *(ax.get_legend() for ax in fig.axes if ax.get_legend())]
    assert legends or not expect_legend
    for legend in legends:
        legend.set_visible(False)
    boxes = [ax.get_tightbbox() for ax in fig.axes if ax.get_visible() and ax.axison]
    for legend in legends:
        legend.set_visible(True)
        extent = legend.get_window_extent()
        assert all(not extent.overlaps(box) for box in boxes), legend.get_texts()[0].get_text()


def test_intensity_lines_keep_decoders_apart_and_skip_mixed_strategies(figures):
    """Each line starts at 0 with its own decoder's unperturbed model (was a gray horizontal line per line)."""
    rows = [
        {
            "train_intensity": x,
            "test_intensity": x,
            "decoder": d,
            "mauve_mean": m + x,
            "mauve_2se": 0.01,
            "eval_set": "test",
        }
        for d, m in (("unbiased", 0.5), ("top-p-0.9", 0.6))
        for x in (0.0, 0.025, 0.05)
    ]
    # trained with insertion, sampled with deletion at the same intensity: on no line
    rows.append(
        {
            "train_intensity": 0.05,
            "test_intensity": 0.05,
            "test_strategy": "deletion",
            "mauve_mean": 0.1,
            "mauve_2se": 0.01,
            "eval_set": "test",
        }
    )
    lm_figures.intensity_figure(frame(rows), "unused")
    (fig,) = figures
    lines = plotted(panel(fig, "mle"))
    assert set(lines) == {"decoder top-p-0.9, insertion (oracle)", "decoder unbiased, insertion (oracle)"}
    assert lines["decoder unbiased, insertion (oracle)"] == ([0.0, 0.025, 0.05], pytest.approx([0.5, 0.525, 0.55]))
    assert lines["decoder top-p-0.9, insertion (oracle)"] == ([0.0, 0.025, 0.05], pytest.approx([0.6, 0.625, 0.65]))
    assert_legend_clear_of_axes(fig)


def test_intensity_panels_only_for_eval_sets_with_a_sweep(figures):
    """The paper sweeps on WebText only: its other eval sets (0 and 0.025) get no empty panels (the rehearsal showed
    three of four panels saying so)."""
    rows = [
        {"train_intensity": x, "test_intensity": x, "mauve_mean": 0.5 + x, "mauve_2se": 0.01, "eval_set": es}
        for es, xs in (
            ("webtext", (0.0, 0.025, 0.05, 0.1)),
            ("wikitext2", (0.0, 0.025)),
            ("writingprompts", (0.0, 0.025)),
        )
        for x in xs
    ]
    lm_figures.intensity_figure(frame(rows), "unused")
    (fig,) = figures
    titles = [ax.get_title() for ax in fig.axes if ax.get_visible() and ax.has_data()]
    assert len(titles) == 1 and titles[0].endswith("webtext")
    assert not any("fewer than two" in t.get_text() for ax in fig.axes for t in ax.texts)


def test_intensity_figure_without_any_sweep_says_so(figures):
    rows = [
        {"train_intensity": x, "test_intensity": x, "mauve_mean": 0.5, "mauve_2se": 0.01, "eval_set": "test"}
        for x in (0.0, 0.025)
    ]
    lm_figures.intensity_figure(frame(rows), "unused")
    (fig,) = figures
    assert any("fewer than two" in t.get_text() for ax in fig.axes for t in ax.texts)


def test_ablation_bars_are_one_group_per_decoder(figures):
    arms = [(0.0, 0.0), (0.025, 0.0), (0.0, 0.025), (0.025, 0.025)]
    rows = [
        {
            "train_intensity": ti,
            "test_intensity": tti,
            "decoder": d,
            "mauve_mean": m + i / 10,
            "mauve_2se": 0.01,
            "eval_set": "test",
        }
        for d, m in (("unbiased", 0.4), ("top-p-0.9", 0.5))
        for i, (ti, tti) in enumerate(arms)
    ]
    lm_figures.ablation_figure(frame(rows), "unused", 0.025)
    (fig,) = figures
    ax = fig.axes[0]
    heights = {c.get_label(): [b.get_height() for b in c.patches] for c in ax.containers if hasattr(c, "patches")}
    # groups sorted by (model, objective, decoder): top-p-0.9 first, then unbiased; never their mean
    assert heights["NoPerturb"] == pytest.approx([0.5, 0.4]) and heights["Both"] == pytest.approx([0.8, 0.7])
    assert [t.get_text() for t in ax.get_xticklabels()] == [
        "tiny\nmle\ndecoder top-p-0.9",
        "tiny\nmle\ndecoder unbiased",
    ]
    assert_legend_clear_of_axes(fig)


def write_log(folder, with_validation: bool, level: float = 0.0) -> str:
    folder.mkdir(parents=True)
    steps = np.arange(1, 41)
    validation = [f"{3 + level - s / 40:.4f}" if with_validation and s % 10 == 0 else "" for s in steps]
    lines = ["step,epoch,loss,lr,tokens_per_s,validation_loss,validation_objective"]
    lines += [f"{s},{s / 40:.3f},{4 + level - s / 20:.4f},0.001,1000,{v},{v}" for s, v in zip(steps, validation)]
    (folder / "train_log.csv").write_text("\n".join(lines) + "\n")
    return str(folder)


def test_training_curves_one_column_per_objective_and_logs_without_validation(tmp_path, figures):
    """Was one training and one validation panel for every folder; now one column of the two per objective, the
    same condition in the same style in every column, validation panels on one y scale."""
    models = tmp_path / "results/models/tiny/syn"
    dirs = [
        write_log(models / "mle/none/augment-m1/none-0/seed1", True),
        write_log(models / "mle/none/augment-m1/none-0/seed2", False),
        write_log(models / "mle/distributional/augment-m1/insertion-0.025/seed1", True, 0.3),
        write_log(models / "brier/none/augment-m1/none-0/seed1", False),
    ]
    lm_figures.training_curves(dirs, "unused")
    (fig,) = figures
    (brier_train, mle_train), (brier_valid, mle_valid) = fig.axes[:2], fig.axes[2:]
    assert [brier_train.get_title(), mle_train.get_title()] == ["brier", "mle"]
    assert [line.get_label() for line in mle_train.get_lines()] == [
        "no perturbation, seed 1",
        "no perturbation, seed 2",
        "insertion 0.025 (distributional), seed 1",
    ]
    assert [line.get_label() for line in brier_train.get_lines()] == ["no perturbation, seed 1"]
    same = [brier_train.get_lines()[0], mle_train.get_lines()[0]]
    assert len({(line.get_color(), line.get_linestyle(), line.get_marker()) for line in same}) == 1
    assert len(mle_valid.get_lines()) == 2
    assert mle_valid.get_lines()[0].get_xdata().tolist() == [10, 20, 30, 40]
    assert any("no validation rows:\nno perturbation, seed 2" in t.get_text() for t in mle_valid.texts)
    assert not brier_valid.get_lines() and any("no validation loss" in t.get_text() for t in brier_valid.texts)
    assert brier_valid.get_shared_y_axes().joined(brier_valid, mle_valid)
    assert not brier_train.get_shared_y_axes().joined(brier_train, mle_train)  # each objective has its own loss
    assert fig._suptitle.get_text() == "tiny on syn"
    assert_legend_clear_of_axes(fig)


def test_training_curves_of_many_folders_get_a_column_per_seed(tmp_path, figures):
    """An objective with more folders than a panel holds (3 seeds x 3 conditions) gets a column per training seed,
    each with that seed's conditions side by side, not cuts through the sorted list that put one seed's baseline
    beside another seed's doses; the columns share one training-loss scale (one objective)."""
    models = tmp_path / "results/models/tiny/syn/mle"
    conditions = [
        "none/augment-m1/none-0",
        "distributional/augment-m1/insertion-0.025",
        "distributional/augment-m1/insertion-0.1",
    ]
    dirs = [write_log(models / f"{c}/seed{s}", True, 0.1 * i) for s in (1, 2, 3) for i, c in enumerate(conditions)]
    lm_figures.training_curves(dirs, "unused")
    (fig,) = figures
    train = fig.axes[:3]
    assert [ax.get_title() for ax in train] == ["mle, seed 1", "mle, seed 2", "mle, seed 3"]
    for seed, ax in zip((1, 2, 3), train):
        assert [line.get_label() for line in ax.get_lines()] == [
            f"no perturbation, seed {seed}",
            f"insertion 0.025 (distributional), seed {seed}",
            f"insertion 0.1 (distributional), seed {seed}",
        ]
    assert train[0].get_shared_y_axes().joined(train[0], train[2])
    assert_legend_clear_of_axes(fig)


def test_training_curves_cli_writes_the_png(tmp_path, monkeypatch):
    from workflow_lib.report import build

    folder = write_log(tmp_path / "results/models/tiny/syn/mle/none/augment-m1/none-0/seed1", False)
    monkeypatch.setattr(sys, "argv", ["report", "curves", "--stem", str(tmp_path / "curves"), folder])
    build.main()
    assert (tmp_path / "curves.png").stat().st_size > 5000 and (tmp_path / "curves.pdf").exists()


# ---- readable by anyone: at most five lines a panel, colour-blind-safe colours, dashes for print ------------

OBJECTIVES = ["brier", "emo", "mixce", "mle", "tvd"]


def default_study() -> pl.DataFrame:
    """The default study's 11 training conditions (five objectives at 0 and 0.025, MLE also at 0.4) on its two
    builtin eval sets; MLE at 0 and 0.025 sampled at both, every other model at its own training intensity."""
    rows = []
    for es, law in (("synthetic-test", "in_support"), ("synthetic-ood", "ood")):
        for i, objective in enumerate(OBJECTIVES):
            for ti in [0.0, 0.025] + ([0.4] if objective == "mle" else []):
                for tti in [0.0, 0.025] if objective == "mle" and ti < 0.4 else [ti]:
                    value = 0.2 + i / 50 + ti / 2 + tti / 4
                    rows.append(
                        {
                            "objective": objective,
                            "train_intensity": ti,
                            "test_intensity": tti,
                            "eval_set": es,
                            "mauve_mean": 1 - value,
                            "mauve_2se": 0.02,
                            "tv_mean": value,
                            "tv_2se": 0.02,
                            "tv_law": law,
                        }
                    )
    return frame(rows)


def sweep_study() -> pl.DataFrame:
    """The paper's shape for one objective: 13 training conditions (none; insertion and deletion at six
    intensities), each sampled at its own intensity, the unperturbed model at all of them."""
    rows = [
        {"test_intensity": 0.0, "mauve_mean": 0.9, "mauve_2se": 0.02, "tv_mean": 0.3, "tv_2se": 0.01, "tv_law": "ood"}
    ]
    for strategy in ("insertion", "deletion"):
        for a in (0.00625, 0.0125, 0.025, 0.05, 0.1, 0.2):
            common = {
                "test_intensity": a,
                "test_strategy": strategy,
                "test_synonyms": "oracle",
                "mauve_2se": 0.02,
                "tv_2se": 0.01,
                "tv_law": "ood",
            }
            rows.append(
                common
                | {
                    "train_intensity": a,
                    "train_strategy": strategy,
                    "train_synonyms": "oracle",
                    "mauve_mean": 0.9 - a,
                    "tv_mean": 0.3 + a,
                }
            )
            rows.append(common | {"mauve_mean": 0.85 - a, "tv_mean": 0.32 + a})
    return frame(rows)


def study_logs(tmp_path, conditions: list[tuple[str, float, str]]) -> list[str]:
    models = tmp_path / "results/models/tiny/synthetic"
    return [
        write_log(
            models / objective / ("none" if a == 0 else "oracle") / "augment-m1" / f"{strategy}-{a:g}" / "seed1",
            True,
            level=a + i / 10,
        )
        for i, (objective, a, strategy) in enumerate(conditions)
    ]


DEFAULT_CONDITIONS = [
    (o, a, "none" if a == 0 else "insertion") for o in OBJECTIVES for a in [0.0, 0.025] + ([0.4] if o == "mle" else [])
]
SWEEP_CONDITIONS = [("mle", 0.0, "none")] + [
    ("mle", a, s) for s in ("insertion", "deletion") for a in (0.00625, 0.0125, 0.025, 0.05, 0.1, 0.2)
]


@pytest.fixture(params=["default", "sweep"])
def every_figure(request, tmp_path, figures) -> list:
    """Every language-model figure of a study shaped like the default one (11 conditions) or like the paper's
    sweep (13 conditions of one objective), still open."""
    study, conditions = {"default": (default_study, DEFAULT_CONDITIONS), "sweep": (sweep_study, SWEEP_CONDITIONS)}[
        request.param
    ]
    for figure in lm_figures.FIGURES.values():
        figure(study(), "unused", 0.025)
    lm_figures.training_curves(study_logs(tmp_path, conditions), "unused")
    assert len(figures) == len(lm_figures.FIGURES) + 1
    return figures


def errorbars(ax) -> list:
    """A panel's errorbar series (not the error bars of bar charts, which have no data line)."""
    return [c for c in ax.containers if hasattr(c, "lines") and c.lines[0] is not None]


def styles_of(fig) -> dict[str, set]:
    """label -> the (colour, marker) every labelled line or point series of a figure is drawn in."""
    seen: dict[str, set] = {}
    for ax in fig.axes:
        series = [(c.get_label(), c.lines[0]) for c in errorbars(ax)]
        series += [(line.get_label(), line) for line in ax.get_lines() if line.get_marker() not in ("None", "")]
        for label, line in series:
            if not label.startswith("_"):
                seen.setdefault(label, set()).add((to_hex(line.get_color()), line.get_marker()))
    return seen


def points(ax) -> int:
    return sum(len(c.lines[0].get_xdata()) for c in errorbars(ax))


def test_no_panel_holds_more_than_five_lines_and_none_is_lost(every_figure):
    for fig in every_figure:
        for ax in fig.axes:
            assert len(drawn_lines(ax)) <= MAX_LINES, ax.get_title()
            assert len(errorbars(ax)) <= MAX_LINES, ax.get_title()
        assert_legend_clear_of_axes(fig, expect_legend=False)  # the sweep has no ablation to draw
    _ablation, _intensity, extrapolation, curves = every_figure
    # every perturbed condition of each eval set is a point: the default study's MLE sampled only, trained only,
    # both (0.025 and 0.4) and the four other objectives' both, on each of two eval sets; the sweep's 12 trained
    # and sampled and 12 sampled only
    assert sum(points(ax) for ax in extrapolation.axes) in (2 * 8, 24)
    assert sum(len(ax.get_lines()) for ax in curves.axes[: len(curves.axes) // 2]) in (11, 13)


def test_no_two_series_of_a_panel_look_alike(every_figure):
    for fig in every_figure:
        for ax in fig.axes:
            # a custom dash pattern reads as "--" from get_linestyle(); matplotlib keeps it here
            cues = [(to_hex(line.get_color()), line._unscaled_dash_pattern) for line in drawn_lines(ax)]
            assert len(cues) == len(set(cues)), ax.get_title()
            marks = [(to_hex(c.lines[0].get_color()), c.lines[0].get_marker()) for c in errorbars(ax)]
            assert len(marks) == len(set(marks)), ax.get_title()


def test_a_condition_keeps_its_style_across_panels_and_figures(every_figure):
    _, _, extrapolation, curves = every_figure
    styles: dict[str, set] = {}
    for fig in (extrapolation, curves):
        for label, seen in styles_of(fig).items():
            styles.setdefault(label, set()).update(seen)
    assert styles and all(len(seen) == 1 for seen in styles.values()), styles
    assert styles["no perturbation"] == {(to_hex(RESERVED["no perturbation"]["color"]), "o")}
    shared = set(styles_of(extrapolation)) & set(styles_of(curves))
    assert "insertion 0.025 (oracle)" in shared  # a training condition named alike in both figures


def test_reserved_styles_and_no_other_condition_looks_like_no_perturbation():
    """No perturbation: black, solid, circle; the paper's recipe (insertion of oracle synonyms at 0.025) its own;
    NEFTune, a sweep or any other condition never gets the circle or black (issue 68: NEFTune had the circle)."""
    assert perturbation_style(Perturbation("none", 0.0)) == RESERVED["no perturbation"]
    assert perturbation_style(paper_recipe()) == RESERVED["paper's recipe"]
    others = [
        Perturbation(s, a, syn)
        for s in ("insertion", "deletion", "replacement", "neftune", "embedding-noise", "new-strategy")
        for a in (0.00625, 0.0125, 0.025, 0.05, 0.1, 0.2, 0.4, 1.0)
        for syn in ("oracle", "distributional", "none")
    ]
    for p in others:
        style = perturbation_style(p)
        assert style["marker"] != "o" and style["color"] != OKABE_ITO["black"], p
        assert style["color"] in PALETTE and style == perturbation_style(p)  # a function of the condition alone


def test_the_palette_is_okabe_ito_and_each_cue_alone_tells_a_panel_apart():
    okabe_ito = {"#000000", "#E69F00", "#56B4E9", "#009E73", "#F0E442", "#0072B2", "#D55E00", "#CC79A7"}
    assert set(OKABE_ITO.values()) == okabe_ito
    assert set(PALETTE) == okabe_ito - {"#F0E442"}  # yellow: too faint a line on white
    first = [line_style(i) for i in range(MAX_LINES)]
    for cue in ("color", "linestyle", "marker"):
        assert len({str(style[cue]) for style in first}) == MAX_LINES, cue
    assert {shared_figures.bar_style(i)["edgecolor"] for i in range(4)} <= set(PALETTE)


def test_assign_styles_keeps_a_key_s_style_and_moves_a_look_alike():
    order = [f"k{i}" for i in range(40)]
    # k35 would repeat k0's colour and dashes (7 colours x 5 dash patterns): in k0's panel it takes another
    styles = assign_styles([["k0", "k35"], ["k0", "k1"]], order)
    assert styles["k0"] == line_style(0) and styles["k1"] == line_style(1)
    assert (styles["k35"]["color"], styles["k35"]["linestyle"]) != (styles["k0"]["color"], styles["k0"]["linestyle"])
    assert assign_styles([["b", "a"]], ["a", "b"]) == {"a": line_style(0), "b": line_style(1)}


def test_split_panels_groups_then_cuts_evenly():
    items = [("mle", i) for i in range(11)] + [("emo", 0)]
    panels = split_panels(items, lambda item: item[0])
    assert [(p.group, len(p.items), p.title(p.group)) for p in panels] == [
        ("mle", 4, "mle (1/3)"),
        ("mle", 4, "mle (2/3)"),
        ("mle", 3, "mle (3/3)"),
        ("emo", 1, "emo"),
    ]
    assert [item for p in panels for item in p.items] == items


def test_figures_write_the_same_bytes_twice(tmp_path):
    dirs = study_logs(tmp_path, DEFAULT_CONDITIONS[:4])
    for run in ("a", "b"):
        lm_figures.extrapolation_figure(default_study(), str(tmp_path / f"{run}-extrapolation"))
        lm_figures.training_curves(dirs, str(tmp_path / f"{run}-curves"))
    for name in ("extrapolation.png", "extrapolation.pdf", "curves.png", "curves.pdf"):
        assert (tmp_path / f"a-{name}").read_bytes() == (tmp_path / f"b-{name}").read_bytes(), name


def error_bar_ends(ax) -> list[tuple[float, float]]:
    """(low, high) of every error bar of a panel's errorbar containers."""
    ends = []
    for container in ax.containers:
        if hasattr(container, "lines"):  # (data line, caps, [bar collection])
            for collection in container.lines[2]:
                ends += [(min(s[0][1], s[1][1]), max(s[0][1], s[1][1])) for s in collection.get_segments()]
    return ends


def test_intensity_bars_stay_in_mauves_range_and_rows_share_one_scale(figures):
    """A MAUVE of 0.99 ± 0.05 has its bar cut at 1 (not drawn to 1.04), 0.02 ± 0.05 at 0; two eval sets' rows share
    one y scale; a sweep over a decade says on its axis that it is logarithmic."""
    rows = [
        {"train_intensity": x, "test_intensity": x, "mauve_mean": m, "mauve_2se": 0.05, "eval_set": es}
        for es, values in (("webtext", (0.99, 0.9, 0.5, 0.02)), ("wikitext2", (0.6, 0.55, 0.5, 0.45)))
        for x, m in zip((0.0, 0.025, 0.1, 0.4), values)
    ]
    lm_figures.intensity_figure(frame(rows), "unused")
    (fig,) = figures
    shown = [ax for ax in fig.axes if ax.has_data()]
    assert len(shown) == 2
    ends = [end for ax in shown for end in error_bar_ends(ax)]
    assert (
        len(ends) == 8
        and min(low for low, _ in ends) == pytest.approx(0.0)
        and max(h for _, h in ends) == pytest.approx(1.0)
    )
    assert (
        pytest.approx((0.94, 1.0)) in ends
        and pytest.approx((0.0, 0.07)) in ends
        and pytest.approx((0.55, 0.65)) in ends
    )
    assert shown[0].get_ylim() == shown[1].get_ylim()
    assert all(ax.get_xscale() == "symlog" and "log scale above 0.025" in ax.get_xlabel() for ax in shown)


def test_ablation_bars_stay_in_mauves_range(figures):
    rows = [
        {"train_intensity": tr, "test_intensity": te, "mauve_mean": 0.99, "mauve_2se": 0.05, "eval_set": "test"}
        for tr in (0.0, 0.025)
        for te in (0.0, 0.025)
    ]
    lm_figures.ablation_figure(frame(rows), "unused", 0.025)
    (fig,) = figures
    ax = next(ax for ax in fig.axes if ax.has_data())
    tops = [
        max(s[0][1], s[1][1])
        for c in ax.containers
        if getattr(c, "errorbar", None)
        for s in c.errorbar.lines[2][0].get_segments()
    ]
    assert len(tops) == 4 and max(tops) == pytest.approx(1.0)


def test_ablation_bars_of_a_cached_study_keep_four_arms_and_say_cached(figures):
    """A study that samples its perturbed arms in `cached` alone: its four bars, and a title naming the mode for
    what it is (one persistent perturbation per sequence, not Algorithm 2's law); an `exact` study has no such title."""
    for mode in ("cached", "exact"):
        rows = [
            {"train_intensity": tr, "test_intensity": te, "test_mode": mode, "mauve_mean": 0.5, "mauve_2se": 0.05}
            for tr in (0.0, 0.025)
            for te in (0.0, 0.025)
        ]
        lm_figures.ablation_figure(frame(rows), "unused", 0.025)
        fig = figures[-1]
        bars = [c.get_label() for c in fig.axes[0].containers if hasattr(c, "patches")]
        assert bars == ["NoPerturb", "TrainPerturb", "TestPerturb", "Both"]
        title = fig.get_suptitle()
        assert (title == "sampled in mode cached, persistent perturbation: not Algorithm 2's law") == (mode == "cached")


# ---- issue 68: fixed styles, legends clear of panels, what the study measured, differences, sweeps -----------


def test_adding_a_condition_moves_no_existing_style(tmp_path, figures):
    """Every figure of the default study, then of the same study with insertion 0.1 (oracle) and deletion 0.025
    (a new strategy) added: each existing condition keeps its colour and marker in every figure (issue 68: adding an
    intensity moved insertion 0.4's colour, and NEFTune took no perturbation's marker)."""
    before = default_study()
    added = [
        {"train_intensity": a, "test_intensity": a, "train_strategy": s, "test_strategy": s, "eval_set": es}
        | {"train_synonyms": "oracle", "test_synonyms": "oracle", "tv_law": law, "tv_mean": 0.5, "tv_2se": 0.02}
        | {"mauve_mean": 0.5, "mauve_2se": 0.02}
        for s, a in (("insertion", 0.1), ("deletion", 0.025))
        for es, law in (("synthetic-test", "in_support"), ("synthetic-ood", "ood"))
    ]
    after = pl.concat([before, frame(added)])
    conditions = DEFAULT_CONDITIONS + [("mle", 0.1, "insertion"), ("mle", 0.025, "deletion")]
    drawn = []
    for study, logs in ((before, DEFAULT_CONDITIONS), (after, conditions)):
        start = len(figures)
        for figure in lm_figures.FIGURES.values():
            figure(study, "unused", 0.025)
        training_curves.training_curves(study_logs(tmp_path / str(len(drawn)), logs), "unused")
        drawn.append([styles_of(fig) for fig in figures[start:]])
    assert all(drawn[0][1:])  # the ablation draws bars, one style per arm (plotting.bar_style); the others lines
    for old, new in zip(*drawn):
        assert all(new[label] == seen for label, seen in old.items()), (old, new)
    assert {"insertion 0.1 (oracle)", "deletion 0.025 (oracle)"} <= set(drawn[1][2])  # the extrapolation figure
    for fig in figures:
        assert_legend_clear_of_axes(fig, expect_legend=False)


def refused_arms(with_tv: bool) -> pl.DataFrame:
    """The four ablation arms of one eval set whose MAUVE the controls refused, with ROUGE-1 and (on a builtin
    eval set) the exact TV."""
    status = "MAUVE cannot see shuffled words at n = 50 with minilm"
    rows = [
        {"train_intensity": tr, "test_intensity": te, "mauve_status": status, "rouge1_mean": 0.6 - i / 100}
        | {"rouge1_2se": 0.01, "eval_set": "synthetic-ood"}
        | ({"tv_mean": 0.40 + i / 100, "tv_2se": 0.02, "tv_law": "ood"} if with_tv else {})
        for i, (tr, te) in enumerate([(0.0, 0.0), (0.025, 0.0), (0.0, 0.025), (0.025, 0.025)])
    ]
    return frame(rows)


@pytest.mark.parametrize("with_tv", [True, False])
def test_ablation_shows_what_the_study_measured_where_mauve_is_refused(figures, with_tv):
    """Was a blank "MAUVE not shown here" panel: now the bars are the TV to the true law (or ROUGE-1 on an eval set
    without a true law), the axis naming the metric and its direction, the title why MAUVE is not shown."""
    lm_figures.ablation_figure(refused_arms(with_tv), "unused", 0.025)
    (fig,) = figures
    (ax,) = fig.axes
    heights = {c.get_label(): [b.get_height() for b in c.patches] for c in ax.containers if hasattr(c, "patches")}
    expected = [0.40, 0.41, 0.42, 0.43] if with_tv else [0.60, 0.59, 0.58, 0.57]
    assert [heights[arm][0] for arm in ("NoPerturb", "TrainPerturb", "TestPerturb", "Both")] == pytest.approx(expected)
    label = "TV to the true law (lower is better)" if with_tv else "ROUGE-1 (higher is better)"
    assert ax.get_ylabel() == label
    assert "its controls fail" in ax.get_title()
    assert_legend_clear_of_axes(fig)


def difference_study() -> pl.DataFrame:
    """MLE: unperturbed 0.40, sampled with insertion 0.425, perturbed at both 0.43; EMO: 0.50 and 0.48 at both."""
    rows = [
        {"objective": o, "train_intensity": tr, "test_intensity": te, "tv_mean": v, "tv_2se": se, "tv_law": "ood"}
        for o, tr, te, v, se in (
            ("mle", 0.0, 0.0, 0.40, 0.03),
            ("mle", 0.0, 0.025, 0.425, 0.04),
            ("mle", 0.025, 0.025, 0.43, 0.02),
            ("emo", 0.0, 0.0, 0.50, 0.01),
            ("emo", 0.025, 0.025, 0.48, 0.01),
        )
    ]
    return frame(rows)


def drawn_differences(fig) -> dict[tuple[str, str], tuple[float, float, float, str]]:
    """(place, objective) -> (difference, low, high, interval line style) of every point of the figure."""
    out = {}
    names = [t.get_text() for t in fig.axes[0].get_yticklabels()]  # the panels share the objectives' axis
    for ax in fig.axes:
        for c in errorbars(ax):
            xs, ys = c.lines[0].get_data()
            (bars,) = c.lines[2]
            for x, y, segment, style in zip(xs, ys, bars.get_segments(), bars.get_linestyles()):
                dashed = "dashed" if style[1] is not None else "solid"
                out[(ax.get_title().split("\n")[0], names[round(y)])] = (x, segment[0][0], segment[1][0], dashed)
    return out


def test_extrapolation_draws_each_condition_minus_its_baseline(figures):
    """Was TV on a 0.3-0.55 axis where a +0.02 effect vanished: now each condition's TV minus its objective's
    unperturbed model's, at 0 a line. Without contrasts: ± sqrt(2se_a^2 + 2se_b^2) (an unpaired interval, dashed);
    with contrasts.csv's rows of the pair: their paired interval (solid)."""
    lm_figures.extrapolation_figure(difference_study(), "unused", 0.025)
    drawn = drawn_differences(figures[-1])
    assert set(drawn) == {("sampling only", "mle"), ("training and sampling", "mle"), ("training and sampling", "emo")}
    for key, (d, se) in {
        ("sampling only", "mle"): (0.025, np.hypot(0.04, 0.03)),
        ("training and sampling", "mle"): (0.03, np.hypot(0.02, 0.03)),
        ("training and sampling", "emo"): (-0.02, np.hypot(0.01, 0.01)),
    }.items():
        assert drawn[key] == (pytest.approx(d), pytest.approx(d - se), pytest.approx(d + se), "dashed"), key
    assert all(any(line.get_xdata()[0] == 0 for line in ax.get_lines()) for ax in figures[-1].axes)
    assert "unpaired" in figures[-1].get_suptitle()

    contrast = {
        "metric": "tv",
        "model": "tiny",
        "dataset": "syn",
        "decoder": "unbiased",
        "seed": 1,
        "eval_set": "syn-ood",
    }
    contrasts = pl.DataFrame(
        [
            contrast
            | {"family": "ablation", "objective": "mle", "a": "TestPerturb", "b": "NoPerturb"}
            | {"difference": 0.025, "low": 0.02, "high": 0.03},
            contrast
            | {"family": "perturbation", "objective": "emo", "a": "insertion 0.025", "b": "no perturbation"}
            | {"difference": -0.02, "low": -0.025, "high": -0.015},
        ]
    )
    lm_figures.extrapolation_figure(difference_study(), "unused", 0.025, contrasts=contrasts)
    drawn = drawn_differences(figures[-1])
    assert drawn[("sampling only", "mle")] == (pytest.approx(0.025), 0.02, 0.03, "solid")
    assert drawn[("training and sampling", "emo")] == (pytest.approx(-0.02), -0.025, -0.015, "solid")
    assert drawn[("training and sampling", "mle")][3] == "dashed"  # no contrast row: unpaired
    assert "paired 95% over prompts (contrasts.csv) for 2 of 3" in figures[-1].get_suptitle()
    assert_legend_clear_of_axes(figures[-1])


def test_an_intensity_sweep_is_one_connected_line_also_where_mauve_is_refused(figures):
    """Insertion at training and sampling at 0.025, 0.1 and 0.4, MAUVE refused: one line from the unperturbed model
    at 0 through every intensity (drawn with a line, not isolated points), of the TV to the true law."""
    status = "MAUVE cannot see shuffled words at n = 50 with minilm"
    rows = [
        {"train_intensity": a, "test_intensity": a, "mauve_status": status, "tv_mean": 0.4 + a / 4, "tv_2se": 0.01}
        | {"tv_law": "ood", "rouge1_mean": 0.6, "rouge1_2se": 0.01}
        for a in (0.0, 0.025, 0.1, 0.4)
    ]
    lm_figures.intensity_figure(frame(rows), "unused")
    (fig,) = figures
    ax = panel(fig, "mle")
    (sweep,) = errorbars(ax)
    line = sweep.lines[0]
    assert sweep.get_label() == "insertion (oracle)"
    assert list(line.get_xdata()) == [0.0, 0.025, 0.1, 0.4]
    assert list(line.get_ydata()) == pytest.approx([0.4, 0.40625, 0.425, 0.5])
    assert line.get_linestyle() not in ("None", "", " ") and line.get_linewidth() > 0
    assert ax.get_ylabel() == "TV to the true law (lower is better)"
    assert_legend_clear_of_axes(fig)


def test_a_sweep_pooled_over_seeds_beside_an_untrained_model_is_one_line_from_zero(figures):
    """The real study's case: the trained arms pooled over their training seeds (seed None, report.seeds), the
    untrained model at its one seed. The sweep is one line from its unperturbed model at 0, labelled without a seed:
    comparing a pooled row's seed (None) with == matched nothing, and the untrained model's seed split the lines."""
    rows = [{"train_intensity": 0.0, "test_intensity": 0.0, "seed": None, "rouge1_mean": 0.66, "rouge1_2se": 0.004}]
    rows += [
        {"train_intensity": x, "test_intensity": x, "seed": None, "rouge1_mean": 0.66 - x / 10, "rouge1_2se": 0.004}
        for x in (0.025, 0.1, 0.4)
    ]
    rows.append({"objective": "untrained", "seed": 42, "rouge1_mean": 0.6, "rouge1_2se": 0.004})
    rows = [r | {"mauve_mean": None, "mauve_status": "MAUVE cannot see shuffled words at n = 8"} for r in rows]
    lm_figures.intensity_figure(frame(rows), "unused")
    (fig,) = figures
    lines = plotted(panel(fig, "mle"))
    assert list(lines) == ["insertion (oracle)"]
    assert lines["insertion (oracle)"][0] == [0.0, 0.025, 0.1, 0.4]


def test_a_sweep_whose_doses_have_fewer_seeds_than_its_baseline_is_still_one_line(figures):
    """real-ci's case: the baseline and 0.025 pooled over two seeds (seed None), the doses 0.1 and 0.4 from seed 42
    alone. Each point is its condition's mean over its seeds; the sweep is one line from 0, not two broken ones."""
    rows = [
        {"train_intensity": x, "test_intensity": x, "seed": seed, "rouge1_mean": 0.7 - x / 10, "rouge1_2se": 0.004}
        for x, seed in ((0.0, None), (0.025, None), (0.1, 42), (0.4, 42))
    ]
    rows = [r | {"mauve_mean": None, "mauve_status": "MAUVE cannot see shuffled words at n = 8"} for r in rows]
    lm_figures.intensity_figure(frame(rows), "unused")
    (fig,) = figures
    ((label, (x, y)),) = plotted(panel(fig, "mle")).items()
    assert label == "insertion (oracle)" and x == [0.0, 0.025, 0.1, 0.4]
    assert y == pytest.approx([0.7, 0.6975, 0.69, 0.66])
