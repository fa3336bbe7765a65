"""Turning logits into tokens: keyed uniforms, the decoders, one draw per row, and the checks on logits.

Every draw depends on (seed, run, prompt_id, step) only (`row_keys`, `step_keys`), so neither batch size nor
resumption changes a sample (up to float32 rounding, which the batch's layout and a key/value cache change).
"""

from __future__ import annotations

import torch

from workflow_lib.perturb.backends import splitmix64

DRAW_PURPOSE = 7  # keeps the token draw's stream apart from the perturbation's (purposes 0-3)


def row_keys(seed: int, prompt_ids: torch.Tensor, runs: torch.Tensor) -> torch.Tensor:
    """One int64 key per (prompt, run): the root of all of that continuation's randomness."""
    return splitmix64(splitmix64(torch.full_like(prompt_ids, seed)) + prompt_ids * 1_000_003 + runs)


def step_keys(keys: torch.Tensor, step: int) -> torch.Tensor:
    return splitmix64(keys + step * 7_919)


DECODER_DEFAULTS = {"temperature": 1.0, "top_k": 0, "top_p": 1.0, "typical_p": 1.0}  # `unbiased`: the law itself


def warpers(decoder: dict):
    """transformers' logits warpers for a decoder, in generate()'s order (temperature, top-k, top-p, typical).
    A setting at its neutral value (temperature 1, top_k 0, top_p 1, typical_p 1) adds no warper, as in
    generate(), so such a decoder draws exactly what `unbiased` draws."""
    from transformers.generation.logits_process import (
        LogitsProcessorList,
        TemperatureLogitsWarper,
        TopKLogitsWarper,
        TopPLogitsWarper,
        TypicalLogitsWarper,
    )

    d = {**DECODER_DEFAULTS, **decoder}
    out = LogitsProcessorList()
    if d["temperature"] != 1.0:
        out.append(TemperatureLogitsWarper(d["temperature"]))
    if d["top_k"]:
        out.append(TopKLogitsWarper(d["top_k"]))
    if d["top_p"] < 1.0:
        out.append(TopPLogitsWarper(d["top_p"]))
    if d["typical_p"] < 1.0:
        out.append(TypicalLogitsWarper(d["typical_p"]))
    return out


def decoded_probs(logits: torch.Tensor, decoder: dict | None = None) -> torch.Tensor:
    """The law a decoder draws from: the model's next-token logits [B, V], warped, as float64 probabilities."""
    logits = logits.float()
    chain = warpers(decoder or {})
    if chain:
        logits = chain(None, logits)  # warpers ignore input_ids
    return torch.softmax(logits, dim=-1, dtype=torch.float64)


def draw(logits: torch.Tensor, u: torch.Tensor, decoder: dict | None = None) -> torch.Tensor:
    """Inverse-CDF sampling with the given uniforms [B]: the uniforms are keyed by (prompt, run, step), so two
    decoders of the same (prompt, run) share them (and every perturbation draw), differing only by the law."""
    probs = decoded_probs(logits, decoder)
    cdf = probs.cumsum(-1)
    u = (u * cdf[:, -1]).unsqueeze(1)
    return torch.searchsorted(cdf, u, right=True).squeeze(1).clamp(max=probs.shape[-1] - 1)


def valid_logits(logits: torch.Tensor) -> torch.Tensor:
    """True when every row is a law: no NaN, no +inf, and some token not at -inf (a -inf logit alone is a
    probability of 0, which a model may state)."""
    return ~(torch.isnan(logits) | (logits == float("inf"))).any() & (logits > float("-inf")).any(-1).all()


def check_finite_logits(finite: torch.Tensor, what: str) -> None:
    """One check per batch (not per step, which would synchronise a GPU every token): a model that produced a
    non-finite logit is refused, so no sample (and no metric) comes from it."""
    from workflow_lib.cli import StageError

    if not bool(finite):
        raise StageError(
            f"{what}: the model produced non-finite logits; nothing is written for it. Check its weights "
            "and its train_log.csv (a diverged training), or sampling.precision"
        )
