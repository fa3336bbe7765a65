"""The language-model figures put every point at its condition's own x, keep legends off the data, and the
training curves show training and validation loss."""

from __future__ import annotations

import sys

import numpy as np
import polars as pl
import pytest

from workflow_lib.report import figures as lm_figures
from workflow_lib.report.collect import SCHEMA


def frame(rows: list[dict]) -> pl.DataFrame:
    """A tidy metrics table (collect.collect's columns) from partial rows: unperturbed defaults."""
    base = {"model": "tiny", "dataset": "syn", "objective": "mle", "train_synonyms": "none", "train_mode": "augment", "copies": 1,
            "train_strategy": "none", "train_intensity": 0.0, "seed": 1, "eval_set": "syn-ood", "decoder": "unbiased",
            "test_synonyms": "none", "test_strategy": "none", "test_intensity": 0.0, "test_mode": "exact"}
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
    """The figures the functions save, still open to inspect (figures._save is where they would be written)."""
    saved = []
    monkeypatch.setattr(lm_figures, "_save", lambda fig, stem: saved.append(fig))
    return saved


def plotted(ax) -> dict[str, tuple[list, list]]:
    """label -> (x, y) of every errorbar line of a panel."""
    return {c.get_label(): tuple(list(v) for v in c.lines[0].get_data()) for c in ax.containers if hasattr(c, "lines")}


def assert_legend_clear_of_axes(fig) -> None:
    fig.canvas.draw()
    assert all(ax.get_legend() is None for ax in fig.axes) and len(fig.legends) == 1
    legend = fig.legends[0].get_window_extent()
    for ax in fig.axes:
        assert not legend.overlaps(ax.get_window_extent())


def test_extrapolation_points_sit_at_their_own_test_intensity(figures):
    """MLE trained at 0 and sampled at {0, 0.025, 0.1}; trained at 0.4 and sampled at {0, 0.4}: the 0.4 point
    is drawn at 0.4, not at the second position of another line's ticks."""
    tests = {0.0: [0.0, 0.025, 0.1], 0.4: [0.0, 0.4]}
    rows = [{"train_intensity": ti, "test_intensity": tti, "tv_mean": 0.3 + ti - tti / 2, "tv_2se": 0.01, "tv_law": "ood"}
            for ti, ttis in tests.items() for tti in ttis]
    rows.append({"objective": "emo", "train_intensity": 0.025, "test_intensity": 0.05, "tv_mean": 0.25, "tv_2se": 0.01, "tv_law": "ood"})
    lm_figures.extrapolation_figure(frame(rows), "unused")
    (fig,) = figures
    ax = fig.axes[0]
    lines = plotted(ax)
    assert lines["mle, train α=0"][0] == [0.0, 0.025, 0.1]
    assert lines["mle, train α=0.4"][0] == [0.0, 0.4]
    assert lines["mle, train α=0.4"][1] == pytest.approx([0.7, 0.5])
    assert lines["emo, train α=0.025"][0] == [0.05]
    assert sorted(ax.get_xticks()) == pytest.approx([0.0, 0.025, 0.05, 0.1, 0.4])
    assert_legend_clear_of_axes(fig)


def test_extrapolation_splits_lines_by_sampling_strategy_and_shares_the_zero_point(figures):
    rows = [{"test_intensity": 0.0, "tv_mean": 0.3, "tv_2se": 0.01, "tv_law": "ood"}]
    rows += [{"test_intensity": x, "test_strategy": s, "tv_mean": 0.2, "tv_2se": 0.01, "tv_law": "ood"}
             for s, xs in (("insertion", [0.025, 0.1]), ("deletion", [0.05])) for x in xs]
    lm_figures.extrapolation_figure(frame(rows), "unused")
    lines = plotted(figures[0].axes[0])
    assert {k: v[0] for k, v in lines.items()} == {"mle, train α=0 (test deletion)": [0.0, 0.05],
                                                   "mle, train α=0 (test insertion)": [0.0, 0.025, 0.1]}


def test_intensity_lines_keep_decoders_apart_and_skip_mixed_strategies(figures):
    rows = [{"train_intensity": x, "test_intensity": x, "decoder": d, "mauve_mean": m + x, "mauve_2se": 0.01, "eval_set": "test"}
            for d, m in (("unbiased", 0.5), ("top-p-0.9", 0.6)) for x in (0.0, 0.025, 0.05)]
    # trained with insertion, sampled with deletion at the same intensity: on no line
    rows.append({"train_intensity": 0.05, "test_intensity": 0.05, "test_strategy": "deletion", "mauve_mean": 0.1, "mauve_2se": 0.01,
                 "eval_set": "test"})
    lm_figures.intensity_figure(frame(rows), "unused")
    (fig,) = figures
    lines = plotted(fig.axes[0])
    assert set(lines) == {"mle, decoder top-p-0.9, insertion", "mle, decoder unbiased, insertion"}
    assert lines["mle, decoder unbiased, insertion"] == ([0.025, 0.05], pytest.approx([0.525, 0.55]))
    assert_legend_clear_of_axes(fig)


def test_ablation_bars_are_one_group_per_decoder(figures):
    arms = [(0.0, 0.0), (0.025, 0.0), (0.0, 0.025), (0.025, 0.025)]
    rows = [{"train_intensity": ti, "test_intensity": tti, "decoder": d, "mauve_mean": m + i / 10, "mauve_2se": 0.01, "eval_set": "test"}
            for d, m in (("unbiased", 0.4), ("top-p-0.9", 0.5)) for i, (ti, tti) in enumerate(arms)]
    lm_figures.ablation_figure(frame(rows), "unused", 0.025)
    (fig,) = figures
    ax = fig.axes[0]
    heights = {c.get_label(): [b.get_height() for b in c.patches] for c in ax.containers if hasattr(c, "patches")}
    # groups sorted by (model, objective, decoder): top-p-0.9 first, then unbiased; never their mean
    assert heights["NoPerturb"] == pytest.approx([0.5, 0.4]) and heights["Both"] == pytest.approx([0.8, 0.7])
    assert [t.get_text() for t in ax.get_xticklabels()] == ["tiny\nmle\ndecoder top-p-0.9", "tiny\nmle\ndecoder unbiased"]
    assert_legend_clear_of_axes(fig)


def write_log(folder, with_validation: bool, level: float = 0.0) -> str:
    folder.mkdir(parents=True)
    steps = np.arange(1, 41)
    validation = [f"{3 + level - s / 40:.4f}" if with_validation and s % 10 == 0 else "" for s in steps]
    lines = ["step,epoch,loss,lr,tokens_per_s,validation_loss,validation_objective"]
    lines += [f"{s},{s / 40:.3f},{4 + level - s / 20:.4f},0.001,1000,{v},{v}" for s, v in zip(steps, validation)]
    (folder / "train_log.csv").write_text("\n".join(lines) + "\n")
    return str(folder)


def test_training_curves_two_panels_and_a_log_without_validation(tmp_path, figures):
    models = tmp_path / "results/models/tiny/syn"
    dirs = [write_log(models / "mle/none/augment-m1/none-0/seed1", True),
            write_log(models / "mle/distributional/augment-m1/insertion-0.025/seed1", True, 0.3),
            write_log(models / "brier/none/augment-m1/none-0/seed1", False)]
    lm_figures.training_curves(dirs, "unused")
    (fig,) = figures
    train_ax, valid_ax = fig.axes
    assert sorted(line.get_label() for line in train_ax.get_lines()) == ["brier, no perturbation", "mle, insertion 0.025",
                                                                      "mle, no perturbation"]
    assert len(valid_ax.get_lines()) == 2
    assert valid_ax.get_lines()[0].get_xdata().tolist() == [10, 20, 30, 40]
    assert any("no validation rows:\nbrier, no perturbation" in t.get_text() for t in valid_ax.texts)
    assert fig._suptitle.get_text() == "tiny on syn"
    assert_legend_clear_of_axes(fig)


def test_training_curves_cli_writes_the_png(tmp_path, monkeypatch):
    from workflow_lib.report import build

    folder = write_log(tmp_path / "results/models/tiny/syn/mle/none/augment-m1/none-0/seed1", False)
    monkeypatch.setattr(sys, "argv", ["report", "curves", "--stem", str(tmp_path / "curves"), folder])
    build.main()
    assert (tmp_path / "curves.png").stat().st_size > 5000 and (tmp_path / "curves.pdf").exists()
