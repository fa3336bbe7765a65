"""The perturber: exact semantics and statistical behaviour, numpy and torch, against a per-token loop."""

from __future__ import annotations

import itertools
import random

import numpy as np
import pytest
import torch
from scipy import stats

from support.reference_perturb import perturb_loop
from workflow_lib.perturb.perturber import STRATEGIES, perturb, prefix_targets, sequence_ids
from workflow_lib.perturb.strategies import get
from workflow_lib.perturb.synonym_table import SynonymTable

V = 20
SPECIAL = [0]
CANDIDATES = {t: ([(t + 1) % V or 1, (t + 2) % V or 2, (t + 5) % V or 5], [0.2, 0.3, 0.5]) for t in range(1, 15)}


def table() -> SynonymTable:
    tokens = sorted(CANDIDATES)
    return SynonymTable.from_rows(V, tokens, [CANDIDATES[t][0] for t in tokens], [CANDIDATES[t][1] for t in tokens])


def batch(n_seq=400, length=30, seed=0, bos_eos=True):
    rng = np.random.default_rng(seed)
    seqs = rng.integers(1, V, size=(n_seq, length))
    if bos_eos:
        seqs[:, 0] = 0
        seqs[:, -1] = 0
    return seqs.reshape(-1).astype(np.int64), np.arange(0, (n_seq + 1) * length, length, dtype=np.int64)


def split(values, offsets):
    return [values[offsets[i] : offsets[i + 1]].tolist() for i in range(len(offsets) - 1)]


def eligible_mask(values, strategy):
    mask = ~np.isin(values, SPECIAL)
    if get(strategy).needs_synonyms:  # deletion and the embedding space's need none
        mask &= np.isin(values, list(CANDIDATES))
    return mask


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_selection_rate_matches_intensity(strategy):
    values, offsets = batch()
    alpha = 0.1
    out = perturb(values, offsets, strategy, alpha, table(), np.random.default_rng(1), SPECIAL)
    eligible = eligible_mask(values, strategy)
    assert not out.selected[~eligible].any()  # special tokens and tokens without synonyms never selected
    k, n = int(out.selected.sum()), int(eligible.sum())
    low, high = stats.binomtest(k, n, alpha).proportion_ci(0.999)
    assert low <= alpha <= high, (k, n)


def test_synonym_draws_follow_table_weights():
    values = np.full(30000, 3, dtype=np.int64)
    out = perturb(values, np.array([0, len(values)]), "replacement", 1.0, table(), np.random.default_rng(2))
    cands, weights = CANDIDATES[3]
    observed = np.array([(out.values == c).sum() for c in cands])
    assert observed.sum() == len(values)
    assert stats.chisquare(observed, np.array(weights) * len(values)).pvalue > 1e-3


def test_insertion_keeps_originals_in_order_and_specials_at_the_ends():
    values, offsets = batch()
    out = perturb(values, offsets, "insertion", 0.3, table(), np.random.default_rng(3), SPECIAL)
    assert out.selected.sum() > 0
    for orig, new, origin in zip(
        split(values, offsets), split(out.values, out.offsets), split(out.origin, out.offsets)
    ):
        assert [t for t, o in zip(new, origin) if o >= 0] == orig
        assert new[0] == 0 and new[-1] == 0 and 0 not in new[1:-1]
    assert len(out.values) == len(values) + int(out.selected.sum())
    inserted = out.origin < 0
    # every inserted token is a synonym of its source
    for syn, src in zip(out.values[inserted], out.sources):
        assert syn in CANDIDATES[int(values[src])][0]


def test_insertion_gap_is_uniform():
    values = np.full(12, 4, dtype=np.int64)  # one sequence, no specials: 13 gaps
    offsets = np.array([0, 12])
    gaps = []
    rng = np.random.default_rng(4)
    for _ in range(400):
        out = perturb(values, offsets, "insertion", 1.0, table(), rng)
        originals_before = np.cumsum(out.origin >= 0) - (out.origin >= 0)
        gaps.append(originals_before[out.origin < 0])
    counts = np.bincount(np.concatenate(gaps), minlength=13)
    assert stats.chisquare(counts).pvalue > 1e-3


def test_replacement_and_deletion_keep_length_and_order():
    values, offsets = batch()
    rep = perturb(values, offsets, "replacement", 0.3, table(), np.random.default_rng(5), SPECIAL)
    assert np.array_equal(rep.offsets, offsets)
    assert np.array_equal(rep.values[~rep.selected], values[~rep.selected])
    assert all(r in CANDIDATES[int(v)][0] for r, v in zip(rep.values[rep.selected], values[rep.selected]))
    dele = perturb(values, offsets, "deletion", 0.3, table(), np.random.default_rng(5), SPECIAL)
    for orig, sel, new in zip(split(values, offsets), split(dele.selected, offsets), split(dele.values, dele.offsets)):
        assert new == [t for t, s in zip(orig, sel) if not s]


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_intensity_zero_is_identity(strategy):
    values, offsets = batch(50)
    out = perturb(values, offsets, strategy, 0.0, table(), np.random.default_rng(6), SPECIAL)
    assert np.array_equal(out.values, values) and np.array_equal(out.offsets, offsets)


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_same_seed_same_output_other_seed_other_output(strategy):
    values, offsets = batch(100)
    a = perturb(values, offsets, strategy, 0.2, table(), np.random.default_rng(7), SPECIAL)
    b = perturb(values, offsets, strategy, 0.2, table(), np.random.default_rng(7), SPECIAL)
    c = perturb(values, offsets, strategy, 0.2, table(), np.random.default_rng(8), SPECIAL)
    assert np.array_equal(a.values, b.values) and np.array_equal(a.offsets, b.offsets)
    if get(strategy).in_embeddings:  # no token changes: what the seed decides is which positions are noised
        assert np.array_equal(a.values, values) and np.array_equal(a.selected, b.selected)
        assert not np.array_equal(a.selected, c.selected)
        assert np.array_equal(a.perturbed_mask(), a.selected)  # the noised positions, in place
    else:
        assert not np.array_equal(a.values, c.values) or not np.array_equal(a.offsets, c.offsets)
    gen = lambda s: torch.Generator().manual_seed(s)
    ta = perturb(torch.from_numpy(values), torch.from_numpy(offsets), strategy, 0.2, table().to("cpu"), gen(7), SPECIAL)
    tb = perturb(torch.from_numpy(values), torch.from_numpy(offsets), strategy, 0.2, table().to("cpu"), gen(7), SPECIAL)
    assert torch.equal(ta.values, tb.values)


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("position", ["uniform", "after_source"])
def test_prefix_targets_score_each_original_once_from_its_perturbed_prefix(strategy, position):
    values, offsets = batch(200, 25)
    out = perturb(values, offsets, strategy, 0.3, table(), np.random.default_rng(9), SPECIAL, position)
    positions, targets, target_offsets = prefix_targets(values, offsets, out)
    seqs = split(values, offsets)
    for s, orig in enumerate(seqs):
        new = out.values[out.offsets[s] : out.offsets[s + 1]]
        slots = out.slot[offsets[s] : offsets[s + 1]] - out.offsets[s]
        pos = positions[target_offsets[s] : target_offsets[s + 1]]
        tgt = targets[target_offsets[s] : target_offsets[s + 1]]
        scored = [t for t in range(1, len(orig)) if slots[t] >= 1]
        assert tgt.tolist() == [orig[t] for t in scored]  # each original token (with a prefix) once, in order
        assert pos.tolist() == [slots[t] - 1 for t in scored]
        if strategy != "deletion":
            assert len(scored) == len(orig) - 1
            # the position after each target position holds the target's own (possibly replaced) token, never
            # an inserted one
            assert [out.origin[out.offsets[s] + p + 1] - offsets[s] for p in pos] == scored
            if strategy == "insertion":
                assert [new[p + 1] for p in pos] == tgt.tolist()
        if strategy == "insertion" and position == "after_source":
            # no leak: the prefix of x_t holds only originals before t and synonyms of them
            src_of = dict(zip(np.flatnonzero(out.origin < 0).tolist(), out.sources.tolist()))
            for t, p in zip(scored, pos):
                for j in range(out.offsets[s], out.offsets[s] + p + 1):
                    source = out.origin[j] if out.origin[j] >= 0 else src_of[j]
                    assert source - offsets[s] < t


def test_deletion_targets_keep_deleted_tokens():
    values, offsets = batch(100, 20, bos_eos=False)
    out = perturb(values, offsets, "deletion", 0.3, table(), np.random.default_rng(10))
    _, targets, _ = prefix_targets(values, offsets, out)
    local = (
        np.arange(len(values))
        - offsets[sequence_ids(offsets, __import__("workflow_lib.perturb.perturber", fromlist=["x"]).backend(values))]
    )
    deleted_targets = out.selected & (local >= 1)
    assert len(targets) >= int(deleted_targets.sum()) > 0


def _histograms(values, strategy, draws):
    """Summary statistics of many perturbations: output-length histogram and token frequencies."""
    lengths = np.bincount([len(d) for d in draws], minlength=60)
    tokens = np.bincount(np.concatenate([np.asarray(d) for d in draws]), minlength=V)
    return lengths, tokens


def _two_sample(a, b):
    keep = (a + b) > 0
    return stats.chi2_contingency(np.stack([a[keep], b[keep]])).pvalue


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_numpy_torch_and_loop_agree_in_distribution(strategy):
    values, offsets = batch(1500, 12)
    seqs = split(values, offsets)
    np_out = perturb(values, offsets, strategy, 0.2, table(), np.random.default_rng(11), SPECIAL)
    t_out = perturb(
        torch.from_numpy(values),
        torch.from_numpy(offsets),
        strategy,
        0.2,
        table().to("cpu"),
        torch.Generator().manual_seed(11),
        SPECIAL,
    )
    if get(strategy).in_embeddings:  # the tokens stay: the selection's law, per position, against Bernoulli(0.2)
        local = np.arange(len(values)) - np.repeat(offsets[:-1], np.diff(offsets))
        eligible = eligible_mask(values, strategy)
        for selected in (np_out.selected, t_out.selected.numpy()):
            assert np.array_equal(np_out.values, values) and not selected[~eligible].any()
            hits = np.bincount(local[selected], minlength=12)
            trials = np.bincount(local[eligible], minlength=12)
            table_ = np.stack([hits, trials - hits])[:, trials > 0]
            assert stats.chi2_contingency(table_).pvalue > 1e-3  # the same rate at every position
            assert stats.binomtest(int(hits.sum()), int(trials.sum()), 0.2).pvalue > 1e-3
        return
    loop = perturb_loop(seqs, strategy, 0.2, CANDIDATES, random.Random(11), set(SPECIAL))
    np_h = _histograms(values, strategy, split(np_out.values, np_out.offsets))
    t_h = _histograms(values, strategy, split(t_out.values.numpy(), t_out.offsets.numpy()))
    l_h = _histograms(values, strategy, loop)
    for a, b, c in zip(np_h, t_h, l_h):
        assert _two_sample(a, b) > 1e-3 and _two_sample(a, c) > 1e-3
    if strategy == "insertion":  # where insertions land: position of inserted tokens, numpy vs the loop
        np_pos = [i for s in split(np_out.origin, np_out.offsets) for i, o in enumerate(s) if o < 0]
        loop_pos = [i for new, orig in zip(loop, seqs) for i in _inserted_positions(new, orig)]
        assert _two_sample(np.bincount(np_pos, minlength=20), np.bincount(loop_pos, minlength=20)) > 1e-3


def _inserted_positions(new, orig):
    """Positions of inserted tokens, by aligning with the original (originals stay in order)."""
    out, j = [], 0
    for i, t in enumerate(new):
        if (
            j < len(orig)
            and t == orig[j]
            and len(new) - i > len(orig) - j - 1
            and _can_align(new[i + 1 :], orig[j + 1 :])
        ):
            j += 1
        else:
            out.append(i)
    return out


def _can_align(rest_new, rest_orig):
    it = iter(rest_new)
    return all(any(t == o for t in it) for o in rest_orig)


def test_synonym_table_round_trips_through_parquet():
    t = table()
    back = SynonymTable.from_arrow(t.to_arrow())
    assert np.array_equal(back.offsets, t.offsets) and np.array_equal(back.candidates, t.candidates)
    assert np.allclose(back.keys, t.keys, atol=1e-6)
    u = SynonymTable.uniform(V, SPECIAL)
    assert SynonymTable.from_arrow(u.to_arrow()).shared and 0 not in u.candidates.tolist()


def test_bad_arguments_raise():
    values, offsets = batch(2)
    with pytest.raises(ValueError, match="strategy"):
        perturb(values, offsets, "swap", 0.1, table(), np.random.default_rng(0))
    with pytest.raises(ValueError, match="intensity"):
        perturb(values, offsets, "insertion", -0.1, table(), np.random.default_rng(0))
    with pytest.raises(ValueError, match="weights"):
        SynonymTable.from_rows(5, [1], [[2]], [[-1.0]])


def test_proposition_token_replacement_tv_bound():
    """Paper, Proposition (extrapolability of token replacement): each of the last l positions is replaced,
    with probability beta, by a draw from Q0. With Q0 uniform, TV(T(.|X), T(.|X')) <= 1 - beta^H <= (1-beta) H,
    H the Hamming distance. Our replacement perturber with the uniform table IS this T (l = L): we check its
    law against the exact enumeration, then the bound on every pair of inputs."""
    vocab, length, beta = 3, 3, 0.6
    q0 = SynonymTable.uniform(vocab)
    outcomes = list(itertools.product(range(vocab), repeat=length))

    def exact_law(x):
        return np.array(
            [np.prod([(1 - beta) * (y_i == x_i) + beta / vocab for y_i, x_i in zip(y, x)]) for y in outcomes]
        )

    x = np.array([0, 1, 2])
    draws = perturb(np.tile(x, 20000), np.arange(0, 60001, 3), "replacement", beta, q0, np.random.default_rng(12))
    observed = np.bincount(draws.values.reshape(-1, 3) @ np.array([9, 3, 1]), minlength=27)
    assert stats.chisquare(observed, exact_law(x) * 20000).pvalue > 1e-3
    for a, b in itertools.combinations(outcomes, 2):
        hamming = sum(i != j for i, j in zip(a, b))
        tv = 0.5 * np.abs(exact_law(a) - exact_law(b)).sum()
        assert tv <= 1 - beta**hamming + 1e-12 <= (1 - beta) * hamming + 1e-12
