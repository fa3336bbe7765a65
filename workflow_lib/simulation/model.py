"""The neural bigram of the simulation study (paper Section 4), trained for many replications at once.

P(x_i | x_{i-1}) = softmax(W2 Dropout(ReLU(W1 E[x_{i-1}] + b1)) + b2), trained with Adam and L2 weight decay. B
independent models (the replications x intensities of one vocabulary size) live in stacked parameters and train as
one: batched matrix products, hand-written gradients (`gradients`), and one Adam over the stacked tensors, which is
B independent Adams since Adam and its L2 decay act elementwise. Every random draw of model b comes from its own
generators in the same order whatever B is, so a model trained in a batch is the one trained alone, up to float32
summation order. The settings, `batch_unit` and `dropout_masks`: docs/method.md §5; the batching and its cost:
docs/theory.md, "The simulation study" (and docs/benchmarks.md).
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
    def from_config(cls, settings: dict) -> ModelSettings:
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
    return params


def dropout_masks(shape: tuple[int, int], p: float, generators: list[np.random.Generator]) -> torch.Tensor:
    """[B, *shape] bool keep-masks, each unit kept with probability 1 - p, model b's from generators[b].

    Masks are most of the random numbers training draws, so they come from raw 64-bit PCG64 output, two
    32-bit uniforms per word: unit kept when its uniform >= round(p * 2^32) (p exact to 2^-32), several
    times faster than torch's bernoulli_.
    """
    size = shape[0] * shape[1]
    threshold = np.uint32(min(round(p * 2**32), 2**32 - 1))
    keep = np.empty((len(generators), size), dtype=bool)
    for b, gen in enumerate(generators):
        words = gen.bit_generator.random_raw((size + 1) // 2)
        np.greater_equal(words.view(np.uint32)[:size], threshold, out=keep[b])
    return torch.from_numpy(keep).view(len(generators), *shape)


def gradients(
    params,
    rows: torch.Tensor,
    targets: torch.Tensor | None,
    counts: torch.Tensor | None,
    n_units: int,
    dropout: float,
    generators: list[np.random.Generator],
) -> list[torch.Tensor]:
    """Gradients of each model's minibatch loss (sum of NLLs / n_units) with respect to its parameters.

    Written out by hand rather than through autograd: the [B, rows, V] logits are the only large array, and
    this touches it a few times (softmax, minus the targets, two products) instead of the many
    passes of log_softmax + nll_loss and their backward. Tests check it against autograd.
    rows [B, r]: the conditioning token of each row. Either `targets` [B, r] (one pair per row) or `counts`
    [B, r, V] (row r stands for counts[b, r].sum() pairs, counts[b, r, v] of them with target v).
    """
    E, W1, b1, W2, b2 = params
    _B, _V, d = E.shape
    emb = torch.gather(E, 1, rows.unsqueeze(-1).expand(-1, -1, d))
    hid = torch.relu(torch.baddbmm(b1.unsqueeze(1), emb, W1))
    if dropout > 0:  # inverted dropout: kept units scaled by 1 / (1 - p)
        hid = hid.mul_(dropout_masks((hid.shape[1], hid.shape[2]), dropout, generators)).mul_(1.0 / (1.0 - dropout))
    # n_units * dloss/dlogits, built in place; the 1/n_units goes on the small products below instead.
    grad = torch.softmax(torch.baddbmm(b2.unsqueeze(1), hid, W2), -1)
    if targets is not None:
        grad.scatter_add_(2, targets.unsqueeze(-1), torch.full(targets.shape + (1,), -1.0))
    else:
        assert counts is not None, "either targets or counts"
        grad.mul_(counts.sum(-1, keepdim=True)).sub_(counts)
    grad_W2 = torch.bmm(hid.transpose(1, 2), grad).mul_(1.0 / n_units)
    grad_b2 = grad.sum(1).mul_(1.0 / n_units)
    # d hid / d pre is the dropout scale where hid > 0 (pre > 0 and kept), 0 elsewhere.
    grad_pre = torch.bmm(grad, W2.transpose(1, 2)).mul_(hid > 0).mul_(1.0 / ((1.0 - dropout) * n_units))
    grad_W1 = torch.bmm(emb.transpose(1, 2), grad_pre)
    grad_b1 = grad_pre.sum(1)
    grad_emb = torch.bmm(grad_pre, W1.transpose(1, 2))
    grad_E = torch.zeros_like(E).scatter_add_(1, rows.unsqueeze(-1).expand(-1, -1, d), grad_emb)
    return [grad_E, grad_W1, grad_b1, grad_W2, grad_b2]


def minibatch_gradients(
    params,
    cond: torch.Tensor,
    target: torch.Tensor,
    n_units: int,
    settings: ModelSettings,
    generators: list[np.random.Generator],
) -> list[torch.Tensor]:
    """The gradients of one minibatch, cond and target [B, n]: per pair, or per token with pair counts (`token`
    masks: one mask per distinct conditioning token, so a step computes [V, V] logits weighted by the minibatch's
    pair counts instead of [pairs, V] logits; the same expected gradient, several times fewer operations when a
    minibatch holds more pairs than there are tokens)."""
    if settings.dropout_masks == "pair":
        return gradients(params, cond, target, None, n_units, settings.dropout, generators)
    B, V = cond.shape[0], params[0].shape[1]
    counts = torch.zeros(B, V * V).scatter_add_(1, cond * V + target, torch.ones(cond.shape)).view(B, V, V)
    return gradients(params, torch.arange(V).expand(B, V), None, counts, n_units, settings.dropout, generators)


def minibatch_loss(params, cond: torch.Tensor, target: torch.Tensor, n_units: int) -> torch.Tensor:
    """Sum over the B models of each one's minibatch loss without dropout (for checking the gradients)."""
    E, W1, b1, W2, b2 = params
    emb = torch.gather(E, 1, cond.unsqueeze(-1).expand(-1, -1, E.shape[-1]))
    logits = torch.baddbmm(b2.unsqueeze(1), torch.relu(torch.baddbmm(b1.unsqueeze(1), emb, W1)), W2)
    nll = torch.nn.functional.cross_entropy(logits.reshape(-1, E.shape[1]), target.reshape(-1), reduction="sum")
    return nll / n_units


def train_bigrams(
    cond: np.ndarray,
    target: np.ndarray,
    vocab_size: int,
    settings: ModelSettings,
    init_seeds: list[np.random.SeedSequence],
    train_seeds: list[np.random.SeedSequence],
) -> np.ndarray:
    """Train B = len(init_seeds) models on their own units and return their transition matrices [B, V, V].

    cond, target: [B, U, P] int arrays, U units of P (conditioning, target) pairs per model. A unit is a whole
    sequence (P = its pairs, as the MixCE code the paper's setup comes from batches) or a single pair (P = 1); a
    minibatch is `batch_size` units, its loss the per-unit sum of NLLs averaged over its units, and the units are
    reshuffled every epoch.
    init_seeds[b] draws model b's initial weights (torch generator), train_seeds[b] its epoch shuffles and
    dropout masks (numpy PCG64).
    The returned matrices are the model without dropout applied to every token (float64).
    """
    if settings.dropout_masks not in DROPOUT_MASKS:
        raise ValueError(f"dropout_masks must be one of {DROPOUT_MASKS}, got {settings.dropout_masks!r}")
    cond_t = torch.as_tensor(np.ascontiguousarray(cond), dtype=torch.int64)
    target_t = torch.as_tensor(np.ascontiguousarray(target), dtype=torch.int64)
    B, U, P = cond_t.shape
    params = init_parameters(vocab_size, settings, [torch_generator(s) for s in init_seeds])
    generators = [np.random.Generator(np.random.PCG64(s)) for s in train_seeds]
    optimizer = torch.optim.Adam(params, lr=settings.lr, weight_decay=settings.weight_decay, fused=True)
    for _ in range(settings.epochs):
        order = torch.from_numpy(np.stack([gen.permutation(U) for gen in generators]))
        for start in range(0, U, settings.batch_size):
            units = order[:, start : start + settings.batch_size]
            pick = units.unsqueeze(-1).expand(-1, -1, P)
            c = torch.gather(cond_t, 1, pick).reshape(B, -1)
            t = torch.gather(target_t, 1, pick).reshape(B, -1)
            for param, grad in zip(params, minibatch_gradients(params, c, t, units.shape[1], settings, generators)):
                param.grad = grad
            optimizer.step()
    return transition_matrices(params)


def transition_matrices(params) -> np.ndarray:
    """softmax(W2 ReLU(W1 E + b1) + b2) for every token (dropout off, as in evaluation): [B, V, V]."""
    E, W1, b1, W2, b2 = params
    hid = torch.relu(torch.baddbmm(b1.unsqueeze(1), E, W1))
    return torch.softmax(torch.baddbmm(b2.unsqueeze(1), hid, W2), -1).double().numpy()
