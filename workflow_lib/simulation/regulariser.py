"""The simulation study's control arm: the unperturbed model shrunk toward uniform, tuned on held-out sequences.

Why a control: the `oracle` perturbation builds its synonym sets from the true M, and the score is the MAE on
cells never seen in the data, so its perturbed copy may write the truth into the scored cells; and where the
unperturbed model is worse than the uniform predictor on those cells, any pull toward uniform lowers the MAE.
A regulariser of the same strength class, which reads no M and no synonym, separates "perturbation helps"
from "smoothing helps".

The control is linear interpolation of the unperturbed model's estimate with the uniform law (Jelinek and
Mercer's interpolated smoothing, 1980; Chen and Goodman 1999 section 2.3):

    M_lambda = (1 - lambda) M^_0 + lambda / |V|,      lambda in [0, 1],

where M^_0 is the intensity-0 fit (the data duplicated, the same fit every perturbation arm is compared with).
It costs no training, keeps every row a distribution, and with lambda = 1 it is the uniform predictor, so the
study's reference line lies on its path. lambda is chosen per replication by held-out log-likelihood (what the
deleted-interpolation method does): the mean log M_lambda[a, b] over the (a, b) pairs of extra sequences drawn
from the replication's truth on a stream of their own (study.HELDOUT). The criterion is a proper scoring rule
(its expectation is maximised by the true transition law), and the tuning sees held-out sequences only: never
M, never the scored cells' values. The perturbation arms' intensity is tuned on the same sequences by the same
criterion (`heldout_nll`), so both sides of the contrast get the same data and the same rule.
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
