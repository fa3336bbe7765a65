"""The sampling loops of Algorithm 2, over a ragged batch of prompts (`sampler` describes the modes).

`sample_exact` perturbs the whole prefix afresh at every step; `sample_cached` perturbs each new token once and
keeps a key/value cache; `sample_ancestral` is plain ancestral sampling with a key/value cache at intensity 0.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from workflow_lib.perturb.backends import KeyedRandom, hash_uniform
from workflow_lib.perturb.perturber import perturb
from workflow_lib.perturb.strategies import get as get_strategy
from workflow_lib.sample.decoding import DRAW_PURPOSE, check_finite_logits, draw, step_keys, valid_logits


def left_pad(
    values: torch.Tensor, offsets: torch.Tensor, pad_id: int, max_len: int | None = None
) -> tuple[torch.Tensor, ...]:
    """Ragged rows -> left-padded ids, attention mask and position ids [B, L]. Rows longer than the model's
    context (`max_len`) keep their last max_len tokens."""
    lengths = offsets[1:] - offsets[:-1]
    width = int(lengths.max()) if max_len is None else min(int(lengths.max()), max_len)
    seq = torch.repeat_interleave(torch.arange(len(lengths), device=values.device), lengths)
    col = torch.arange(len(values), device=values.device) - offsets[seq] + (width - lengths[seq])
    keep = col >= 0
    ids = torch.full((len(lengths), width), pad_id, dtype=torch.long, device=values.device)
    mask = torch.zeros_like(ids)
    ids[seq[keep], col[keep]] = values[keep].long()
    mask[seq[keep], col[keep]] = 1
    return ids, mask, (mask.cumsum(1) - 1).clamp(min=0)


def context_length(model) -> int | None:
    config = getattr(model, "config", None)
    return getattr(config, "n_positions", None) or getattr(config, "max_position_embeddings", None)


def attention_window(model) -> int | None:
    """The slots a windowed layer attends to (GPT-Neo's local layers, sliding-window models), else None. The
    window counts cache slots, masked ones included, not tokens."""
    config = getattr(model, "config", None)
    kinds = [*(getattr(config, "attention_layers", None) or ()), *(getattr(config, "layer_types", None) or ())]
    if any(kind in ("local", "sliding_attention") for kind in kinds):
        return getattr(config, "window_size", None) or getattr(config, "sliding_window", None)
    if getattr(config, "use_sliding_window", True):
        return getattr(config, "sliding_window", None)
    return None


def with_generated(prompt_values, prompt_offsets, generated: torch.Tensor):
    """Ragged rows prompt_b + generated[b] (all rows have generated.shape[1] new tokens)."""
    steps = generated.shape[1]
    n_rows = len(prompt_offsets) - 1
    offsets = prompt_offsets + steps * torch.arange(n_rows + 1, device=generated.device)
    values = torch.empty(int(offsets[-1]), dtype=torch.long, device=generated.device)
    lengths = prompt_offsets[1:] - prompt_offsets[:-1]
    seq = torch.repeat_interleave(torch.arange(n_rows, device=generated.device), lengths)
    values[torch.arange(len(prompt_values), device=generated.device) + steps * seq] = prompt_values.long()
    if steps:
        starts = offsets[:-1] + lengths
        values[(starts[:, None] + torch.arange(steps, device=generated.device)).reshape(-1)] = generated.reshape(-1)
    return values, offsets


def prefix_logits(
    model,
    prompt_values,
    prompt_offsets,
    generated: torch.Tensor,
    k: torch.Tensor,
    perturbation: dict,
    table,
    special,
    pad_id: int,
) -> torch.Tensor:
    """One step of Algorithm 2 without a cache: the next-token logits [B, V] of every prompt + generated row,
    freshly perturbed with the step's keys `k`, the whole batch left-padded (a prefix longer than the context
    keeps its last tokens) and recomputed."""
    values, offsets = with_generated(prompt_values, prompt_offsets, generated)
    if perturbation["intensity"] > 0:
        out = perturb(
            values,
            offsets,
            perturbation["strategy"],
            perturbation["intensity"],
            table,
            KeyedRandom(k, offsets),
            special,
        )
        values, offsets = out.values, out.offsets
    return full_logits(model, values, offsets, pad_id)


def full_logits(model, values: torch.Tensor, offsets: torch.Tensor, pad_id: int) -> torch.Tensor:
    """The next-token logits [B, V] of ragged rows recomputed whole, without a cache (left padding; a row longer
    than the context keeps its last tokens)."""
    ids, mask, positions = left_pad(values, offsets, pad_id, context_length(model))
    return model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=False, logits_to_keep=1).logits[
        :, -1
    ]


@torch.no_grad()
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
    """Algorithm 2: a fresh perturbation of the whole prefix at every step."""
    n_rows = len(prompt_offsets) - 1
    generated = torch.empty((n_rows, 0), dtype=torch.long, device=prompt_values.device)
    finite = torch.ones((), dtype=torch.bool, device=prompt_values.device)
    for step in range(new_tokens):
        k = step_keys(keys, step)
        logits = prefix_logits(model, prompt_values, prompt_offsets, generated, k, perturbation, table, special, pad_id)
        finite &= valid_logits(logits)
        logits[:, suppress] = float("-inf")
        token = draw(logits, hash_uniform(k * 31 + DRAW_PURPOSE), **draw_kw)
        generated = torch.cat([generated, token[:, None]], dim=1)
    check_finite_logits(finite, "sampling (exact)")
    return generated


@torch.no_grad()
def sample_ancestral(
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
    """Intensity 0 (Algorithm 2 with nothing perturbed): plain ancestral sampling with a key/value cache, as
    Hugging Face `generate` samples.

    The batch is laid out as `sample_exact` lays it out (left padding, position ids counting real tokens) and each
    step draws with its uniforms, suppressed tokens and decoder, from the cached logits. Those differ from
    `sample_exact`'s uncached ones by float32 rounding (~1e-6), so a uniform that close to a CDF bound may draw
    the neighbouring token: the same law, not always the same tokens (docs/usage.md, "Intensity 0"). The last token is
    drawn, never fed: the cache holds at most prompt + new_tokens - 1 positions (`cache_fits`). Arguments as
    `sample_exact`; `perturbation`, `table` and `special` are unused (intensity 0)."""
    decoder = decoder or {}
    n_rows = len(keys)
    ids, mask, positions = left_pad(prompt_values, prompt_offsets, pad_id)
    out = model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True, logits_to_keep=1)
    past, logits = out.past_key_values, out.logits[:, -1]
    finite = valid_logits(logits)
    width = ids.shape[1]
    # The mask of every step at once (each fed token is real); step s attends to its first width + s + 1 slots.
    mask = torch.cat([mask, mask.new_ones((n_rows, max(new_tokens - 1, 0)))], dim=1)
    position = mask[:, :width].sum(1, keepdim=True)  # the real tokens before the first fed one, as left_pad counts
    generated = torch.empty((n_rows, new_tokens), dtype=torch.long, device=keys.device)
    for step in range(new_tokens):
        logits[:, suppress] = float("-inf")
        token = draw(logits, hash_uniform(step_keys(keys, step) * 31 + DRAW_PURPOSE), decoder=decoder)
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
        past, logits = out.past_key_values, out.logits[:, -1]
        finite &= valid_logits(logits)
    check_finite_logits(finite, "sampling (intensity 0)")
    return generated


def cache_fits(model, longest_prompt: int, new_tokens: int) -> bool:
    """Whether `sample_ancestral` can keep a batch whose longest prompt has `longest_prompt` tokens in its cache
    (prompt + new_tokens - 1 positions). Where it cannot, `sample_exact` keeps the last tokens of the prefix."""
    context = context_length(model)
    return context is None or longest_prompt + new_tokens - 1 <= context


@torch.no_grad()
def sample_cached(
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
    """One persistent perturbed prefix with its key/value cache; each new token is perturbed on arrival."""
    device, alpha, strategy = prompt_values.device, perturbation["intensity"], perturbation["strategy"]
    rule = get_strategy(strategy)
    values, offsets = prompt_values, prompt_offsets
    if alpha > 0:  # the prompt itself, perturbed once
        out = perturb(values, offsets, strategy, alpha, table, KeyedRandom(keys, offsets), special)
        values, offsets = out.values, out.offsets
    longest = int((offsets[1:] - offsets[:-1]).max()) + new_tokens * rule.fed_per_token
    context = context_length(model)
    if context and longest > context:
        raise ValueError(
            f"cached sampling needs {longest} positions but the model has {context}: "
            "shorten sampling.new_tokens or the prompts, or use mode exact (it keeps the last tokens)"
        )
    window = attention_window(model)
    if alpha > 0 and rule.masks_slots and window and longest > window:
        # A deleted token or an unused insertion slot is a masked slot in the cache; a windowed layer counts it,
        # so the model would see fewer tokens of the perturbed prefix than it should.
        raise ValueError(
            f"cached sampling with {strategy} leaves masked slots in the key/value cache, and this model "
            f"attends to windows of {window} slots (local or sliding-window attention), so its context "
            "would shrink: use mode exact for this model"
        )
    ids, mask, positions = left_pad(values, offsets, pad_id)
    out = model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True)
    past, logits = out.past_key_values, out.logits[:, -1]
    rows = torch.arange(len(keys), device=device)
    has_syn = table.has_synonyms(_torch_ops(device)) if alpha > 0 and rule.needs_synonyms else None
    special_t = torch.as_tensor(special, device=device)
    generated = []
    finite = valid_logits(logits)
    for step in range(new_tokens):
        k = step_keys(keys, step)
        logits[:, suppress] = float("-inf")
        token = draw(logits, hash_uniform(k * 31 + DRAW_PURPOSE), **draw_kw)
        generated.append(token)
        eligible = ~torch.isin(token, special_t)
        if has_syn is not None:
            eligible &= has_syn[token]
        selected = eligible & (hash_uniform(k * 31 + 1) < alpha) if alpha > 0 else torch.zeros_like(eligible)
        synonym = token
        if alpha > 0 and rule.needs_synonyms and selected.any():
            synonym = table.sample(token.clamp(min=0), hash_uniform(k * 31 + 2), _torch_ops(device))
        chunk, chunk_mask = fed_chunk(rule, token, selected, synonym, pad_id, perturbing=alpha > 0)
        mask = torch.cat([mask, chunk_mask], dim=1)
        positions = (mask.cumsum(1) - 1).clamp(min=0)[:, -chunk.shape[1] :]
        out = model(input_ids=chunk, attention_mask=mask, position_ids=positions, past_key_values=past, use_cache=True)
        past = out.past_key_values
        last_real = chunk_mask.sum(1) - 1  # -1: nothing fed, the view (and its next-token law) is unchanged
        fed = last_real >= 0
        finite &= valid_logits(out.logits)
        logits = torch.where(fed[:, None], out.logits[rows, last_real.clamp(min=0)], logits)
    check_finite_logits(finite, "sampling (cached)")
    return torch.stack(generated, dim=1)


def fed_chunk(rule, token, selected, synonym, pad_id: int, perturbing: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """What cached sampling feeds for one drawn token per row ([B, w] ids and mask, w = 1, or 2 for a strategy that
    inserts): the token's place (itself, its synonym where the strategy keeps a synonym, masked where it deletes),
    then the insertion right after it where selected (a masked slot where not)."""
    if rule.keep == "token":
        columns = [token]
    else:
        columns = [torch.where(selected, synonym if rule.keep == "synonym" else pad_id, token)]
    masks = [(~selected if rule.deletes else torch.ones_like(selected)).long()]
    if rule.inserts and perturbing:
        columns.append(torch.where(selected, synonym if rule.insert == "synonym" else token, pad_id))
        masks.append(selected.long())
    return torch.stack(columns, dim=1), torch.stack(masks, dim=1)


def _torch_ops(device):
    from workflow_lib.perturb.backends import _Torch

    return _Torch(None, device)


SAMPLERS: dict[str, Callable[..., torch.Tensor]] = {"exact": sample_exact, "cached": sample_cached}
