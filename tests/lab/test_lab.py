"""The theory lab's grammar side: exact support distance, delta sets, true law, keyed perturbation, constants."""

from __future__ import annotations

from itertools import product

import numpy as np
import pytest

from workflow_lib.data.builtin_corpus import build_grammar
from workflow_lib.lab import perturbation, prefix_sets

SEED, LENGTH, LAST, DELTAS = 9, 30, 12, [0, 1, 2, 3]


def tiny(**probs):
    return build_grammar(
        seed=3, n_noun_classes=2, n_verb_classes=2, n_adj_classes=1, words_per_class=2, ood_fraction=0.25, **probs
    )


@pytest.fixture(scope="module")
def grammar():
    return build_grammar(1234)


@pytest.fixture(scope="module")
def lex(grammar):
    return prefix_sets.lexicon(grammar, SEED)


@pytest.fixture(scope="module")
def base(grammar):
    return prefix_sets.base_prefixes(grammar, 80, LENGTH, SEED)


@pytest.fixture(scope="module")
def sets(grammar, lex, base):
    return {(s["family"], s["delta"]): s for s in prefix_sets.delta_sets(grammar, lex, base, DELTAS, LAST, SEED)}


def support_class_sequences(grammar, length: int) -> np.ndarray:
    """[k, length] every class sequence whose words all have positive in-support probability given their
    prefix, grown one position at a time from next_word_probs (independent of the lab's automaton)."""
    representative = np.searchsorted(grammar.word_class, np.arange(len(grammar.class_names)))
    seqs = np.zeros((1, 0), dtype=np.int64)
    for _ in range(length):
        probs = grammar.next_word_probs(list(representative[seqs]), "in_support")[:, representative]
        row, cls = np.nonzero(np.nan_to_num(probs) > 0)
        seqs = np.concatenate([seqs[row], cls[:, None]], axis=1)
    return seqs


def brute_distance(lex, prefixes: np.ndarray, support: np.ndarray) -> np.ndarray:
    matches = lex.seen[prefixes][:, None, :] & (lex.word_class[prefixes][:, None, :] == support[None])
    return (~matches).sum(axis=2).min(axis=1)


def sentence_index(grammar, prefixes: np.ndarray) -> np.ndarray:
    """[n, L] index of each word's sentence, a "." counted in the sentence it closes."""
    is_end = prefixes == len(grammar.vocabulary) - 1
    return np.cumsum(is_end, axis=1) - is_end


# ---- lexicon and support distance ---------------------------------------------------------------------------


def test_lexicon_adds_one_new_word_per_content_class(grammar, lex):
    w = len(grammar.vocabulary)
    assert lex.n_seen == w and lex.words[:w] == grammar.vocabulary
    assert lex.seen[:w].all() and not lex.seen[w:].any()
    new = lex.words[w:]
    assert len(set(new)) == len(new) and not set(new) & set(grammar.vocabulary)
    assert sorted(lex.word_class[w:].tolist()) == list(range(grammar.noun0, grammar.end_class))
    assert np.array_equal(lex.word_class[:w], grammar.word_class)
    assert (
        prefix_sets.lexicon(grammar, SEED).words == lex.words
        and prefix_sets.lexicon(grammar, SEED + 1).words != lex.words
    )


@pytest.mark.parametrize("probs", [{}, {"p_adj": 0.0, "p_adv": 1.0}, {"p_adj": 1.0, "p_adv": 0.0}])
def test_support_distance_equals_brute_force_minimum(probs):
    grammar = tiny(**probs)
    lex = prefix_sets.lexicon(grammar, 0)
    rng = np.random.default_rng(0)
    seen_distances = set()
    for length in range(1, 11):  # 10 words always cross a sentence end
        support = support_class_sequences(grammar, length)
        near = prefix_sets.base_prefixes(grammar, 40, length, seed=length)
        hits = rng.random(near.shape) < rng.choice([0.1, 0.3], size=(40, 1))
        near[hits] = rng.integers(len(lex.words), size=hits.sum())
        far = rng.integers(len(lex.words), size=(40, length))
        prefixes = np.concatenate([near, far])
        expected = brute_distance(lex, prefixes, support)
        assert np.array_equal(prefix_sets.support_distance(grammar, lex, prefixes), expected), (probs, length)
        seen_distances |= set(expected.tolist())
    assert {0, 1, 2, 3} <= seen_distances


def test_support_distance_rejects_ids_outside_the_lexicon(grammar, lex):
    with pytest.raises(ValueError, match="lexicon ids"):
        prefix_sets.support_distance(grammar, lex, np.array([[0, len(lex.words)]]))


# ---- delta sets ---------------------------------------------------------------------------------------------


def test_base_prefixes_are_in_support_and_cut_at_varied_slots(grammar, lex, base):
    assert base.shape == (80, LENGTH)
    assert (prefix_sets.support_distance(grammar, lex, base) == 0).all()
    assert len(np.unique(grammar.word_class[base[:, -1]])) >= 4
    assert np.array_equal(prefix_sets.base_prefixes(grammar, 80, LENGTH, SEED), base)


def test_every_delta_set_row_is_at_exact_distance(grammar, lex, base, sets):
    assert sorted(sets) == sorted(product(prefix_sets.FAMILIES, DELTAS))
    for (family, delta), s in sets.items():
        assert s["prefixes"].shape == (len(s["base"]), LENGTH)
        assert (prefix_sets.support_distance(grammar, lex, s["prefixes"]) == delta).all(), (family, delta)
        changed = s["prefixes"] != base[s["base"]]
        assert (changed.sum(axis=1) == delta).all()
        assert not changed[:, : LENGTH - LAST].any()
    for family in prefix_sets.FAMILIES:
        assert np.array_equal(sets[family, 0]["prefixes"], base)
        assert len(sets[family, 1]["base"]) > len(base) // 2
    assert len(sets["composition", 2]["base"]) > 0
    assert len(sets["synonym", 3]["base"]) == len(base)


def test_composition_rows_move_nouns_and_verbs_to_another_seen_class(grammar, lex, base, sets):
    kind = np.array([name.rstrip("0123456789") for name in grammar.class_names])
    for delta in DELTAS[1:]:
        s = sets["composition", delta]
        changed = s["prefixes"] != base[s["base"]]
        old, new = base[s["base"]][changed], s["prefixes"][changed]
        assert lex.seen[new].all()
        assert np.isin(kind[grammar.word_class[old]], ["noun", "verb"]).all()
        assert (kind[grammar.word_class[old]] == kind[grammar.word_class[new]]).all()
        assert (grammar.word_class[old] != grammar.word_class[new]).all()
        assert all(len(set(row[c])) == delta for row, c in zip(sentence_index(grammar, base[s["base"]]), changed))


def test_composition_reaches_delta_4_with_one_change_in_each_of_4_sentences():
    """The default grammar, 40 words, changes among the last 32 (about five sentences): most rows reach
    delta 4, and every changed sentence is, on its own, off the support."""
    grammar = build_grammar(1234)
    lex = prefix_sets.lexicon(grammar, 42)
    base = prefix_sets.base_prefixes(grammar, 100, 40, 42)
    sets = prefix_sets.delta_sets(grammar, lex, base, [2, 3, 4], 32, 42, tries=4)
    for s in (s for s in sets if s["family"] == "composition"):
        delta, rows = s["delta"], base[s["base"]]
        assert len(rows) >= len(base) // 2, delta
        assert (prefix_sets.support_distance(grammar, lex, s["prefixes"]) == delta).all()
        changed = s["prefixes"] != rows
        assert not changed[:, :8].any() and (changed.sum(axis=1) == delta).all()
        sentences = sentence_index(grammar, rows)
        broken = []
        for prefix, sentence, c in zip(s["prefixes"], sentences, changed):
            assert len(set(sentence[c])) == delta
            for k in set(sentence[c]):
                words = prefix[sentence == k]
                broken.append(words[words != len(grammar.vocabulary) - 1])  # the sentence, without its "."
        assert np.isnan(grammar.next_word_probs(broken, "in_support")).all(axis=1).all()
        assert np.isfinite(prefix_sets.truth(grammar, lex, s["prefixes"], "composition")).all()


def test_delta_sets_need_an_in_support_base(grammar, lex, sets):
    with pytest.raises(ValueError, match="in the support"):
        prefix_sets.delta_sets(grammar, lex, sets["composition", 1]["prefixes"], [1], LAST, SEED)


def test_synonym_rows_differ_only_by_unseen_class_mates(lex, base, sets):
    for delta in DELTAS[1:]:
        s = sets["synonym", delta]
        changed = s["prefixes"] != base[s["base"]]
        old, new = base[s["base"]][changed], s["prefixes"][changed]
        assert not lex.seen[new].any()
        assert np.array_equal(lex.word_class[new], lex.word_class[old])


# ---- the true law -------------------------------------------------------------------------------------------


def current_sentence_start(grammar, prefixes: np.ndarray) -> np.ndarray:
    is_end = prefixes == len(grammar.vocabulary) - 1
    return np.where(is_end.any(1), prefixes.shape[1] - np.argmax(is_end[:, ::-1], axis=1), 0)


def test_truth_is_a_law_and_matches_the_base_where_the_current_sentence_is_kept(grammar, lex, base, sets):
    for (family, delta), s in sets.items():
        probs = prefix_sets.truth(grammar, lex, s["prefixes"], family)
        assert probs.shape == (len(s["base"]), len(grammar.vocabulary))
        assert np.isfinite(probs).all() and np.allclose(probs.sum(axis=1), 1.0)
        base_law = grammar.next_word_probs(list(base[s["base"]]), "in_support")
        if family == "synonym":
            assert np.allclose(probs, base_law)
            continue
        changed = s["prefixes"] != base[s["base"]]
        kept = ~(changed & (np.arange(LENGTH) >= current_sentence_start(grammar, s["prefixes"])[:, None])).any(1)
        assert np.allclose(probs[kept], base_law[kept])
        if delta in (1, 2):
            assert kept.any() and not kept.all()


def test_truth_extends_the_in_support_law_by_the_ood_law(grammar, lex, sets):
    s = sets["composition", 1]
    rows = list(s["prefixes"])
    in_support = grammar.next_word_probs(rows, "in_support")
    off = np.isnan(in_support).any(axis=1)
    assert off.any()
    probs = prefix_sets.truth(grammar, lex, s["prefixes"], "composition")
    assert np.allclose(probs[off], grammar.next_word_probs([rows[i] for i in np.flatnonzero(off)], "ood"))
    with pytest.raises(ValueError, match="no true law"):
        prefix_sets.truth(grammar, lex, s["prefixes"][off], "synonym")
    with pytest.raises(ValueError, match="no true law"):
        prefix_sets.truth(grammar, lex, np.zeros((1, 3), dtype=np.int64), "composition")  # "the the the"


# ---- the keyed perturbation ---------------------------------------------------------------------------------


def test_splitmix64_matches_the_reference_stream():
    golden = 0x9E3779B97F4A7C15
    states = np.array([0, golden, 2 * golden % (1 << 64)], dtype=np.uint64)
    assert [int(v) for v in perturbation.splitmix64(states)] == [
        0xE220A8397B1DCDAF,
        0x6E789E6AA1B965F4,
        0x06C45D188009454F,
    ]


def test_perturbation_is_a_pure_function_of_keys_and_draw(grammar, lex, base):
    keys = perturbation.keys_for(SEED, np.arange(len(base)))
    assert len(np.unique(keys)) == len(base) and np.array_equal(keys, perturbation.keys_for(SEED, np.arange(len(base))))
    for q0 in perturbation.Q0S:
        once = perturbation.perturb_words(lex, base, q0, 0.5, LAST, keys, draw=0, weights_source=grammar)
        assert np.array_equal(
            once, perturbation.perturb_words(lex, base, q0, 0.5, LAST, keys, 0, weights_source=grammar)
        )
        assert not np.array_equal(
            once, perturbation.perturb_words(lex, base, q0, 0.5, LAST, keys, 1, weights_source=grammar)
        )
        half = perturbation.perturb_words(lex, base[:10], q0, 0.5, LAST, keys[:10], draw=0, weights_source=grammar)
        assert np.array_equal(half, once[:10])


def test_draws_are_indexed_from_the_end_of_the_prefix(grammar, lex, base):
    """A longer prefix with the same last words and key gets the same perturbation of those words."""
    keys = perturbation.keys_for(SEED, np.arange(len(base)))
    for q0 in perturbation.Q0S:
        full = perturbation.perturb_words(lex, base, q0, 0.5, LAST, keys, 3, grammar)
        cut = perturbation.perturb_words(lex, base[:, 7:], q0, 0.5, LAST, keys, 3, grammar)
        assert np.array_equal(full[:, 7:], cut)


def test_synonym_perturbation_maps_a_synonym_prefix_onto_its_base(grammar, lex, base, sets):
    for delta in DELTAS[1:]:
        s = sets["synonym", delta]
        keys = perturbation.keys_for(SEED, s["base"])
        for draw in range(3):
            corrupted = perturbation.perturb_words(lex, s["prefixes"], "synonym", 1.0, LAST, keys, draw, grammar)
            clean = perturbation.perturb_words(lex, base[s["base"]], "synonym", 1.0, LAST, keys, draw, grammar)
            assert np.array_equal(corrupted, clean)
        c = sets["composition", delta]  # the class changed: the synonym perturber never restores it
        keys = perturbation.keys_for(SEED, c["base"])
        corrupted = perturbation.perturb_words(lex, c["prefixes"], "synonym", 1.0, LAST, keys, 0, grammar)
        clean = perturbation.perturb_words(lex, base[c["base"]], "synonym", 1.0, LAST, keys, 0, grammar)
        assert (corrupted != clean).any(axis=1).all()


def test_uniform_perturbation_couples_rows_wherever_every_change_was_replaced(lex, base, sets):
    beta = 0.6
    for family, delta in product(prefix_sets.FAMILIES, DELTAS[1:]):
        s = sets[family, delta]
        keys = perturbation.keys_for(SEED, s["base"])
        corrupted = perturbation.perturb_words(lex, s["prefixes"], "uniform", beta, LAST, keys, draw=4)
        clean = perturbation.perturb_words(lex, base[s["base"]], "uniform", beta, LAST, keys, draw=4)
        replaced = perturbation.keyed_uniforms(keys, 4, np.arange(LAST)[::-1], perturbation.SELECT) < beta
        changed = (s["prefixes"] != base[s["base"]])[:, -LAST:]
        coupled = ~(changed & ~replaced).any(axis=1)
        assert np.array_equal((corrupted == clean).all(axis=1), coupled), (family, delta)
        if len(s["base"]):
            assert coupled.any() and not coupled.all()


@pytest.mark.parametrize("beta", [0.1, 0.45])
def test_replacement_frequency_is_beta(grammar, lex, base, beta):
    rows = np.tile(base, (6, 1))
    keys = perturbation.keys_for(SEED + 1, np.arange(len(rows)))
    window = rows[:, -LAST:]
    n = window.size

    def check(changed: np.ndarray, expected: float) -> None:
        assert abs(changed.mean() - expected) < 4.5 * np.sqrt(expected * (1 - expected) / n), (changed.mean(), expected)

    selected = perturbation.keyed_uniforms(keys, 0, np.arange(LAST)[::-1], perturbation.SELECT) < beta
    check(selected, beta)
    out = perturbation.perturb_words(lex, rows, "uniform", beta, LAST, keys, draw=0)
    check(out[:, -LAST:] != window, beta * (1 - 1 / lex.n_seen))
    out = perturbation.perturb_words(lex, rows, "synonym", beta, LAST, keys, draw=0, weights_source=grammar)
    content = lex.content_class[lex.word_class[window]]
    check(out[:, -LAST:] != window, beta * (content * (1 - grammar.word_weight[window])).mean())


def test_uniform_draws_cover_the_seen_vocabulary_evenly(grammar, lex, base):
    """At the replaced positions (and only there, so the draw must not depend on the replace decision)."""
    rows = np.tile(base, (40, 1))
    keys = perturbation.keys_for(0, np.arange(len(rows)))
    out = perturbation.perturb_words(lex, rows, "uniform", 0.5, LAST, keys, draw=2)
    assert np.array_equal(out[:, :-LAST], rows[:, :-LAST])
    replaced = perturbation.keyed_uniforms(keys, 2, np.arange(LAST)[::-1], perturbation.SELECT) < 0.5
    assert np.array_equal(out[:, -LAST:][~replaced], rows[:, -LAST:][~replaced])
    counts = np.bincount(out[:, -LAST:][replaced], minlength=len(lex.words))
    assert not counts[lex.n_seen :].any()
    expected = replaced.sum() / lex.n_seen
    chi2 = ((counts[: lex.n_seen] - expected) ** 2 / expected).sum()
    assert counts[: lex.n_seen].min() > 0 and chi2 < (lex.n_seen - 1) + 6 * np.sqrt(2 * (lex.n_seen - 1))


def test_synonym_draws_stay_in_class_with_the_grammar_weights(grammar, lex, base, sets):
    rows = np.tile(sets["synonym", 3]["prefixes"], (4, 1))
    out = perturbation.perturb_words(
        lex, rows, "synonym", 1.0, LAST, perturbation.keys_for(1, np.arange(len(rows))), 0, grammar
    )
    assert np.array_equal(out[:, :-LAST], rows[:, :-LAST])
    assert np.array_equal(lex.word_class[out], lex.word_class[rows]) and lex.seen[out].all()
    content = lex.content_class[lex.word_class[rows]]
    assert np.array_equal(out[~content], rows[~content])
    unseen_noun = np.flatnonzero(~lex.seen & (lex.word_class == grammar.noun0))[0]
    draws = perturbation.perturb_words(
        lex,
        np.full((3000, LAST), unseen_noun),
        "synonym",
        1.0,
        LAST,
        perturbation.keys_for(2, np.arange(3000)),
        0,
        grammar,
    ).ravel()
    members = np.flatnonzero(grammar.word_class == grammar.noun0)
    freq = np.bincount(draws, minlength=len(lex.words))[members] / draws.size
    weights = grammar.word_weight[members]
    assert np.all(np.abs(freq - weights) < 5 * np.sqrt(weights * (1 - weights) / draws.size))


def test_perturbation_refuses_what_it_cannot_draw_and_keeps_every_word_at_beta_0(lex, base):
    keys = perturbation.keys_for(0, np.arange(len(base)))
    for args, message in [
        (
            ("synonym", 0.5, LAST, keys),
            "q0='synonym' needs weights_source, the grammar whose within-class weights Q0 uses",
        ),
        (("uniformly", 0.5, LAST, keys), "q0 must be one of ('uniform', 'synonym'), not 'uniformly'"),
        (("uniform", 1.5, LAST, keys), "beta must be in [0, 1], not 1.5"),
        (("uniform", 0.5, LAST, keys[:2]), f"keys must be one per prefix, shape ({len(base)},), not (2,)"),
    ]:
        with pytest.raises(ValueError) as error:
            perturbation.perturb_words(lex, base, *args, 0)
        assert str(error.value) == message
    assert np.array_equal(perturbation.perturb_words(lex, base, "uniform", 0.0, LAST, keys, 0), base)


# ---- the constants ------------------------------------------------------------------------------------------


def test_constants_of_the_proposition_as_stated():
    assert perturbation.proposition_constants(0.9, 16, 2) == pytest.approx((1.0, 0.2))
    assert perturbation.proposition_constants(0.95, 16, 2) == pytest.approx((0.8, 0.1))
    with pytest.raises(ValueError):
        perturbation.proposition_constants(1.5, 16, 2)


def test_exact_constants_of_the_t_that_runs():
    # l < L: prefixes that differ before the window have disjoint T-laws; an unseen word there is never replaced.
    assert perturbation.exact_constants("uniform", 0.975, 32, 40, 1) == (1.0, 1.0)
    assert perturbation.exact_constants("uniform", 0.975, 32, 40, 0) == (1.0, 0.0)
    # l = L: the sup is the coupling's value, attained by unseen words (never drawn from Q0).
    alpha, c = perturbation.exact_constants("uniform", 0.975, 40, 40, 2)
    assert alpha == pytest.approx(1 - 0.975**40) and c == pytest.approx(1 - 0.975**2)
    assert perturbation.exact_constants("synonym", 1.0, 40, 40, 1) == (1.0, 1.0)
    with pytest.raises(ValueError, match="q0"):
        perturbation.exact_constants("other", 1.0, 4, 4, 1)


def test_contraction_betas_invert_the_exact_alpha_and_the_propositions_bound():
    exact_beta, prop_beta = perturbation.contraction_betas(40)
    assert exact_beta == pytest.approx(0.9828, abs=5e-5) and prop_beta == pytest.approx(0.9875)
    assert perturbation.exact_constants("uniform", exact_beta, 40, 40, 1)[0] == pytest.approx(0.5)
    assert perturbation.proposition_constants(prop_beta, 40, 1)[0] == pytest.approx(0.5)
    assert perturbation.exact_constants("uniform", 0.985, 40, 40, 1)[0] == pytest.approx(0.454, abs=5e-4)  # < 1/2


@pytest.mark.parametrize("beta", [0.3, 0.8])
def test_exact_constants_at_l_equal_l_are_the_sup_over_every_prefix_pair(beta):
    """Enumerating every pair of prefixes over 3 seen words and 1 unseen one: alpha is the sup of TV(T(.|X),
    T(.|X')), and C_delta the sup over X' at distance delta of the TV to its nearest seen-word (support) prefix."""
    vocab, seen, length = 4, 3, 2
    seqs = list(product(range(vocab), repeat=length))
    support = [x for x in seqs if max(x) < seen]
    tv = {(x, y): perturbation.exact_tv_of_T(vocab, beta, x, y, q0_words=seen) for x in seqs for y in seqs}
    alpha, _ = perturbation.exact_constants("uniform", beta, length, length, 0)
    assert max(tv.values()) == pytest.approx(alpha)
    for delta in range(1, length + 1):
        near = [x for x in seqs if min(sum(a != b for a, b in zip(x, s)) for s in support) <= delta]
        eta = max(min(tv[(s, x)] for s in support) for x in near)
        assert eta == pytest.approx(perturbation.exact_constants("uniform", beta, length, length, delta)[1])


def test_uniform_replacement_tv_is_exact_and_below_the_propositions_c():
    assert [round(perturbation.uniform_replacement_tv(0.975, 93, m), 4) for m in (1, 2, 4)] == [0.025, 0.0489, 0.0934]
    for seen_changes, unseen_changes, x, y in [
        (2, 0, (0, 1, 2), (1, 0, 2)),
        (1, 1, (0, 1, 2), (2, 4, 2)),
        (0, 2, (0, 1, 2), (4, 5, 2)),
        (2, 1, (0, 1, 2), (1, 3, 4)),
    ]:
        exact = perturbation.exact_tv_of_T(6, 0.7, x, y, q0_words=4)
        assert perturbation.uniform_replacement_tv(0.7, 4, seen_changes, unseen_changes) == pytest.approx(exact)
    for m in range(1, 6):
        assert perturbation.uniform_replacement_tv(0.9, 50, m) < min(0.1 * m, 1.0)
        assert perturbation.uniform_replacement_tv(0.9, 50, 0, m) == pytest.approx(1 - 0.9**m)


def test_row_tv_to_base_shows_where_the_propositions_condition_fails(lex, base):
    """Changes inside the window: the exact TV, below the Proposition's C. One change before the window (l < L):
    TV = 1 whatever beta, far above the Proposition's (1 - beta) delta."""
    rows = base[:3].copy()
    inside, before = LENGTH - 1, 0
    rows[0, inside] = (rows[0, inside] + 1) % lex.n_seen  # a seen word, inside the window
    rows[1, inside] = lex.n_seen  # an unseen word, inside
    rows[2, before] = lex.n_seen  # an unseen word before the window
    tv, exact = perturbation.row_tv_to_base(lex, rows, base[:3], "uniform", 0.975, LAST)
    assert exact.all()
    assert tv == pytest.approx([perturbation.uniform_replacement_tv(0.975, lex.n_seen, 1), 0.025, 1.0])
    assert tv[2] > perturbation.proposition_constants(0.975, LAST, 1)[1]


def test_exact_tv_of_small_cases():
    assert perturbation.exact_tv_of_T(3, 0.4, (0,), (2,)) == pytest.approx(0.6)
    assert perturbation.exact_tv_of_T(2, 0.5, (0, 0), (1, 1)) == pytest.approx(0.5)  # marginals (.75,.25) vs (.25,.75)
    assert perturbation.exact_tv_of_T(2, 0.0, (0, 1), (0, 0)) == pytest.approx(1.0)
    assert perturbation.exact_tv_of_T(3, 1.0, (0, 1), (2, 2)) == pytest.approx(0.0)


@pytest.mark.parametrize("beta", [0.0, 0.3, 0.5, 0.8, 0.95, 1.0])
def test_proposition_holds_by_exhaustive_enumeration(beta):
    vocab = 3
    for length in range(1, 4):
        seqs = list(product(range(vocab), repeat=length))
        worst = np.zeros(length + 1)  # sup of TV over pairs at each Hamming distance
        for x, x_prime in product(seqs, repeat=2):
            delta = sum(a != b for a, b in zip(x, x_prime))
            worst[delta] = max(worst[delta], perturbation.exact_tv_of_T(vocab, beta, x, x_prime))
        alpha, _ = perturbation.proposition_constants(beta, length, length)
        assert worst.max() <= alpha + 1e-12
        assert worst[0] == 0.0  # U(0) = 0
        for delta in range(1, length + 1):
            assert worst[delta] <= perturbation.proposition_constants(beta, length, delta)[1] + 1e-12
        assert worst[1] == pytest.approx(1 - beta)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda: perturbation.proposition_constants(0.5, -1, 1),
            "need beta in [0, 1], last >= 0 and delta >= 0, not 0.5, -1, 1",
        ),
        (
            lambda: perturbation.proposition_constants(1.5, 4, 1),
            "need beta in [0, 1], last >= 0 and delta >= 0, not 1.5, 4, 1",
        ),
        (
            lambda: perturbation.uniform_replacement_tv(0.5, 1, 1),
            "need beta in [0, 1], n_words >= 2, changes >= 0; not 0.5, 1, 1, 0",
        ),
        (
            lambda: perturbation.uniform_replacement_tv(0.5, 9, -1),
            "need beta in [0, 1], n_words >= 2, changes >= 0; not 0.5, 9, -1, 0",
        ),
        (
            lambda: perturbation.uniform_replacement_tv(1.5, 9, 1),
            "need beta in [0, 1], n_words >= 2, changes >= 0; not 1.5, 9, 1, 0",
        ),
        (
            lambda: perturbation.exact_constants("uniform", 0.5, 0, 4, 1),
            "need beta in [0, 1], last >= 1, length >= 1 and delta >= 0; not 0.5, 0, 4, 1",
        ),
        (
            lambda: perturbation.exact_constants("uniform", 0.5, 4, 0, 1),
            "need beta in [0, 1], last >= 1, length >= 1 and delta >= 0; not 0.5, 4, 0, 1",
        ),
        (
            lambda: perturbation.exact_constants("uniform", 0.5, 4, 4, -1),
            "need beta in [0, 1], last >= 1, length >= 1 and delta >= 0; not 0.5, 4, 4, -1",
        ),
        (
            lambda: perturbation.exact_constants("uniform", 1.5, 4, 4, 1),
            "need beta in [0, 1], last >= 1, length >= 1 and delta >= 0; not 1.5, 4, 4, 1",
        ),
        (lambda: perturbation.contraction_betas(0), "length must be >= 1, not 0"),
        (lambda: perturbation.exact_tv_of_T(3, 0.5, (0, 1), (0,)), "x and x_prime must have the same length"),
    ],
)
def test_arguments_outside_the_definitions_are_refused_with_the_values(call, message):
    with pytest.raises(ValueError) as error:
        call()
    assert str(error.value) == message


def test_the_smallest_valid_arguments_are_accepted():
    """The edges of each domain: beta 0, no positions, two words, one word of length, delta 0."""
    assert perturbation.proposition_constants(0.5, 0, 0) == (0.0, 0.0)
    assert perturbation.proposition_constants(0.5, 4, 4) == (1.0, 1.0)  # (1 - beta) delta = 2, capped at 1
    assert perturbation.uniform_replacement_tv(0.0, 2, 1) == 1.0  # T keeps every word: the laws are disjoint
    assert perturbation.uniform_replacement_tv(1.0, 2, 1) == 0.0  # T redraws every word
    assert perturbation.exact_constants("uniform", 0.0, 1, 1, 1) == (1.0, 1.0)
    assert perturbation.exact_constants("uniform", 0.9, 16, 16, 0) == (pytest.approx(1 - 0.9**16), 0.0)
    assert perturbation.contraction_betas(1) == (0.5, 0.5)


def class_mates(lex, row: np.ndarray, positions: range, unseen: bool) -> tuple[list[int], list[int]]:
    """The first two content-word positions in `positions` and, for each, a class-mate of its word (the class's
    unseen pseudo-word, or another seen word of the class)."""
    found, mates = [], []
    for p in positions:
        cls = lex.word_class[row[p]]
        if not lex.content_class[cls]:
            continue
        pool = np.flatnonzero((lex.word_class == cls) & (lex.seen != unseen) & (np.arange(len(lex.words)) != row[p]))
        if pool.size:
            found.append(p)
            mates.append(int(pool[0]))
        if len(found) == 2:
            return found, mates
    raise AssertionError("no two content words with class-mates in the window")


def test_row_tv_to_base_counts_seen_and_unseen_changes_and_reads_t_window(lex, base):
    """Two changes: seen and unseen ones give different exact TVs (one change would not tell them apart, both are
    1 - beta). With l = L a change at position 0 is inside the window."""
    window = range(LENGTH - LAST, LENGTH)
    rows = base[:3].copy()
    for r, kind in enumerate(("seen", "unseen", "both")):
        positions, _ = class_mates(lex, rows[r], window, unseen=False)
        for p, unseen in zip(positions, (kind != "seen", kind == "unseen")):
            rows[r, p] = lex.n_seen if unseen else (rows[r, p] + 1) % lex.n_seen
    tv, exact = perturbation.row_tv_to_base(lex, rows, base[:3], "uniform", 0.975, LAST)
    expected = [perturbation.uniform_replacement_tv(0.975, lex.n_seen, s, u) for s, u in ((2, 0), (0, 2), (1, 1))]
    assert exact.all() and tv == pytest.approx(expected) and expected[0] < expected[2] < expected[1]
    first = base[:1].copy()
    first[0, 0] = lex.n_seen
    tv, _ = perturbation.row_tv_to_base(lex, first, base[:1], "uniform", 0.975, LENGTH)
    assert tv == pytest.approx([0.025])  # inside the window at l = L: the unseen word is replaced w.p. beta
    with pytest.raises(ValueError) as error:
        perturbation.row_tv_to_base(lex, base[:2], base[:3], "uniform", 0.5, LAST)
    assert str(error.value) == f"prefixes (2, {LENGTH}) and bases (3, {LENGTH}) must have one base per row"


def test_row_tv_to_base_under_class_replacement_is_the_couplings_bound_below_beta_1_and_exact_at_1(lex, base):
    window = range(LENGTH - LAST, LENGTH)
    rows = base[:4].copy()
    positions, mates = class_mates(lex, rows[1], window, unseen=True)
    rows[1, positions[0]] = mates[0]  # one unseen synonym: restored by class replacement
    positions, mates = class_mates(lex, rows[2], window, unseen=True)
    rows[2, positions] = mates  # two
    other = np.flatnonzero(lex.word_class != lex.word_class[rows[3, LENGTH - 1]])[0]
    rows[3, LENGTH - 1] = other  # a word of another class: never restored
    tv, exact = perturbation.row_tv_to_base(lex, rows, base[:4], "synonym", 0.5, LAST)
    assert tv.tolist() == [0.0, 0.5, 0.75, 1.0]  # 1 - beta^m where every change is restorable, else 1
    assert exact.tolist() == [True, False, False, True]  # the coupling's value bounds the TV from above
    tv, exact = perturbation.row_tv_to_base(lex, rows, base[:4], "synonym", 1.0, LAST)
    assert tv.tolist() == [0.0, 0.0, 0.0, 1.0] and exact.all()


def test_positions_are_chosen_uniformly_among_the_eligible_ones():
    """k distinct eligible columns per row, every eligible column reachable: over 400 rows each of 10 columns is
    chosen, and an ineligible one never is."""
    eligible = np.ones((400, 10), dtype=bool)
    eligible[:, 3] = False
    ok, positions = prefix_sets._choose_positions(np.random.default_rng(0), eligible, 2)
    assert ok.all() and (positions[:, 0] != positions[:, 1]).all()
    counts = np.bincount(positions.ravel(), minlength=10)
    assert counts[3] == 0 and (np.delete(counts, 3) > 50).all()  # 800 picks over 9 columns: about 89 each


def test_in_class_draws_follow_the_grammars_within_class_weights(grammar):
    """An even grid of uniforms gives each word of a content class its share of the class's weight, to 1/n."""
    n = 2000
    for cls in (grammar.noun0, grammar.verb0 + 1):
        words = np.flatnonzero(grammar.word_class == cls)
        drawn = prefix_sets._draw_in_class(grammar, np.full(n, cls), (np.arange(n) + 0.5) / n)
        share = np.bincount(drawn - words[0], minlength=words.size) / n
        weights = grammar.word_weight[words] / grammar.word_weight[words].sum()
        assert drawn.min() >= words[0] and drawn.max() <= words[-1]
        assert share == pytest.approx(weights, abs=1.0 / n)


def test_a_partial_composition_has_a_completion_by_what_has_been_read():
    """mass[s, v, o]: subject 0 has completions only through verb 0; subject 1 has none."""
    mass = np.zeros((2, 2, 2), dtype=bool)
    mass[0, 0, 1] = True
    comp = np.array([[0, 0, 1], [0, 0, 0], [0, 1, 0], [0, 0, 0], [1, 0, 0], [1, 1, 1]])
    present = np.array([[1, 1, 1], [1, 1, 1], [1, 1, 0], [1, 1, 0], [1, 0, 0], [0, 0, 0]], dtype=bool)
    # the last: nothing read yet, so any sentence can follow
    assert prefix_sets._has_completion(mass, comp, present).tolist() == [True, False, False, True, False, True]


def test_delta_sets_and_truth_refuse_bad_arguments_with_the_values(grammar, lex, base, sets):
    cases = [
        (lambda: prefix_sets.delta_sets(grammar, lex, base, [-1], LAST, SEED), "deltas must be >= 0, not -1"),
        (
            lambda: prefix_sets.delta_sets(grammar, lex, sets["composition", 1]["prefixes"], [1], LAST, SEED),
            "base prefixes must be in the support (distance 0), e.g. from base_prefixes",
        ),
        (
            lambda: prefix_sets.truth(grammar, lex, base, "synonyms"),
            "family must be one of ('composition', 'synonym'), not 'synonyms'",
        ),
    ]
    off = sets["composition", 1]["prefixes"][:3]  # held-out compositions in the current sentence: no in-support law
    off = off[np.isnan(grammar.next_word_probs(list(off), "in_support")).any(axis=1)]
    message = (
        f"{len(off)} prefix(es) have no true law: their current sentence breaks the template or, for the synonym "
        "family, leaves the support"
    )
    cases.append((lambda: prefix_sets.truth(grammar, lex, off, "synonym"), message))
    for call, expected in cases:
        with pytest.raises(ValueError) as error:
            call()
        assert str(error.value) == expected


def test_the_window_starts_at_position_l_minus_last(grammar, lex, base):
    """With last = 1 only the final word may change: the synonym rows are the bases ending in a content word."""
    (s,) = [x for x in prefix_sets.delta_sets(grammar, lex, base, [1], 1, SEED) if x["family"] == "synonym"]
    ends_in_content = np.flatnonzero(lex.content_class[lex.word_class[base[:, -1]]])
    assert s["base"].tolist() == ends_in_content.tolist() and ends_in_content.size
    assert (s["prefixes"][:, :-1] == base[s["base"], :-1]).all() and not lex.seen[s["prefixes"][:, -1]].any()


def test_composition_changes_are_drawn_across_slots_and_words(grammar, sets):
    """Which slot of a sentence changes, and the new word within its class, are random draws: over the delta-1 rows
    both subjects or objects (nouns) and verbs change, and some class receives more than one new word."""
    s = sets["composition", 1]
    base_rows = prefix_sets.base_prefixes(grammar, 80, LENGTH, SEED)[s["base"]]
    changed = s["prefixes"] != base_rows
    new = s["prefixes"][changed]
    kinds = grammar.word_class[new]
    assert ((kinds >= grammar.noun0) & (kinds < grammar.verb0)).any() and (
        (kinds >= grammar.verb0) & (kinds < grammar.adj0)
    ).any()
    assert any(len(set(new[kinds == k].tolist())) > 1 for k in set(kinds.tolist()))


def test_a_sentences_change_is_drawn_among_all_that_break_it(grammar, base):
    """The same base row drawn 200 times at delta 1: within one sentence, more than one (position, new class)
    breaks it, and the draws find several, not always the first option."""
    rows = np.repeat(base[:1], 200, axis=0)
    window = np.broadcast_to(np.arange(LENGTH) >= LENGTH - LAST, rows.shape)
    ok, out = prefix_sets._composition_candidates(grammar, rows, window, 1, np.random.default_rng(0))
    is_end = grammar.word_class[base[0]] == grammar.end_class
    sentence = np.cumsum(is_end) - is_end
    changes: dict[int, set] = {}
    for r, p in zip(*np.nonzero(out[ok] != rows[ok])):
        changes.setdefault(int(sentence[p]), set()).add((int(p), int(grammar.word_class[out[ok][r, p]])))
    assert max(len(c) for c in changes.values()) > 1


def test_no_base_prefixes_is_an_empty_int_table_and_the_lexicon_checks_shapes_and_types(grammar, lex):
    empty = prefix_sets.base_prefixes(grammar, 0, LENGTH, SEED)
    assert empty.shape == (0, LENGTH) and empty.dtype == np.int64
    assert lex.check([[1.0, 2.0]]).dtype == np.int64
    with pytest.raises(ValueError) as error:
        lex.check([1, 2])
    assert str(error.value) == "prefixes must be [n, L], not shape (2,)"
