"""One sampling step, many ways to compute its logits: the batch every mode samples, and the loop they share.

Every mode of Algorithm 2 draws the same way: at step t each row's next-token logits, checked (raw, before any
token is suppressed), the end-of-text token suppressed, one draw with the row's keyed uniform for t
(`decoding.step_keys`, purpose `DRAW_PURPOSE`) through the decoder, the token recorded, then fed to the model. So a
mode is a `Steps` (how its logits are computed, what feeding means) and `sample` is the one loop: a new kind of
perturbation is one new `Steps`, not another loop. The modes: `loops.Recompute`, `loops.Ancestral`, `loops.Cached`,
`reuse.Reuse` and sample/embedded.py's (docs/usage.md, "Sampling and evaluation").
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch

from workflow_lib.perturb.backends import backend, hash_uniform
from workflow_lib.perturb.realised import Tally, count_positions
from workflow_lib.perturb.strategies import get as get_strategy
from workflow_lib.perturb.synonym_table import SynonymTable
from workflow_lib.sample.decoding import DRAW_PURPOSE, check_finite_logits, draw, step_keys, valid_logits


@dataclass(frozen=True, eq=False)
class Batch:
    """A batch of rows to continue: everything a sampling mode reads but the model. Rows are ragged (prompt_b is
    prompt_values[prompt_offsets[b]:prompt_offsets[b + 1]]) and each has its key (`decoding.row_keys`), the root of
    all its randomness, so no row's sample depends on the batch it is in (up to float32 rounding)."""

    prompt_values: torch.Tensor
    prompt_offsets: torch.Tensor
    keys: torch.Tensor
    new_tokens: int
    perturbation: dict  # strategy, intensity
    table: SynonymTable | None  # the synonyms a perturbed batch draws from (on the model's device)
    special: list[int]  # never perturbed
    pad_id: int
    suppress: list[int]  # never drawn (the end-of-text token: every continuation has new_tokens tokens)
    decoder: dict = field(default_factory=dict)  # temperature, top_k, top_p, typical_p (`decoding.warpers`)
    tally: Tally | None = None  # where the modes count the positions they perturb (perturb/realised.py)

    def count(self, selected: Any, values: torch.Tensor, eligible: Any = None) -> None:
        """Add one perturbation of `values` (flat token ids) with `selected` positions to the tally: its
        perturbable positions, and its eligible ones (those with a synonym where the strategy writes one), or
        `eligible` where the mode has them."""
        if self.tally is None:
            return
        rule = get_strategy(self.strategy)
        has = self.synonyms().has_synonyms(backend(values)) if rule.needs_synonyms else None
        perturbable, counted = count_positions(values, self.special, has)
        self.tally.add(selected, perturbable, counted if eligible is None else eligible)

    @property
    def n_rows(self) -> int:
        return len(self.prompt_offsets) - 1

    @property
    def intensity(self) -> float:
        return self.perturbation["intensity"]

    @property
    def strategy(self) -> str:
        return self.perturbation["strategy"]

    def synonyms(self) -> SynonymTable:
        """The synonym table, which every perturbed batch has (`sampler.generate` refuses one without)."""
        if self.table is None:
            raise ValueError("a perturbed sampler needs a synonym table")
        return self.table

    @property
    def longest_prompt(self) -> int:
        return int((self.prompt_offsets[1:] - self.prompt_offsets[:-1]).max())


class Steps(ABC):
    """One mode's computation of a batch's steps: the next-token logits given the tokens drawn so far (`logits`),
    and what the model is shown of a drawn token (`feed`). A mode sets up whatever it keeps (a key/value cache, a
    perturbed prompt) when it is made, `Steps(model, batch)`, and may refuse a batch there (`ValueError`).

    Every logit the draws rely on is checked to be a law (`decoding.valid_logits`), raw, before suppression, once
    a batch (`check_finite_logits` names the mode by `what`). By default `sample` checks each step's logits; a mode
    whose model calls compute more than it hands on (cached mode: every fed slot's logits) checks them itself
    (`check`) and sets `checks_step_logits` False."""

    what: ClassVar[str] = "sampling"
    feeds_last: ClassVar[bool] = False  # also feed the last drawn token (whose logits nothing draws from)
    checks_step_logits: ClassVar[bool] = True

    def __init__(self, model: Any, batch: Batch) -> None:
        self.model, self.batch = model, batch
        self.finite = torch.ones((), dtype=torch.bool, device=batch.keys.device)

    @abstractmethod
    def logits(self, step: int, key: torch.Tensor, generated: torch.Tensor) -> torch.Tensor:
        """The raw next-token logits [B, V] of step `step`, whose keys are `key` [B], after the tokens
        `generated` [B, step]. The caller suppresses tokens in place: a mode that keeps these logits for later
        keeps them suppressed, or returns a copy."""

    def feed(self, step: int, key: torch.Tensor, token: torch.Tensor) -> None:
        """Show the model step `step`'s drawn tokens [B]. Nothing by default: a mode without a cache recomputes
        from `generated`."""

    def check(self, logits: torch.Tensor) -> None:
        self.finite &= valid_logits(logits)


Mode = Callable[[Any, Batch], Steps]  # a sampling mode: the Steps of a batch for a model (a class, or a chooser)


@torch.no_grad()
def sample(model: Any, batch: Batch, mode: Mode) -> torch.Tensor:
    """The continuations [B, new_tokens] of a batch in a mode: Algorithm 2's loop, every mode's draws alike. The
    last token is drawn but not fed (the model never needs its logits), unless the mode `feeds_last`."""
    steps = mode(model, batch)
    generated = torch.empty((batch.n_rows, batch.new_tokens), dtype=torch.long, device=batch.keys.device)
    for step in range(batch.new_tokens):
        key = step_keys(batch.keys, step)
        logits = steps.logits(step, key, generated[:, :step])
        if steps.checks_step_logits:
            steps.check(logits)
        logits[:, batch.suppress] = float("-inf")
        token = draw(logits, hash_uniform(key * 31 + DRAW_PURPOSE), decoder=batch.decoder)
        generated[:, step] = token
        if step < batch.new_tokens - 1 or steps.feeds_last:
            steps.feed(step, key, token)
    check_finite_logits(steps.finite, steps.what)
    return generated
