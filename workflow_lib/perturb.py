"""The perturber T(. | X): random insertion, replacement or deletion of synonyms in token-id sequences.

Training data, perturbed sampling and the simulation study all call this one implementation. It works on a
batch of sequences stored *ragged*: one flat array of token ids plus `offsets` (sequence s is
`values[offsets[s]:offsets[s+1]]`), so blocks, prompts of any length and growing generations share one code
path. The same code runs on numpy arrays (data stage, numpy's Generator) and on torch tensors on any device
(sampling, a torch Generator); `_Numpy` and `_Torch` supply the few array operations that differ.

Semantics (REFERENCE section 1): every eligible token (not special, and for insertion/replacement with at
least one synonym) is selected independently with probability `intensity`.
- insertion: a synonym of each selected token is inserted at a uniformly random gap of its sequence.
  Special tokens at the ends (BOS, EOS) stay at the ends: the gap before a leading and after a trailing
  special token are excluded. Several insertions at one gap come in random order.
- replacement: each selected token is replaced by a synonym.
- deletion: each selected token is dropped.
Cost: with numpy the selected positions are drawn directly (geometric gaps) and everything after that
touches only the K selected tokens, plus one C-level pass to write the output; no Python loop over tokens or
sequences.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

STRATEGIES = ("insertion", "replacement", "deletion")


# ---- array backends -----------------------------------------------------------------------------------------


class _Numpy:
    """numpy arrays and a numpy Generator."""

    def __init__(self, rng: np.random.Generator | None = None):
        self.rng = rng

    def rand(self, n: int) -> np.ndarray:
        return self.rng.random(n)

    def rand_at(self, picked: np.ndarray, purpose: int) -> np.ndarray:
        """Uniforms for the picked tokens (one draw of the stream each; `purpose` only matters for keyed draws)."""
        return self.rng.random(len(picked))

    def select(self, n: int, p: float) -> np.ndarray:
        """Sorted positions, each of range(n) included independently with probability p. The gaps between
        successive Bernoulli(p) successes are Geometric(p), so the positions are a cumulative sum of
        geometric draws: O(selected) work instead of O(n)."""
        if p >= 1.0:
            return np.arange(n, dtype=np.int64)
        chunk = int(n * p + 6 * np.sqrt(n * p) + 16)
        found, last = [], -1
        while True:
            positions = last + np.cumsum(self.rng.geometric(p, size=chunk))
            if positions[-1] >= n:
                found.append(positions[positions < n])
                return np.concatenate(found)
            found.append(positions)
            last = positions[-1]

    arange = staticmethod(lambda n: np.arange(n, dtype=np.int64))
    ones_bool = staticmethod(lambda n: np.ones(n, dtype=bool))
    cumsum = staticmethod(np.cumsum)
    isin = staticmethod(np.isin)
    searchsorted = staticmethod(lambda keys, x, side="right": np.searchsorted(keys, x, side=side))
    argsort = staticmethod(lambda x: np.argsort(x, kind="stable"))
    as_int = staticmethod(lambda x: np.asarray(x).astype(np.int64))
    floor_int = staticmethod(lambda x: np.floor(x).astype(np.int64))
    cast_like = staticmethod(lambda x, like: x.astype(like.dtype))
    minimum = staticmethod(np.minimum)
    tensor = staticmethod(lambda ids, like: np.asarray(list(ids), dtype=like.dtype))
    mask_of = staticmethod(lambda idx, n: np.bincount(idx, minlength=n).astype(bool) if len(idx) else np.zeros(n, bool))
    prepend_zero = staticmethod(lambda x: np.concatenate([np.zeros(1, dtype=x.dtype), x]))

    @staticmethod
    def replace(values, idx, new):
        out = values.copy()
        out[idx] = new
        return out

    @staticmethod
    def delete(values, idx):
        return np.delete(values, idx)

    @staticmethod
    def insert(values, before, new):
        """Insert new[k] before values[before[k]] (before sorted; equal positions keep their order)."""
        return np.insert(values, before, new)


class _Torch:
    """torch tensors on one device and a torch Generator on that device."""

    def __init__(self, generator=None, device="cpu"):
        import torch

        self.torch, self.generator, self.device = torch, generator, device

    def rand(self, n: int):
        return self.torch.rand(n, generator=self.generator, device=self.device, dtype=self.torch.float64)

    def rand_at(self, picked, purpose: int):
        if isinstance(self.generator, KeyedRandom):
            return self.generator.at(picked, purpose)
        return self.rand(len(picked))

    def select(self, n: int, p: float):
        if isinstance(self.generator, KeyedRandom):
            return (self.generator.at(self.arange(n), 0) < p).nonzero().flatten()
        return (self.rand(n) < p).nonzero().flatten()

    def arange(self, n):
        return self.torch.arange(n, device=self.device, dtype=self.torch.int64)

    def ones_bool(self, n):
        return self.torch.ones(n, device=self.device, dtype=self.torch.bool)

    def mask_of(self, idx, n):
        mask = self.torch.zeros(n, device=self.device, dtype=self.torch.bool)
        mask[idx] = True
        return mask

    cumsum = staticmethod(lambda x: x.cumsum(0))
    as_int = staticmethod(lambda x: x.long())
    floor_int = staticmethod(lambda x: x.floor().long())
    cast_like = staticmethod(lambda x, like: x.to(like.dtype))
    prepend_zero = staticmethod(lambda x: __import__("torch").cat([x.new_zeros(1), x]))

    def isin(self, x, values):
        return self.torch.isin(x, values)

    def searchsorted(self, keys, x, side="right"):
        return self.torch.searchsorted(keys, x, right=side == "right")

    def argsort(self, x):
        return self.torch.argsort(x, stable=True)

    def minimum(self, a, b):
        return self.torch.minimum(a, self.torch.as_tensor(b, device=self.device))

    def tensor(self, ids, like):
        return self.torch.as_tensor(list(ids), dtype=like.dtype, device=self.device)

    def replace(self, values, idx, new):
        out = values.clone()
        out[idx] = new
        return out

    def delete(self, values, idx):
        return values[~self.mask_of(idx, len(values))]

    def insert(self, values, before, new):
        inserted = self.mask_of(before + self.arange(len(before)), len(values) + len(new))
        out = values.new_empty(len(values) + len(new))
        out[inserted] = new
        out[~inserted] = values
        return out


MASK64 = (1 << 64) - 1


def _signed(x: int) -> int:
    return x - (1 << 64) if x >= 1 << 63 else x


_GOLDEN, _MIX1, _MIX2 = _signed(0x9E3779B97F4A7C15), _signed(0xBF58476D1CE4E5B9), _signed(0x94D049BB133111EB)


def splitmix64(x):
    """The splitmix64 finaliser on int64 tensors (wrapping arithmetic; logical shifts emulated by masking)."""
    import torch

    def shr(v, k):
        return torch.bitwise_and(torch.bitwise_right_shift(v, k), (1 << (64 - k)) - 1)

    x = x + _GOLDEN
    x = torch.bitwise_xor(x, shr(x, 30)) * _MIX1
    x = torch.bitwise_xor(x, shr(x, 27)) * _MIX2
    return torch.bitwise_xor(x, shr(x, 31))


def hash_uniform(x):
    """int64 keys -> uniforms in [0, 1) from their top 53 bits."""
    import torch

    return torch.bitwise_and(torch.bitwise_right_shift(splitmix64(x), 11), (1 << 53) - 1).double() / float(1 << 53)


class KeyedRandom:
    """Counter-based randomness for torch: the draw for a token depends only on its sequence's key, its
    position in the sequence and the purpose of the draw. A sequence then gets the same perturbation whatever
    else shares its batch, which makes samples independent of batch size and of resumption.
    """

    def __init__(self, keys, offsets):
        self.keys, self.offsets = keys, offsets

    def at(self, flat_positions, purpose: int):
        import torch

        seq = torch.searchsorted(self.offsets, flat_positions, right=True) - 1
        local = flat_positions - self.offsets[seq]
        return hash_uniform(splitmix64(self.keys[seq] * 1_000_003 + purpose) + local)


def backend(values, rng=None):
    """The operations for `values` (numpy or torch), drawing from `rng`."""
    if isinstance(values, np.ndarray):
        if rng is not None and not isinstance(rng, np.random.Generator):
            raise TypeError("numpy token arrays need a numpy.random.Generator")
        return _Numpy(rng)
    return _Torch(rng, values.device)


# ---- the synonym table ------------------------------------------------------------------------------------


@dataclass
class SynonymTable:
    """token -> candidate synonyms with weights, laid out for vectorised sampling.

    CSR layout: the candidates of token t are `candidates[offsets[t]:offsets[t+1]]`. `keys` holds, for each
    candidate, t + (cumulative normalised weight within t's row), so all rows live in one increasing array
    and sampling synonyms for many tokens at once is one searchsorted of `token + uniform`.
    A table may instead be `shared`: every non-special token draws from the same candidates (the uniform Q0
    of the paper's Proposition on token replacement) without a V x V table.
    """

    vocab_size: int
    offsets: Any  # [V+1] int64
    candidates: Any  # [nnz] int64
    keys: Any  # [nnz] float64
    shared: bool = False
    padded_candidates: Any = None  # [V, kmax] when rows are short: candidates, and
    padded_cumulative: Any = None  # [V, kmax] cumulative weights (2.0 past a row's end)

    def __post_init__(self):
        # Short rows (top-k, classes) are sampled faster from a dense [V, kmax] layout: one row gather and a
        # count instead of a binary search over the whole table (whose random accesses dominate otherwise).
        if self.shared or self.padded_candidates is not None or not isinstance(self.offsets, np.ndarray):
            return
        sizes = np.diff(self.offsets)
        kmax = int(sizes.max()) if len(sizes) else 0
        if 0 < kmax and self.vocab_size * kmax <= 4_000_000:
            row = np.repeat(np.arange(self.vocab_size), sizes)
            col = np.arange(len(self.candidates)) - self.offsets[row]
            self.padded_candidates = np.zeros((self.vocab_size, kmax), dtype=np.int64)
            self.padded_cumulative = np.full((self.vocab_size, kmax), 2.0)
            self.padded_candidates[row, col] = self.candidates
            self.padded_cumulative[row, col] = self.keys - row

    @classmethod
    def from_rows(cls, vocab_size: int, tokens, candidates: list, weights: list) -> "SynonymTable":
        """Build from per-token candidate lists (token id, [candidate ids], [weights])."""
        tokens = np.asarray(tokens, dtype=np.int64)
        if len(tokens) and (tokens.min() < 0 or tokens.max() >= vocab_size):
            raise ValueError(f"synonym table: token ids must be in [0, {vocab_size})")
        counts = np.zeros(vocab_size, dtype=np.int64)
        sizes = np.array([len(c) for c in candidates], dtype=np.int64)
        counts[tokens] = sizes
        offsets = np.zeros(vocab_size + 1, dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])
        order = np.argsort(tokens, kind="stable")
        flat_c = np.concatenate([np.asarray(candidates[i], dtype=np.int64) for i in order]) if len(order) else np.zeros(0, np.int64)
        flat_w = np.concatenate([np.asarray(weights[i], dtype=np.float64) for i in order]) if len(order) else np.zeros(0)
        if (flat_w < 0).any() or not np.isfinite(flat_w).all():
            raise ValueError("synonym table: weights must be finite and non-negative")
        if len(flat_c) and (flat_c.min() < 0 or flat_c.max() >= vocab_size):
            raise ValueError(f"synonym table: candidate ids must be in [0, {vocab_size})")
        row = np.repeat(np.arange(vocab_size), counts)
        keys = _row_keys(row, flat_w, offsets)
        return cls(vocab_size, offsets, flat_c, keys)

    @classmethod
    def uniform(cls, vocab_size: int, special_ids=()) -> "SynonymTable":
        """Q0 uniform over the non-special vocabulary, the token itself included (the Proposition's law)."""
        allowed = np.setdiff1d(np.arange(vocab_size, dtype=np.int64), np.asarray(list(special_ids), dtype=np.int64))
        keys = np.arange(1, len(allowed) + 1, dtype=np.float64) / len(allowed)
        return cls(vocab_size, np.array([0, len(allowed)], dtype=np.int64), allowed, keys, shared=True)

    def has_synonyms(self, xp):
        """[V] bool: which tokens have at least one candidate."""
        if self.shared:
            return xp.ones_bool(self.vocab_size)
        return self.offsets[1:] > self.offsets[:-1]

    def sample(self, tokens, u, xp):
        """One synonym per token in `tokens` (each must have candidates), from uniforms `u` in [0, 1)."""
        if self.shared:
            idx = xp.minimum(xp.searchsorted(self.keys, u), len(self.candidates) - 1)
        elif self.padded_candidates is not None:
            tokens = xp.as_int(tokens)
            within = (self.padded_cumulative[tokens] <= u[:, None]).sum(1)  # searchsorted(row, u, "right")
            return self.padded_candidates[tokens, xp.minimum(within, self.padded_candidates.shape[1] - 1)]
        else:
            tokens = xp.as_int(tokens)
            # Rounding can push token + u past the row's last key: clamp into the row.
            idx = xp.minimum(xp.searchsorted(self.keys, tokens + u), self.offsets[tokens + 1] - 1)
        return self.candidates[idx]

    def to(self, device) -> "SynonymTable":
        """The table as torch tensors on `device` (for perturbing on the sampling device)."""
        import torch

        def conv(a, dtype):
            return torch.as_tensor(np.asarray(a), dtype=dtype).to(device)

        padded = self.padded_candidates is not None
        return SynonymTable(self.vocab_size, conv(self.offsets, torch.int64), conv(self.candidates, torch.int64),
                            conv(self.keys, torch.float64), self.shared,
                            conv(self.padded_candidates, torch.int64) if padded else None,
                            conv(self.padded_cumulative, torch.float64) if padded else None)

    # Parquet: one row per token with candidates (token, candidates, weights); a shared table is token -1.
    def to_arrow(self):
        import pyarrow as pa

        offsets, cand, keys = np.asarray(self.offsets), np.asarray(self.candidates), np.asarray(self.keys)
        sizes = np.diff(offsets)
        rows = np.flatnonzero(sizes > 0)
        cumulative = keys - np.repeat(np.arange(len(sizes)), sizes)  # within-row cumulative weight
        previous = np.concatenate([[0.0], cumulative[:-1]])
        previous[offsets[rows]] = 0.0
        list_offsets = pa.array(np.concatenate([[0], np.cumsum(sizes[rows])]).astype(np.int32))
        return pa.table({
            "token": pa.array((np.array([-1]) if self.shared else rows).astype(np.int32)),
            "candidates": pa.ListArray.from_arrays(list_offsets, pa.array(cand.astype(np.int32))),
            "weights": pa.ListArray.from_arrays(list_offsets, pa.array((cumulative - previous).astype(np.float32))),
        }).replace_schema_metadata({"vocab_size": str(self.vocab_size)})

    @classmethod
    def from_arrow(cls, table) -> "SynonymTable":
        vocab_size = int(table.schema.metadata[b"vocab_size"])
        tokens = table.column("token").to_numpy()
        cands = table.column("candidates").to_pylist()
        weights = table.column("weights").to_pylist()
        if len(tokens) == 1 and tokens[0] == -1:
            allowed = np.asarray(cands[0], dtype=np.int64)
            keys = np.cumsum(np.asarray(weights[0], dtype=np.float64))
            return cls(vocab_size, np.array([0, len(allowed)], dtype=np.int64), allowed, keys / keys[-1], shared=True)
        return cls.from_rows(vocab_size, tokens, cands, weights)


def _row_keys(row: np.ndarray, weights: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """row + cumulative normalised weight within the row: one increasing array over all rows."""
    totals = np.bincount(row, weights=weights, minlength=len(offsets) - 1)
    if (totals[row] <= 0).any():
        raise ValueError("synonym table: a token's candidate weights sum to zero")
    cumulative = np.cumsum(weights)
    row_start = np.concatenate([[0.0], cumulative])[offsets[:-1]]
    within = (cumulative - row_start[row]) / totals[row]
    within[offsets[1:][np.diff(offsets) > 0] - 1] = 1.0  # exact 1 at each row's end
    return row + within


# ---- the perturbation ----------------------------------------------------------------------------------------

# ---- the perturbation ----------------------------------------------------------------------------------------


@dataclass
class Perturbed:
    """A perturbed ragged batch and how it relates to the original (N original tokens).

    `picked`: sorted flat indices of the selected original tokens (given a synonym, replaced, deleted).
    For insertion, `gaps` are the global gap indices of the inserted tokens in output order (gap g of
    sequence s is offsets[s] + s + g) and `sources` the original token each one is a synonym of.
    The full per-token maps below are derived on demand, since augment-mode data never needs them.
    """

    values: Any
    offsets: Any
    strategy: str
    n: int
    picked: Any
    orig_offsets: Any
    xp: Any
    gaps: Any = None
    sources: Any = None

    @property
    def selected(self):
        """[N] bool: which original tokens were selected."""
        return self.xp.mask_of(self.picked, self.n)

    @property
    def inserted_positions(self):
        """Output positions of the inserted tokens: the k-th (in gap order) at gap G lands at G - s + k."""
        seq = self.xp.searchsorted(self.orig_offsets, self.sources, "right") - 1
        return self.gaps - seq + self.xp.arange(len(self.gaps))

    @property
    def origin(self):
        """[N'] the original flat index of each output token, -1 for an inserted one."""
        xp, total = self.xp, len(self.values)
        if self.strategy == "replacement":
            return xp.arange(total)
        if self.strategy == "deletion":
            return xp.delete(xp.arange(self.n), self.picked)
        new = xp.mask_of(self.inserted_positions, total)
        origin = xp.cumsum(xp.as_int(~new)) - 1
        origin[new] = -1
        return origin

    @property
    def slot(self):
        """[N] where each original token sits in the output (a deleted one: where it would be), so the
        perturbed prefix of token i is output[offsets[s] : slot[i]]."""
        xp, idx = self.xp, self.xp.arange(self.n)
        if self.strategy == "replacement":
            return idx
        if self.strategy == "deletion":
            return idx - xp.searchsorted(self.picked, idx, "left")
        seq = sequence_ids(self.orig_offsets, xp)
        return idx + xp.searchsorted(self.gaps, idx + seq, "right")  # insertions at gaps up to its own

    def perturbed_mask(self):
        """[N'] which output tokens are new (inserted) or changed (replaced); deletion leaves none."""
        if self.strategy == "replacement":
            return self.selected
        if self.strategy == "insertion":
            return self.xp.mask_of(self.inserted_positions, len(self.values))
        return self.xp.mask_of(self.picked[:0], len(self.values))


def sequence_ids(offsets, xp):
    """[N] the sequence index of every flat position."""
    n_seq = len(offsets) - 1
    return xp.searchsorted(offsets[1:], xp.arange(int(offsets[-1])), "right") if n_seq else xp.arange(0)


def perturb(values, offsets, strategy: str, intensity: float, table: SynonymTable, rng, special_ids=(),
            insert_position: str = "uniform") -> Perturbed:
    """Apply T(. | X) independently to every sequence of a ragged batch.

    values/offsets: numpy arrays (with a numpy Generator) or torch tensors (with a torch Generator on their
    device; the table must be on that device too, see SynonymTable.to). `insert_position`: "uniform" (the
    paper: any gap of the sequence) or "after_source" (right after the token it is a synonym of; prefix-mode
    training data needs it, since a synonym placed before its source leaks a future token into the prefix of
    an earlier target).
    """
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown perturbation strategy {strategy!r}; allowed: {', '.join(STRATEGIES)}")
    if not 0.0 <= intensity <= 1.0:
        raise ValueError(f"perturbation intensity must be in [0, 1], got {intensity}")
    if insert_position not in ("uniform", "after_source"):
        raise ValueError(f"insert_position must be 'uniform' or 'after_source', got {insert_position!r}")
    xp = backend(values, rng)
    n = len(values)
    special = xp.tensor(special_ids, values)
    # Select every position with probability alpha, then keep the eligible ones: the same law as selecting
    # each eligible token with probability alpha, while looking only at the selected few.
    picked = xp.select(n, intensity) if intensity > 0 else xp.arange(0)
    tokens = values[picked]
    eligible = ~xp.isin(tokens, special)
    if strategy != "deletion":
        eligible &= table.has_synonyms(xp)[xp.as_int(tokens)]
    picked, tokens = picked[eligible], tokens[eligible]
    result = dict(strategy=strategy, n=n, picked=picked, orig_offsets=offsets, xp=xp)

    if strategy == "deletion":
        new_offsets = offsets - xp.searchsorted(picked, offsets, "left")
        return Perturbed(xp.delete(values, picked), new_offsets, **result)

    synonyms = xp.cast_like(table.sample(tokens, xp.rand_at(picked, 1), xp), values)
    if strategy == "replacement":
        return Perturbed(xp.replace(values, picked, synonyms), offsets, **result)

    # Insertion. Gaps of sequence s are numbered offsets[s] + s + g, g = 0..len(s): one increasing index over
    # the batch, in which the gap just before flat token i is i + seq(i).
    seq = xp.searchsorted(offsets, picked, "right") - 1
    starts, ends = offsets[seq], offsets[seq + 1]
    if insert_position == "uniform":
        first = xp.as_int(xp.isin(values[starts], special))
        last = ends - starts - xp.as_int(xp.isin(values[ends - 1], special))
        gaps = starts + seq + first + xp.floor_int(xp.rand_at(picked, 2) * (last - first + 1))
        order = xp.argsort(gaps + 0.5 * xp.rand_at(picked, 3))  # by gap, random order within a gap
        gaps, synonyms, picked_order = gaps[order], synonyms[order], picked[order]
    else:
        gaps, picked_order = picked + seq + 1, picked  # already increasing
    before = gaps - (xp.searchsorted(offsets, picked_order, "right") - 1)  # = offsets[s] + g: insert before it
    out = xp.insert(values, before, synonyms)
    new_offsets = offsets + xp.searchsorted(gaps, offsets + xp.arange(len(offsets)), "left")
    return Perturbed(out, new_offsets, gaps=gaps, sources=picked_order, **result)


def prefix_targets(values, offsets, perturbed: Perturbed):
    """Algorithm 1's targets on one perturbed sequence: every ORIGINAL token (but a sequence's first) is
    scored once, from the position where its perturbed prefix ends; inserted tokens are never targets and a
    deleted token is still one. Returns (target_positions, target_ids, target_offsets), positions local to
    each output sequence, ragged like the batch. A token whose perturbed prefix is empty (everything before
    it deleted) has nothing to condition on and is skipped.

    The prefix of token i is the output up to its slot. That is a draw from T(. | X_<i) for replacement and
    deletion, which act on each token independently; for insertion it is when each synonym sits right after
    its source (perturb(..., insert_position="after_source")), since a synonym placed earlier would leak a
    future token into the prefix of an earlier target.
    """
    xp = perturbed.xp
    seq = sequence_ids(offsets, xp)
    local_index = xp.arange(len(values)) - offsets[seq]
    local_slot = perturbed.slot - perturbed.offsets[seq]
    scored = (local_index >= 1) & (local_slot >= 1)
    target_offsets = xp.cumsum(xp.prepend_zero(xp.as_int(scored)))[offsets]
    return local_slot[scored] - 1, values[scored], target_offsets
