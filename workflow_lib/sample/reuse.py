"""Exact sampling (Algorithm 2) that reuses the unperturbed key/value cache up to each row's first edit.

A fresh perturbation leaves the prefix unchanged up to its first edit, and a causal model's keys and values there
depend on those tokens only. So `sample_exact_reusing` keeps the cache of the unperturbed prefix (prompt + tokens
generated so far, grown by one token a step, as `loops.sample_ancestral` grows it), and at each step feeds each row
only its perturbed tokens from its first edit on, attending to the cache slots before that edit; a row that no edit
touched takes the unperturbed logits. The perturbations are `loops.sample_exact`'s (the same `perturb` call with
the same keys); only the forward computation changes. The next-token probabilities agree with the full
recompute's within float32 rounding: at most 4.2e-7 apart on the tests' tiny GPT-2 and Llama (every strategy,
intensity 0.2), 2.2e-9 on bench/sample.py's tiny GPT-2 (insertion, replacement and deletion at 0.025, 100 rows, 80
steps), where none of the 24,000 tokens differed. As at intensity 0, a uniform that close to a CDF bound may draw
the neighbouring token. Rows are fed in a few groups of similar suffix lengths (`plan_groups`), so that padding
does not eat the saving: on the bench (20-word prompts, 80 new tokens, insertion at 0.025) half the rows of a step
are untouched, an edited row's first edit falls at 0.44 of its length on average, and the loop feeds 0.37 of the
token positions of the full recompute.

Where reuse is not safe a batch runs `loops.sample_exact` (`reuse_fits`; `sample_exact` chooses): at intensity 0
(the ancestral sampler's case), for a model with local or sliding-window attention (the masked slots between a
row's first edit and its fed suffix would count against the window; GPT-Neo's laws moved by 0.05), where the
unperturbed prefix outgrows the model's context, or where the model's cache is not a plain per-position one. A step
whose perturbed prefix is longer than the context (the full recompute keeps its last tokens) or empty recomputes
the whole batch as `loops.sample_exact` does.
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import pairwise

import numpy as np
import torch

from workflow_lib.perturb.backends import KeyedRandom, hash_uniform
from workflow_lib.perturb.perturber import perturb
from workflow_lib.sample import loops
from workflow_lib.sample.decoding import DRAW_PURPOSE, check_finite_logits, draw, step_keys, valid_logits
from workflow_lib.sample.loops import (
    attention_window,
    cache_fits,
    context_length,
    full_logits,
    left_pad,
    with_generated,
)

# A forward call's fixed cost in fed tokens, for `plan_groups`: 1.9 ms against 11 us a token (the bench's tiny GPT-2,
# one CPU core); of 64, 192, 512 and 1000, 192 sampled the bench's batch of 100 fastest.
CALL_TOKENS = 192
MOST_GROUPS = 6


def reuse_fits(model, longest_prompt: int, new_tokens: int, intensity: float) -> bool:
    """Whether a batch may reuse the unperturbed cache: it is perturbed (at intensity 0 the ancestral sampler runs,
    and `sample_exact` only where its cache does not fit), the model attends globally (a local or sliding-window
    layer counts the masked cache slots between a row's first edit and its suffix, so it would see fewer tokens
    than the full recompute shows it), and the unperturbed prefix fits the context (`cache_fits`)."""
    return intensity > 0 and attention_window(model) is None and cache_fits(model, longest_prompt, new_tokens)


def plain_cache(past) -> bool:
    """Whether a cache holds one key and value per position in every layer (transformers' `DynamicLayer`), which
    `suffix_logits` slices; a sliding-window, quantised or recurrent cache is not."""
    from transformers.cache_utils import DynamicCache, DynamicLayer

    return isinstance(past, DynamicCache) and all(type(layer) is DynamicLayer for layer in past.layers)


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


@torch.no_grad()
def sample_exact_reusing(
    model,
    prompt_values,
    prompt_offsets,
    keys,
    new_tokens: int,
    perturbation: dict,
    table,
    special,
    pad_id: int,
    suppress: list[int],
    decoder: dict | None = None,
) -> torch.Tensor:
    """Algorithm 2 as `loops.sample_exact` runs it (the same perturbations and draws), with the unperturbed cache
    reused up to each row's first edit (see the module docstring). Arguments as `loops.sample_exact`; where the
    model's cache is not a plain per-position one, the batch runs `loops.sample_exact`."""
    n_rows = len(keys)
    alpha, strategy = perturbation["intensity"], perturbation["strategy"]
    ids, mask, positions = left_pad(prompt_values, prompt_offsets, pad_id)
    out = model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True, logits_to_keep=1)
    past, plain = out.past_key_values, out.logits[:, -1]
    if not plain_cache(past):
        return loops.sample_exact(
            model,
            prompt_values,
            prompt_offsets,
            keys,
            new_tokens,
            perturbation,
            table,
            special,
            pad_id,
            suppress,
            decoder=decoder or {},
        )
    width, context = ids.shape[1], context_length(model)
    first_slot = width - (prompt_offsets[1:] - prompt_offsets[:-1])  # each row's first real slot (left padding)
    mask = torch.cat([mask, mask.new_ones((n_rows, max(new_tokens - 1, 0)))], dim=1)  # as sample_ancestral's
    position = mask[:, :width].sum(1, keepdim=True)
    generated = torch.empty((n_rows, new_tokens), dtype=torch.long, device=keys.device)
    finite = torch.ones((), dtype=torch.bool, device=keys.device)
    for step in range(new_tokens):
        k = step_keys(keys, step)
        values, offsets = with_generated(prompt_values, prompt_offsets, generated[:, :step])
        edited_values, edited_offsets = values, offsets
        if alpha > 0:  # the same call as loops.prefix_logits: the same perturbed prefixes
            edited = perturb(values, offsets, strategy, alpha, table, KeyedRandom(k, offsets), special)
            edited_values, edited_offsets = edited.values, edited.offsets
        edited_lengths = edited_offsets[1:] - edited_offsets[:-1]
        if bool((edited_lengths == 0).any()) or (context is not None and int(edited_lengths.max()) > context):
            logits = full_logits(model, edited_values, edited_offsets, pad_id)
        else:
            logits = reused_logits(
                model, past, plain, first_slot, values, offsets, edited_values, edited_offsets, pad_id
            )
        finite &= valid_logits(logits)
        logits[:, suppress] = float("-inf")
        token = draw(logits, hash_uniform(k * 31 + DRAW_PURPOSE), decoder=decoder or {})
        generated[:, step] = token
        if step == new_tokens - 1:
            break
        out = model(
            input_ids=token[:, None],
            attention_mask=mask[:, : width + step + 1],
            position_ids=position + step,
            past_key_values=past,
            use_cache=True,
        )
        past, plain = out.past_key_values, out.logits[:, -1]
    check_finite_logits(finite, "sampling (exact)")
    return generated


def sample_exact(
    model,
    prompt_values,
    prompt_offsets,
    keys,
    new_tokens: int,
    perturbation: dict,
    table,
    special,
    pad_id: int,
    suppress: list[int],
    **draw_kw,
) -> torch.Tensor:
    """Mode `exact`: `sample_exact_reusing` where the batch may reuse the unperturbed cache (`reuse_fits`), else
    `loops.sample_exact`, the full recompute of every step. Arguments as `loops.sample_exact`."""
    longest = int((prompt_offsets[1:] - prompt_offsets[:-1]).max())
    reusing = reuse_fits(model, longest, new_tokens, perturbation["intensity"])
    sampler = sample_exact_reusing if reusing else loops.sample_exact
    return sampler(
        model,
        prompt_values,
        prompt_offsets,
        keys,
        new_tokens,
        perturbation,
        table,
        special,
        pad_id,
        suppress,
        **draw_kw,
    )


# The modes' samplers, of which sampler.generate picks one per batch: loops', but `exact` reusing where it can.
SAMPLERS: dict[str, Callable[..., torch.Tensor]] = {**loops.SAMPLERS, "exact": sample_exact}
