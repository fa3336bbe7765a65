"""One style per condition in every figure of the report: a perturbation's colour and marker are a function of what
it is (strategy, synonym source, intensity, sampling mode), never of which other conditions a study has, so adding
a condition to a study moves no existing condition's style (issue 68).

The cues, each from one field: the colour from the strategy and its synonym source (Okabe and Ito's colour-blind-safe
colours, black kept for no perturbation), the marker and the dash pattern from the intensity (one step per doubling
around the headline 0.025), a hollow marker for a sampling mode that is not Algorithm 2's law, and the dash pattern
from the seed (or training mode) where a figure draws several of one condition. Two reserved styles: no
perturbation (black, solid, circle: no other condition gets the circle or black) and the paper's recipe (insertion
of oracle synonyms at 0.025: vermillion, dashed, square). docs/output.md, "The report".
"""

from __future__ import annotations

import math
import zlib
from typing import NamedTuple

from workflow_lib.constants import PAPER_STRATEGY, SYNONYM_SOURCES
from workflow_lib.plotting import LINESTYLES, OKABE_ITO
from workflow_lib.sample.modes import DEFAULT as DEFAULT_MODE

NO_PERTURBATION = "no perturbation"
TRAINING_LEGEND = "training perturbation"
# Black is no perturbation's; the other six in a fixed order (yellow: too faint a line on white).
COLOURS = tuple(
    OKABE_ITO[name] for name in ("vermillion", "blue", "bluish green", "reddish purple", "orange", "sky blue")
)
# Where each registered strategy's colours start: insertion and deletion, the sweep's two, three apart, so that their
# oracle and distributional variants (offsets 0 and 1) take four different colours. A strategy not named here starts
# at a place fixed by its name.
STRATEGY_COLOUR = {"insertion": 0, "replacement": 2, "deletion": 3, "embedding-noise": 5, "neftune": 4}
SYNONYM_OFFSET = {"none": 0, "oracle": 0, "distributional": 1, "embedding": 2, "uniform": 3, "file": 4}
# A marker per intensity step (0.025 x 2^k; the circle is no perturbation's): 0.025 square, 0.05 triangle, ...
MARKERS = ("s", "^", "D", "v", "P", "X", "<", ">", "h", "*")
# Solid is no perturbation's; eight patterns, so the steps of 0.00625 to 1 (-2 to 5) each have their own.
DASHES = (*LINESTYLES[1:], (0, (8, 2)), (0, (1, 1)), (0, (6, 1.5, 1, 1.5)), (0, (2, 2)))
HEADLINE_STEP = 0.025
SWEEP_MARKER = "d"  # a line over intensities: one marker for all its points (no circle: no perturbation's)
RESERVED = {
    NO_PERTURBATION: {"color": OKABE_ITO["black"], "linestyle": "-", "marker": "o"},
    "paper's recipe": {"color": OKABE_ITO["vermillion"], "linestyle": "--", "marker": "s"},
}


class Perturbation(NamedTuple):
    """One side's perturbation as a figure names and styles it. Intensity 0 is no perturbation, whatever else."""

    strategy: str
    intensity: float
    synonyms: str = "none"
    mode: str = DEFAULT_MODE

    @classmethod
    def of(cls, row: dict, side: str) -> Perturbation:
        """A metrics row's `side` ("train" or "test") perturbation; a training side has no sampling mode."""
        intensity = float(row[f"{side}_intensity"] or 0.0)
        if intensity == 0:
            return cls("none", 0.0)
        mode = row.get("test_mode") or DEFAULT_MODE if side == "test" else DEFAULT_MODE
        return cls(row[f"{side}_strategy"], intensity, row.get(f"{side}_synonyms") or "none", mode)

    @property
    def none(self) -> bool:
        return self.intensity == 0

    def sweep_label(self) -> str:
        """The perturbation over intensities: 'insertion (oracle)'."""
        return self.label().replace(f" {self.intensity:g}", "", 1) if not self.none else NO_PERTURBATION

    def label(self) -> str:
        """'no perturbation', 'insertion 0.025 (oracle)', 'neftune 1', 'deletion 0.1 (oracle, cached)'."""
        if self.none:
            return NO_PERTURBATION
        notes = [s for s in (self.synonyms,) if s != "none"] + ([self.mode] if self.mode != DEFAULT_MODE else [])
        return f"{self.strategy} {self.intensity:g}" + (f" ({', '.join(notes)})" if notes else "")


def _stable(text: str) -> int:
    return zlib.crc32(text.encode())  # the same on every machine and run (hash() is salted per process)


def _colour(strategy: str, synonyms: str) -> str:
    start = STRATEGY_COLOUR.get(strategy, _stable(strategy))
    offset = SYNONYM_OFFSET.get(synonyms)
    if offset is None:  # a source added to constants.SYNONYM_SOURCES later: a fixed place from its position or name
        offset = SYNONYM_SOURCES.index(synonyms) if synonyms in SYNONYM_SOURCES else _stable(synonyms)
    return COLOURS[(start + offset) % len(COLOURS)]


def intensity_step(intensity: float) -> int:
    """The intensity's doubling step from 0.025 (0.025: 0, 0.05: 1, 0.0125: -1, NEFTune's 1: 5)."""
    return round(math.log2(intensity / HEADLINE_STEP))


def _hollow(mode: str) -> bool:
    from workflow_lib.sample.modes import get as get_mode

    try:
        return not get_mode(mode).algorithm2
    except (KeyError, ValueError):
        return True


def perturbation_style(p: Perturbation) -> dict:
    """A perturbation's style (keyword arguments of plot and errorbar): a function of `p` alone."""
    if p.none:
        return dict(RESERVED[NO_PERTURBATION])
    step = intensity_step(p.intensity)
    style = {
        "color": _colour(p.strategy, p.synonyms),
        "linestyle": DASHES[step % len(DASHES)],
        "marker": MARKERS[step % len(MARKERS)],
    }
    if _hollow(p.mode):
        style["markerfacecolor"] = "white"
    return style


def sweep_style(p: Perturbation) -> dict:
    """The style of a line over intensities of one strategy (its intensity ignored): the strategy's colour, solid."""
    style = {"color": _colour(p.strategy, p.synonyms), "linestyle": "-", "marker": SWEEP_MARKER}
    if _hollow(p.mode):
        style["markerfacecolor"] = "white"
    return style


def pair_style(train: Perturbation, test: Perturbation) -> dict:
    """A condition perturbed at training and sampling: its perturbation's style when both sides are one
    perturbation (the ablation's Both), else the training side's colour with the sampling side's marker."""
    if train.none or test.none or train[:3] == test[:3]:
        return perturbation_style(test if train.none else train if test.none else test)
    return perturbation_style(train) | {"marker": perturbation_style(test)["marker"]}


def with_repeat(style: dict, repeat: int | str | None) -> dict:
    """`style` for one of several lines of one condition (its seed, or a training mode: `repeat`): the dash pattern
    from `repeat` alone (a seed's number, consecutive seeds apart), so that seed 1's line keeps its dashes when a seed
    is added."""
    if repeat is None or repeat == "":
        return style
    index = repeat if isinstance(repeat, int) else _stable(repeat)
    return style | {"linestyle": LINESTYLES[index % len(LINESTYLES)]}


def paper_recipe() -> Perturbation:
    return Perturbation(PAPER_STRATEGY, HEADLINE_STEP, "oracle")


def describe(row: dict, fields: list[str]) -> str:
    """The fields' values for a label ('none' of an unperturbed side left out)."""
    names = {"seed": "seed ", "decoder": "decoder ", "copies": "m="}
    return ", ".join(f"{names.get(f, '')}{row[f]}" for f in fields if row[f] != "none")


def training_condition(row: dict, fields: list[str]) -> str:
    """A training condition as every legend of the report names it (figure_styles.Perturbation.label: 'no
    perturbation', 'insertion 0.025 (oracle)'), then the values of `fields` (those that vary in the study)."""
    extra = describe(row, fields)
    return Perturbation.of(row, "train").label() + (f", {extra}" if extra else "")
