"""The perturbation strategies: one registry, read by the perturber, both samplers, the data stage, the cost model,
the workflow's wildcards and the config check; every stage asks a strategy's attributes, never its name.

A strategy edits each selected token in two words: `keep`, what stays in its place ("token", "synonym", or None: it
is deleted), and `insert`, what is inserted as well (None, "synonym" or "token"), at a uniformly random gap or, where
a prefix must not see the future, right after the token; everything else derives from them. An edit that moves
tokens (a swap, a deletion plus an insertion elsewhere) is not of this form: it would need the perturber's position
maps (`Perturbed.origin`, `.slot`) extended. The strategies: docs/method.md §1; adding one: docs/cookbook.md, "A new
perturbation strategy". This module imports only the standard library: the Snakefile reads it at parse time.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from workflow_lib.constants import NAME as NAME_PATTERN

NAME = re.compile(NAME_PATTERN)  # the config's names (its schema): output paths hold it, layout.py reads it back
KEEP = ("token", "synonym", None)
SPACES = ("tokens", "embeddings")
INSERT = (None, "token", "synonym")


@dataclass(frozen=True)
class Strategy:
    """One perturbation strategy (see the module docstring)."""

    name: str
    keep: str | None
    insert: str | None = None
    description: str = ""
    space: str = "tokens"  # or "embeddings": the selected tokens' input embeddings are edited, not the tokens
    at_sampling: bool = True  # whether a test perturbation may use it (NEFTune is a training method only)
    every_position: bool = False  # whether it perturbs every position (intensity 1) or a share (any in [0, 1])
    # The `embedding_perturbation` keys an embedding-space strategy's noise reads: only these reach its jobs, so that
    # editing another strategy's key reruns nothing.
    settings: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not NAME.fullmatch(self.name) or self.name == "none":
            raise ValueError(
                f"strategy name {self.name!r}: a name as the config writes one (a letter or digit, then letters, "
                "digits, '_', '.' or '-'), and not 'none' (the baseline)"
            )
        if self.keep not in KEEP or self.insert not in INSERT:
            raise ValueError(f"strategy {self.name!r}: keep must be one of {KEEP}, insert one of {INSERT}")
        if self.keep is None and self.insert is not None:
            raise ValueError(
                f"strategy {self.name!r}: deleting a token and inserting elsewhere moves it; "
                "the perturber's position maps do not cover moves"
            )
        if self.space not in SPACES:
            raise ValueError(f"strategy {self.name!r}: space must be one of {SPACES}")
        if self.space == "embeddings" and (self.keep, self.insert) != ("token", None):
            raise ValueError(f"strategy {self.name!r}: an embedding-space strategy keeps every token in place")
        if self.space == "tokens" and self.keep == "token" and self.insert is None:
            raise ValueError(f"strategy {self.name!r} changes nothing")

    @property
    def needs_synonyms(self) -> bool:
        """Whether a token without a synonym in the table is ineligible (it could not be edited)."""
        return "synonym" in (self.keep, self.insert)

    @property
    def in_embeddings(self) -> bool:
        """Whether it edits input embeddings (no token changes; no synonym table)."""
        return self.space == "embeddings"

    @property
    def hooked(self) -> bool:
        """Whether transformers' NEFTune hook applies it in the model's forward, at every position and at training
        only (perturb/embedding.py `activate`), rather than the data listing the positions it noises."""
        return self.in_embeddings and self.every_position

    @property
    def deletes(self) -> bool:
        return self.keep is None

    @property
    def inserts(self) -> bool:
        return self.insert is not None

    @property
    def fed_per_token(self) -> int:
        """The most tokens cached sampling feeds for one drawn token (the token's place, and an insertion)."""
        return 2 if self.inserts else 1

    @property
    def masks_slots(self) -> bool:
        """Whether cached sampling leaves masked slots in the key/value cache (a deleted token, an unused insertion
        slot), which shrinks the context of a model with windowed attention."""
        return self.deletes or self.inserts

    def length_factor(self, intensity: float) -> float:
        """Expected perturbed length / original length when every token is eligible."""
        return 1.0 + intensity * (int(self.inserts) - int(self.deletes))


STRATEGIES: dict[str, Strategy] = {}


def register(strategy: Strategy) -> Strategy:
    if strategy.name in STRATEGIES:
        raise ValueError(f"strategy {strategy.name!r} is registered twice")
    STRATEGIES[strategy.name] = strategy
    return strategy


def get(name: str) -> Strategy:
    try:
        return STRATEGIES[name]
    except KeyError:
        raise ValueError(f"unknown perturbation strategy {name!r}; allowed: {', '.join(STRATEGIES)}") from None


def wildcard_pattern() -> str:
    """The regular expression of the `strategy` wildcards: every registered name, and `none` (intensity 0)."""
    return "|".join(re.escape(name) for name in [*STRATEGIES, "none"])


register(
    Strategy(
        "insertion",
        keep="token",
        insert="synonym",
        description="a synonym of each selected token inserted at a uniformly random gap (the paper's T)",
    )
)
register(Strategy("replacement", keep="synonym", description="each selected token replaced by a synonym"))
register(Strategy("deletion", keep=None, description="each selected token dropped"))
register(
    Strategy(
        "embedding-noise",
        keep="token",
        space="embeddings",
        settings=("noise", "scale"),
        description="noise added to the input embedding of each selected token (Gaussian or uniform, of scale "
        "embedding_perturbation.scale times the embedding matrix's RMS), at training and at every sampling step",
    )
)
register(
    Strategy(
        "neftune",
        keep="token",
        space="embeddings",
        at_sampling=False,
        every_position=True,
        settings=("neftune_alpha",),
        description="NEFTune (Jain et al. 2023): uniform noise of norm alpha/sqrt(L d) on every input embedding at "
        "training (transformers' implementation; embedding_perturbation.neftune_alpha), none at sampling",
    )
)
