"""The array operations the perturber needs, on numpy (data stage) and torch (sampling, any device), and
counter-based randomness (splitmix64, `KeyedRandom`) for torch.
"""

from __future__ import annotations

import numpy as np

# ---- array backends -----------------------------------------------------------------------------------------


class _Numpy:
    """numpy arrays and a numpy Generator."""

    def __init__(self, rng: np.random.Generator | None = None):
        self.rng = rng

    def rand(self, n: int) -> np.ndarray:
        assert self.rng is not None, "random draws need a numpy Generator"
        return self.rng.random(n)

    def rand_at(self, picked: np.ndarray, purpose: int) -> np.ndarray:
        """Uniforms for the picked tokens (one draw of the stream each; `purpose` only matters for keyed draws)."""
        assert self.rng is not None, "random draws need a numpy Generator"
        return self.rng.random(len(picked))

    def select(self, n: int, p: float) -> np.ndarray:
        """Sorted positions, each of range(n) included independently with probability p. The gaps between
        successive Bernoulli(p) successes are Geometric(p), so the positions are a cumulative sum of
        geometric draws: O(selected) work instead of O(n)."""
        if p >= 1.0:
            return np.arange(n, dtype=np.int64)
        assert self.rng is not None, "random draws need a numpy Generator"
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
