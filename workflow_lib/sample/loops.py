"""The modes of Algorithm 2 over a ragged batch of prompts (`sampler` describes them), as `steps.Steps`, and the
batch layout they share.

`Recompute` perturbs the whole prefix afresh at every step; `Cached` perturbs each new token once and keeps a
key/value cache; `Ancestral` is plain ancestral sampling with a key/value cache at intensity 0. `steps.sample` runs
any of them.
"""

from __future__ import annotations

from typing import ClassVar

import torch

from workflow_lib.perturb.backends import KeyedRandom, hash_uniform
from workflow_lib.perturb.perturber import perturb
from workflow_lib.perturb.strategies import get as get_strategy
from workflow_lib.sample.steps import Batch, Steps


def left_pad(
    values: torch.Tensor, offsets: torch.Tensor, pad_id: int, max_len: int | None = None
) -> tuple[torch.Tensor, ...]:
    """Ragged rows -> left-padded ids, attention mask and position ids [B, L]. Rows longer than the model's
    context (`max_len`) keep their last max_len tokens."""
    lengths = offsets[1:] - offsets[:-1]
    seq, col, width = pad_coordinates(offsets, max_len)
    keep = col >= 0
    ids = torch.full((len(lengths), width), pad_id, dtype=torch.long, device=values.device)
    mask = torch.zeros_like(ids)
    ids[seq[keep], col[keep]] = values[keep].long()
    mask[seq[keep], col[keep]] = 1
    return ids, mask, (mask.cumsum(1) - 1).clamp(min=0)


def pad_coordinates(offsets: torch.Tensor, max_len: int | None = None) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Where `left_pad` puts each flat position of ragged rows: its row and column [N] (a negative column: cut, the
    row being longer than max_len), and the padded width."""
    lengths = offsets[1:] - offsets[:-1]
    width = int(lengths.max()) if max_len is None else min(int(lengths.max()), max_len)
    seq = torch.repeat_interleave(torch.arange(len(lengths), device=offsets.device), lengths)
    col = torch.arange(int(offsets[-1]), device=offsets.device) - offsets[seq] + (width - lengths[seq])
    return seq, col, width


def plain_cache(past) -> bool:
    """Whether a cache holds one key and value per position in every layer (transformers' `DynamicLayer`), whose
    rows cached sampling's `insert` and exact sampling's reuse slice; a sliding-window, quantised or recurrent cache
    is not."""
    from transformers.cache_utils import DynamicCache, DynamicLayer

    return isinstance(past, DynamicCache) and all(type(layer) is DynamicLayer for layer in past.layers)


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


def perturbed_prefix(
    batch: Batch, generated: torch.Tensor, key: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """One step of Algorithm 2's perturbation: every prompt + generated row (values, offsets) and its fresh
    perturbation with the step's keys `key` (edited values, edited offsets; the rows themselves at intensity 0)."""
    values, offsets = with_generated(batch.prompt_values, batch.prompt_offsets, generated)
    edited_values, edited_offsets = values, offsets
    if batch.intensity > 0:
        edited = perturb(
            values, offsets, batch.strategy, batch.intensity, batch.synonyms(), KeyedRandom(key, offsets), batch.special
        )
        edited_values, edited_offsets = edited.values, edited.offsets
        batch.count(len(edited.picked), values)
    return values, offsets, edited_values, edited_offsets


def prefix_logits(model, batch: Batch, generated: torch.Tensor, key: torch.Tensor) -> torch.Tensor:
    """One step of Algorithm 2 without a cache: the next-token logits [B, V] of every prompt + generated row,
    freshly perturbed with the step's keys `key`, the whole batch left-padded (a prefix longer than the context
    keeps its last tokens) and recomputed."""
    *_, values, offsets = perturbed_prefix(batch, generated, key)
    return full_logits(model, values, offsets, batch.pad_id)


def full_logits(model, values: torch.Tensor, offsets: torch.Tensor, pad_id: int) -> torch.Tensor:
    """The next-token logits [B, V] of ragged rows recomputed whole, without a cache (left padding; a row longer
    than the context keeps its last tokens)."""
    ids, mask, positions = left_pad(values, offsets, pad_id, context_length(model))
    return model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=False, logits_to_keep=1).logits[
        :, -1
    ]


class Recompute(Steps):
    """Algorithm 2 as written: a fresh perturbation of the whole prefix at every step, recomputed without a cache
    (`prefix_logits`); nothing is fed. Mode `exact` where the unperturbed cache cannot be reused
    (`reuse.reuse_fits`), and intensity 0 where the prompt plus new tokens outgrow the context (`cache_fits`)."""

    what = "sampling (exact)"

    def logits(self, step: int, key: torch.Tensor, generated: torch.Tensor) -> torch.Tensor:
        return prefix_logits(self.model, self.batch, generated, key)


class Ancestral(Steps):
    """Intensity 0 (Algorithm 2 with nothing perturbed): plain ancestral sampling with a key/value cache, as
    Hugging Face `generate` samples.

    The batch is laid out as `Recompute` lays it out (left padding, position ids counting real tokens) and each
    step draws with its uniforms, suppressed tokens and decoder, from the cached logits. Those differ from
    `Recompute`'s uncached ones by float32 rounding (~1e-6), so a uniform that close to a CDF bound may draw
    the neighbouring token: the same law, not always the same tokens (docs/usage.md, "Intensity 0"). The last token
    is drawn, never fed: the cache holds at most prompt + new_tokens - 1 positions (`cache_fits`). The batch's
    perturbation, table and special tokens are unused (intensity 0)."""

    what = "sampling (intensity 0)"

    def __init__(self, model, batch: Batch) -> None:
        super().__init__(model, batch)
        ids, mask, positions = left_pad(batch.prompt_values, batch.prompt_offsets, batch.pad_id)
        out = model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True, logits_to_keep=1)
        self.past, self.next = out.past_key_values, out.logits[:, -1]
        self.width = ids.shape[1]
        # The mask of every step at once (each fed token is real); step s attends to its first width + s + 1 slots.
        self.mask = torch.cat([mask, mask.new_ones((batch.n_rows, max(batch.new_tokens - 1, 0)))], dim=1)
        # the real tokens before the first fed one, as left_pad counts them
        self.position = self.mask[:, : self.width].sum(1, keepdim=True)

    def logits(self, step: int, key: torch.Tensor, generated: torch.Tensor) -> torch.Tensor:
        return self.next

    def feed(self, step: int, key: torch.Tensor, token: torch.Tensor) -> None:
        out = self.model(
            input_ids=token[:, None],
            attention_mask=self.mask[:, : self.width + step + 1],
            position_ids=self.position + step,
            past_key_values=self.past,
            use_cache=True,
        )
        self.past, self.next = out.past_key_values, out.logits[:, -1]


def cache_fits(model, longest_prompt: int, new_tokens: int) -> bool:
    """Whether `Ancestral` can keep a batch whose longest prompt has `longest_prompt` tokens in its cache
    (prompt + new_tokens - 1 positions). Where it cannot, `Recompute` keeps the last tokens of the prefix."""
    context = context_length(model)
    return context is None or longest_prompt + new_tokens - 1 <= context


SELECT_PURPOSE, SYNONYM_PURPOSE = 1, 2  # cached mode's streams of a step's keys: which tokens, which synonyms


class Cached(Steps):
    """Mode `cached`: one persistent perturbed prefix with its key/value cache; each new token is perturbed on
    arrival (`fed_chunk`). A batch that would outgrow the model's context, or (with masked slots) a local or
    sliding-window layer's window, is refused.

    Every logit the model computes is checked, in `feed`: the fed chunk's every slot, masked ones and unfed rows
    included. So the last drawn token is fed too (its logits are checked, not drawn from)."""

    what = "sampling (cached)"
    feeds_last = True
    checks_step_logits = False
    # Feed an insertion to the rows that insert only, in a pass of their own (`insert`), where the model's cache
    # is a plain per-position one; else (False) one pass of both slots for every row, the second masked where a
    # row does not insert. Split is faster on both devices measured: a second slot for every row cost 1.4x a step
    # on the CPU, and on an H200 the split pass gave 1.02-1.3x the one pass's tokens/s in fp32 and 2.3-2.6x in bf16
    # (docs/benchmarks.md, "The GPU check"). The tests force either to compare them.
    split_insertions: ClassVar[bool] = True

    def __init__(self, model, batch: Batch) -> None:
        super().__init__(model, batch)
        device, alpha, strategy = batch.prompt_values.device, batch.intensity, batch.strategy
        self.rule = rule = get_strategy(strategy)
        values, offsets = batch.prompt_values, batch.prompt_offsets
        if alpha > 0:  # the prompt itself, perturbed once
            out = perturb(
                values, offsets, strategy, alpha, batch.synonyms(), KeyedRandom(batch.keys, offsets), batch.special
            )
            batch.count(len(out.picked), values)
            values, offsets = out.values, out.offsets
        longest = int((offsets[1:] - offsets[:-1]).max()) + batch.new_tokens * rule.fed_per_token
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
        ids, self.mask, positions = left_pad(values, offsets, batch.pad_id)
        out = model(input_ids=ids, attention_mask=self.mask, position_ids=positions, use_cache=True)
        self.past, self.next = out.past_key_values, out.logits[:, -1]
        self.device, self.rows = device, torch.arange(batch.n_rows, device=device)
        synonyms = alpha > 0 and rule.needs_synonyms
        self.has_syn = batch.synonyms().has_synonyms(_torch_ops(device)) if synonyms else None
        self.special = torch.as_tensor(batch.special, device=device)
        self.check(self.next)

    def logits(self, step: int, key: torch.Tensor, generated: torch.Tensor) -> torch.Tensor:
        return self.next

    def feed(self, step: int, key: torch.Tensor, token: torch.Tensor) -> None:
        alpha, rule = self.batch.intensity, self.rule
        eligible = ~torch.isin(token, self.special)
        if self.has_syn is not None:
            eligible &= self.has_syn[token]
        selected = (
            eligible & (hash_uniform(key * 31 + SELECT_PURPOSE) < alpha) if alpha > 0 else torch.zeros_like(eligible)
        )
        if alpha > 0:
            self.batch.count(selected.sum(), token, eligible.sum())
        synonym = token
        if alpha > 0 and rule.needs_synonyms and selected.any():
            u = hash_uniform(key * 31 + SYNONYM_PURPOSE)
            synonym = self.batch.synonyms().sample(token.clamp(min=0), u, _torch_ops(self.device))
        chunk, chunk_mask = fed_chunk(rule, token, selected, synonym, self.batch.pad_id, perturbing=alpha > 0)
        if chunk.shape[1] == 2 and self.split_insertions and plain_cache(self.past):
            self.forward(chunk[:, :1], chunk_mask[:, :1])
            if bool(chunk_mask[:, 1].any()):  # only the rows that insert; none: no insertion slot this step
                self.insert(chunk[:, 1], chunk_mask[:, 1].bool())
        else:
            self.forward(chunk, chunk_mask)

    def forward(self, chunk: torch.Tensor, chunk_mask: torch.Tensor) -> None:
        """Feed every row this step's slots ([B, w] ids and mask); a row's next-token law is its last real slot's,
        unchanged where every slot is masked (deleted)."""
        self.mask = torch.cat([self.mask, chunk_mask], dim=1)
        positions = (self.mask.cumsum(1) - 1).clamp(min=0)[:, -chunk.shape[1] :]
        out = self.model(
            input_ids=chunk, attention_mask=self.mask, position_ids=positions, past_key_values=self.past, use_cache=True
        )
        self.past = out.past_key_values
        last_real = chunk_mask.sum(1) - 1  # -1: nothing fed, the view (and its next-token law) is unchanged
        self.check(out.logits)
        self.next = torch.where((last_real >= 0)[:, None], out.logits[self.rows, last_real.clamp(min=0)], self.next)

    def insert(self, ids: torch.Tensor, inserting: torch.Tensor) -> None:
        """Feed the rows that insert after their token ([B] ids, `inserting` [B]) their inserted token, in a forward
        pass of those rows alone (a few of a batch at low intensity: feeding every row a second, masked slot
        computed twice the tokens), over a copy of their rows of the cache; the cache then gains one slot for every
        row, theirs filled, the others' masked. The same law as one pass of both slots; the logits differ by float32
        rounding (docs/usage.md, "Sampling and evaluation": `cached`)."""
        from transformers.cache_utils import DynamicCache

        rows = inserting.nonzero().squeeze(1)
        mask = torch.cat([self.mask[rows], torch.ones_like(rows)[:, None]], dim=1)
        sub = DynamicCache([(layer.keys[rows], layer.values[rows]) for layer in self.past.layers])
        out = self.model(
            input_ids=ids[rows, None],
            attention_mask=mask,
            position_ids=mask.sum(1, keepdim=True) - 1,
            past_key_values=sub,
            use_cache=True,
        )
        self.check(out.logits)
        for layer, fed in zip(self.past.layers, sub.layers, strict=True):
            for name in ("keys", "values"):
                full = getattr(layer, name)
                slot = full.new_zeros((*full.shape[:2], 1, full.shape[3]))
                slot[rows] = getattr(fed, name)[:, :, -1:]
                setattr(layer, name, torch.cat([full, slot], dim=2))
        self.mask = torch.cat([self.mask, inserting.long()[:, None]], dim=1)
        self.next = self.next.index_copy(0, rows, out.logits[:, -1])


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
