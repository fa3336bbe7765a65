"""Exact sampling (Algorithm 2) that reuses the unperturbed key/value cache up to each row's first edit.

A fresh perturbation leaves the prefix unchanged up to its first edit, and a causal model's keys and values there
depend on those tokens only. So `Reuse` keeps the unperturbed prefix's cache (grown a token a step, as in
`loops.Ancestral`) and feeds each row only its perturbed tokens from its first edit on, in a few groups of similar
suffix lengths (`plan_groups`); a row no edit touched takes the unperturbed logits. The perturbations are
`loops.Recompute`'s, and so are the laws, within float32 rounding. Where reuse is not safe (`reuse_fits`,
`start_reuse`) a batch runs `loops.Recompute`. When, the tolerances and the saving: docs/usage.md, "Sampling and
evaluation"; docs/benchmarks.md, "Exact sampling reusing the unperturbed cache".
"""

from __future__ import annotations

from itertools import pairwise

import numpy as np
import torch

from workflow_lib.sample.loops import (
    Ancestral,
    Recompute,
    attention_window,
    cache_fits,
    context_length,
    full_logits,
    perturbed_prefix,
    plain_cache,
)
from workflow_lib.sample.steps import Batch, Steps

# A forward call's fixed cost in fed tokens, for `plan_groups`: 1.9 ms against 11 us a token (the bench's tiny GPT-2,
# one CPU core); of 64, 192, 512 and 1000, 192 sampled the bench's batch of 100 fastest.
CALL_TOKENS = 192
MOST_GROUPS = 6


def reuse_fits(model, longest_prompt: int, new_tokens: int, intensity: float) -> bool:
    """Whether a batch may reuse the unperturbed cache: it is perturbed (at intensity 0 the ancestral sampler runs,
    and `loops.Recompute` only where its cache does not fit), the model attends globally (a local or sliding-window
    layer counts the masked cache slots between a row's first edit and its suffix, so it would see fewer tokens
    than the full recompute shows it), and the unperturbed prefix fits the context (`cache_fits`)."""
    return intensity > 0 and attention_window(model) is None and cache_fits(model, longest_prompt, new_tokens)


def right_padded(values: torch.Tensor, offsets: torch.Tensor, fill: int, width: int) -> torch.Tensor:
    """Ragged rows -> [B, width] ids, each row from column 0, the rest `fill`."""
    lengths = offsets[1:] - offsets[:-1]
    seq = torch.repeat_interleave(torch.arange(len(lengths), device=values.device), lengths)
    out = torch.full((len(lengths), width), fill, dtype=torch.long, device=values.device)
    out[seq, torch.arange(len(values), device=values.device) - offsets[seq]] = values.long()
    return out


def first_edits(values, offsets, edited_values, edited_offsets) -> torch.Tensor:
    """[B] the first position where each perturbed row differs from its unperturbed row: the first differing
    token, or the shorter row's length where one is a prefix of the other (a deletion at the end, an insertion
    after the last token). A row that no edit touched gets its length. The two are right-padded with different
    fills, so every row differs by its longer length, and the count of leading equal columns is the position."""
    width = int(torch.maximum(offsets[1:] - offsets[:-1], edited_offsets[1:] - edited_offsets[:-1]).max()) + 1
    same = right_padded(values, offsets, -1, width) == right_padded(edited_values, edited_offsets, -2, width)
    return same.long().cumprod(1).sum(1)


def suffixes(values, offsets, edited_values, edited_offsets) -> tuple[torch.Tensor, torch.Tensor]:
    """Where each perturbed row's fed suffix starts and how many tokens it has ([B] each): from its first edit to
    its end, or only its last token where the perturbed row is a prefix of the unperturbed one (the logits are
    those of its last position, which the cache does not hold); none (0) for a row that no edit touched."""
    lengths, edited_lengths = offsets[1:] - offsets[:-1], edited_offsets[1:] - edited_offsets[:-1]
    first = first_edits(values, offsets, edited_values, edited_offsets)
    start = torch.minimum(first, edited_lengths - 1)
    return start, torch.where((first == lengths) & (edited_lengths == lengths), 0, edited_lengths - start)


def plan_groups(fed: np.ndarray, call_tokens: int = CALL_TOKENS, most: int = MOST_GROUPS) -> np.ndarray:
    """Split rows sorted by the tokens each feeds (ascending, each >= 1) into at most `most` contiguous groups, each
    left-padded to its longest row: the split that minimises the padded tokens plus `call_tokens` per group (a
    forward call's fixed cost), found exactly by dynamic programming over the distinct lengths. Returns the group
    bounds as indices into `fed` (first 0, last len(fed))."""
    lengths, counts = np.unique(fed, return_counts=True)
    ends = np.concatenate([[0], np.cumsum(counts)])  # rows before each distinct length
    rows = ends[None, :] - ends[:, None]  # [i, j]: the rows of distinct lengths i .. j-1
    cost = np.where(rows > 0, rows * np.concatenate([[0], lengths])[None, :], np.inf)  # padded to the longest, j - 1
    best = np.full(len(ends), np.inf)
    best[0] = 0.0
    starts, totals = [], []
    for groups in range(1, most + 1):  # best[j]: the least cost of the first j distinct lengths in `groups` groups
        candidates = best[:, None] + cost
        starts.append(candidates.argmin(0))
        best = candidates.min(0)
        totals.append(best[-1] + groups * call_tokens)
    bounds = [len(lengths)]
    for level in range(int(np.argmin(totals)), -1, -1):
        bounds.append(int(starts[level][bounds[-1]]))
    return ends[bounds[::-1]]


def suffix_logits(
    model,
    past,
    rows: torch.Tensor,
    first_slot: torch.Tensor,
    start: torch.Tensor,
    fed: torch.Tensor,
    width: int,
    edited_values: torch.Tensor,
    row_starts: torch.Tensor,
    pad_id: int,
) -> torch.Tensor:
    """The next-token logits [R, V] of a group of R rows (`rows` of the unperturbed cache `past`; the other
    arguments are the group's), each fed its `fed` perturbed tokens from position `start` on (the row begins at
    edited_values[row_starts]), left-padded to `width` so that the last column is every row's last token, and
    attending to the cache slots of its unperturbed tokens before `start` (first_slot .. first_slot + start).
    Position ids count real tokens, as `left_pad` counts them. The group's slice of the cache is a copy (indexed
    rows), so the perturbed suffix never enters the unperturbed cache."""
    from transformers.cache_utils import DynamicCache

    column = torch.arange(width, device=start.device)
    local = start[:, None] + column[None, :] - (width - fed)[:, None]  # the position in the perturbed row
    real = local >= start[:, None]
    index = (row_starts[:, None] + local).clamp(0, len(edited_values) - 1)
    ids = torch.where(real, edited_values[index].long(), pad_id)
    lo, hi = first_slot, first_slot + start  # each row's kept cache slots
    a, e = int(lo.min()), int(hi.max())
    slots = torch.arange(a, e, device=start.device)
    mask = torch.cat([(slots >= lo[:, None]) & (slots < hi[:, None]), real], dim=1).long()
    cache = (
        DynamicCache([(layer.keys[rows, :, a:e], layer.values[rows, :, a:e]) for layer in past.layers])
        if e > a
        else None
    )
    out = model(
        input_ids=ids,
        attention_mask=mask,
        position_ids=local.clamp(min=0),
        past_key_values=cache,
        use_cache=cache is not None,
        logits_to_keep=1,
    )
    return out.logits[:, -1]


def reused_logits(
    model,
    past,
    plain: torch.Tensor,
    first_slot: torch.Tensor,
    values: torch.Tensor,
    offsets: torch.Tensor,
    edited_values: torch.Tensor,
    edited_offsets: torch.Tensor,
    pad_id: int,
) -> torch.Tensor:
    """One step's next-token logits [B, V] of the perturbed rows (edited_values, edited_offsets) of the unperturbed
    rows (values, offsets), whose cache `past` and last logits `plain` the caller keeps (row b's first token in
    cache slot first_slot[b]). An untouched row's logits are `plain`; every other row is fed from its first edit
    (from its last token where the perturbed row is a prefix of the unperturbed one: a deletion at the end), in
    groups of similar lengths (`plan_groups`)."""
    start, fed = suffixes(values, offsets, edited_values, edited_offsets)
    logits = plain.clone()
    fed_host = fed.cpu().numpy()
    order = np.argsort(fed_host, kind="stable")
    order = order[fed_host[order] > 0]
    if not len(order):
        return logits
    bounds = plan_groups(fed_host[order], CALL_TOKENS, MOST_GROUPS)
    for lo, hi in pairwise(bounds):  # a few groups
        rows = torch.as_tensor(order[lo:hi], device=plain.device)
        logits[rows] = suffix_logits(
            model,
            past,
            rows,
            first_slot[rows],
            start[rows],
            fed[rows],
            int(fed_host[order[hi - 1]]),
            edited_values,
            edited_offsets[rows],
            pad_id,
        )
    return logits


class Reuse(Ancestral):
    """Algorithm 2 as `loops.Recompute` runs it (the same perturbations and draws), with the unperturbed cache
    reused up to each row's first edit (see the module docstring). The unperturbed cache is grown as `Ancestral`
    grows it, one drawn token a step (the last one never fed); `start_reuse` makes one. A step whose perturbed
    prefix is empty or longer than the context recomputes the whole batch, as `loops.Recompute` does (keeping the
    last tokens of a long one)."""

    what = "sampling (exact)"

    def __init__(self, model, batch: Batch) -> None:
        super().__init__(model, batch)
        self.context = context_length(model)
        # each row's first real slot (left padding)
        self.first_slot = self.width - (batch.prompt_offsets[1:] - batch.prompt_offsets[:-1])

    def logits(self, step: int, key: torch.Tensor, generated: torch.Tensor) -> torch.Tensor:
        # The same perturbation as loops.prefix_logits: the same perturbed prefixes.
        values, offsets, edited_values, edited_offsets = perturbed_prefix(self.batch, generated, key)
        edited_lengths = edited_offsets[1:] - edited_offsets[:-1]
        pad_id = self.batch.pad_id
        if bool((edited_lengths == 0).any()) or (self.context is not None and int(edited_lengths.max()) > self.context):
            return full_logits(self.model, edited_values, edited_offsets, pad_id)
        return reused_logits(
            self.model, self.past, self.next, self.first_slot, values, offsets, edited_values, edited_offsets, pad_id
        )


def start_reuse(model, batch: Batch) -> Steps:
    """`Reuse` for a batch, or `loops.Recompute` where the model's cache is not a plain per-position one
    (`plain_cache`)."""
    steps = Reuse(model, batch)
    return steps if plain_cache(steps.past) else Recompute(model, batch)


def exact_steps(model, batch: Batch) -> Steps:
    """Mode `exact`: `start_reuse` where the batch may reuse the unperturbed cache (`reuse_fits`), else
    `loops.Recompute`, the full recompute of every step."""
    if reuse_fits(model, batch.longest_prompt, batch.new_tokens, batch.intensity):
        return start_reuse(model, batch)
    return Recompute(model, batch)
