"""The neural bigram of the simulation study (paper Section 4), trained for many replications at once.

Model (the paper, after MixCE's synthetic.py): P(x_i | x_{i-1}) = softmax(W2 Dropout(ReLU(W1 E[x_{i-1}] + b1)) + b2),
embedding E and hidden width d = 50, dropout 0.1, Adam (lr 1e-3, L2 weight decay 1e-4) on E, W1, b1, W2, b2.

Batching: B independent models (replications x intensities of one vocabulary size) live in stacked
parameters ([B, V, d], [B, d, h], ...) and train as one: every step is a few batched matrix products, and the
loss is the sum of the B models' losses, so each model's gradient is exactly its own. Adam and its L2 decay
act elementwise, so one Adam over the stacked tensors is B independent Adams. Every random draw of model b
(initial weights, epoch shuffles, dropout masks) comes from model b's own generators, in the same order
whatever B is: training a model inside a batch gives what training it alone gives, up to the summation
order of batched matrix products (tests compare at atol 1e-6).

Data: each model gets `units` [B, U, P] of (conditioning, target) token pairs. A unit is a whole sequence
(P = its pairs; the MixCE code the paper's setup comes from batches whole sequences and sums the log-loss
along each one) or a single pair (P = 1). A minibatch is `batch_size` units, the loss the per-unit sum of
negative log-likelihoods averaged over the units of the minibatch; units are reshuffled every epoch.

Dropout masks: `pair` draws an independent mask for every pair (what nn.Dropout does on a batch of
positions); `token` draws one mask per distinct conditioning token per minibatch, which lets a step compute
[V, V] logits and weight them by the minibatch's pair counts instead of computing [pairs, V] logits: the same
expected gradient, several times fewer operations when a minibatch holds more pairs than there are tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

DROPOUT_MASKS = ("pair", "token")


@dataclass(frozen=True)
class ModelSettings:
    embedding_dim: int = 50
    hidden_dim: int = 50
    dropout: float = 0.1
    lr: float = 1e-3
    weight_decay: float = 1e-4
    batch_size: int = 500
    epochs: int = 25
    dropout_masks: str = "pair"

    @classmethod
    def from_config(cls, settings: dict) -> "ModelSettings":
        return cls(**{k: settings[k] for k in cls.__dataclass_fields__ if k in settings})


def torch_generator(seed_sequence: np.random.SeedSequence) -> torch.Generator:
    """A CPU torch generator seeded from a numpy SeedSequence (so all streams derive from one config seed)."""
    return torch.Generator().manual_seed(int(seed_sequence.generate_state(1, np.uint64)[0]))


def init_parameters(vocab_size: int, settings: ModelSettings, generators: list[torch.Generator]) -> list[torch.Tensor]:
    """Stacked parameters of len(generators) models, model b drawn from generators[b] only.

    The laws are PyTorch's defaults for nn.Embedding (N(0, 1)) and nn.Linear (U(-1/sqrt(fan_in), 1/sqrt(fan_in))
    for weight and bias). W1 and W2 are stored transposed ([d, h], [h, V]) so a forward pass is x @ W.
    """
    V, d, h = vocab_size, settings.embedding_dim, settings.hidden_dim
    shapes = [((V, d), None), ((d, h), d), ((h,), d), ((h, V), h), ((V,), h)]
    params = [torch.empty((len(generators), *shape)) for shape, _ in shapes]
    for b, gen in enumerate(generators):
        for tensor, (shape, fan_in) in zip(params, shapes):
            if fan_in is None:
                tensor[b].normal_(0.0, 1.0, generator=gen)
            else:
                bound = 1.0 / fan_in**0.5
                tensor[b].uniform_(-bound, bound, generator=gen)
    return [p.requires_grad_() for p in params]


def hidden(params, tokens: torch.Tensor) -> torch.Tensor:
    """ReLU(W1 E[x] + b1) for token ids [B, n]: [B, n, h]."""
    E, W1, b1 = params[0], params[1], params[2]
    emb = torch.gather(E, 1, tokens.unsqueeze(-1).expand(-1, -1, E.shape[-1]))
    return torch.relu(torch.baddbmm(b1.unsqueeze(1), emb, W1))


def logits_of(params, hid: torch.Tensor) -> torch.Tensor:
    return torch.baddbmm(params[4].unsqueeze(1), hid, params[3])


def dropout_masks(shape: tuple[int, int], p: float, generators: list[torch.Generator]) -> torch.Tensor:
    """[B, *shape] inverted-dropout multipliers (0 or 1/(1-p)), model b's from generators[b]."""
    u = torch.empty((len(generators), *shape))
    for b, gen in enumerate(generators):
        u[b].uniform_(0.0, 1.0, generator=gen)
    return (u >= p).to(u.dtype).div_(1.0 - p)


def minibatch_loss(params, cond: torch.Tensor, target: torch.Tensor, n_units: int, settings: ModelSettings,
                   generators: list[torch.Generator]) -> torch.Tensor:
    """Sum over the B models of each model's mean per-unit negative log-likelihood. cond, target: [B, n]."""
    B, V = cond.shape[0], params[0].shape[1]
    p = settings.dropout
    if settings.dropout_masks == "pair":
        hid = hidden(params, cond)
        if p > 0:
            hid = hid * dropout_masks(tuple(hid.shape[1:]), p, generators)
        logits = logits_of(params, hid)
        nll = torch.nn.functional.cross_entropy(logits.reshape(-1, V), target.reshape(-1), reduction="sum")
        return nll / n_units
    # token: every token's row once, weighted by how often each (token, next) pair occurs in the minibatch.
    every = torch.arange(V).expand(B, V)
    hid = hidden(params, every)
    if p > 0:
        hid = hid * dropout_masks(tuple(hid.shape[1:]), p, generators)
    logits = logits_of(params, hid)
    counts = torch.zeros(B, V * V).scatter_add_(1, cond * V + target, torch.ones(cond.shape)).view(B, V, V)
    nll = (counts.sum(-1) * torch.logsumexp(logits, -1)).sum() - (counts * logits).sum()
    return nll / n_units


def train_bigrams(cond: np.ndarray, target: np.ndarray, vocab_size: int, settings: ModelSettings,
                  init_seeds: list[np.random.SeedSequence], train_seeds: list[np.random.SeedSequence]) -> np.ndarray:
    """Train B = len(init_seeds) models on their own units and return their transition matrices [B, V, V].

    cond, target: [B, U, P] int arrays, U units of P (conditioning, target) pairs per model.
    init_seeds[b] draws model b's initial weights, train_seeds[b] its epoch shuffles and dropout masks.
    The returned matrices are the model without dropout applied to every token (float64).
    """
    if settings.dropout_masks not in DROPOUT_MASKS:
        raise ValueError(f"dropout_masks must be one of {DROPOUT_MASKS}, got {settings.dropout_masks!r}")
    cond_t = torch.as_tensor(np.ascontiguousarray(cond), dtype=torch.int64)
    target_t = torch.as_tensor(np.ascontiguousarray(target), dtype=torch.int64)
    B, U, P = cond_t.shape
    params = init_parameters(vocab_size, settings, [torch_generator(s) for s in init_seeds])
    generators = [torch_generator(s) for s in train_seeds]
    optimizer = torch.optim.Adam(params, lr=settings.lr, weight_decay=settings.weight_decay)
    for _ in range(settings.epochs):
        order = torch.stack([torch.randperm(U, generator=gen) for gen in generators])
        for start in range(0, U, settings.batch_size):
            units = order[:, start:start + settings.batch_size]
            pick = units.unsqueeze(-1).expand(-1, -1, P)
            c = torch.gather(cond_t, 1, pick).reshape(B, -1)
            t = torch.gather(target_t, 1, pick).reshape(B, -1)
            loss = minibatch_loss(params, c, t, units.shape[1], settings, generators)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
    return transition_matrices(params)


@torch.no_grad()
def transition_matrices(params) -> np.ndarray:
    """softmax(W2 ReLU(W1 E + b1) + b2) for every token (dropout off, as in evaluation): [B, V, V]."""
    V = params[0].shape[1]
    every = torch.arange(V).expand(params[0].shape[0], V)
    return torch.softmax(logits_of(params, hidden(params, every)), -1).double().numpy()
