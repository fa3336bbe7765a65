"""Training objectives: one plain function per scoring rule, registered by name.

Every objective takes the logits gathered at the target positions, [N, V], and the target ids, [N], and
returns the mean loss over the N targets (docs/method.md §2 for the formulas). Taking gathered logits
rather than a [B, L, V] tensor is what lets the prefix mode of Algorithm 1 (several targets per position, none
at others) and the ordinary causal-LM targets share one training step. Computation is in float32 whatever the
model's precision: the scores involve p_y**alpha and sums over the vocabulary.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

OBJECTIVES: dict[str, Callable[..., torch.Tensor]] = {}


def register(name: str):
    def wrap(fn):
        OBJECTIVES[name] = fn
        return fn

    return wrap


def _nll_and_probs(logits: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-target NLL [N], the target probability p_y [N] and log-probabilities [N, V]."""
    logp = F.log_softmax(logits.float(), dim=-1)
    logp_y = logp.gather(1, targets[:, None]).squeeze(1)
    return -logp_y, logp_y.exp(), logp


@register("mle")
def mle(logits, targets, **_unused):
    """The log score: mean negative log-likelihood."""
    return F.cross_entropy(logits.float(), targets)


@register("alpha_power")
def alpha_power(logits, targets, alpha: float = 2.0, **_unused):
    """Minus the alpha-power score S = alpha p_y^(alpha-1) - (alpha-1) sum_v p_v^alpha, strictly proper for
    alpha > 1; alpha = 2 is the Brier score (up to the constant 1)."""
    _, p_y, logp = _nll_and_probs(logits, targets)
    p = logp.exp()
    score = alpha * p_y.pow(alpha - 1) - (alpha - 1) * p.pow(alpha).sum(-1)
    return -score.mean()


@register("brier")
def brier(logits, targets, **_unused):
    """sum_v p_v^2 - 2 p_y: minus the Brier score (the alpha-power score at alpha = 2)."""
    _, p_y, logp = _nll_and_probs(logits, targets)
    return (logp.exp().pow(2).sum(-1) - 2 * p_y).mean()


@register("mixce")
def mixce(logits, targets, eta: float = 0.5, **_unused):
    """MixCE (Zhang et al. 2023): eta * NLL + (1 - eta) * sg(p_y) * NLL; eta = 1 is MLE."""
    nll, p_y, _ = _nll_and_probs(logits, targets)
    return (eta * nll + (1 - eta) * p_y.detach() * nll).mean()


@register("tvd")
def tvd(logits, targets, gamma: float = 0.5, min_weight: float = 0.2, mix: float = 0.5, **_unused):
    """TaiLr's total-variation weighting (Ji et al. 2023) mixed with MLE as EMO's baseline does:
    w = sg(p_y / (gamma + (1 - gamma) p_y)) clamped to [min_weight, 1]; loss = mix NLL + (1 - mix) w NLL."""
    nll, p_y, _ = _nll_and_probs(logits, targets)
    weight = (p_y / (gamma + (1 - gamma) * p_y)).detach().clamp(min_weight, 1.0)
    return (mix * nll + (1 - mix) * weight * nll).mean()


@register("emo")
def emo(logits, targets, cost_embedding: torch.Tensor | None = None, **_unused):
    """EMO (Ren et al. 2024): with E = the row-normalised frozen output embedding taken before training,
    emo_t = 1 - <E_y, p E>, loss_t = 0.5 (NLL_t + sg(NLL_t / (emo_t + 1e-10)) emo_t)."""
    if cost_embedding is None:
        raise ValueError("objective 'emo' needs cost_embedding (a frozen, row-normalised output embedding)")
    nll, _, logp = _nll_and_probs(logits, targets)
    expected = logp.exp() @ cost_embedding.float()  # [N, d]
    emo_t = 1.0 - (cost_embedding[targets].float() * expected).sum(-1)
    return (0.5 * (nll + (nll / (emo_t + 1e-10)).detach() * emo_t)).mean()


def cost_embedding_of(model) -> torch.Tensor:
    """EMO's cost embedding: a frozen copy of the output embedding, rows L2-normalised, taken now."""
    weight = model.get_output_embeddings().weight.detach().float().clone()
    return F.normalize(weight, dim=-1)


def get(name: str) -> Callable[..., torch.Tensor]:
    if name not in OBJECTIVES:
        raise ValueError(f"unknown objective {name!r}; allowed: {', '.join(sorted(OBJECTIVES))}")
    return OBJECTIVES[name]
