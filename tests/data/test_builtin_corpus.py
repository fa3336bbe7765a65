"""The builtin synthetic language: determinism, the in-/out-of-support split, and its exact next-word law."""

from __future__ import annotations

import json
import re
import time
from collections import defaultdict

import numpy as np
import pytest

from workflow_lib.data.builtin_corpus import build_grammar

TEMPLATE = re.compile(r"^DA?NVDA?NR?E$")  # det [adj] noun verb det [adj] noun [adv] .
KIND_LETTER = {"det": "D", "noun": "N", "verb": "V", "adj": "A", "adv": "R", "end": "E"}


@pytest.fixture(scope="module")
def grammar():
    return build_grammar(seed=11)


def kinds(grammar, ids: np.ndarray) -> str:
    return "".join(KIND_LETTER[re.sub(r"\d+$", "", grammar.class_names[c])] for c in grammar.word_class[ids])


def sentences(grammar, text: str) -> list[np.ndarray]:
    ids = grammar.encode([text])[0]
    ends = np.flatnonzero(ids == len(grammar.vocabulary) - 1)
    return np.split(ids, ends[:-1] + 1)


def composition(grammar, sentence: np.ndarray) -> tuple[int, int, int]:
    classes = grammar.word_class[sentence]
    nouns = [c - grammar.noun0 for c in classes if grammar.class_names[c].startswith("noun")]
    verbs = [c - grammar.verb0 for c in classes if grammar.class_names[c].startswith("verb")]
    return nouns[0], verbs[0], nouns[1]


def test_same_arguments_same_text_and_streams_differ(grammar):
    again = build_grammar(seed=11)
    assert again.vocabulary == grammar.vocabulary and np.array_equal(again.in_support, grammar.in_support)
    texts = grammar.generate("train", n_docs=20, sentences_per_doc=5, seed=3)
    assert texts == again.generate("train", n_docs=20, sentences_per_doc=5, seed=3)
    assert texts != grammar.generate("train", n_docs=20, sentences_per_doc=5, seed=4)
    assert texts != grammar.generate("validation", n_docs=20, sentences_per_doc=5, seed=3)
    other = build_grammar(seed=12)
    assert other.vocabulary != grammar.vocabulary
    assert other.generate("train", n_docs=20, sentences_per_doc=5, seed=3) != texts


def test_vocabulary_is_distinct_pseudo_english(grammar):
    vocab = grammar.vocabulary
    assert len(set(vocab)) == len(vocab)
    content = [w for w, c in zip(vocab, grammar.word_class) if grammar.class_names[c] not in ("det", "end")]
    assert all(re.fullmatch(r"([bdfgklmnprstvz][aeiou]){2,3}", w) for w in content)
    assert len(content) == (4 + 4 + 2 + 1) * 8 and vocab[-1] == "."
    classes = grammar.synonym_classes()
    assert np.array_equal(np.sort(np.concatenate(classes)), np.arange(len(vocab)))
    for c, ids in enumerate(classes):
        assert np.all(grammar.word_class[ids] == c) and np.isclose(grammar.word_weight[ids].sum(), 1)


def test_supports_split_the_compositions_and_keep_every_class(grammar):
    ins, ood = ({tuple(r) for r in a.tolist()} for a in (grammar.in_support, grammar.out_of_support))
    assert not ins & ood and len(ins | ood) == 4 * 4 * 4 and len(ood) == round(0.25 * 64)
    assert {s for s, _, _ in ins} == {o for _, _, o in ins} == set(range(4)) and {v for _, v, _ in ins} == set(range(4))
    for split, support in (("train", ins), ("validation", ins), ("test", ins), ("ood", ood)):
        seen = {composition(grammar, s) for t in grammar.generate(split, 50, 10, seed=1) for s in sentences(grammar, t)}
        assert seen <= support, split
        assert len(seen) > 0.8 * len(support), split  # drawn across the whole support


def test_every_sentence_follows_the_template_with_words_in_their_slots(grammar):
    texts = grammar.generate("train", n_docs=30, sentences_per_doc=8, seed=2)
    assert all(t == " ".join(t.split()) for t in texts)
    counts = {"A": 0, "R": 0, "sentences": 0}
    for text in texts:
        parts = sentences(grammar, text)
        assert len(parts) == 8
        for sentence in parts:
            pattern = kinds(grammar, sentence)
            assert TEMPLATE.match(pattern), pattern
            counts["A"] += pattern.count("A")
            counts["R"] += pattern.count("R")
            counts["sentences"] += 1
    n = counts["sentences"]
    assert abs(counts["A"] / (2 * n) - 0.5) < 0.06 and abs(counts["R"] / n - 0.3) < 0.07


def empirical_next_words(grammar, texts: list[str]) -> dict[tuple, tuple[np.ndarray, np.ndarray]]:
    """For each sentence-so-far class sequence: (a prefix reaching it, counts of the following word)."""
    vocab = len(grammar.vocabulary)
    seen: dict[tuple, list] = defaultdict(lambda: [None, np.zeros(vocab, dtype=np.int64)])
    for ids in grammar.encode(texts):
        classes = grammar.word_class[ids].tolist()
        start = 0
        for t in range(len(ids)):
            entry = seen[tuple(classes[start:t])]
            if entry[0] is None:
                entry[0] = ids[:t]
            entry[1][ids[t]] += 1
            if classes[t] == grammar.end_class:
                start = t + 1
    return {key: (prefix, counts) for key, (prefix, counts) in seen.items()}


@pytest.mark.parametrize("split, law, other", [("test", "in_support", "ood"), ("ood", "ood", "in_support")])
def test_next_word_probs_match_generated_frequencies(grammar, split, law, other):
    groups = empirical_next_words(grammar, grammar.generate(split, n_docs=2000, sentences_per_doc=20, seed=5))
    # the most frequent state of each of these word-kind patterns: every slot of the template, with each kind
    # of conditioning (none, subject, subject + verb, full composition)
    patterns = ("", "D", "DA", "DN", "DAN", "DNV", "DNVD", "DNVDA", "DNVDN", "DNVDNR")
    chosen = {}
    for key, (prefix, counts) in groups.items():
        pattern = "".join(KIND_LETTER[re.sub(r"\d+$", "", grammar.class_names[c])] for c in key)
        if pattern in patterns and (pattern not in chosen or counts.sum() > chosen[pattern][1].sum()):
            chosen[pattern] = (prefix, counts)
    assert set(chosen) == set(patterns)
    prefixes = [prefix for prefix, _ in chosen.values()]
    truth, wrong_law = grammar.next_word_probs(prefixes, law), grammar.next_word_probs(prefixes, other)
    differs = 0
    for row, other_row, (_, counts) in zip(truth, wrong_law, chosen.values()):
        n = counts.sum()
        assert n >= 50
        tv = 0.5 * np.abs(counts / n - row).sum()
        tolerance = np.sqrt(row * (1 - row) / n).sum()  # about 2.5x the expected TV of n draws
        assert tv <= tolerance, (tv, tolerance)
        differs += bool(np.isnan(other_row).any() or 0.5 * np.abs(other_row - row).sum() > 2 * tolerance)
    assert differs >= 1  # the comparison can tell the two laws apart


def test_rows_sum_to_one_and_impossible_prefixes_are_nan(grammar):
    ids = grammar.encode(grammar.generate("train", n_docs=10, sentences_per_doc=6, seed=9))
    prefixes = [doc[:t] for doc in ids for t in range(len(doc) + 1)]
    probs = grammar.next_word_probs(prefixes, "in_support")
    assert probs.shape == (len(prefixes), len(grammar.vocabulary))
    assert np.allclose(probs.sum(axis=1), 1) and (probs >= 0).all()
    det = grammar.word_class == 0
    assert np.allclose(probs[0][det], grammar.word_weight[det]) and probs[0][~det].sum() == 0

    ood_doc = grammar.encode(grammar.generate("ood", n_docs=1, sentences_per_doc=1, seed=0))[0]
    object_position = kinds(grammar, ood_doc).index("N", kinds(grammar, ood_doc).index("V"))
    after_object = ood_doc[: object_position + 1]
    assert np.isnan(grammar.next_word_probs([after_object], "in_support")).all()
    assert np.isclose(grammar.next_word_probs([after_object], "ood").sum(), 1)
    the = grammar.vocabulary.index("the")
    bad = grammar.next_word_probs([np.array([the, the]), np.array([the] * 9)], "in_support")
    assert np.isnan(bad).all()
    with pytest.raises(ValueError, match="word ids"):
        grammar.next_word_probs([np.array([len(grammar.vocabulary)])], "in_support")
    with pytest.raises(ValueError, match="law"):
        grammar.next_word_probs([np.array([the])], "test")


def test_a_million_words_in_seconds(grammar):
    start = time.perf_counter()
    texts = grammar.generate("train", n_docs=7000, sentences_per_doc=20, seed=0)
    elapsed = time.perf_counter() - start
    assert sum(t.count(" ") + 1 for t in texts) >= 1_000_000 and elapsed < 10


def test_encode_round_trips_and_rejects_unknown_words(grammar):
    texts = grammar.generate("test", n_docs=3, sentences_per_doc=4, seed=1)
    assert [" ".join(grammar.vocabulary[i] for i in ids) for ids in grammar.encode(texts)] == texts
    assert grammar.encode([]) == [] and len(grammar.encode([""])[0]) == 0
    with pytest.raises(ValueError, match="zebra"):
        grammar.encode(["the zebra ."])


def test_description_is_json_and_rebuilds_the_grammar(grammar):
    described = json.loads(json.dumps(grammar.to_dict()))
    args = (
        "seed",
        "n_noun_classes",
        "n_verb_classes",
        "n_adj_classes",
        "words_per_class",
        "ood_fraction",
        "p_adj",
        "p_adv",
    )
    rebuilt = build_grammar(**{k: described[k] for k in args})
    assert list(rebuilt.vocabulary) == described["vocabulary"]
    assert rebuilt.in_support.tolist() == described["in_support"]


@pytest.mark.parametrize(
    "kwargs, name",
    [
        ({"ood_fraction": 0}, "ood_fraction"),
        ({"ood_fraction": 1.0}, "ood_fraction"),
        ({"words_per_class": 1}, "words_per_class"),
        ({"n_noun_classes": 0}, "n_noun_classes"),
        ({"n_noun_classes": 1, "n_verb_classes": 1}, "ood_fraction"),
        ({"p_adj": 1.5}, "p_adj"),
        ({"p_adv": -0.1}, "p_adv"),
        ({"seed": -1}, "seed"),
    ],
)
def test_bad_grammar_arguments_name_the_parameter(kwargs, name):
    with pytest.raises(ValueError, match=name):
        build_grammar(**{"seed": 0, **kwargs})


def test_bad_generate_arguments(grammar):
    with pytest.raises(ValueError, match="split"):
        grammar.generate("dev", 1, 1, seed=0)
    with pytest.raises(ValueError, match="sentences_per_doc"):
        grammar.generate("train", 1, 0, seed=0)
    assert grammar.generate("train", 0, 3, seed=0) == []


# The `reach` split (context_fraction > 0): familiar words in a context never seen with them.


@pytest.fixture(scope="module")
def context_grammar():
    return build_grammar(seed=11, context_fraction=0.25)


def subjects(grammar, text: str) -> list[int]:
    out = []
    for sentence in sentences(grammar, text):
        nouns = [w for w in sentence.tolist() if grammar.class_names[grammar.word_class[w]].startswith("noun")]
        out.append(nouns[0])
    return out


def test_context_fraction_zero_changes_no_byte(grammar):
    held_none = build_grammar(seed=11, context_fraction=0.0)
    for split in ("train", "test", "ood"):
        assert held_none.generate(split, 30, 10, seed=4) == grammar.generate(split, 30, 10, seed=4)
    assert not held_none.held_subject.any()
    with pytest.raises(ValueError, match="context_fraction"):
        held_none.generate("reach", 1, 1, seed=0)


def test_held_subjects_are_objects_in_training_and_subjects_only_in_reach(context_grammar):
    g = context_grammar
    assert g.held_subject.sum() == 2 * g.n_noun_classes  # round(0.25 * 8) per noun class
    held = set(np.flatnonzero(g.held_subject).tolist())
    train = " ".join(g.generate("train", 300, 20, seed=3))
    train_subjects = set(subjects(g, train))
    train_words = set(g.encode([train])[0].tolist())
    assert not train_subjects & held  # never a subject in training ...
    assert held <= train_words  # ... but every one of them is seen (as an object)
    reach = " ".join(g.generate("reach", 100, 20, seed=3))
    assert set(subjects(g, reach)) == held  # every reach sentence has a held-out subject, and all of them occur
    # their class-mates are subjects in training: each held word's class has subjects there
    assert {g.word_class[w] for w in held} <= {g.word_class[w] for w in train_subjects}
    # and reach keeps the training compositions
    comps = {composition(g, s) for s in sentences(g, reach)}
    assert comps <= {tuple(c) for c in g.in_support.tolist()}
    # the other streams are untouched by holding subjects out, but for the subject slot
    plain = build_grammar(seed=11)
    assert plain.vocabulary == g.vocabulary and (plain.word_weight == g.word_weight).all()


def test_reach_law_matches_generated_frequencies(context_grammar):
    g = context_grammar
    groups = empirical_next_words(g, g.generate("reach", n_docs=1500, sentences_per_doc=20, seed=5))
    checked = 0
    for prefix, counts in sorted(groups.values(), key=lambda pc: -pc[1].sum())[:12]:
        n = counts.sum()
        row = g.next_word_probs([prefix], "reach")[0]
        tolerance = np.sqrt(row * (1 - row) / n).sum()
        assert 0.5 * np.abs(counts / n - row).sum() <= tolerance
        checked += 1
    assert checked == 12
    # after "det <held subject>" the truth is the verbs that follow its class-mates, which the training law
    # cannot say: that prefix is off its support
    held = np.flatnonzero(g.held_subject)[0]
    mate = np.flatnonzero((g.word_class == g.word_class[held]) & ~g.held_subject)[0]
    reach_row = g.next_word_probs([np.array([0, held])], "reach")[0]
    train_row = g.next_word_probs([np.array([0, mate])], "in_support")[0]
    assert np.allclose(reach_row, train_row)
    assert np.isnan(g.next_word_probs([np.array([0, held])], "in_support")).all()
    # and before the subject, the reach law draws only held-out subjects, the training law none
    start = g.next_word_probs([np.array([0])], "reach")[0]
    assert start[held] > 0 and start[mate] == 0
    assert g.next_word_probs([np.array([0])], "in_support")[0][held] == 0


def test_support_status_reach_is_reachable_by_class_mates_and_ood_is_not(context_grammar):
    g = context_grammar

    def prefixes(split):
        docs = g.encode(g.generate(split, 40, 20, seed=8))
        return [d[:t] for d in docs for t in range(1, len(d), 3)]

    off, reachable = g.support_status(prefixes("reach"))
    assert off.mean() > 0.5 and (reachable == off).all()  # every off-support reach prefix: a class-mate reaches it
    off, reachable = g.support_status(prefixes("ood"))
    assert off.mean() > 0.1 and not reachable.any()  # held-out compositions: no class-mate reaches them
    off, reachable = g.support_status(prefixes("test"))
    assert not off.any() and not reachable.any()


def test_bad_context_fraction_names_the_parameter():
    for value in (-0.1, 1.0):
        with pytest.raises(ValueError, match="context_fraction"):
            build_grammar(seed=0, context_fraction=value)
