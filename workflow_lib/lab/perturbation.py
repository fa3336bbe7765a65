"""The lab's T on words: keyed replacement of the last `last` words with probability beta, and its constants.

Randomness is a numpy twin of perturb.backends.splitmix64 (tested bit-identical), so the grammar side of the lab
imports no torch. `proposition_constants` are the paper's alpha and C as stated, `exact_constants` and
`row_tv_to_base` those of the T that runs; `exact_tv_of_T` checks them by enumeration on tiny vocabularies.
"""

from __future__ import annotations

from math import comb, factorial

import numpy as np

from workflow_lib.data.builtin_corpus import BuiltinGrammar
from workflow_lib.lab.prefix_sets import Lexicon, _draw_in_class

Q0S = ("uniform", "synonym")
SELECT, DRAW = 0, 1  # purposes of the keyed uniforms: replace this position?  which word replaces it?
_GOLDEN, _MIX1, _MIX2 = np.uint64(0x9E3779B97F4A7C15), np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)


def splitmix64(values: np.ndarray | np.integer) -> np.ndarray:
    """The splitmix64 finaliser on uint64 with wrapping arithmetic; bit-identical to `perturb.backends.splitmix64`
    (its torch int64 twin), so both sides of the lab can share keys."""
    with np.errstate(over="ignore"):
        x = np.asarray(values).astype(np.uint64) + _GOLDEN
        x = (x ^ (x >> np.uint64(30))) * _MIX1
        x = (x ^ (x >> np.uint64(27))) * _MIX2
        return x ^ (x >> np.uint64(31))


def keys_for(seed: int, base: np.ndarray) -> np.ndarray:
    """uint64 key per base index: a delta-corrupted prefix and its base share the key, hence T's replacement
    decisions and draws (common random numbers: the coupling the proof of the Proposition uses)."""
    with np.errstate(over="ignore"):
        return splitmix64(splitmix64(np.uint64(seed)) + np.asarray(base).astype(np.uint64))


def keyed_uniforms(keys: np.ndarray, draw: int, from_end: np.ndarray, purpose: int) -> np.ndarray:
    """[m, w] uniforms in [0, 1), a pure function of (key, draw, position counted from the end, purpose)."""
    with np.errstate(over="ignore"):
        stream = splitmix64(
            splitmix64(splitmix64(np.asarray(keys).astype(np.uint64)) + np.uint64(draw)) + np.uint64(purpose)
        )
        bits = splitmix64(stream[:, None] + np.asarray(from_end).astype(np.uint64)[None, :])
    return (bits >> np.uint64(11)).astype(np.float64) / float(1 << 53)


def perturb_words(
    lex: Lexicon,
    prefixes: np.ndarray,
    q0: str,
    beta: float,
    last: int,
    keys: np.ndarray,
    draw: int,
    weights_source: BuiltinGrammar | None = None,
) -> np.ndarray:
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
    """(alpha, C_{T,delta}) as the paper's Proposition states them for replacing each of the last `last` tokens with
    probability beta by a Q0 draw: (min((1-beta) last, 1), min((1-beta) delta, 1)). Its proof couples all L positions
    (paper lines 1649-1693), so these hold for last = L, or for prefixes that differ inside the window only;
    `exact_constants` gives the values for the T that runs."""
    if not 0 <= beta <= 1 or last < 0 or delta < 0:
        raise ValueError(f"need beta in [0, 1], last >= 0 and delta >= 0, not {beta}, {last}, {delta}")
    return min((1 - beta) * last, 1.0), min((1 - beta) * delta, 1.0)


def _multinomials(m: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Every (ka, kb, ko) with ka + kb + ko = m, and its multinomial coefficient."""
    k = np.array([(a, b, m - a - b) for a in range(m + 1) for b in range(m + 1 - a)], dtype=np.int64).reshape(-1, 3)
    coefficient = np.array([factorial(m) // (factorial(a) * factorial(b) * factorial(c)) for a, b, c in k], dtype=float)
    return k[:, 0], k[:, 1], k[:, 2], coefficient


def uniform_replacement_tv(beta: float, n_words: int, seen_changes: int, unseen_changes: int = 0) -> float:
    """Exact TV(T(.|X), T(.|X')) for uniform-Q0 replacement (probability beta, Q0 uniform on `n_words` seen words)
    of two prefixes that differ inside T's window only: at `seen_changes` positions both words are seen (in Q0's
    support), at `unseen_changes` positions X holds a seen word and X' an unseen one.

    T is a product over positions and the positions where X and X' agree have the same law, so the TV is that of
    the differing positions: 1 - sum over outcomes of min(P, P'), summed over how many positions show X's word (a),
    X''s word (b) or another one. An unseen word is never drawn from Q0, so a position that shows it has P = 0. With
    only unseen changes this is the coupling's value 1 - beta^m; with seen ones it is smaller (0.025, 0.0489 and
    0.0934 for m = 1, 2, 4 at beta 0.975 and 93 words), and the Proposition's (1 - beta) m is an upper bound."""
    if not 0 <= beta <= 1 or n_words < 2 or seen_changes < 0 or unseen_changes < 0:
        raise ValueError(
            f"need beta in [0, 1], n_words >= 2, changes >= 0; not {beta}, {n_words}, {seen_changes}, {unseen_changes}"
        )
    q = beta / n_words
    pa, pb = 1 - beta + q, q  # X's word under X's law, and under X''s law (it is one of Q0's words there)
    ka, kb, ko, coefficient = _multinomials(seen_changes)
    rest = ((n_words - 2) * q) ** ko
    p, p_prime = pa**ka * pb**kb * rest, pb**ka * pa**kb * rest
    # An unseen change shows X's word (P = pa, P' = q) or another seen word (q each); showing the unseen word has
    # P = 0 and adds nothing to the overlap. ja of its positions show X's word, the rest another.
    ja = np.arange(unseen_changes + 1)
    unseen_coefficient = np.array([comb(unseen_changes, j) for j in ja], dtype=float)
    others = ((n_words - 1) * q) ** (unseen_changes - ja)
    u_p, u_prime = pa**ja * others, q**ja * others
    overlap = (
        coefficient[:, None]
        * unseen_coefficient[None, :]
        * np.minimum(p[:, None] * u_p[None, :], p_prime[:, None] * u_prime[None, :])
    ).sum()
    return float(max(0.0, 1.0 - overlap))


def exact_constants(q0: str, beta: float, last: int, length: int, delta: int) -> tuple[float, float]:
    """alpha(T) and C_{T,delta} = eta_T(delta) (paper lines 1069-1085: sup over X' within delta of the support of
    the inf over support prefixes X of TV(T(.|X), T(.|X'))) for the T that runs, over all prefixes of `length`
    words of the lexicon (which holds unseen words).

    - q0 "uniform", last < length: two prefixes that differ before the window have disjoint T-laws, so alpha = 1,
      and an unseen word before the window is never replaced, so C = 1 for every delta >= 1.
    - q0 "uniform", last = length: the sup is attained by unseen words (never drawn from Q0): alpha = 1 - beta^L
      and C = 1 - beta^delta, the coupling's value (below the Proposition's (1 - beta) L and (1 - beta) delta).
    - q0 "synonym" (class replacement of content words): a changed function word, or a class sequence the
      support does not hold (a held-out composition), is never restored: alpha = 1 and C = 1 for delta >= 1.
    C = 0 at delta 0."""
    if q0 not in Q0S:
        raise ValueError(f"q0 must be one of {Q0S}, not {q0!r}")
    if not 0 <= beta <= 1 or not 1 <= last or length < 1 or delta < 0:
        raise ValueError(
            f"need beta in [0, 1], last >= 1, length >= 1 and delta >= 0; not {beta}, {last}, {length}, {delta}"
        )
    if q0 == "uniform" and last >= length:
        return 1.0 - beta**length, (1.0 - beta ** min(delta, length)) if delta else 0.0
    return 1.0, 1.0 if delta else 0.0


def contraction_betas(length: int) -> tuple[float, float]:
    """(exact, Proposition's): the beta above which uniform replacement of all `length` words has alpha(T) < 1/2,
    where the Contractivity bound 2 alpha U_base^inf first falls below U_base^inf. Exact: 1 - beta^L = 1/2, so
    beta = 2^(-1/L) (the inverse of `exact_constants`); by the Proposition's bound: (1 - beta) L = 1/2, so
    beta = 1 - 1/(2L). With l < L, alpha = 1 at every beta."""
    if length < 1:
        raise ValueError(f"length must be >= 1, not {length}")
    return 0.5 ** (1.0 / length), 1.0 - 1.0 / (2 * length)


def row_tv_to_base(
    lex: Lexicon, prefixes: np.ndarray, bases: np.ndarray, q0: str, beta: float, last: int
) -> tuple[np.ndarray, np.ndarray]:
    """Per row, TV(T(.|X'), T(.|X0)) to its own support prefix X0, and whether that value is exact.

    Exact for q0 "uniform" (`uniform_replacement_tv`) and for class replacement at beta 1 (0 when every change is
    a content word inside the window that keeps its class, else 1); 1 when a change lies before the window. For
    class replacement at beta < 1 the coupling's 1 - beta^m is given, an upper bound (marked not exact)."""
    prefixes, bases = lex.check(prefixes), lex.check(bases)
    if prefixes.shape != bases.shape:
        raise ValueError(f"prefixes {prefixes.shape} and bases {bases.shape} must have one base per row")
    length = prefixes.shape[1]
    changed = prefixes != bases
    outside = changed[:, : max(length - last, 0)].any(1)
    tv, exact = np.zeros(len(prefixes)), np.ones(len(prefixes), dtype=bool)
    if q0 == "uniform":
        unseen = (changed & ~lex.seen[prefixes]).sum(1)
        seen = changed.sum(1) - unseen
        pairs = {(int(s), int(u)) for s, u in zip(seen, unseen)}
        value = {pair: uniform_replacement_tv(beta, lex.n_seen, *pair) for pair in pairs}
        tv = np.array([value[(int(s), int(u))] for s, u in zip(seen, unseen)], dtype=float)
    else:
        same_class = lex.word_class[prefixes] == lex.word_class[bases]
        restored = (~changed | (same_class & lex.content_class[lex.word_class[bases]])).all(1)
        if beta >= 1:
            tv = np.where(restored, 0.0, 1.0)
        else:
            tv = np.where(restored, 1.0 - beta ** changed.sum(1), 1.0)
            exact = ~restored | (changed.sum(1) == 0)
    tv = np.where(outside, 1.0, tv)
    return tv, exact | outside


def exact_tv_of_T(
    vocab_size: int, beta: float, x: tuple[int, ...], x_prime: tuple[int, ...], q0_words: int | None = None
) -> float:
    """Exact TV(T(.|x), T(.|x')) for uniform-Q0 replacement of every position with probability beta, by
    enumerating all vocab_size^l outcomes (T is a product over positions). Q0 is uniform on the first `q0_words`
    ids (all by default); the others are unseen words, never drawn. For checking the closed forms on tiny cases;
    exponential in l."""
    if len(x) != len(x_prime):
        raise ValueError("x and x_prime must have the same length")
    q0_words = vocab_size if q0_words is None else q0_words

    def law(seq: tuple[int, ...]) -> np.ndarray:
        joint = np.ones(())
        for token in seq:
            marginal = np.zeros(vocab_size)
            marginal[:q0_words] = beta / q0_words
            marginal[token] += 1 - beta
            joint = np.multiply.outer(joint, marginal)
        return joint

    return 0.5 * float(np.abs(law(tuple(x)) - law(tuple(x_prime))).sum())
