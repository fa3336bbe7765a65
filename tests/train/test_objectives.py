"""Objectives against their formulas, their stop-gradients through autograd, and properness."""

from __future__ import annotations

import pytest
import torch

from workflow_lib.train import objectives

torch.manual_seed(0)
LOGITS = torch.randn(7, 5, dtype=torch.float64)
TARGETS = torch.tensor([0, 1, 2, 3, 4, 0, 2])


def probs(logits=LOGITS):
    return torch.softmax(logits, -1)


def by_hand(name: str, logits=LOGITS, targets=TARGETS, **kw) -> torch.Tensor:
    """Each formula of docs/method.md §2 written directly, token by token."""
    p = probs(logits)
    rows = []
    for i, y in enumerate(targets.tolist()):
        py, nll = p[i, y], -torch.log(p[i, y])
        if name == "mle":
            rows.append(nll)
        elif name == "brier":
            rows.append((p[i] ** 2).sum() - 2 * py)
        elif name == "alpha_power":
            a = kw["alpha"]
            rows.append(-(a * py ** (a - 1) - (a - 1) * (p[i] ** a).sum()))
        elif name == "mixce":
            rows.append(0.5 * nll + 0.5 * py * nll)
        elif name == "tvd":
            w = min(max(float(py / (0.5 + 0.5 * py)), 0.2), 1.0)
            rows.append(0.5 * nll + 0.5 * w * nll)
        elif name == "emo":
            e = kw["cost_embedding"]
            emo_t = sum(p[i, v] * (1 - e[y] @ e[v]) for v in range(p.shape[1]))
            rows.append(0.5 * (nll + nll / (emo_t + 1e-10) * emo_t))
    return torch.stack(rows).mean()


COST = torch.nn.functional.normalize(torch.randn(5, 3, dtype=torch.float64), dim=-1)


@pytest.mark.parametrize(
    "name,kw",
    [
        ("mle", {}),
        ("brier", {}),
        ("alpha_power", {"alpha": 3.0}),
        ("mixce", {}),
        ("tvd", {}),
        ("emo", {"cost_embedding": COST}),
    ],
)
def test_value_matches_the_formula(name, kw):
    got = objectives.get(name)(LOGITS, TARGETS, **kw)
    assert torch.allclose(got.double(), by_hand(name, **kw), atol=1e-5)


def test_brier_is_alpha_power_two():
    assert torch.allclose(
        objectives.brier(LOGITS, TARGETS), objectives.alpha_power(LOGITS, TARGETS, alpha=2.0), atol=1e-6
    )


def grad_of(fn, **kw):
    logits = LOGITS.clone().float().requires_grad_(True)
    fn(logits, TARGETS, **kw).backward()
    return logits.grad


def test_mixce_weight_is_stop_gradient():
    # d/dlogits [0.5 nll + 0.5 sg(p_y) nll] = (0.5 + 0.5 p_y) d nll: the weight itself gets no gradient.
    p_y = probs().float()[torch.arange(7), TARGETS]
    nll_grad = grad_of(
        lambda l, t: torch.nn.functional.cross_entropy(l, t, reduction="none").mul(0.5 + 0.5 * p_y).mean()
    )
    assert torch.allclose(grad_of(objectives.mixce), nll_grad, atol=1e-6)


def test_tvd_weight_is_stop_gradient():
    p_y = probs().float()[torch.arange(7), TARGETS]
    w = (p_y / (0.5 + 0.5 * p_y)).clamp(0.2, 1.0)
    expected = grad_of(lambda l, t: torch.nn.functional.cross_entropy(l, t, reduction="none").mul(0.5 + 0.5 * w).mean())
    assert torch.allclose(grad_of(objectives.tvd), expected, atol=1e-6)


def test_emo_gradient_uses_stop_gradient_ratio():
    # loss = 0.5 (nll + c * emo) with c = sg(nll / emo): grad = 0.5 (d nll + c d emo).
    cost = COST.float()
    logits = LOGITS.clone().float()
    p = torch.softmax(logits, -1)
    nll = -torch.log(p[torch.arange(7), TARGETS])
    emo_t = 1 - (cost[TARGETS] * (p @ cost)).sum(-1)
    c = (nll / (emo_t + 1e-10)).detach()

    def expected(l, t):
        q = torch.softmax(l, -1)
        n = -torch.log(q[torch.arange(7), t])
        e = 1 - (cost[t] * (q @ cost)).sum(-1)
        return (0.5 * (n + c * e)).mean()

    assert torch.allclose(grad_of(objectives.emo, cost_embedding=cost), grad_of(expected), atol=1e-6)


@pytest.mark.parametrize(
    "name,kw", [("mle", {}), ("brier", {}), ("alpha_power", {"alpha": 1.5}), ("alpha_power", {"alpha": 3.0})]
)
def test_proper_scoring_rules_are_minimised_by_the_truth(name, kw):
    """Expected loss under the true q, E_{y~q} loss(p, y), is smallest at p = q, for many q and perturbed p."""
    gen = torch.Generator().manual_seed(1)
    for _ in range(20):
        q = torch.distributions.Dirichlet(torch.ones(6)).sample()
        ys = torch.arange(6)

        def expected_loss(logits, q=q, ys=ys):
            losses = torch.stack([objectives.get(name)(logits[None], y[None], **kw) for y in ys])
            return (q * losses).sum()

        at_truth = expected_loss(q.log())
        for _ in range(10):
            other = q.log() + 0.5 * torch.randn(6, generator=gen)
            assert expected_loss(other) >= at_truth - 1e-6


def test_unknown_objective_and_missing_cost_embedding():
    with pytest.raises(ValueError, match="allowed: alpha_power, brier, emo, mixce, mle, tvd"):
        objectives.get("focal")
    with pytest.raises(ValueError, match="cost_embedding"):
        objectives.emo(LOGITS, TARGETS)
