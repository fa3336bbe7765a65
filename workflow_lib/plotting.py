"""What every stage's figures share (report, lab, simulation): saving, and the style of their lines.

Saving: STEM.png and STEM.pdf, deterministic files (no timestamps in the PDF, fixed PNG metadata), so the same
study writes the same bytes. Style: Okabe and Ito's colour-blind-safe colours, each paired with its own line style
and marker, so that any one cue tells a line apart; `split_panels` cuts a figure's series into meaningful groups of
at most MAX_LINES, and `assign_styles` gives each series one style for the whole figure. docs/output.md, "The
report".
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, TypeVar

import numpy as np

from workflow_lib.files import atomic_path

# Okabe & Ito (2008), "Color Universal Design": told apart under the common colour-vision deficiencies. Their
# yellow (#F0E442) is left out: too faint for a thin line on white. Black comes first, for the reference line
# (an unperturbed model) that a figure's first series usually is.
OKABE_ITO = {
    "black": "#000000",
    "vermillion": "#D55E00",
    "blue": "#0072B2",
    "bluish green": "#009E73",
    "reddish purple": "#CC79A7",
    "orange": "#E69F00",
    "sky blue": "#56B4E9",
    "yellow": "#F0E442",
}
PALETTE = tuple(
    OKABE_ITO[name] for name in ("black", "vermillion", "blue", "bluish green", "reddish purple", "orange", "sky blue")
)
# Five dash patterns (the fifth: dash-dot-dot) and seven markers: the first five styles differ in all three cues.
LINESTYLES = ("-", "--", ":", "-.", (0, (5, 1.5, 1, 1.5, 1, 1.5)))
MARKERS = ("o", "s", "^", "D", "v", "P", "X")
HATCHES = ("", "//", "\\\\", "xx", "..", "--")
MAX_LINES = 5
PANEL_SIZE = (3.1, 2.7)  # inches per panel of a grid of line panels
# A style repeats its colour and dash pattern together every lcm(7, 5) = 35 indices.
_PERIOD = len(PALETTE) * len(LINESTYLES)


def _save(fig, path_stem: str) -> None:
    stem = Path(path_stem)
    pdf_metadata = {"CreationDate": None, "Producer": None, "Creator": None}
    for ext, metadata in (("png", {"Software": None}), ("pdf", pdf_metadata)):
        with atomic_path(stem.with_name(f"{stem.name}.{ext}")) as tmp:
            fig.savefig(tmp, format=ext, metadata=metadata, dpi=150)


def line_style(i: int) -> dict:
    """The i-th line style: colour, dash pattern and marker (keyword arguments of plot and errorbar)."""
    return {
        "color": PALETTE[i % len(PALETTE)],
        "linestyle": LINESTYLES[i % len(LINESTYLES)],
        "marker": MARKERS[i % len(MARKERS)],
    }


def bar_style(i: int) -> dict:
    """The i-th bar style (keyword arguments of bar): line_style(i)'s colour lightened for the face, so that black
    error bars stay visible on it, and a hatch in the full colour for print."""
    color = PALETTE[i % len(PALETTE)]
    # Half-way to white: the hue stays recognisable, black on it stays readable.
    tint = "#" + "".join(f"{(int(color[k : k + 2], 16) + 255) // 2:02x}" for k in (1, 3, 5))
    return {"color": tint, "edgecolor": color, "hatch": HATCHES[i % len(HATCHES)]}


def empty_panel(ax, text: str) -> None:
    """A panel with nothing to plot says why, in words, without ticks (tick_params, not set_ticks: a panel that
    shares its axis with another leaves the other's ticks alone)."""
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, fontsize=9)
    ax.tick_params(left=False, bottom=False, labelleft=False, labelbottom=False)


def legend_below(fig, axes, title: str | None = None, order: Sequence[str] = (), under=None) -> None:
    """Legends below the panels, never over the data (the figure grows to hold them: constrained layout).

    One legend for the figure while its labels are few enough to differ in colour (len(PALETTE)): a key keeps
    its style in every panel (assign_styles), so one entry serves all. Beyond that, colours repeat across the
    figure and one legend would list look-alikes: each panel gets its own, of its own at most MAX_LINES lines,
    below it (or below `under[i]`, the bottom panel of a column, for the i-th of `axes`). Entries follow `order`
    (the order the styles were assigned in), then first appearance.
    """
    pairs = [
        (ax, below)
        for ax, below in zip(np.ravel(axes), np.ravel(under if under is not None else axes))
        if ax.get_legend_handles_labels()[1]
    ]
    entries: dict[str, object] = {}
    for ax, _ in pairs:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            entries.setdefault(label, handle)
    rank = {label: i for i, label in enumerate(order)}

    def ranked(labels):
        return sorted(labels, key=lambda label: rank.get(label, len(rank)))

    if not entries:
        return
    if len(entries) > len(PALETTE):
        from matplotlib.transforms import ScaledTranslation

        # The figure grows by the legends' height (~0.19 in per 7-point entry) so that the panels keep theirs.
        rows = len({round(below.get_position().y0, 3) for _, below in pairs})
        entries_per_legend = max(len(ax.get_legend_handles_labels()[1]) for ax, _ in pairs) + (title is not None)
        fig.set_figheight(fig.get_figheight() + 0.19 * rows * entries_per_legend)
        fig.draw_without_rendering()  # lays the panels out: what hangs below each (ticks, labels) has its size
        for ax, below in pairs:
            handles = {label: handle for handle, label in zip(*ax.get_legend_handles_labels())}
            labels = ranked(handles)
            # Anchored under the axes' tick labels and x label, an offset in inches that a later layout keeps.
            drop = (below.get_window_extent().y0 - below.get_tightbbox().y0) / fig.dpi + 0.03
            anchor = below.transAxes + ScaledTranslation(0, -drop, fig.dpi_scale_trans)
            below.legend(
                [handles[label] for label in labels],
                labels,
                loc="upper center",
                bbox_to_anchor=(0.5, 0),
                bbox_transform=anchor,
                borderaxespad=0,
                fontsize=7,
                title=title,
                title_fontsize=7,
                frameon=False,
            )
        return
    labels = ranked(entries)
    # As many columns as the figure's width holds (an entry: ~0.6 in of handle, ~0.055 in per character).
    width = 0.6 + 0.055 * max(len(label) for label in labels)
    ncol = max(1, min(len(labels), int(fig.get_figwidth() // width)))
    fig.legend(
        [entries[label] for label in labels],
        labels,
        loc="outside lower center",
        ncol=ncol,
        fontsize=8,
        title=title,
        title_fontsize=8,
        frameon=False,
    )


def _cue(i: int) -> tuple:
    return PALETTE[i % len(PALETTE)], LINESTYLES[i % len(LINESTYLES)]


K = TypeVar("K", bound=Hashable)  # a series' key (its style's)
G = TypeVar("G", bound=Hashable)  # a panel's group
T = TypeVar("T")  # a panel's item


def assign_styles(panels: Iterable[Sequence[K]], order: Sequence[K] = ()) -> dict[K, dict]:
    """key -> line_style for every series of a figure, given the keys each panel shows.

    A key keeps one style in every panel. Its style is the one at its place in `order` (then in order of first
    appearance): pass the same order in two figures (a fixed list of names, or the sorted conditions of the
    study) and a condition looks the same in both. A key that would share colour and dash pattern with a key
    of one of its panels takes the next free style instead.
    """
    panels = [list(dict.fromkeys(keys)) for keys in panels]
    keys = list(dict.fromkeys([*order, *(k for keys in panels for k in keys)]))
    wanted = {k: i for i, k in enumerate(keys)}
    shown = {k for keys in panels for k in keys}
    neighbours: dict[K, set[K]] = {k: set() for k in shown}
    for panel in panels:
        for k in panel:
            neighbours[k].update(other for other in panel if other != k)
    index: dict[K, int] = {}
    for k in (k for k in keys if k in shown):
        taken = {_cue(index[n]) for n in neighbours[k] if n in index}
        # With at most _PERIOD - 1 neighbours a free style is always within one period.
        index[k] = next((i for i in range(wanted[k], wanted[k] + _PERIOD) if _cue(i) not in taken), wanted[k])
    return {k: line_style(i) for k, i in index.items()}


@dataclass(frozen=True)
class Panel(Generic[G, T]):
    """One panel's share of a figure's series: a group (e.g. an objective), part `part` of `parts`."""

    group: G
    items: list[T]
    part: int = 1
    parts: int = 1

    def title(self, name: str) -> str:
        """`name` (the group's), numbered when the group needed several panels."""
        return name if self.parts == 1 else f"{name} ({self.part}/{self.parts})"


def split_panels(items: Iterable[T], group: Callable[[T], G], max_lines: int = MAX_LINES) -> list[Panel[G, T]]:
    """The items grouped by `group(item)` (groups and items in the order given), a group of more than
    `max_lines` items cut into as few panels as hold it, of near-equal size (11 -> 4, 4, 3)."""
    groups: dict[G, list[T]] = {}
    for item in items:
        groups.setdefault(group(item), []).append(item)
    panels = []
    for name, members in groups.items():
        parts = -(-len(members) // max_lines)
        size, extra = divmod(len(members), parts)
        start = 0
        for part in range(parts):
            stop = start + size + (part < extra)
            panels.append(Panel(name, members[start:stop], part + 1, parts))
            start = stop
    return panels
