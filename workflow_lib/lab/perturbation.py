"""The lab's T on words: keyed replacement of the last `last` words with probability beta, and its constants.

Randomness is a numpy twin of perturb.backends.splitmix64 (tested bit-identical), so the grammar side of the lab
imports no torch. `proposition_constants` are the paper's alpha and C; `exact_tv_of_T` checks them by
enumeration on tiny vocabularies.
"""

from __future__ import annotations

import numpy as np

from workflow_lib.data.builtin_corpus import BuiltinGrammar
from workflow_lib.lab.prefix_sets import FAMILIES, Lexicon, _draw_in_class

Q0S = ("uniform", "synonym")
SELECT, DRAW = 0, 1  # purposes of the keyed uniforms: replace this position?  which word replaces it?
_GOLDEN, _MIX1, _MIX2 = np.uint64(0x9E3779B97F4A7C15), np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)


def splitmix64(x: np.ndarray) -> np.ndarray:
    """The splitmix64 finaliser on uint64 with wrapping arithmetic; bit-identical to `perturb.backends.splitmix64`
    (its torch int64 twin), so both sides of the lab can share keys."""
    with np.errstate(over="ignore"):
        x = np.asarray(x).astype(np.uint64) + _GOLDEN
        x = (x ^ (x >> np.uint64(30))) * _MIX1
        x = (x ^ (x >> np.uint64(27))) * _MIX2
        return x ^ (x >> np.uint64(31))


def keys_for(seed: int, base: np.ndarray) -> np.ndarray:
    """uint64 key per base index: a delta-corrupted prefix and its base share the key, hence T's draws."""
    with np.errstate(over="ignore"):
        return splitmix64(splitmix64(np.uint64(seed)) + np.asarray(base).astype(np.uint64))


def keyed_uniforms(keys: np.ndarray, draw: int, from_end: np.ndarray, purpose: int) -> np.ndarray:
    """[m, w] uniforms in [0, 1), a pure function of (key, draw, position counted from the end, purpose)."""
    with np.errstate(over="ignore"):
        stream = splitmix64(splitmix64(splitmix64(np.asarray(keys).astype(np.uint64)) + np.uint64(draw))
                            + np.uint64(purpose))
        bits = splitmix64(stream[:, None] + np.asarray(from_end).astype(np.uint64)[None, :])
    return (bits >> np.uint64(11)).astype(np.float64) / float(1 << 53)


def perturb_words(lex: Lexicon, prefixes: np.ndarray, q0: str, beta: float, last: int, keys: np.ndarray,
                  draw: int, weights_source: BuiltinGrammar | None = None) -> np.ndarray:
    """One draw X~ ~ T(.|X) per row: each of the last `last` words is, with probability beta, replaced by a
    draw from Q0. q0 "uniform": any position, a uniform seen word (the Proposition's T). q0 "synonym": only
    content words, by a seen word of the same class with the grammar's within-class weights
    (`weights_source`), which maps unseen synonyms back onto the support."""
    prefixes = lex.check(prefixes)
    if q0 not in Q0S:
        raise ValueError(f"q0 must be one of {Q0S}, not {q0!r}")
    if not 0 <= beta <= 1:
        raise ValueError(f"beta must be in [0, 1], not {beta}")
    keys = np.asarray(keys)
    if keys.shape != (len(prefixes),):
        raise ValueError(f"keys must be one per prefix, shape ({len(prefixes)},), not {keys.shape}")
    length = prefixes.shape[1]
    start = max(length - last, 0)
    from_end = length - 1 - np.arange(start, length)
    window = prefixes[:, start:]
    u_draw = keyed_uniforms(keys, draw, from_end, DRAW)
    if q0 == "uniform":
        eligible = np.ones(window.shape, dtype=bool)
        new = np.minimum((u_draw * lex.n_seen).astype(np.int64), lex.n_seen - 1)
    else:
        if weights_source is None:
            raise ValueError("q0='synonym' needs weights_source, the grammar whose within-class weights Q0 uses")
        cls = lex.word_class[window]
        eligible = lex.content_class[cls]
        new = _draw_in_class(weights_source, cls, u_draw)
    replace = eligible & (keyed_uniforms(keys, draw, from_end, SELECT) < beta)
    out = prefixes.copy()
    out[:, start:] = np.where(replace, new, window)
    return out


def proposition_constants(beta: float, last: int, delta: int) -> tuple[float, float]:
    """(alpha, C_{T,delta}) of the Proposition for replacing each of the last `last` tokens with probability
    beta by a Q0 draw: (min((1-beta) last, 1), min((1-beta) delta, 1))."""
    if not 0 <= beta <= 1 or last < 0 or delta < 0:
        raise ValueError(f"need beta in [0, 1], last >= 0 and delta >= 0, not {beta}, {last}, {delta}")
    return min((1 - beta) * last, 1.0), min((1 - beta) * delta, 1.0)


def bound_constants(q0: str, family: str, beta: float, last: int, delta: int) -> tuple[float, float]:
    """(alpha, C) entering the bounds for this perturber on this family. Uniform Q0: the Proposition's.
    Synonym Q0: alpha = 1 (prefixes of different classes never meet); C = min((1-beta) delta, 1) on the
    synonym family (changed words keep their class, so the coupling applies) and 1 on the composition family
    (the class changed and the perturber never restores it); C = 0 at delta 0."""
    if q0 not in Q0S or family not in FAMILIES:
        raise ValueError(f"need q0 in {Q0S} and family in {FAMILIES}, not {q0!r}, {family!r}")
    alpha, coupled = proposition_constants(beta, last, delta)
    if q0 == "uniform":
        return alpha, coupled
    if delta == 0:
        return 1.0, 0.0
    return 1.0, coupled if family == "synonym" else 1.0


def exact_tv_of_T(vocab_size: int, beta: float, x: tuple[int, ...], x_prime: tuple[int, ...]) -> float:
    """Exact TV(T(.|x), T(.|x')) for uniform-Q0 replacement of every position with probability beta, by
    enumerating all vocab_size^l outcomes (T is a product over positions). For checking the Proposition on
    tiny cases; exponential in l."""
    if len(x) != len(x_prime):
        raise ValueError("x and x_prime must have the same length")

    def law(seq: tuple[int, ...]) -> np.ndarray:
        joint = np.ones(())
        for token in seq:
            marginal = np.full(vocab_size, beta / vocab_size)
            marginal[token] += 1 - beta
            joint = np.multiply.outer(joint, marginal)
        return joint

    return 0.5 * float(np.abs(law(tuple(x)) - law(tuple(x_prime))).sum())
