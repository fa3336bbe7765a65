"""The synonym table: token -> candidate synonyms with weights, laid out for vectorised sampling (CSR), on numpy or
on a torch device.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

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
    def from_rows(cls, vocab_size: int, tokens, candidates: list, weights: list) -> SynonymTable:
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
        flat_c = (
            np.concatenate([np.asarray(candidates[i], dtype=np.int64) for i in order])
            if len(order)
            else np.zeros(0, np.int64)
        )
        flat_w = (
            np.concatenate([np.asarray(weights[i], dtype=np.float64) for i in order]) if len(order) else np.zeros(0)
        )
        if (flat_w < 0).any() or not np.isfinite(flat_w).all():
            raise ValueError("synonym table: weights must be finite and non-negative")
        if len(flat_c) and (flat_c.min() < 0 or flat_c.max() >= vocab_size):
            raise ValueError(f"synonym table: candidate ids must be in [0, {vocab_size})")
        row = np.repeat(np.arange(vocab_size), counts)
        keys = _row_keys(row, flat_w, offsets)
        return cls(vocab_size, offsets, flat_c, keys)

    @classmethod
    def uniform(cls, vocab_size: int, special_ids=()) -> SynonymTable:
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

    def to(self, device) -> SynonymTable:
        """The table as torch tensors on `device` (for perturbing on the sampling device)."""
        import torch

        def conv(a, dtype):
            return torch.as_tensor(np.asarray(a), dtype=dtype).to(device)

        padded = self.padded_candidates is not None
        return SynonymTable(
            self.vocab_size,
            conv(self.offsets, torch.int64),
            conv(self.candidates, torch.int64),
            conv(self.keys, torch.float64),
            self.shared,
            conv(self.padded_candidates, torch.int64) if padded else None,
            conv(self.padded_cumulative, torch.float64) if padded else None,
        )

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
        return pa.table(
            {
                "token": pa.array((np.array([-1]) if self.shared else rows).astype(np.int32)),
                "candidates": pa.ListArray.from_arrays(list_offsets, pa.array(cand.astype(np.int32))),
                "weights": pa.ListArray.from_arrays(list_offsets, pa.array((cumulative - previous).astype(np.float32))),
            }
        ).replace_schema_metadata({"vocab_size": str(self.vocab_size)})

    @classmethod
    def from_arrow(cls, table) -> SynonymTable:
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
