"""The perturber T(. | X): random insertion, replacement or deletion of synonyms in token-id sequences.

Training data, perturbed sampling and the simulation study all call this one implementation. It works on ragged
batches, one flat array of token ids plus `offsets` (sequence s is `values[offsets[s]:offsets[s+1]]`), so blocks,
prompts of any length and growing generations share one code path, on numpy arrays (the data stage) or torch
tensors on any device (sampling); `_Numpy` and `_Torch` supply the few operations that differ. With numpy the
selected positions are drawn as geometric gaps and only the selected tokens are touched, with no Python loop over
tokens or sequences (docs/benchmarks.md, "Perturbation"). Which tokens are eligible and what becomes of a selected one:
docs/method.md §1, "The perturber"; docs/usage.md, "The perturbation"; the strategies: perturb.strategies.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from workflow_lib.perturb.backends import backend
from workflow_lib.perturb.strategies import STRATEGIES, Strategy, get
from workflow_lib.perturb.synonym_table import SynonymTable

__all__ = ["STRATEGIES", "Perturbed", "perturb", "prefix_targets", "sequence_ids"]


@dataclass
class Perturbed:
    """A perturbed ragged batch and how it relates to the original (N original tokens).

    `picked`: sorted flat indices of the selected original tokens (edited by the strategy).
    Where the strategy inserts, `gaps` are the global gap indices of the inserted tokens in output order (gap g of
    sequence s is offsets[s] + s + g) and `sources` the original token each one is a synonym of.
    The full per-token maps below are derived on demand, since augment-mode data never needs them.
    """

    values: Any
    offsets: Any
    strategy: str
    n: int
    picked: Any
    orig_offsets: Any
    xp: Any
    gaps: Any = None
    sources: Any = None

    @property
    def rule(self) -> Strategy:
        return get(self.strategy)

    @property
    def selected(self):
        """[N] bool: which original tokens were selected."""
        return self.xp.mask_of(self.picked, self.n)

    @property
    def inserted_positions(self):
        """Output positions of the inserted tokens: the k-th (in gap order) at gap G lands at G - s + k."""
        seq = self.xp.searchsorted(self.orig_offsets, self.sources, "right") - 1
        return self.gaps - seq + self.xp.arange(len(self.gaps))

    @property
    def origin(self):
        """[N'] the original flat index of each output token, -1 for an inserted one."""
        xp, total = self.xp, len(self.values)
        if self.rule.deletes:
            return xp.delete(xp.arange(self.n), self.picked)
        if not self.rule.inserts:
            return xp.arange(total)
        new = xp.mask_of(self.inserted_positions, total)
        origin = xp.cumsum(xp.as_int(~new)) - 1
        origin[new] = -1
        return origin

    @property
    def slot(self):
        """[N] where each original token sits in the output (a deleted one: where it would be), so the
        perturbed prefix of token i is output[offsets[s] : slot[i]]."""
        xp, idx = self.xp, self.xp.arange(self.n)
        if self.rule.deletes:
            return idx - xp.searchsorted(self.picked, idx, "left")
        if not self.rule.inserts:
            return idx
        seq = sequence_ids(self.orig_offsets, xp)
        return idx + xp.searchsorted(self.gaps, idx + seq, "right")  # insertions at gaps up to its own

    def perturbed_mask(self):
        """[N'] which output tokens are new (inserted) or changed (replaced; in the embedding space, noised); deletion
        leaves none."""
        rule, xp, total = self.rule, self.xp, len(self.values)
        if not rule.inserts:
            edited = rule.keep == "synonym" or rule.in_embeddings
            return xp.mask_of(self.picked if edited else self.picked[:0], total)
        mask = xp.mask_of(self.inserted_positions, total)
        if rule.keep == "synonym":
            mask |= xp.mask_of(self.slot[self.picked], total)
        return mask


def sequence_ids(offsets, xp):
    """[N] the sequence index of every flat position."""
    n_seq = len(offsets) - 1
    return xp.searchsorted(offsets[1:], xp.arange(int(offsets[-1])), "right") if n_seq else xp.arange(0)


def perturb(
    values,
    offsets,
    strategy: str,
    intensity: float,
    table: SynonymTable,
    rng,
    special_ids=(),
    insert_position: str = "uniform",
) -> Perturbed:
    """Apply T(. | X) independently to every sequence of a ragged batch.

    values/offsets: numpy arrays (with a numpy Generator) or torch tensors (with a torch Generator on their
    device; the table must be on that device too, see SynonymTable.to). `insert_position`: "uniform" (the
    paper: any gap of the sequence) or "after_source" (right after the token it is a synonym of; prefix-mode
    training data needs it, since a synonym placed before its source leaks a future token into the prefix of
    an earlier target).
    """
    rule = get(strategy)
    if not 0.0 <= intensity <= 1.0:
        raise ValueError(f"perturbation intensity must be in [0, 1], got {intensity}")
    if insert_position not in ("uniform", "after_source"):
        raise ValueError(f"insert_position must be 'uniform' or 'after_source', got {insert_position!r}")
    xp = backend(values, rng)
    n = len(values)
    special = xp.tensor(special_ids, values)
    # Select every position with probability alpha, then keep the eligible ones: the same law as selecting
    # each eligible token with probability alpha, while looking only at the selected few.
    picked = xp.select(n, intensity) if intensity > 0 else xp.arange(0)
    tokens = values[picked]
    eligible = ~xp.isin(tokens, special)
    if rule.needs_synonyms:
        eligible &= table.has_synonyms(xp)[xp.as_int(tokens)]
    picked, tokens = picked[eligible], tokens[eligible]
    result = {"strategy": strategy, "n": n, "picked": picked, "orig_offsets": offsets, "xp": xp}

    if rule.deletes:
        new_offsets = offsets - xp.searchsorted(picked, offsets, "left")
        return Perturbed(xp.delete(values, picked), new_offsets, **result)

    synonyms = xp.cast_like(table.sample(tokens, xp.rand_at(picked, 1), xp), values) if rule.needs_synonyms else None
    if rule.keep == "synonym":
        values = xp.replace(values, picked, synonyms)
    if not rule.inserts:
        return Perturbed(values, offsets, **result)
    inserted = synonyms if rule.insert == "synonym" else xp.cast_like(tokens, values)
    assert inserted is not None, "inserting synonyms needs them drawn (Strategy.needs_synonyms)"

    # The insertion. Gaps of sequence s are numbered offsets[s] + s + g, g = 0..len(s): one increasing index over
    # the batch, in which the gap just before flat token i is i + seq(i).
    seq = xp.searchsorted(offsets, picked, "right") - 1
    starts, ends = offsets[seq], offsets[seq + 1]
    if insert_position == "uniform":
        first = xp.as_int(xp.isin(values[starts], special))
        last = ends - starts - xp.as_int(xp.isin(values[ends - 1], special))
        gaps = starts + seq + first + xp.floor_int(xp.rand_at(picked, 2) * (last - first + 1))
        order = xp.argsort(gaps + 0.5 * xp.rand_at(picked, 3))  # by gap, random order within a gap
        gaps, inserted, picked_order = gaps[order], inserted[order], picked[order]
    else:
        gaps, picked_order = picked + seq + 1, picked  # already increasing
    before = gaps - (xp.searchsorted(offsets, picked_order, "right") - 1)  # = offsets[s] + g: insert before it
    out = xp.insert(values, before, inserted)
    new_offsets = offsets + xp.searchsorted(gaps, offsets + xp.arange(len(offsets)), "left")
    return Perturbed(out, new_offsets, gaps=gaps, sources=picked_order, **result)


def prefix_targets(values, offsets, perturbed: Perturbed):
    """Algorithm 1's targets on one perturbed sequence: every ORIGINAL token (but a sequence's first) is
    scored once, from the position where its perturbed prefix ends; inserted tokens are never targets and a
    deleted token is still one. Returns (target_positions, target_ids, target_offsets), positions local to
    each output sequence, ragged like the batch. A token whose perturbed prefix is empty (everything before
    it deleted) has nothing to condition on and is skipped.

    The prefix of token i is the output up to its slot. That is a draw from T(. | X_<i) for strategies that edit
    each token in place (replacement, deletion); for one that inserts it is when each insertion sits right after
    its source (perturb(..., insert_position="after_source")), since a synonym placed earlier would leak a
    future token into the prefix of an earlier target.
    """
    xp = perturbed.xp
    seq = sequence_ids(offsets, xp)
    local_index = xp.arange(len(values)) - offsets[seq]
    local_slot = perturbed.slot - perturbed.offsets[seq]
    scored = (local_index >= 1) & (local_slot >= 1)
    target_offsets = xp.cumsum(xp.prepend_zero(xp.as_int(scored)))[offsets]
    return local_slot[scored] - 1, values[scored], target_offsets
