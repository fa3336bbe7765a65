"""The simulation study's control arm: the unperturbed model shrunk toward uniform, tuned on held-out sequences.

M_lambda = (1 - lambda) M^_0 + lambda / |V| (Jelinek and Mercer's interpolated smoothing, 1980), M^_0 the
intensity-0 fit, with lambda chosen per replication by the held-out log-likelihood of extra sequences drawn from
the replication's truth on a stream of their own (study.HELDOUT); the perturbation arms' intensity is tuned on the
same sequences by the same criterion (`heldout_nll`). It reads no M and no synonym, so it separates "perturbation
helps" from "smoothing toward uniform helps". Why this control and its properties: docs/method.md §5, "The
controls".
"""

from __future__ import annotations

import numpy as np

# Halvings of [0, 1] in the bisection: 2^-64 is below float64's resolution near any lambda in (0, 1].
BISECTION_STEPS = 64


def heldout_pairs(sequences: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(conditioning, target) token arrays of every consecutive pair of the held-out sequences [n, L]."""
    return sequences[:, :-1].ravel(), sequences[:, 1:].ravel()


def heldout_nll(M_hat: np.ndarray, cond: np.ndarray, target: np.ndarray) -> float:
    """Mean negative log-likelihood per held-out pair, -mean log M_hat[a, b] (inf if a pair has probability 0)."""
    with np.errstate(divide="ignore"):
        return float(-np.log(M_hat[cond, target]).mean())


def shrink(M_hat: np.ndarray, lam: float) -> np.ndarray:
    """(1 - lam) M_hat + lam / |V|: each row stays a distribution."""
    return (1.0 - lam) * M_hat + lam / M_hat.shape[0]


def tune_shrinkage(M_hat: np.ndarray, cond: np.ndarray, target: np.ndarray) -> float:
    """The lambda in [0, 1] that maximises the held-out log-likelihood mean log((1 - lambda) p_i + lambda u).

    p_i = M_hat[a_i, b_i], u = 1/|V|. The objective is concave in lambda (a sum of logs of affine functions), so
    its derivative g(lambda) = mean((u - p_i) / ((1 - lambda) p_i + lambda u)) decreases: g(0) <= 0 gives 0,
    g(1) >= 0 (mean p_i <= u) gives 1, otherwise the root of g is found by bisection, a fixed number of steps,
    so the same data give the same bytes.
    """
    p = M_hat[cond, target].astype(np.float64)
    u = 1.0 / M_hat.shape[0]

    def slope(lam: float) -> float:
        with np.errstate(divide="ignore", invalid="ignore"):
            return float(np.mean((u - p) / ((1.0 - lam) * p + lam * u)))

    if slope(0.0) <= 0:
        return 0.0
    if slope(1.0) >= 0:
        return 1.0
    low, high = 0.0, 1.0
    for _ in range(BISECTION_STEPS):
        middle = 0.5 * (low + high)
        if slope(middle) > 0:
            low = middle
        else:
            high = middle
    return 0.5 * (low + high)
