"""Perturbation in the embedding space: noise added to the input embeddings of the selected prefix positions (the
strategies of `strategies.py` whose `space` is "embeddings").

Each eligible position is selected with probability alpha, as the token strategies select, and a selected
embedding e becomes e + scale * rms(E) * eps (eps `gaussian` or `uniform`, unit variance per coordinate), added
where the model looks its tokens up. At sampling every draw is keyed (`keyed_noise`: the row's key for the step
and the position), so no sample depends on its batch; at training the noise comes from torch's generator
(`random_noise`), restored on resume with the rest of the RNG state. NEFTune is transformers' own hook (`activate`).
The law and NEFTune's: docs/method.md §1, "Embedding-space perturbation"; usage: docs/usage.md, "The perturbation".
"""

from __future__ import annotations

import math
from typing import Any

import torch

from workflow_lib.perturb.backends import hash_uniform, splitmix64
from workflow_lib.perturb.strategies import get as get_strategy

NOISES = ("gaussian", "uniform")
# The purpose of the noise's stream of a key (cached sampling's selection and synonym streams are 1 and 2).
NOISE_PURPOSE = 3


def embedding_rms(model: Any) -> torch.Tensor:
    """The root mean square of the model's input embedding matrix's entries, detached: the unit of `scale`."""
    weight = model.get_input_embeddings().weight.detach()
    return weight.float().pow(2).mean().sqrt()


def unit_noise(u1: torch.Tensor, u2: torch.Tensor, kind: str) -> torch.Tensor:
    """Zero-mean, unit-variance noise from two uniforms in [0, 1) of the same shape: Box-Muller's first coordinate
    (gaussian) or a uniform on [-sqrt(3), sqrt(3)] from u1 alone (uniform)."""
    if kind == "gaussian":
        return torch.sqrt(-2.0 * torch.log1p(-u1)) * torch.cos(2.0 * math.pi * u2)
    if kind == "uniform":
        return math.sqrt(3.0) * (2.0 * u1 - 1.0)
    raise ValueError(f"embedding_perturbation.noise {kind!r}: one of {', '.join(NOISES)}")


def keyed_noise(keys: torch.Tensor, dim: int, kind: str) -> torch.Tensor:
    """Unit noise [N, dim] (float32) for N int64 keys: coordinate j of key k depends on (k, j) alone."""
    base = splitmix64(keys * 1_000_003 + NOISE_PURPOSE)[:, None] + 2 * torch.arange(dim, device=keys.device)
    return unit_noise(hash_uniform(base), hash_uniform(base + 1), kind).float()


def random_noise(shape: tuple[int, ...], kind: str, device: Any) -> torch.Tensor:
    """Unit noise from torch's generator (training), the same law as `keyed_noise`."""
    if kind == "gaussian":
        return torch.randn(shape, device=device)
    return math.sqrt(3.0) * (2.0 * torch.rand(shape, device=device) - 1.0)


def noised_embeddings(
    model: Any, ids: torch.Tensor, where: torch.Tensor, noise: torch.Tensor, settings: dict
) -> torch.Tensor:
    """The input embeddings [B, L, d] of `ids` [B, L], with `settings["scale"] * rms(E) * noise` ([n, d], in the
    row-major order of `where`'s true entries) added at the positions `where` [B, L] marks."""
    embeds = model.get_input_embeddings()(ids)
    if not bool(where.any()):
        return embeds
    step = torch.zeros(embeds.shape, dtype=torch.float32, device=embeds.device)
    step[where] = noise.to(embeds.device) * (settings["scale"] * embedding_rms(model))
    return embeds + step.to(embeds.dtype)


def neftune_scale(model: Any, alpha: float, length: int) -> dict:
    """NEFTune's noise against the embeddings it is added to: its per-coordinate RMS, alpha / sqrt(3 L d) (uniform on
    +-alpha / sqrt(L d)), over the input embedding matrix's RMS. Its authors tuned alpha 5-15 on ~4,096-wide models,
    where the ratio is small; the design range the report holds it to is 0.05-0.5 (docs/method.md §1)."""
    width = int(model.get_input_embeddings().weight.shape[1])
    noise = float(alpha) / math.sqrt(3.0 * length * width)
    rms = float(embedding_rms(model))
    return {"alpha": float(alpha), "length": int(length), "width": width, "noise_rms": noise, "ratio": noise / rms}


def activate(lm: Any, settings: dict) -> Any | None:
    """Switch on a training job's embedding-space perturbation where it is NEFTune (transformers' hook on the input
    embeddings, active in training mode only); returns the hook's handle, or None for any other perturbation."""
    if not get_strategy(settings["strategy"]).hooked:
        return None
    from transformers.integrations.neftune import activate_neftune

    return activate_neftune(lm, settings["neftune_alpha"])
