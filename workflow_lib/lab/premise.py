"""Model classes that meet the theorems' premise by construction, and their U_base(delta) and U_perturb(delta),
exactly, as the sups the paper defines (Definition 1, tex lines 351-379).

Each class is a finite family of next-word laws whose members share one law on a set A of prefixes (A holds the
support) and differ outside A by a constant law each, so a pair's TV at X' is 1[X' outside A] (base) or
P_T(X~ outside A | X') (perturbed) times the members' TV. Each sup over every prefix within delta is attained by one
prefix (`worst_prefixes`; the proof is in `class_sups`). The classes `unseen` and `off-support`, which pairs stay
admissible under which T, and why Assumption UI holds: docs/theory.md, "The theory lab", "Model classes that meet
the premise"; docs/method.md §7, "What the code measures".
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypedDict

import numpy as np

from workflow_lib.data.builtin_corpus import BuiltinGrammar
from workflow_lib.lab import perturbation, prefix_sets

MEMBERS = ("uniform", "unigram", "rarest word")
CLASSES = ("unseen", "off-support")


def member_laws(support_truth: np.ndarray) -> np.ndarray:
    """[3, W] the members' laws where they differ: uniform, the support's average next-word law, and a point mass
    on that law's rarest word (an adversarial member)."""
    unigram = np.asarray(support_truth, dtype=np.float64).mean(0)
    point = np.zeros_like(unigram)
    point[int(np.argmin(unigram))] = 1.0
    return np.stack([np.full_like(unigram, 1.0 / unigram.size), unigram, point])


def max_pairwise_tv(laws: np.ndarray) -> float:
    """The largest TV between two members' laws: the factor every U of a class is a share of."""
    first, second = np.triu_indices(len(laws), k=1)
    return float(0.5 * np.abs(laws[first] - laws[second]).sum(-1).max())


def unseen_share(lex: prefix_sets.Lexicon, prefixes: np.ndarray, q0: str, beta: float, last: int) -> np.ndarray:
    """Exact P_T(X~ holds an unseen word | X) per row: every unseen word survives unless T replaces it, which it
    does with probability beta inside the window (uniform Q0: any word; class replacement: content words, which
    every unseen word is) and never before it."""
    prefixes = lex.check(prefixes)
    inside = np.arange(prefixes.shape[1]) >= prefixes.shape[1] - last
    unseen = ~lex.seen[prefixes]
    replaceable = unseen & inside[None, :]
    if q0 == "synonym":
        replaceable &= lex.content_class[lex.word_class[prefixes]]
    kept_for_sure = (unseen & ~replaceable).any(1)
    return np.where(kept_for_sure, 1.0, 1.0 - beta ** replaceable.sum(1))


def off_support_share(
    grammar: BuiltinGrammar, lex: prefix_sets.Lexicon, prefixes: np.ndarray, q0: str, beta: float, last: int
) -> np.ndarray:
    """Exact P_T(X~ off the support | X) per row, for class replacement at any beta and for any T at beta 0.

    The support is the set of seen-word sequences whose class sequence the grammar's automaton accepts. Class
    replacement keeps every class and draws seen words, so X~ is in the support iff X's class sequence is accepted
    and each of X's u unseen words is replaced: probability beta^u if they all lie in the window, else 0. Uniform
    replacement at beta > 0 is refused: the `off-support` class has no admissible pair under it (`admissible`), so
    its share is never needed."""
    prefixes = lex.check(prefixes)
    if beta == 0:
        return (prefix_sets.support_distance(grammar, lex, prefixes) > 0).astype(np.float64)
    if q0 != "synonym":
        raise ValueError(
            f"off_support_share: no closed form for q0 {q0!r} at beta {beta} (none is needed: no pair "
            "of the off-support class is admissible under it)"
        )
    representative = grammar.representative
    classes_accepted = prefix_sets.support_distance(grammar, lex, representative[lex.word_class[prefixes]]) == 0
    unseen = ~lex.seen[prefixes]
    inside = np.arange(prefixes.shape[1]) >= prefixes.shape[1] - last
    restorable = classes_accepted & ~(unseen & ~inside[None, :]).any(1)
    return 1.0 - np.where(restorable, beta ** unseen.sum(1), 0.0)


def outside_a(grammar: BuiltinGrammar, lex: prefix_sets.Lexicon, cls: str, prefixes: np.ndarray) -> np.ndarray:
    """[n] bool: the prefix lies outside the set A where the class's members agree (their base TV is 1 x spread)."""
    if cls == "unseen":
        return (~lex.seen[lex.check(prefixes)]).any(1)
    if cls == "off-support":
        return prefix_sets.support_distance(grammar, lex, prefixes) > 0
    raise ValueError(f"class must be one of {CLASSES}, not {cls!r}")


def leave_share(
    grammar: BuiltinGrammar, lex: prefix_sets.Lexicon, cls: str, prefixes: np.ndarray, q0: str, beta: float, last: int
) -> np.ndarray:
    """[n] exact P_T(X~ outside A | X): the factor of the perturbed members' TV on each prefix."""
    if cls == "unseen":
        return unseen_share(lex, prefixes, q0, beta, last)
    if cls == "off-support":
        return off_support_share(grammar, lex, prefixes, q0, beta, last)
    raise ValueError(f"class must be one of {CLASSES}, not {cls!r}")


def admissible(
    grammar: BuiltinGrammar, lex: prefix_sets.Lexicon, cls: str, q0: str, beta: float, support_prefix: np.ndarray
) -> bool:
    """Whether two distinct members still agree on EVERY support prefix once perturbed (their share is 0 there).

    `unseen`: yes, Q0 draws only seen words and support prefixes hold none. `off-support`: yes under class
    replacement or beta 0 (`off_support_share`); under uniform replacement at beta > 0, no: the support prefix with
    its last word (inside every window) replaced by some seen word is off the support, and T makes that replacement
    with positive probability. That word is found by trying all of them (an error if none exists)."""
    if cls == "unseen" or q0 == "synonym" or beta == 0:
        return True
    variants = np.repeat(np.asarray(support_prefix, dtype=np.int64)[None, :], lex.n_seen, axis=0)
    variants[:, -1] = np.arange(lex.n_seen)
    if not (prefix_sets.support_distance(grammar, lex, variants) > 0).any():
        raise ValueError(
            "no seen word in the last position takes this support prefix off the support; "
            "the off-support class's admissibility under uniform replacement is undecided"
        )
    return False


def worst_prefixes(
    grammar: BuiltinGrammar, lex: prefix_sets.Lexicon, support_prefix: np.ndarray, deltas: Sequence[int]
) -> np.ndarray:
    """[len(deltas), L] per delta the prefix X'_delta that attains both classes' sups: `support_prefix` with its first
    u = min(delta, L) words replaced by an unseen noun synonym. Every unseen word costs one substitution and
    restoring them gives the support prefix, so d(X'_delta, X) = u exactly (checked)."""
    support_prefix = lex.check(np.asarray(support_prefix)[None, :])[0]
    u = np.minimum(np.asarray(deltas, dtype=np.int64), support_prefix.size)
    worst = np.repeat(support_prefix[None, :], u.size + 1, axis=0)  # row 0 stays the support prefix
    worst[1:][np.arange(support_prefix.size)[None, :] < u[:, None]] = int(np.flatnonzero(~lex.seen)[0])
    distance = prefix_sets.support_distance(grammar, lex, worst)
    if distance[0] != 0:
        raise ValueError(f"worst_prefixes: the prefix is not a support prefix (distance {distance[0]})")
    if (distance[1:] != u).any():
        raise ValueError("worst_prefixes: a worst prefix is not at distance min(delta, L) from the support")
    return worst[1:]


class ClassSups(TypedDict):
    """`class_sups`' result: the two sups per delta (over the spread) and whether distinct pairs are admissible."""

    U_base: np.ndarray
    U_perturb: np.ndarray
    admissible: bool


def class_sups(
    grammar: BuiltinGrammar,
    lex: prefix_sets.Lexicon,
    cls: str,
    q0: str,
    beta: float,
    last: int,
    support_prefix: np.ndarray,
    deltas: Sequence[int],
) -> ClassSups:
    """Per delta, sup over every prefix X' with d(X', X) <= delta of 1[X' outside A] (U_base / spread) and of
    P_T(X~ outside A | X') over admissible pairs (U_perturb / spread; 0 when only a member paired with itself is
    admissible), and whether distinct pairs are admissible. Both sups are attained at X'_delta (`worst_prefixes`):

    - 1[X' outside A] <= 1, and X'_delta (an unseen word, so outside both A's) reaches it for delta >= 1.
    - `unseen`: a prefix within delta holds u' <= min(delta, L) unseen words (each costs one substitution). Its
      share is 1 if one lies where T never replaces it, else 1 - beta^u' (`unseen_share`). X'_delta puts an unseen
      word at position 0, before T's window when l < L (share 1), and otherwise min(delta, L) of them, all
      replaceable (1 - beta^min(delta, L)): at least any X''s share.
    - `off-support` (admissible: class replacement or beta 0): share <= 1, and X'_delta reaches 1 for delta >= 1:
      it starts with a noun where every support class sequence starts with a determiner, and T keeps classes.
    The brute-force sup over every prefix of a tiny grammar is checked against these in tests/lab/test_premise.py."""
    worst = worst_prefixes(grammar, lex, support_prefix, deltas)
    pairs = admissible(grammar, lex, cls, q0, beta, support_prefix)
    share = leave_share(grammar, lex, cls, worst, q0, beta, last) if pairs else np.zeros(len(worst))
    return {"U_base": outside_a(grammar, lex, cls, worst).astype(np.float64), "U_perturb": share, "admissible": pairs}


def describe_worst(delta: int, last: int, length: int) -> str:
    """Where X'_delta's unseen words lie, in words, for the report."""
    u = min(delta, length)
    if u == 0:
        return "a support prefix"
    words = "an unseen word at position 0" if u == 1 else f"unseen words at positions 0-{u - 1}"
    if last >= length:
        return words + ", inside T's window"
    return words + (", before T's window" if u <= length - last else "; position 0 lies before T's window")


def check_shares_against_draws(
    grammar: BuiltinGrammar,
    lex: prefix_sets.Lexicon,
    cls: str,
    prefixes: np.ndarray,
    share: np.ndarray,
    q0: str,
    beta: float,
    last: int,
    keys: np.ndarray,
    draws: int,
) -> None:
    """An internal check of the closed forms against the perturber itself: over `draws` keyed draws of T, a row
    whose exact share is 0 never leaves A and a row whose share is 1 always does. A failure is a bug."""
    certain = (share <= 0) | (share >= 1)
    rows = np.flatnonzero(certain)
    if not rows.size:
        return
    for draw in range(draws):
        drawn = perturbation.perturb_words(
            lex, prefixes[rows], q0, beta, last, keys[rows], draw, weights_source=grammar
        )
        wrong = outside_a(grammar, lex, cls, drawn) != (share[rows] >= 1)
        if wrong.any():
            row = int(rows[np.argmax(wrong)])
            raise ValueError(
                f"premise class {cls}, q0 {q0}, beta {beta}, l {last}: row {row} has exact share "
                f"{share[row]:.0f} of leaving A, but draw {draw} disagrees; the closed form is wrong"
            )
