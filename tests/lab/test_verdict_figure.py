"""The theory lab's figure: deterministic, each family's numbers where its labels say, coinciding lines named, a
panel with nothing says so, lines against their deltas."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from support.lab_files import SETTINGS, run_cli
from workflow_lib.lab import figure as lab_figure
from workflow_lib.lab import premise_views


def test_figure_is_deterministic_with_at_most_five_lines_a_panel(lab_files, monkeypatch, tmp_path):
    folder, laws = lab_files
    run_cli(monkeypatch, folder, laws)
    trained, premise = pl.read_csv(folder / "out/u.csv"), pl.read_csv(folder / "out/p.csv")
    lab_figure.figure(trained, premise, str(tmp_path / "a"))
    lab_figure.figure(trained, premise, str(tmp_path / "b"))
    for ext in ("png", "pdf"):
        assert (tmp_path / f"a.{ext}").read_bytes() == (tmp_path / f"b.{ext}").read_bytes()
    saved = []
    monkeypatch.setattr("workflow_lib.plotting._save", lambda fig, stem: saved.append(fig))
    lab_figure.figure(trained, premise, "unused")
    (fig,) = saved
    assert all(len([x for x in ax.get_lines() if not x.get_label().startswith("_")]) <= 5 for ax in fig.axes)
    top = {line.get_label(): line for line in fig.axes[0].get_lines()}
    none = trained.filter((pl.col("family") == "composition") & (pl.col("perturbation") == "none")).sort("delta")
    assert list(top["no perturbation"].get_ydata()) == pytest.approx(none["U_max"].to_list())
    fig.canvas.draw()
    legend = fig.legends[0].get_window_extent()
    assert all(not legend.overlaps(ax.get_window_extent()) for ax in fig.axes)


def _figure_of(monkeypatch, trained, premise):
    saved = []
    monkeypatch.setattr("workflow_lib.plotting._save", lambda fig, stem: saved.append((fig, stem)))
    lab_figure.figure(trained, premise, "stem")
    ((fig, stem),) = saved
    assert stem == "stem"
    return fig


def test_the_figure_shows_each_familys_numbers_where_its_labels_say(lab_files, monkeypatch):
    """What a reader sees, panel by panel, against the tables it draws: the titles and axis labels, every line's
    points (the trained models' max TV, the premise class's sups per T and its rows' sample as circles of the
    line's colour, the TV to the truth with its 2 SE bars), the shared axes and ticks, and the sizes."""
    from workflow_lib.plotting import line_style

    folder, laws = lab_files
    run_cli(monkeypatch, folder, laws)
    trained, premise = pl.read_csv(folder / "out/u.csv"), pl.read_csv(folder / "out/p.csv")
    fig = _figure_of(monkeypatch, trained, premise)
    assert tuple(fig.get_size_inches()) == pytest.approx((9.2, 9.0))  # 2 families x 4.6 in
    assert fig._suptitle.get_text() == (
        "Theory lab on the synthetic grammar: trained models (descriptive) and a model class that meets the "
        "theorems' premise"
    )
    assert fig._suptitle.get_fontsize() == 9
    axes = np.array(fig.axes[:6]).reshape(3, 2)
    names = ["none", *trained["perturbation"].to_list(), *premise["perturbation"].to_list()]
    styles = {name: line_style(i) for i, name in enumerate(dict.fromkeys(names))}
    cls = premise.filter(pl.col("class") == "unseen")
    for col, family in enumerate(["composition", "synonym"]):
        top, middle, bottom = axes[:, col]
        assert top.get_title() == f"{family} prefixes\n({lab_figure.FAMILY_NOTES[family]})"
        assert top.title.get_fontsize() == 9
        part = trained.filter(pl.col("family") == family)
        deltas = sorted(set(part["delta"].to_list()))
        for ax in (top, middle, bottom):
            assert list(ax.get_xticks()) == deltas and ax.get_ylim() == pytest.approx((-0.02, 1.02))
            assert ax.xaxis.get_ticklabels()[0].get_fontsize() == 8
        assert bottom.get_xlabel() == "δ: Hamming distance to the training support"
        assert bottom.xaxis.label.get_fontsize() == 9
        for name, label in (("none", "no perturbation"), ("syn", "T = syn")):
            line = part.filter(pl.col("perturbation") == name).sort("delta")
            (drawn,) = [x for x in top.get_lines() if x.get_label() == label]
            assert list(drawn.get_xdata()) == line["delta"].to_list()
            assert list(drawn.get_ydata()) == pytest.approx(line["U_max"].to_list())
            assert drawn.get_color() == styles[name]["color"] and drawn.get_marker() == styles[name]["marker"]
            (errors,) = [c for c in bottom.containers if c.get_label() == label]
            points, _caps, (bars,) = errors
            assert list(points.get_ydata()) == pytest.approx(line["tv_truth_mean"].to_list())
            spans = [segment[1, 1] - segment[0, 1] for segment in bars.get_segments()]
            assert spans == pytest.approx([2 * (e or 0.0) for e in line["tv_truth_2se"].to_list()])
            assert len(_caps) == 2 and _caps[0].get_markersize() == 2 * 2  # capsize 2 (matplotlib: 2x in points)
        rows = cls.filter(pl.col("family") == family)
        sups = premise_views.sups_frame(cls).filter(pl.col("delta").is_in(rows["delta"].unique().to_list()))
        lines = {x.get_label(): x for x in middle.get_lines() if not x.get_label().startswith("_")}
        base = sups.group_by("delta").agg(pl.col("U_base").max()).sort("delta")
        assert list(lines["no perturbation"].get_ydata()) == pytest.approx(base["U_base"].to_list())
        perturbed = sups.filter(pl.col("perturbation") == "syn").sort("delta")
        assert list(lines["T = syn"].get_ydata()) == pytest.approx(perturbed["U_perturb"].to_list())
        circles = [x for x in middle.get_lines() if x.get_label() == "_rows"]
        shown = ["none", *dict.fromkeys(rows["perturbation"].to_list())]
        assert len(circles) == len(shown) == len(lines) > 2
        for circle, name in zip(circles, shown):
            sample = (
                rows.group_by("delta").agg(pl.col("U_base_rows").max()).sort("delta")["U_base_rows"]
                if name == "none"
                else rows.filter(pl.col("perturbation") == name).sort("delta")["U_perturb_rows"]
            )
            assert circle.get_linestyle() == "None" and circle.get_marker() == "o"
            assert circle.get_markerfacecolor() == "none" and circle.get_color() == styles[name]["color"]
            assert list(circle.get_ydata()) == pytest.approx(sample.to_list())
    left = axes[:, 0]
    assert [ax.get_ylabel() for ax in left] == [
        "trained models:\nmax pairwise TV (not U)",
        "premise class 'unseen': U(δ),\nsup over every prefix (lines);\non the lab's rows (circles)",
        "trained models: TV to the\ntrue law (mean ± 2 SE)",
    ]
    assert all(ax.yaxis.label.get_fontsize() == 8 for ax in left)
    assert [ax.get_ylabel() for ax in axes[:, 1]] == ["", "", ""]


def test_the_figure_names_coinciding_lines_and_says_when_a_panel_has_nothing(lab_files, monkeypatch):
    """Two T's whose sups are equal draw one line over the other: the panel names them, so none seems missing. A
    family with no trained models, or no premise rows, says so in its panels instead of leaving them blank."""
    folder, laws = lab_files
    settings = {
        **SETTINGS,
        "perturbations": {"syn": {"q0": "uniform", "beta": 0.9}, "twin": {"q0": "uniform", "beta": 0.9}},
    }
    for path in laws:
        with np.load(path) as data:
            model = dict(data)
        model["laws"] = np.concatenate([model["laws"], model["laws"][1:]])
        model["perturbations"] = np.array(["none", "syn", "twin"])
        np.savez(path, **model)
    run_cli(monkeypatch, folder, laws, settings)
    trained, premise = pl.read_csv(folder / "out/u.csv"), pl.read_csv(folder / "out/p.csv")
    fig = _figure_of(monkeypatch, trained, premise)
    middle = fig.axes[2]
    (note,) = [t for t in middle.texts if t.get_text().startswith("equal")]
    groups = note.get_text().removeprefix("equal, drawn over each other:\n").split("\n\n")
    assert note.get_text().startswith("equal, drawn over each other:\n") and any(
        "T = syn\nT = twin" in group for group in groups
    )
    labels = {x.get_label() for x in middle.get_lines()}
    assert all(len(group.split("\n")) > 1 and set(group.split("\n")) <= labels for group in groups)
    assert note.get_position() == (0.35, 0.5) and note.get_fontsize() == 7 and note.get_va() == "center"
    assert note.get_transform() == middle.transAxes and not note.get_in_layout()
    fig = _figure_of(
        monkeypatch, trained.filter(pl.col("family") == "synonym"), premise.filter(pl.col("family") == "synonym")
    )
    assert [t.get_text() for t in fig.axes[0].texts] == [] and len(fig.axes) >= 3
    fig = _figure_of(monkeypatch, trained.filter(pl.col("family") == "synonym"), premise)
    top, middle, bottom = (fig.axes[i] for i in (0, 2, 4))
    assert [t.get_text() for t in top.texts] == ["no trained models"] == [t.get_text() for t in bottom.texts]
    fig = _figure_of(monkeypatch, trained, premise.filter(pl.col("class") == "other"))
    assert [t.get_text() for t in fig.axes[2].texts] == ["no premise class"]


def test_the_figure_plots_against_delta_shares_each_rows_axis_and_has_a_panel_when_the_lab_is_empty(
    lab_files, monkeypatch
):
    """Deltas that are not 0, 1, 2 (so a line drawn against its index would show), and not the same in the trained
    table (0, 1, 4) as in the premise table (0, 1, 3): every line and circle sits at its deltas, in its T's style;
    a column's ticks are both tables' deltas; a missing 2 SE is a bar of 0; a row of panels shares its y axis;
    three rows, laid out by matplotlib's constrained engine; only coinciding lines are named, two or more. An empty
    lab still draws one labelled column, at least 7 in wide, with no line."""
    from workflow_lib.plotting import line_style

    folder, laws = lab_files
    run_cli(monkeypatch, folder, laws)
    trained = pl.read_csv(folder / "out/u.csv").with_columns(pl.col("delta").replace_strict({0: 0, 1: 1, 2: 4}))
    trained = trained.with_columns(
        pl.when(pl.col("delta") == 4).then(None).otherwise(pl.col("tv_truth_2se")).alias("tv_truth_2se")
    )
    premise = pl.read_csv(folder / "out/p.csv").with_columns(pl.col("delta").replace_strict({0: 0, 1: 1, 2: 3}))
    fig = _figure_of(monkeypatch, trained, premise)
    assert fig.axes[0].get_gridspec().get_geometry() == (3, 2)
    assert type(fig.get_layout_engine()).__name__ == "ConstrainedLayoutEngine"
    axes = np.array(fig.axes[:6]).reshape(3, 2)
    for row in axes:
        assert row[0].get_shared_y_axes().joined(row[0], row[1])
    names = dict.fromkeys(["none", *trained["perturbation"].to_list(), *premise["perturbation"].to_list()])
    styles = {name: line_style(i) for i, name in enumerate(names)}
    labels = {("no perturbation" if name == "none" else f"T = {name}"): name for name in names}
    top, middle, bottom = axes[:, 0]
    assert all(list(ax.get_xticks()) == [0, 1, 3, 4] for ax in axes[:, 0])
    for name, label in (("none", "no perturbation"), ("syn", "T = syn")):
        (drawn,) = [x for x in top.get_lines() if x.get_label() == label]
        assert list(drawn.get_xdata()) == [0, 1, 4]
        (errors,) = [c for c in bottom.containers if c.get_label() == label]
        points, _caps, (bars,) = errors
        assert list(points.get_xdata()) == [0, 1, 4]
        assert points.get_color() == styles[name]["color"] and points.get_marker() == styles[name]["marker"]
        spans = [segment[1, 1] - segment[0, 1] for segment in bars.get_segments()]
        assert spans[2] == 0.0 and spans[0] > 0
    lines = [x for x in middle.get_lines() if not x.get_label().startswith("_")]
    circles = [x for x in middle.get_lines() if x.get_label() == "_rows"]
    assert len(lines) == len(circles) >= 2
    for line, circle in zip(lines, circles):
        style = styles[labels[line.get_label()]]
        assert line.get_color() == style["color"] and line.get_marker() == style["marker"]
        assert list(line.get_xdata()) == list(circle.get_xdata()) == [0, 1, 3]
    sups = {x.get_label(): tuple(x.get_ydata()) for x in lines}
    equal = {frozenset(a for a in sups if sups[a] == sups[b]) for b in sups}
    named = {
        frozenset(group.split("\n"))
        for note in (t.get_text() for t in middle.texts if t.get_text().startswith("equal"))
        for group in note.removeprefix("equal, drawn over each other:\n").split("\n\n")
    }
    assert named == {group for group in equal if len(group) >= 2}  # every pair or more that coincides, only those
    empty = _figure_of(monkeypatch, trained.clear(), premise.clear())
    assert [ax.get_title() for ax in empty.axes[:1]] == ["(none) prefixes"]
    assert tuple(empty.get_size_inches()) == pytest.approx((7.0, 9.0))
    assert [t.get_text() for t in empty.axes[0].texts] == ["no trained models"]
    assert empty.axes[1].get_lines() == [] and [t.get_text() for t in empty.axes[1].texts] == ["no premise class"]
