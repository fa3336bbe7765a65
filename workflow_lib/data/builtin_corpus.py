"""The builtin corpus: a seeded synthetic English-like language whose true next-word law is known.

It lets the default study run with no download and measure extrapolation exactly, which real corpora cannot. Every
sentence follows one template, DET [ADJ] SUBJ_NOUN VERB DET [ADJ] OBJ_NOUN [ADV] ., each slot a word of a lexical
class whose words are true synonyms. `ood` holds held-out class compositions (new combinations of familiar words);
`reach` (with `context_fraction` > 0) puts words never seen as subjects in that role, which a class-mate maps back
to the support (`support_status`). `next_word_probs` gives the exact next-word law after any prefix; sentences are
independent, so only the current one matters. The splits and what the theory predicts on each:
docs/default-study.md, and its "Where the theory predicts a gain".
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

SPLITS = ("train", "validation", "test", "ood", "reach")
LAWS = ("in_support", "ood", "reach")
LAW_OF_SPLIT = {"train": "in_support", "validation": "in_support", "test": "in_support", "ood": "ood", "reach": "reach"}
# Each split's random stream is SeedSequence([seed, stream]); the grammar's own is 4 and the held-out subjects' 6,
# fixed numbers so that adding a split changes no earlier draw.
SPLIT_STREAMS = {"train": 0, "validation": 1, "test": 2, "ood": 3, "reach": 5}
GRAMMAR_STREAM, CONTEXT_STREAM = 4, 6
DETERMINERS = ("the", "a", "this", "that")
END = "."
CONSONANTS = "bdfgklmnprstvz"
VOWELS = "aeiou"
MAX_CONTENT_WORDS = 100_000
TEMPLATE = "det [adj] noun verb det [adj] noun [adv] ."
N_SLOTS = 9  # det adj subj verb det adj obj adv end
WINDOW = N_SLOTS  # the longest unfinished sentence (8 words) and the "." before it: all a prefix state needs

# Sentence-template parser: state = index of the last filled slot (0..7), START before the first word,
# INVALID once the word order breaks the template. Rows are indexed by state + 2.
DET, NOUN, VERB, ADJ, ADV, ENDK = range(6)
START, INVALID = -1, -2
_NEXT = np.full((N_SLOTS + 1, 6), INVALID, dtype=np.int64)
for _state, _kind, _slot in [
    (START, DET, 0),
    (0, ADJ, 1),
    (0, NOUN, 2),
    (1, NOUN, 2),
    (2, VERB, 3),
    (3, DET, 4),
    (4, ADJ, 5),
    (4, NOUN, 6),
    (5, NOUN, 6),
    (6, ADV, 7),
]:
    _NEXT[_state + 2, _kind] = _slot


@dataclass(frozen=True, eq=False)
class BuiltinGrammar:
    """The grammar: vocabulary, synonym classes with word weights, and the two composition supports.

    Word ids: determiners first, then each noun, verb and adjective class, the adverbs, and "." last; the words of
    a class have contiguous ids. Class ids follow `class_names`: det, noun*, verb*, adj*, adv, end."""

    vocabulary: tuple[str, ...]
    word_class: np.ndarray
    class_names: tuple[str, ...]
    word_weight: np.ndarray
    in_support: np.ndarray
    out_of_support: np.ndarray
    p_adj: float
    p_adv: float
    n_noun_classes: int
    n_verb_classes: int
    n_adj_classes: int
    words_per_class: int
    ood_fraction: float
    seed: int
    held_subject: np.ndarray  # [V] bool: never a subject under the training law, always one under `reach`
    context_fraction: float = 0.0

    @property
    def noun0(self) -> int:
        return 1

    @property
    def verb0(self) -> int:
        return 1 + self.n_noun_classes

    @property
    def adj0(self) -> int:
        return self.verb0 + self.n_verb_classes

    @property
    def adv_class(self) -> int:
        return self.adj0 + self.n_adj_classes

    @property
    def end_class(self) -> int:
        return self.adv_class + 1

    @cached_property
    def _class_kind(self) -> np.ndarray:
        kinds = [DET] + [NOUN] * self.n_noun_classes + [VERB] * self.n_verb_classes + [ADJ] * self.n_adj_classes
        return np.array(kinds + [ADV, ENDK], dtype=np.int64)

    @cached_property
    def _class_last(self) -> np.ndarray:
        return np.searchsorted(self.word_class, np.arange(len(self.class_names)), side="right") - 1

    def _keys(self, weight: np.ndarray) -> np.ndarray:
        """class id + cumulative within-class weight, so one searchsorted samples words of any classes."""
        cum = np.cumsum(weight)
        before_class = np.concatenate([[0.0], cum[self._class_last[:-1]]])
        keys = self.word_class + cum - before_class[self.word_class]
        keys[self._class_last] = np.arange(len(self.class_names)) + 1.0  # exact class ends despite rounding
        return keys

    @cached_property
    def _sampling_keys(self) -> np.ndarray:
        return self._keys(self.word_weight)

    def subject_weight(self, law: str) -> np.ndarray:
        """[V] the word weights of the subject slot under `law`: the training laws never draw a held-out subject,
        `reach` draws only those; each class renormalised (classes other than nouns keep their weights)."""
        self._support(law)  # checks the law
        if not self.held_subject.any():
            return self.word_weight
        noun = (self.word_class >= self.noun0) & (self.word_class < self.verb0)
        allowed = ~noun | (self.held_subject if law == "reach" else ~self.held_subject)
        weight = np.where(allowed, self.word_weight, 0.0)
        totals = np.bincount(self.word_class, weight, minlength=len(self.class_names))
        with np.errstate(invalid="ignore", divide="ignore"):
            return weight / totals[self.word_class]

    @cached_property
    def representative(self) -> np.ndarray:
        """[classes] a word of each class that may fill every slot of its class (no held-out subject): what an
        unseen word is read as."""
        return np.array(
            [np.flatnonzero((self.word_class == c) & ~self.held_subject)[0] for c in range(len(self.class_names))]
        )

    def synonym_classes(self) -> list[np.ndarray]:
        """Word ids of every class in class-id order, determiners and the one-word "." class included:
        within any class the words are interchangeable. Callers wanting substitutes skip size-1 classes."""
        return [np.flatnonzero(self.word_class == c) for c in range(len(self.class_names))]

    def generate(self, split: str, n_docs: int, sentences_per_doc: int, seed: int) -> list[str]:
        """`n_docs` documents of `sentences_per_doc` independent sentences, words separated by single
        spaces. Each split has its own random stream, SeedSequence([seed, SPLIT_STREAMS[split]]), so splits
        never share draws and the same arguments always give the same text."""
        if split not in SPLITS:
            raise ValueError(f"split must be one of {SPLITS}, not {split!r}")
        if split == "reach" and not self.held_subject.any():
            raise ValueError("split 'reach' needs context_fraction > 0 (no word is held out of the subject role)")
        if n_docs < 0:
            raise ValueError(f"n_docs must be >= 0, not {n_docs}")
        if sentences_per_doc < 1:
            raise ValueError(f"sentences_per_doc must be >= 1, not {sentences_per_doc}")
        if seed < 0:
            raise ValueError(f"seed must be >= 0, not {seed}")
        rng = np.random.default_rng(np.random.SeedSequence([seed, SPLIT_STREAMS[split]]))
        law = LAW_OF_SPLIT[split]
        support = self._support(law)
        n = n_docs * sentences_per_doc
        comp = support[rng.integers(len(support), size=n)]
        adj = self.adj0 + rng.integers(self.n_adj_classes, size=(n, 2))
        adj[rng.random((n, 2)) >= self.p_adj] = -1
        adv = np.where(rng.random(n) < self.p_adv, self.adv_class, -1)
        det, end = np.zeros(n, dtype=np.int64), np.full(n, self.end_class)
        # [n_sentences, N_SLOTS] class of each slot, -1 where an optional slot is empty
        slots = np.stack(
            [
                det,
                adj[:, 0],
                self.noun0 + comp[:, 0],
                self.verb0 + comp[:, 1],
                det,
                adj[:, 1],
                self.noun0 + comp[:, 2],
                adv,
                end,
            ],
            axis=1,
        )
        present = slots >= 0
        classes = slots[present]  # row-major: the words in reading order
        # the subject slot draws from its own weights (held-out subjects); the same uniforms either way
        is_subject = np.broadcast_to(np.arange(N_SLOTS) == 2, present.shape)[present]
        uniforms = classes + rng.random(len(classes))
        words = np.where(
            is_subject,
            np.searchsorted(self._keys(self.subject_weight(law)), uniforms, side="right"),
            np.searchsorted(self._sampling_keys, uniforms, side="right"),
        )
        words = np.minimum(words, self._class_last[classes])  # guards c + u rounding up to c + 1
        per_doc = present.sum(axis=1).reshape(n_docs, sentences_per_doc).sum(axis=1)
        seps = np.full(len(words), " ", dtype=object)
        seps[np.cumsum(per_doc) - 1] = "\n"
        pieces = np.empty(2 * len(words), dtype=object)
        pieces[0::2] = np.asarray(self.vocabulary, dtype=object)[words]
        pieces[1::2] = seps
        return "".join(pieces.tolist()).split("\n")[:n_docs]

    def encode(self, texts: list[str]) -> list[np.ndarray]:
        """Whitespace words -> word ids, one array per text; a word outside the vocabulary is an error
        (the caller has text that this grammar did not produce)."""
        if not texts:
            return []
        split = [t.split() for t in texts]
        counts = np.array([len(ws) for ws in split], dtype=np.int64)
        flat = np.array([w for ws in split for w in ws], dtype=str)
        order = np.argsort(np.asarray(self.vocabulary))
        sorted_vocab = np.asarray(self.vocabulary)[order]
        pos = np.minimum(np.searchsorted(sorted_vocab, flat), len(sorted_vocab) - 1)
        known = sorted_vocab[pos] == flat
        if not known.all():
            unknown = sorted(set(flat[~known].tolist()))
            raise ValueError(f"{len(unknown)} word(s) not in the builtin vocabulary, e.g. {unknown[:5]}")
        return np.split(order[pos].astype(np.int64), np.cumsum(counts)[:-1])

    def _support(self, law: str) -> np.ndarray:
        """The compositions of `law`: `reach` keeps the training compositions (only its subjects are new)."""
        if law not in LAWS:
            raise ValueError(f"law must be one of {LAWS}, not {law!r}")
        if law == "reach" and not self.held_subject.any():
            raise ValueError("law 'reach' needs context_fraction > 0 (no word is held out of the subject role)")
        return self.out_of_support if law == "ood" else self.in_support

    def _parse(self, prefixes: list[np.ndarray]) -> tuple[np.ndarray, ...]:
        """State of the current sentence after each prefix: (last slot, subject, verb, object class index,
        whether the prefix breaks the template or uses an optional slot of probability 0, subject word id or -1)."""
        n, vocab = len(prefixes), len(self.vocabulary)
        tail = np.full((n, WINDOW), -1, dtype=np.int64)
        lengths = np.zeros(n, dtype=np.int64)
        for i, prefix in enumerate(prefixes):
            last = np.asarray(prefix, dtype=np.int64)[-WINDOW:]
            tail[i, WINDOW - len(last) :] = last
            lengths[i] = len(prefix)
        filled = np.arange(WINDOW) >= WINDOW - np.minimum(lengths, WINDOW)[:, None]
        if (((tail < 0) | (tail >= vocab)) & filled).any():
            raise ValueError(f"prefixes must hold word ids in [0, {vocab})")
        cls = np.where(filled, self.word_class[np.clip(tail, 0, vocab - 1)], -1)
        is_end = cls == self.end_class
        sentence_start = np.where(is_end.any(1), WINDOW - np.argmax(is_end[:, ::-1], axis=1), 0)
        impossible = ~is_end.any(1) & (lengths > WINDOW)  # a sentence longer than the template allows
        # probability of each parser step: the optional slots make some steps impossible at p = 0 or 1
        step_p = np.ones(_NEXT.shape)
        step_p[[0 + 2, 4 + 2], ADJ] = self.p_adj
        step_p[[0 + 2, 4 + 2], NOUN] = 1 - self.p_adj
        step_p[6 + 2, ADV] = self.p_adv
        slot = np.full(n, START)
        subj, verb, obj = (np.zeros(n, dtype=np.int64) for _ in range(3))
        subject_word = np.full(n, -1, dtype=np.int64)
        for col in range(WINDOW):
            active = (col >= sentence_start) & (cls[:, col] >= 0)
            kind = self._class_kind[np.maximum(cls[:, col], 0)]
            impossible |= active & (step_p[slot + 2, kind] == 0)
            slot = np.where(active, _NEXT[slot + 2, kind], slot)
            for target, at, offset in ((subj, 2, self.noun0), (verb, 3, self.verb0), (obj, 6, self.noun0)):
                hit = active & (slot == at)
                target[hit] = cls[hit, col] - offset
            subject_word = np.where(active & (slot == 2), tail[:, col], subject_word)
        impossible |= slot == INVALID
        return slot, subj, verb, obj, impossible, subject_word

    def next_word_probs(self, prefixes: list[np.ndarray], law: str) -> np.ndarray:
        """[len(prefixes), V] exact distribution of the next word after each word-id prefix (the words of the
        document so far; empty = document start) under the in-support law (train/validation/test) or the
        ood law. A row is all NaN where the prefix's current sentence has probability 0 under that law:
        it breaks the template, or its partial composition (subject, subject+verb, or full composition
        once the object is seen) never occurs under the law, e.g. an ood sentence under `in_support`.
        Earlier sentences are not checked: they are independent of the next word."""
        return self._next_word_probs(prefixes, law, words=True)

    def support_status(self, prefixes: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """Per prefix: whether its current sentence is off the training support (probability 0 under the
        in-support law), and whether it is off it only through its words, its class sequence being in the support:
        then replacing each word by a class-mate seen in that role (the oracle synonyms) maps it into the support,
        and T(.|X') = T(.|X0) for a support prefix X0 under class replacement (Assumption SP_perturb,
        docs/theory.md). `ood`'s held-out compositions are off it by their classes: no class-mate reaches them."""
        off = np.isnan(self._next_word_probs(prefixes, "in_support", words=True)[:, 0])
        off_by_class = np.isnan(self._next_word_probs(prefixes, "in_support", words=False)[:, 0])
        return off, off & ~off_by_class

    def _next_word_probs(self, prefixes: list[np.ndarray], law: str, words: bool) -> np.ndarray:
        """next_word_probs; `words` False: ignore which words may be subjects (the class-level law)."""
        support = self._support(law)
        nn, nv = self.n_noun_classes, self.n_verb_classes
        mass = np.zeros((nn, nv, nn))
        mass[tuple(support.T)] = 1.0
        with np.errstate(invalid="ignore", divide="ignore"):
            p_subj = mass.sum((1, 2)) / mass.sum()
            p_verb = mass.sum(2) / mass.sum((1, 2))[:, None]
            p_obj = mass / mass.sum(2, keepdims=True)
        slot, subj, verb, obj, impossible, subject_word = self._parse(prefixes)
        subject_weight = self.subject_weight(law) if words else self.word_weight
        if words:
            impossible |= (slot >= 2) & (subject_weight[np.maximum(subject_word, 0)] == 0)
        impossible |= (slot >= 2) & (p_subj[subj] == 0)
        impossible |= (slot >= 3) & (mass.sum(2)[subj, verb] == 0)
        impossible |= (slot >= 6) & (mass[subj, verb, obj] == 0)
        n = len(slot)
        class_p = np.zeros((n, len(self.class_names)))
        nouns, verbs, adjs = (
            slice(self.noun0, self.verb0),
            slice(self.verb0, self.adj0),
            slice(self.adj0, self.adv_class),
        )
        class_p[np.isin(slot, (START, 3)), 0] = 1.0
        for at, p_skip in ((0, 1 - self.p_adj), (1, 1.0)):
            rows = slot == at
            class_p[rows, nouns] = p_skip * p_subj
            class_p[rows, adjs] = (1 - p_skip) / self.n_adj_classes
        rows = slot == 2
        class_p[rows, verbs] = p_verb[subj[rows]]
        for at, p_skip in ((4, 1 - self.p_adj), (5, 1.0)):
            rows = slot == at
            class_p[rows, nouns] = p_skip * p_obj[subj[rows], verb[rows]]
            class_p[rows, adjs] = (1 - p_skip) / self.n_adj_classes
        class_p[slot == 6, self.adv_class] = self.p_adv
        class_p[slot == 6, self.end_class] = 1 - self.p_adv
        class_p[slot == 7, self.end_class] = 1.0
        probs = class_p[:, self.word_class] * self.word_weight
        subject_next = np.isin(slot, (0, 1))  # the next noun is the subject: the law's subject weights
        probs[subject_next] = class_p[subject_next][:, self.word_class] * subject_weight
        probs[impossible] = np.nan
        return probs

    def to_dict(self) -> dict:
        """Everything that defines the language, JSON-ready, for the provenance sidecar."""
        return {
            "seed": self.seed,
            "template": TEMPLATE,
            "p_adj": self.p_adj,
            "p_adv": self.p_adv,
            "n_noun_classes": self.n_noun_classes,
            "n_verb_classes": self.n_verb_classes,
            "n_adj_classes": self.n_adj_classes,
            "words_per_class": self.words_per_class,
            "ood_fraction": self.ood_fraction,
            **(
                {"context_fraction": self.context_fraction, "held_subjects": np.flatnonzero(self.held_subject).tolist()}
                if self.context_fraction
                else {}
            ),
            "class_names": list(self.class_names),
            "vocabulary": list(self.vocabulary),
            "word_class": self.word_class.tolist(),
            "word_weight": self.word_weight.tolist(),
            "in_support": self.in_support.tolist(),
            "out_of_support": self.out_of_support.tolist(),
        }


def pseudo_words(rng: np.random.Generator, n: int) -> list[str]:
    """n distinct lowercase words of 2-3 consonant-vowel syllables ("bako", "tirelu"), none a determiner."""
    syllables = np.array([c + v for c in CONSONANTS for v in VOWELS] + [""], dtype=object)
    words: dict[str, None] = {}
    while len(words) < n:
        picks = rng.integers(len(syllables) - 1, size=(2 * n, 3))
        picks[rng.random(2 * n) < 0.5, 2] = len(syllables) - 1  # half the words have 2 syllables
        for word in syllables[picks].sum(axis=1).tolist():
            if word not in DETERMINERS and len(words) < n:
                words.setdefault(word, None)
    return list(words)


def _covers_every_class(support: np.ndarray, n_noun: int, n_verb: int) -> bool:
    """Every noun class as subject and as object and every verb class occur in training."""
    return (
        len(np.unique(support[:, 0])) == n_noun
        and len(np.unique(support[:, 2])) == n_noun
        and len(np.unique(support[:, 1])) == n_verb
    )


def build_grammar(
    seed: int,
    n_noun_classes: int = 4,
    n_verb_classes: int = 4,
    n_adj_classes: int = 2,
    words_per_class: int = 8,
    ood_fraction: float = 0.25,
    p_adj: float = 0.5,
    p_adv: float = 0.3,
    context_fraction: float = 0.0,
) -> BuiltinGrammar:
    """The grammar for these settings; the same arguments always give the same grammar.

    Within-class word weights are Dirichlet(2): unequal like real synonyms, but no word so rare it never
    appears. round(ood_fraction * total) compositions are held out, redrawn until the in-support rest still
    shows every noun class as subject and as object and every verb class, so `ood` tests new combinations,
    never unseen words or roles. `context_fraction` > 0 holds round(context_fraction * words_per_class) words of each
    noun class (at least 1, at most all but 1) out of the subject role, drawn on their own stream, so the rest of
    the grammar is the same as with 0 (module docstring: the `reach` split)."""
    for name, value in (
        ("n_noun_classes", n_noun_classes),
        ("n_verb_classes", n_verb_classes),
        ("n_adj_classes", n_adj_classes),
    ):
        if value < 1:
            raise ValueError(f"{name} must be >= 1, not {value}")
    if seed < 0:
        raise ValueError(f"seed must be >= 0, not {seed}")
    if words_per_class < 2:
        raise ValueError(f"words_per_class must be >= 2 (a class needs synonyms), not {words_per_class}")
    n_content = (n_noun_classes + n_verb_classes + n_adj_classes + 1) * words_per_class
    if n_content > MAX_CONTENT_WORDS:
        raise ValueError(f"words_per_class: {n_content} content words exceed the limit {MAX_CONTENT_WORDS}")
    if not 0 < ood_fraction < 1:
        raise ValueError(f"ood_fraction must be in (0, 1), not {ood_fraction}")
    if not 0 <= context_fraction < 1:
        raise ValueError(f"context_fraction must be in [0, 1), not {context_fraction}")
    for name, probability in (("p_adj", p_adj), ("p_adv", p_adv)):
        if not 0 <= probability <= 1:
            raise ValueError(f"{name} must be in [0, 1], not {probability}")
    total = n_noun_classes * n_verb_classes * n_noun_classes
    n_held = round(ood_fraction * total)
    if n_held < 1 or total - n_held < max(n_noun_classes, n_verb_classes):
        raise ValueError(
            f"ood_fraction={ood_fraction} holds out {n_held} of {total} compositions: need at least "
            f"1 held out and {max(n_noun_classes, n_verb_classes)} kept; change it or the class counts"
        )
    rng = np.random.default_rng(np.random.SeedSequence([seed, GRAMMAR_STREAM]))
    all_comps = np.stack(np.unravel_index(np.arange(total), (n_noun_classes, n_verb_classes, n_noun_classes)), 1)
    for _ in range(1000):
        held = np.zeros(total, dtype=bool)
        held[rng.permutation(total)[:n_held]] = True
        if _covers_every_class(all_comps[~held], n_noun_classes, n_verb_classes):
            break
    else:
        raise ValueError(
            f"ood_fraction={ood_fraction}: no held-out set of {n_held} compositions leaves every "
            "class in training; lower it"
        )
    class_names = (
        ("det",)
        + tuple(f"noun{i}" for i in range(n_noun_classes))
        + tuple(f"verb{i}" for i in range(n_verb_classes))
        + tuple(f"adj{i}" for i in range(n_adj_classes))
        + ("adv", "end")
    )
    n_content_classes = len(class_names) - 2
    sizes = [len(DETERMINERS)] + [words_per_class] * n_content_classes + [1]
    weights = [rng.dirichlet(np.full(size, 2.0)) if size > 1 else np.ones(1) for size in sizes]
    word_class = np.repeat(np.arange(len(class_names)), sizes)
    held_subject = np.zeros(len(word_class), dtype=bool)
    if context_fraction > 0:
        n_held_words = min(max(round(context_fraction * words_per_class), 1), words_per_class - 1)
        context_rng = np.random.default_rng(np.random.SeedSequence([seed, CONTEXT_STREAM]))
        for c in range(1, 1 + n_noun_classes):
            held_subject[np.flatnonzero(word_class == c)[context_rng.permutation(words_per_class)[:n_held_words]]] = (
                True
            )
    return BuiltinGrammar(
        vocabulary=DETERMINERS + tuple(pseudo_words(rng, n_content)) + (END,),
        word_class=word_class,
        class_names=class_names,
        word_weight=np.concatenate(weights),
        in_support=all_comps[~held],
        out_of_support=all_comps[held],
        p_adj=float(p_adj),
        p_adv=float(p_adv),
        n_noun_classes=n_noun_classes,
        n_verb_classes=n_verb_classes,
        n_adj_classes=n_adj_classes,
        words_per_class=words_per_class,
        ood_fraction=float(ood_fraction),
        seed=seed,
        held_subject=held_subject,
        context_fraction=float(context_fraction),
    )
