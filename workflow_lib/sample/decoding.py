"""Turning logits into tokens: keyed uniforms, the decoders, one draw per row, and the checks on logits.

Every draw depends on (seed, run, prompt_id, step) only (`row_keys`, `step_keys`), so neither batch size nor
resumption changes a sample. The tolerances say when a key/value cache's rounding could change a draw.
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


# A key/value cache computes the same logits as sample_exact's full forward in another floating-point order:
# they differ by ~1e-6 and the normalised CDF a uniform is compared with by up to 8e-7 (measured on the default
# study's trained models, 288,000 draws). A draw is trusted to the cache only when its uniform lies further than
# CDF_TOLERANCE from the CDF bounds of its token (and a top-k cut is further than LOGIT_TOLERANCE from a tie);
# otherwise that step is recomputed as sample_exact computes it. At every recomputation the cached law is
# compared with the exact one, and a difference above half a tolerance sends the whole batch to sample_exact.
CDF_TOLERANCE = 4e-6
LOGIT_TOLERANCE = 4e-5


def draw_margin(logits: torch.Tensor, u: torch.Tensor, decoder: dict) -> torch.Tensor:
    """Per row: how far `draw`'s uniform lies from the CDF bounds of the token it selects (probability, normalised),
    or -1 where the decoder's top-k cut is within LOGIT_TOLERANCE of a tie. A row whose margin exceeds the
    rounding of its law selects the same token from the exactly computed logits."""
    probs = decoded_probs(logits, decoder)
    cdf = probs.cumsum(-1)
    target = u * cdf[:, -1]
    token = torch.searchsorted(cdf, target[:, None], right=True).clamp(max=probs.shape[-1] - 1)
    upper = cdf.gather(1, token)[:, 0]
    lower = torch.where(token[:, 0] > 0, cdf.gather(1, (token - 1).clamp(min=0))[:, 0], 0.0)
    margin = torch.minimum(target - lower, upper - target) / cdf[:, -1]
    top_k = {**DECODER_DEFAULTS, **decoder}["top_k"]
    if top_k and top_k < logits.shape[-1]:  # the temperature divides scores without reordering them
        cut = torch.topk(logits.float(), top_k + 1, dim=-1).values
        margin = torch.where(cut[:, -2] - cut[:, -1] > LOGIT_TOLERANCE, margin, -1.0)
    return margin


def within_rounding(cached: torch.Tensor, exact: torch.Tensor, decoder: dict) -> bool:
    """Whether the cached logits' law (and, for a top-k decoder, their scores) lie within half the tolerances of
    the exact ones."""
    law_gap = (decoded_probs(cached, decoder).cumsum(-1) - decoded_probs(exact, decoder).cumsum(-1)).abs().max()
    if not {**DECODER_DEFAULTS, **decoder}["top_k"]:
        return bool(law_gap <= CDF_TOLERANCE / 2)
    finite = torch.isfinite(exact)
    logit_gap = (cached - exact)[finite].abs().max() if finite.any() else torch.zeros(())
    return bool(law_gap <= CDF_TOLERANCE / 2) and bool(logit_gap <= LOGIT_TOLERANCE / 2)


def cache_keeps_draws(decoder: dict) -> bool:
    """Decoders whose draws `sample_ancestral` certifies: temperature and top-k. Top-p and typical sets are cut
    on cumulative sums of sorted probabilities, which its margins do not cover; those decoders recompute."""
    d = {**DECODER_DEFAULTS, **decoder}
    return d["top_p"] >= 1.0 and d["typical_p"] >= 1.0


def valid_logits(logits: torch.Tensor) -> torch.Tensor:
    """True when every row is a law: no NaN, no +inf, and some token not at -inf (a -inf logit alone is a
    probability of 0, which a model may state)."""
    return ~(torch.isnan(logits) | (logits == float("inf"))).any() & (logits > float("-inf")).any(-1).all()


def check_finite_logits(finite: torch.Tensor, what: str) -> None:
    """One check per batch (not per step, which would synchronise a GPU every token): a model that produced a
    non-finite logit is refused, so no sample (and no metric) comes from it."""
    from workflow_lib.cli import StageError

    if not bool(finite):
        raise StageError(f"{what}: the model produced non-finite logits; nothing is written for it. Check its weights "
                         "and its train_log.csv (a diverged training), or sampling.precision")
