"""Algorithm 2 with T acting on the prefix's input embeddings (`perturb/embedding.py`): the sampling modes of the
embedding-space strategies, as `steps.Steps`.

`NoisedRecompute` (mode `exact`) perturbs the whole prefix afresh at every step and recomputes the batch without a
cache; `NoisedCached` (mode `cached`) perturbs the prompt once and each drawn token once, with one key/value cache:
one persistent perturbation per sequence, so not Algorithm 2's law from the second drawn token on. Every draw is
keyed, as the token strategies' are: which positions (`KeyedRandom`; cached mode: the step's key, purpose
`SELECT_PURPOSE`) and each coordinate of their noise (`embedding.keyed_noise`), so no row's sample depends on its
batch. docs/method.md §1, "Embedding-space perturbation" and "Sampling".
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from workflow_lib.perturb.backends import KeyedRandom, hash_uniform, splitmix64
from workflow_lib.perturb.embedding import NOISE_PURPOSE, keyed_noise, noised_embeddings
from workflow_lib.perturb.perturber import perturb
from workflow_lib.sample.loops import SELECT_PURPOSE, context_length, left_pad, pad_coordinates, with_generated
from workflow_lib.sample.steps import Batch, Steps


def noised_positions(perturbation: dict, special: list[int], values, offsets, keys: torch.Tensor) -> torch.Tensor:
    """[N] which flat positions of ragged rows the perturbation selects, with the rows' keys `keys` [B]: each
    eligible (not special) position independently with probability alpha, as `perturb` selects for every strategy."""
    strategy, alpha = perturbation["strategy"], perturbation["intensity"]
    return perturb(values, offsets, strategy, alpha, None, KeyedRandom(keys, offsets), special).selected  # type: ignore[arg-type]  # reads no synonym


def position_noise(keys: torch.Tensor, offsets: torch.Tensor, flat: torch.Tensor, dim: int, kind: str) -> torch.Tensor:
    """Unit noise [n, dim] of the flat positions `flat` [n] of ragged rows keyed `keys` [B]: each depends on its
    row's key and its place in the row alone."""
    seq = torch.searchsorted(offsets, flat, right=True) - 1
    return keyed_noise(splitmix64(keys[seq] * 1_000_003 + NOISE_PURPOSE) + (flat - offsets[seq]), dim, kind)


def noised_forward(
    model,
    perturbation: dict,
    special: list[int],
    pad_id: int,
    values,
    offsets,
    keys,
    max_len: int | None,
    count: Callable | None = None,
    **kwargs,
):
    """The model's outputs on ragged rows left-padded (`loops.left_pad`, the last max_len tokens of a longer row),
    the embeddings of the positions the perturbation selects with the rows' keys noised; and the attention mask.
    The sampling modes below and the extrapolation job's Monte Carlo draws call it."""
    settings = perturbation["embedding"]
    selected = noised_positions(perturbation, special, values, offsets, keys)
    if count is not None:
        count(selected.sum(), values)
    ids, mask, positions = left_pad(values, offsets, pad_id, max_len)
    seq, col, _ = pad_coordinates(offsets, max_len)
    kept = selected & (col >= 0)
    where = torch.zeros_like(ids, dtype=torch.bool)
    where[seq[kept], col[kept]] = True
    flat = kept.nonzero().squeeze(1)  # row-major, as `where`'s true entries
    noise = position_noise(keys, offsets, flat, model.get_input_embeddings().weight.shape[1], settings["noise"])
    embeds = noised_embeddings(model, ids, where, noise, settings)
    return model(inputs_embeds=embeds, attention_mask=mask, position_ids=positions, **kwargs), mask


class NoisedRecompute(Steps):
    """Mode `exact` of an embedding-space strategy: the whole prefix freshly noised and recomputed every step."""

    what = "sampling (exact, embedding space)"

    def logits(self, step: int, key: torch.Tensor, generated: torch.Tensor) -> torch.Tensor:
        values, offsets = with_generated(self.batch.prompt_values, self.batch.prompt_offsets, generated)
        batch = self.batch
        out, _ = noised_forward(
            self.model,
            batch.perturbation,
            batch.special,
            batch.pad_id,
            values,
            offsets,
            key,
            context_length(self.model),
            batch.count,
            use_cache=False,
            logits_to_keep=1,
        )
        return out.logits[:, -1]


class NoisedCached(Steps):
    """Mode `cached` of an embedding-space strategy: the prompt noised once (keyed by the rows' keys), each drawn
    token once when fed (keyed by the step's), with a key/value cache. A batch that would outgrow the model's
    context is refused, as `loops.Cached` refuses one."""

    what = "sampling (cached, embedding space)"

    def __init__(self, model, batch: Batch) -> None:
        super().__init__(model, batch)
        longest = batch.longest_prompt + batch.new_tokens
        context = context_length(model)
        if context and longest > context:
            raise ValueError(
                f"cached sampling needs {longest} positions but the model has {context}: "
                "shorten sampling.new_tokens or the prompts, or use mode exact (it keeps the last tokens)"
            )
        out, mask = noised_forward(
            model,
            batch.perturbation,
            batch.special,
            batch.pad_id,
            batch.prompt_values,
            batch.prompt_offsets,
            batch.keys,
            None,
            batch.count,
            use_cache=True,
            logits_to_keep=1,
        )
        self.past, self.next = out.past_key_values, out.logits[:, -1]
        self.mask = mask
        self.special = torch.as_tensor(batch.special, device=batch.keys.device)
        self.dim = model.get_input_embeddings().weight.shape[1]

    def logits(self, step: int, key: torch.Tensor, generated: torch.Tensor) -> torch.Tensor:
        return self.next

    def feed(self, step: int, key: torch.Tensor, token: torch.Tensor) -> None:
        settings = self.batch.perturbation["embedding"]
        selected = ~torch.isin(token, self.special) & (hash_uniform(key * 31 + SELECT_PURPOSE) < self.batch.intensity)
        self.batch.count(selected.sum(), token)
        noise = keyed_noise(splitmix64(key[selected] * 1_000_003 + NOISE_PURPOSE), self.dim, settings["noise"])
        embeds = noised_embeddings(self.model, token[:, None], selected[:, None], noise, settings)
        self.mask = torch.cat([self.mask, self.mask.new_ones((len(token), 1))], dim=1)
        out = self.model(
            inputs_embeds=embeds,
            attention_mask=self.mask,
            position_ids=self.mask.sum(1, keepdim=True) - 1,
            past_key_values=self.past,
            use_cache=True,
        )
        self.past, self.next = out.past_key_values, out.logits[:, -1]
