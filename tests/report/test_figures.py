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
from workflow_lib.report import figures as lm_figures
from workflow_lib.report.collect import SCHEMA


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
    monkeypatch.setattr(lm_figures, "_save", lambda fig, stem: saved.append(fig))
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
    # A closed figure's canvas no longer draws (FigureCanvasBase): this lays it out as saving does.
    fig.draw_without_rendering()
    legends = [*fig.legends, *(ax.get_legend() for ax in fig.axes if ax.get_legend())]
    assert legends or not expect_legend
    for legend in legends:
        for ax in fig.axes:
            if ax.get_visible() and ax.axison:
                assert not legend.get_window_extent().overlaps(ax.get_window_extent())


def test_extrapolation_points_sit_at_their_own_test_intensity(figures):
    """MLE trained at 0 and sampled at {0, 0.025, 0.1}; trained at 0.4 and sampled at {0, 0.4}: the 0.4 point
    is drawn at 0.4, not at the second position of another line's ticks. One panel per objective, lines named by
    their training condition, every panel on the same axes."""
    tests = {0.0: [0.0, 0.025, 0.1], 0.4: [0.0, 0.4]}
    rows = [
        {"train_intensity": ti, "test_intensity": tti, "tv_mean": 0.3 + ti - tti / 2, "tv_2se": 0.01, "tv_law": "ood"}
        for ti, ttis in tests.items()
        for tti in ttis
    ]
    rows.append(
        {
            "objective": "emo",
            "train_intensity": 0.025,
            "test_intensity": 0.05,
            "tv_mean": 0.25,
            "tv_2se": 0.01,
            "tv_law": "ood",
        }
    )
    lm_figures.extrapolation_figure(frame(rows), "unused")
    (fig,) = figures
    mle, emo = panel(fig, "mle"), panel(fig, "emo")
    assert mle.get_title() == "mle\nsyn-ood (ood)"
    lines = plotted(mle)
    assert set(lines) == {"no perturbation", "insertion 0.4"}
    assert lines["no perturbation"][0] == [0.0, 0.025, 0.1]
    assert lines["insertion 0.4"][0] == [0.0, 0.4]
    assert lines["insertion 0.4"][1] == pytest.approx([0.7, 0.5])
    assert plotted(emo)["insertion 0.025"][0] == [0.05]
    for ax in (mle, emo):
        assert sorted(ax.get_xticks()) == pytest.approx([0.0, 0.025, 0.05, 0.1, 0.4])
    assert mle.get_shared_y_axes().joined(mle, emo) and mle.get_shared_x_axes().joined(mle, emo)
    assert_legend_clear_of_axes(fig)


def test_extrapolation_splits_lines_by_sampling_strategy_and_shares_the_zero_point(figures):
    rows = [{"test_intensity": 0.0, "tv_mean": 0.3, "tv_2se": 0.01, "tv_law": "ood"}]
    rows += [
        {"test_intensity": x, "test_strategy": s, "tv_mean": 0.2, "tv_2se": 0.01, "tv_law": "ood"}
        for s, xs in (("insertion", [0.025, 0.1]), ("deletion", [0.05]))
        for x in xs
    ]
    lm_figures.extrapolation_figure(frame(rows), "unused")
    lines = plotted(panel(figures[0], "mle"))
    assert {k: v[0] for k, v in lines.items()} == {
        "no perturbation, sampling deletion": [0.0, 0.05],
        "no perturbation, sampling insertion": [0.0, 0.025, 0.1],
    }


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
    assert set(lines) == {"decoder top-p-0.9, insertion", "decoder unbiased, insertion"}
    assert lines["decoder unbiased, insertion"] == ([0.0, 0.025, 0.05], pytest.approx([0.5, 0.525, 0.55]))
    assert lines["decoder top-p-0.9, insertion"] == ([0.0, 0.025, 0.05], pytest.approx([0.6, 0.625, 0.65]))
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
        "no perturbation (seed 1)",
        "no perturbation (seed 2)",
        "insertion 0.025 (seed 1)",
    ]
    assert [line.get_label() for line in brier_train.get_lines()] == ["no perturbation (seed 1)"]
    same = [brier_train.get_lines()[0], mle_train.get_lines()[0]]
    assert len({(line.get_color(), line.get_linestyle(), line.get_marker()) for line in same}) == 1
    assert len(mle_valid.get_lines()) == 2
    assert mle_valid.get_lines()[0].get_xdata().tolist() == [10, 20, 30, 40]
    assert any("no validation rows:\nno perturbation (seed 2)" in t.get_text() for t in mle_valid.texts)
    assert not brier_valid.get_lines() and any("no validation loss" in t.get_text() for t in brier_valid.texts)
    assert brier_valid.get_shared_y_axes().joined(brier_valid, mle_valid)
    assert not brier_train.get_shared_y_axes().joined(brier_train, mle_train)  # each objective has its own loss
    assert fig._suptitle.get_text() == "tiny on syn"
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


def test_no_panel_holds_more_than_five_lines_and_none_is_lost(every_figure):
    for fig in every_figure:
        for ax in fig.axes:
            assert len(drawn_lines(ax)) <= MAX_LINES, ax.get_title()
        assert_legend_clear_of_axes(fig, expect_legend=False)  # the sweep has no ablation to draw
    _ablation, _intensity, extrapolation, curves = every_figure
    # every training condition of each eval set is on some panel: 11 lines in each of the default study's two
    # rows; in the sweep's one row 12 perturbed ones and the unperturbed model once per sampling strategy
    labels = [c.get_label() for ax in extrapolation.axes for c in ax.containers]
    assert len(labels) in (2 * 11, 12 + 2)
    assert sum(len(ax.get_lines()) for ax in curves.axes[: len(curves.axes) // 2]) in (11, 13)


def test_no_two_lines_of_a_panel_share_colour_and_dashes(every_figure):
    for fig in every_figure:
        for ax in fig.axes:
            # a custom dash pattern reads as "--" from get_linestyle(); matplotlib keeps it here
            cues = [(to_hex(line.get_color()), line._unscaled_dash_pattern) for line in drawn_lines(ax)]
            assert len(cues) == len(set(cues)), ax.get_title()


def test_a_condition_keeps_its_style_across_panels_and_figures(every_figure):
    _, _, extrapolation, curves = every_figure
    styles = {}
    for fig in (extrapolation, curves):
        for ax in fig.axes:
            for line in ax.get_lines():
                if not line.get_label().startswith("_") and "sampling" not in line.get_label():
                    styles.setdefault(line.get_label(), set()).add((to_hex(line.get_color()), line.get_marker()))
    assert styles and all(len(seen) == 1 for seen in styles.values())
    assert styles["no perturbation"] == {(to_hex(line_style(0)["color"]), line_style(0)["marker"])}


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
