"""The theory lab, grammar side: prefixes at an exact Hamming distance delta from the training support, with their
true next-word laws, on the builtin grammar.

The paper's bounds speak of the extrapolation uncertainty U(delta); real corpora give neither the distance nor the
true law, the builtin grammar gives both exactly. Everything here is at the word level (a token of the theory is a
grammar word) and pure numpy; the lab's T is lab.perturbation, the model side lab.laws. Two families, each prefix
paired with the support prefix X0 it came from (`delta_sets`): `composition` (held-out class combinations, which no
class-preserving T restores) and `synonym` (unseen same-class words, where SP_perturb holds under class
replacement). docs/theory.md, "The theory lab", "What the lab computes"; docs/method.md §7.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import product
from typing import cast

import numpy as np

from workflow_lib.data.builtin_corpus import BuiltinGrammar, pseudo_words

FAMILIES = ("composition", "synonym")
_LEXICON_STREAM, _BASE_STREAM, _DELTA_STREAM = 7_001, 7_002, 7_003
_MIN_SENTENCE = 6  # det noun verb det noun .
_FAR = 1 << 20  # cost of an unreachable automaton state; paths cost at most a prefix length


@dataclass(frozen=True, eq=False)
class Lexicon:
    """The grammar's words (ids 0..n_seen-1, the grammar's own ids) then one unseen synonym per content class."""

    words: tuple[str, ...]
    word_class: np.ndarray
    seen: np.ndarray
    n_seen: int

    @property
    def content_class(self) -> np.ndarray:
        """[n_classes] bool: noun, verb, adjective and adverb classes, exactly those given an unseen synonym."""
        mask = np.zeros(int(self.word_class.max()) + 1, dtype=bool)
        mask[self.word_class[~self.seen]] = True
        return mask

    def check(self, prefixes: np.ndarray) -> np.ndarray:
        """The prefixes as an int64 [n, L] array of lexicon ids, or a ValueError saying what is wrong."""
        prefixes = np.asarray(prefixes, dtype=np.int64)
        if prefixes.ndim != 2:
            raise ValueError(f"prefixes must be [n, L], not shape {prefixes.shape}")
        if prefixes.size and (prefixes.min() < 0 or prefixes.max() >= len(self.words)):
            raise ValueError(f"prefixes must hold lexicon ids in [0, {len(self.words)})")
        return prefixes


def lexicon(grammar: BuiltinGrammar, seed: int) -> Lexicon:
    """The grammar's vocabulary plus one new pseudo-word per content class: words the training law never
    emits but whose true role (by the grammar's synonymy) is their class's."""
    classes = np.arange(grammar.noun0, grammar.end_class)  # nouns, verbs, adjectives, adverbs
    rng = np.random.default_rng(np.random.SeedSequence([seed, _LEXICON_STREAM]))
    known = set(grammar.vocabulary)
    # n + |V| distinct candidates: at most |V| collide with the grammar's words, so n survive
    new = [w for w in pseudo_words(rng, len(classes) + len(known)) if w not in known][: len(classes)]
    n_seen = len(grammar.vocabulary)
    return Lexicon(
        words=tuple(grammar.vocabulary) + tuple(new),
        word_class=np.concatenate([grammar.word_class, classes]).astype(np.int64),
        seen=np.arange(n_seen + len(classes)) < n_seen,
        n_seen=n_seen,
    )


def _support_automaton(grammar: BuiltinGrammar) -> tuple[int, np.ndarray, np.ndarray, np.ndarray]:
    """Class-level automaton of the in-support language: (n_states, edge source, edge target, edge class).
    State 0 is the sentence (and document) start. Only partial compositions with an in-support completion
    are states, and an optional slot of probability 0 (or a skip of probability 0) has no edge, as in
    `BuiltinGrammar._parse`, so every state can be completed and every path has positive probability."""
    nn, nv = grammar.n_noun_classes, grammar.n_verb_classes
    mass = np.zeros((nn, nv, nn), dtype=bool)
    mass[tuple(grammar.in_support.T)] = True
    adj_ok, bare_ok = grammar.p_adj > 0, grammar.p_adj < 1
    adv_ok, end_ok = grammar.p_adv > 0, grammar.p_adv < 1
    adjs = range(grammar.adj0, grammar.adv_class)
    states: dict[object, int] = {"start": 0}
    edges: list[tuple[int, int, int | np.integer]] = []

    def edge(src: object, dst: object, cls: int | np.integer) -> None:
        edges.append((states.setdefault(src, len(states)), states.setdefault(dst, len(states)), cls))

    edge("start", "det0", 0)
    for a in adjs if adj_ok else ():
        edge("det0", "adj1", a)
    for s in np.flatnonzero(mass.any((1, 2))):
        if bare_ok:
            edge("det0", ("subj", s), grammar.noun0 + s)
        if adj_ok:
            edge("adj1", ("subj", s), grammar.noun0 + s)
    for s, v in np.argwhere(mass.any(2)):
        edge(("subj", s), ("verb", s, v), grammar.verb0 + v)
        edge(("verb", s, v), ("det4", s, v), 0)
        for a in adjs if adj_ok else ():
            edge(("det4", s, v), ("adj5", s, v), a)
        for o in np.flatnonzero(mass[s, v]):
            if bare_ok:
                edge(("det4", s, v), "obj6", grammar.noun0 + o)
            if adj_ok:
                edge(("adj5", s, v), "obj6", grammar.noun0 + o)
    if adv_ok:
        edge("obj6", "adv7", grammar.adv_class)
        edge("adv7", "start", grammar.end_class)
    if end_ok:
        edge("obj6", "start", grammar.end_class)
    src, dst, cls = np.array(edges, dtype=np.int64).T
    return len(states), src, dst, cls


def support_distance(grammar: BuiltinGrammar, lex: Lexicon, prefixes: np.ndarray) -> np.ndarray:
    """[n] exact minimum Hamming distance d(X', X) from each document-start prefix [n, L] to the length-L
    word sequences of positive in-support probability: a min-cost path over the class-level automaton,
    where reading class c at a position costs 0 if the word there is seen and of class c, else 1."""
    prefixes = lex.check(prefixes)
    n, length = prefixes.shape
    n_states, src, dst, cls = _support_automaton(grammar)
    order = np.argsort(dst, kind="stable")
    src, dst, cls = src[order], dst[order], cls[order]
    targets, first_edge = np.unique(dst, return_index=True)
    cost = np.full((n_states, n), _FAR, dtype=np.int32)  # state-major: edge gathers copy whole rows
    cost[0] = 0
    columns = np.arange(n)
    n_classes = int(lex.word_class.max()) + 1
    for t in range(length):
        word = prefixes[:, t]
        substitute = np.ones((n_classes, n), dtype=np.int32)
        keep = lex.seen[word]
        substitute[lex.word_class[word[keep]], columns[keep]] = 0
        via_edge = cost[src] + substitute[cls]  # [n_edges, n]
        cost = np.full((n_states, n), _FAR, dtype=np.int32)
        cost[targets] = np.minimum.reduceat(via_edge, first_edge, axis=0)
    best = cost.min(axis=0).astype(np.int64)
    assert (best <= length).all(), "some prefix has no path: the automaton lost the support"
    return best


def base_prefixes(grammar: BuiltinGrammar, n: int, length: int, seed: int) -> np.ndarray:
    """[n, length] the first `length` words of n in-support documents from a stream of their own (not the
    study's test split), so the cut lands at varied template slots. All lie in the support (distance 0)."""
    sentences = -(-length // _MIN_SENTENCE) + 1
    stream = int(np.random.SeedSequence([seed, _BASE_STREAM]).generate_state(1)[0])
    docs = grammar.encode(grammar.generate("test", n, sentences_per_doc=sentences, seed=stream))
    base = np.stack([doc[:length] for doc in docs]) if n else np.zeros((0, length), dtype=np.int64)
    if (support_distance(grammar, lexicon(grammar, seed), base) != 0).any():
        raise RuntimeError("a generated in-support document is off the support: grammar and automaton disagree")
    return base


def _choose_positions(rng: np.random.Generator, eligible: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """(ok [r], positions [r, k]): k distinct uniformly chosen eligible columns per row; ok where a row has k."""
    scores = np.where(eligible, rng.random(eligible.shape), np.inf)
    return eligible.sum(axis=1) >= k, np.argsort(scores, axis=1)[:, :k]


def _draw_in_class(grammar: BuiltinGrammar, classes: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Seen word ids of the given classes, drawn with the grammar's within-class weights from uniforms u. A word held
    out of the subject role (data.builtin_corpus, context_fraction) is never drawn: the lab's rows and T keep to words
    that may fill every slot of their class, which its class-level automaton (support_distance) assumes."""
    cum = np.cumsum(np.where(grammar.held_subject, 0.0, grammar.word_weight))
    first = np.searchsorted(grammar.word_class, classes, side="left")
    last = np.searchsorted(grammar.word_class, classes, side="right") - 1
    before = np.where(first > 0, cum[first - 1], 0.0)
    picked = np.searchsorted(cum, before + u * (cum[last] - before), side="right")
    return np.clip(picked, first, last)


def _sentence_slots(grammar: BuiltinGrammar, base: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(slot_position [r, S, 3], current [r]): the position of each sentence's subject, verb and object
    (-1 where absent) and the index of the unfinished last sentence (empty after a final "."). A sentence is
    the words up to and including a "."; rows must follow the template, as in-support prefixes do."""
    cls = grammar.word_class[base]
    is_end = cls == grammar.end_class
    is_noun = (cls >= grammar.noun0) & (cls < grammar.verb0)
    is_verb = (cls >= grammar.verb0) & (cls < grammar.adj0)
    sentence = np.cumsum(is_end, axis=1) - is_end
    # every finished sentence holds one verb: a noun is an object iff more verbs than "." precede it
    after_verb = np.cumsum(is_verb, axis=1) > sentence
    n_sentences = base.shape[1] // _MIN_SENTENCE + 1  # at most L // 6 "." close sentences, then the unfinished one
    slot_position = np.full((len(base), n_sentences, 3), -1, dtype=np.int64)
    for slot, at in enumerate((is_noun & ~after_verb, is_verb, is_noun & after_verb)):
        row, col = np.nonzero(at)
        slot_position[row, sentence[row, col], slot] = col
    return slot_position, is_end.sum(axis=1)


def _has_completion(mass: np.ndarray, comp: np.ndarray, present: np.ndarray) -> np.ndarray:
    """Whether partial compositions comp [..., 3] (subject, verb, object class index within their kind, read
    where present [..., 3]) have a completion in mass [nn, nv, nn]: where a law's next-word law is defined."""
    s, v, o = np.moveaxis(comp, -1, 0)
    return np.select(
        [present[..., 2], present[..., 1], present[..., 0]],
        [mass[s, v, o], cast(np.ndarray, mass.any(2))[s, v], cast(np.ndarray, mass.any((1, 2)))[s]],
        default=True,
    )


def _composition_candidates(
    grammar: BuiltinGrammar, base: np.ndarray, window: np.ndarray, delta: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """(ok [r], candidates [r, L]): in each of delta distinct sentences of an in-support row, one noun or
    verb inside the window moved to another class of its kind so that the sentence's (partial) composition
    has no in-support completion; in the unfinished last sentence the new one keeps an ood completion, so
    the true law stays defined. Sentences, then each one's change, are drawn uniformly among those that
    allow one; ok where a row has delta such sentences.

    Each broken sentence costs one substitution to repair (undo its change) and sentences are independent,
    so the candidate sits at distance delta unless re-segmenting across "." is cheaper: callers verify."""
    n_noun, n_verb = grammar.n_noun_classes, grammar.n_verb_classes
    in_mass, ood_mass = (np.zeros((n_noun, n_verb, n_noun), dtype=bool) for _ in range(2))
    in_mass[tuple(grammar.in_support.T)] = True
    ood_mass[tuple(grammar.out_of_support.T)] = True
    slot_position, current = _sentence_slots(grammar, base)  # [r, S, 3], [r]
    n_rows, n_sentences = slot_position.shape[:2]
    rows = np.arange(n_rows)[:, None, None]
    present = slot_position >= 0
    column = np.maximum(slot_position, 0)
    first_class = np.array([grammar.noun0, grammar.verb0, grammar.noun0])
    comp = np.where(present, grammar.word_class[base[rows, column]] - first_class, 0)
    changeable = present & window[rows, column]
    is_current = np.arange(n_sentences) == current[:, None]  # [r, S]
    option_parts: list[np.ndarray] = []
    option_slot: list[int] = []
    option_class: list[int] = []
    for slot, count in enumerate((n_noun, n_verb, n_noun)):
        new = np.repeat(comp[:, :, None, :], count, axis=2)  # [r, S, count, 3]: the slot set to each class
        new[..., slot] = np.arange(count)
        seen_part = present[:, :, None, :]
        option_parts.append(
            changeable[..., slot, None]
            & (new[..., slot] != comp[..., slot, None])
            & ~_has_completion(in_mass, new, seen_part)
            & (~is_current[..., None] | _has_completion(ood_mass, new, seen_part))
        )
        option_slot += [slot] * count
        option_class += (first_class[slot] + np.arange(count)).tolist()
    options = np.concatenate(option_parts, axis=2)  # [r, S, n_options]
    ok, sentences = _choose_positions(rng, cast(np.ndarray, options.any(axis=2)), delta)  # [r], [r, delta]
    picks = np.argmin(np.where(options, rng.random(options.shape), np.inf), axis=2)  # [r, S]
    ok_rows, sentences = np.flatnonzero(ok)[:, None], sentences[ok]
    chosen = picks[ok_rows, sentences]  # [m, delta] option index of each chosen sentence
    positions = slot_position[ok_rows, sentences, np.array(option_slot)[chosen]]
    out = base.copy()
    out[ok_rows, positions] = _draw_in_class(grammar, np.array(option_class)[chosen], rng.random(chosen.shape))
    return ok, out


def delta_sets(
    grammar: BuiltinGrammar, lex: Lexicon, base: np.ndarray, deltas: list[int], last: int, seed: int, tries: int = 32
) -> list[dict]:
    """Prefixes at exact distance delta from the support, per family and delta: dicts with "family",
    "delta", "prefixes" [m, L] and "base" [m] (row of `base` each came from). `base` must be in the support
    (distance 0, as from `base_prefixes`). Changes lie in the last `last` positions, delta of them per row.
    Delta 0 is the base itself; a base row with no valid corruption is left out (m <= n).

    "composition" breaks delta distinct sentences with one change each (`_composition_candidates`): a row
    needs delta sentences that one noun/verb change inside the window can break (a sentence of which only
    the subject is read, or whose one-change neighbours are all in support, cannot be). Each row gets `tries`
    independent draws and keeps the first whose `support_distance` is exactly delta; the others are dropped.
    The truth (`truth`, family "composition") is defined on every row: an unchanged last sentence keeps its
    in-support law, a broken one has an ood completion."""
    base = lex.check(base)
    n, length = base.shape
    if (support_distance(grammar, lex, base) != 0).any():
        raise ValueError("base prefixes must be in the support (distance 0), e.g. from base_prefixes")
    window = np.broadcast_to(np.arange(length) >= length - last, base.shape)
    content = lex.content_class[lex.word_class[base]]
    unseen_of_class = np.full(len(lex.content_class), -1, dtype=np.int64)
    unseen_of_class[lex.word_class[~lex.seen]] = np.flatnonzero(~lex.seen)
    sets = []
    for family, delta in product(FAMILIES, deltas):
        if delta < 0:
            raise ValueError(f"deltas must be >= 0, not {delta}")
        rng = np.random.default_rng(np.random.SeedSequence([seed, _DELTA_STREAM, FAMILIES.index(family), delta]))
        if delta == 0:
            prefixes, rows = base.copy(), np.arange(n)
        elif family == "composition":
            tiled = np.repeat(base, tries, axis=0)  # [n * tries, L], row i * tries + j = try j of base i
            ok, candidates = _composition_candidates(grammar, tiled, np.repeat(window, tries, axis=0), delta, rng)
            ok, candidates = ok.reshape(n, tries), candidates.reshape(n, tries, length)
            kept_try = np.full(n, -1)
            for attempt in range(tries):  # verify lazily: a constructed candidate is almost always exact
                todo = np.flatnonzero((kept_try < 0) & ok[:, attempt])
                if todo.size:
                    exact = support_distance(grammar, lex, candidates[todo, attempt]) == delta
                    kept_try[todo[exact]] = attempt
            rows = np.flatnonzero(kept_try >= 0)
            prefixes = candidates[rows, kept_try[rows]]
        else:
            ok, pos = _choose_positions(rng, window & content, delta)
            rows = np.flatnonzero(ok)
            prefixes = base[rows].copy()
            chosen = np.take_along_axis(prefixes, pos[rows], axis=1)
            np.put_along_axis(prefixes, pos[rows], unseen_of_class[lex.word_class[chosen]], axis=1)
            if (support_distance(grammar, lex, prefixes) != delta).any():
                raise RuntimeError(f"synonym prefixes at delta {delta} are not at distance {delta}")
        sets.append({"family": family, "delta": delta, "prefixes": prefixes, "base": rows.astype(np.int64)})
    return sets


def truth(grammar: BuiltinGrammar, lex: Lexicon, prefixes: np.ndarray, family: str) -> np.ndarray:
    """[m, W] the true next-word law over the grammar's words after each prefix. An unseen word plays its
    class's role, so it is read as a seen class-mate. The in-support law is extended off its support by the
    ood law: where the current sentence is a held-out composition (in-support law undefined, "composition"
    family), the law is the ood law's (sentences are independent; only the current one matters)."""
    if family not in FAMILIES:
        raise ValueError(f"family must be one of {FAMILIES}, not {family!r}")
    prefixes = lex.check(prefixes)
    representative = grammar.representative
    read = np.where(lex.seen[prefixes], prefixes, representative[lex.word_class[prefixes]])
    rows = list(read)
    probs = grammar.next_word_probs(rows, "in_support")
    undefined = np.isnan(probs).any(axis=1)
    if family == "composition" and undefined.any():
        probs[undefined] = grammar.next_word_probs([rows[i] for i in np.flatnonzero(undefined)], "ood")
        undefined = np.isnan(probs).any(axis=1)
    if undefined.any():
        raise ValueError(
            f"{undefined.sum()} prefix(es) have no true law: their current sentence breaks the "
            "template or, for the synonym family, leaves the support"
        )
    return probs
