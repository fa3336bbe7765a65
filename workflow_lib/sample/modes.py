"""The sampling modes: one registry, read by the sampler, the config schema's enum, the `test_mode` wildcard, the
cost model, the rules' priorities and the report's labels (docs/method.md §1, "Sampling").

Adding a mode: one `register(SamplingMode(...))` line below, naming the `steps.Steps` makers that run it
(tests/workflow/test_new_sampling_mode.py adds one in a copy and runs a study). Every stage asks a mode's
attributes, never its name. Standard library only: the Snakefile reads it at parse time.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from workflow_lib.constants import NAME as NAME_PATTERN

NAME = re.compile(NAME_PATTERN)


@dataclass(frozen=True)
class SamplingMode:
    """One sampling mode of a perturbed prefix (intensity 0 is plain ancestral sampling in every mode)."""

    name: str
    steps: str  # "module:attribute", the `steps.Mode` of a token-space strategy (sample/sampler.py resolves it)
    embedded_steps: str  # the same for a strategy of the embedding space (sample/embedded.py)
    algorithm2: bool  # whether it draws from Algorithm 2's law: a fresh perturbation of the whole prefix every step
    description: str = ""
    # How tables, figures and findings name its rows. A mode that is not Algorithm 2's law says what it is in every
    # label (no ": " and no " (" in it: a label's "<strategy>: " prefix and its qualifiers are parsed).
    label: str = ""
    priority: int = 0  # a scheduling hint (rules/common.smk): a CPU-heavy mode starts first; no rerun follows it

    def __post_init__(self) -> None:
        if not NAME.fullmatch(self.name):
            raise ValueError(f"sampling mode name {self.name!r}: a name as the config writes one")
        if ": " in self.shown or " (" in self.shown:
            raise ValueError(f"sampling mode {self.name!r}: its label may hold neither ': ' nor ' ('")

    @property
    def shown(self) -> str:
        """How the report names it."""
        return self.label or self.name


MODES: dict[str, SamplingMode] = {}


def register(mode: SamplingMode) -> SamplingMode:
    if mode.name in MODES:
        raise ValueError(f"sampling mode {mode.name!r} is registered twice")
    MODES[mode.name] = mode
    return mode


def get(name: str) -> SamplingMode:
    try:
        return MODES[name]
    except KeyError:
        raise ValueError(f"unknown sampling mode {name!r}; allowed: {', '.join(MODES)}") from None


def wildcard_pattern() -> str:
    """The regular expression of the `test_mode` wildcard: every registered name."""
    return "|".join(re.escape(name) for name in MODES)


register(
    SamplingMode(
        "exact",
        steps="workflow_lib.sample.reuse:exact_steps",
        embedded_steps="workflow_lib.sample.embedded:NoisedRecompute",
        algorithm2=True,
        description="Algorithm 2: a fresh perturbation of the whole prefix at every step",
        priority=1,  # on a CPU about 9x a `cached` job: started last, it would end the run alone
    )
)
register(
    SamplingMode(
        "cached",
        steps="workflow_lib.sample.loops:Cached",
        embedded_steps="workflow_lib.sample.embedded:NoisedCached",
        algorithm2=False,
        description="one persistent perturbation per sequence, each token perturbed once on arrival",
        label="cached, persistent perturbation",
    )
)
DEFAULT = "exact"  # Algorithm 2; and the mode an unperturbed condition's path names (at intensity 0 all are one law)
