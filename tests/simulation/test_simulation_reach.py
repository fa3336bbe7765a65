"""Which unseen pairs a perturbed copy reaches: the `empirical` arm's copy holds no training pair outside D (by
construction, measured here), the `oracle` arm's does, and the fits record the count per fit."""

from __future__ import annotations

import numpy as np
import pytest

from workflow_lib.simulation.study import (
    empirical_bigram,
    fit_vocabulary,
    pair_counts,
    perturbed_copy,
    sample_truth,
    synonym_table,
    unseen_pairs_reached,
)

# The paper's data size (500 sequences of 10 tokens) at vocabulary sizes where D covers most pairs (20) to where it
# covers few (800).
SIZES = (20, 50, 200, 800)


def copy_of(rule: str, V: int, alpha: float = 1.0, seed: int = 0):
    M, x = sample_truth(V, 500, 10, 0.5, np.random.default_rng(seed))
    P = M if rule == "oracle" else empirical_bigram(x, V)
    copy, _eligible, _replaced, changed = perturbed_copy(x, synonym_table(P, x, 2.0), alpha, np.random.default_rng(1))
    return x, copy, changed


def test_the_count_is_the_unseen_training_pairs_of_the_copy_one_by_one():
    """unseen_pairs_reached against a loop over the copy's training pairs (copy[t], x[t + 1])."""
    x, copy, changed = copy_of("oracle", 200)
    assert changed > 0
    seen = {(int(a), int(b)) for a, b in zip(x[:, :-1].ravel(), x[:, 1:].ravel())}
    pairs = {(int(a), int(b)) for a, b in zip(copy.ravel(), x[:, 1:].ravel())}
    assert unseen_pairs_reached(copy, x, 200) == len(pairs - seen) > 0
    assert unseen_pairs_reached(x[:, :-1], x, 200) == 0  # alpha = 0: the copy is D


@pytest.mark.parametrize("V", SIZES)
@pytest.mark.parametrize("alpha", [0.3, 1.0])
def test_the_empirical_copy_holds_no_pair_outside_the_data(V, alpha):
    """Every replacement X_t -> v of the empirical arm has both (X_{t-1}, v) and (v, X_{t+1}) observed in D (P_D
    above 2/|V| means a count above 0); the copy's training pairs are (v, X_{t+1}) and, before it, (X_{t-1} or its
    own replacement, X_t): the target never changes. So the copy reaches no unseen pair of D."""
    x, copy, changed = copy_of("empirical", V, alpha)
    counts = pair_counts(x, V)
    s, t = np.nonzero(copy != x[:, :-1])
    assert len(s) == changed > 0
    v = copy[s, t]
    assert (counts[x[s, t - 1], v] > 0).all() and (counts[v, x[s, t + 1]] > 0).all()
    assert unseen_pairs_reached(copy, x, V) == 0


@pytest.mark.parametrize("V", [200, 800])
def test_oracle_synonyms_do_reach_unseen_pairs(V):
    """The same count on the oracle arm's copy is positive where D leaves many pairs unseen: the measure sees
    what the empirical arm's zero would have missed."""
    x, copy, _ = copy_of("oracle", V)
    assert unseen_pairs_reached(copy, x, V) > 100


def test_the_guarantee_rests_on_the_targets_staying():
    """Read as a sequence (v also the target of the pair before it), the empirical copy does hold unseen pairs: two
    adjacent replacements make (v', v), which no synonym set checks. The fit trains on (copy[t], x[t + 1]) instead,
    so this never reaches the model; the test pins down why the zero above holds."""
    x, copy, _ = copy_of("empirical", 200)
    as_sequences = np.concatenate([copy, x[:, -1:]], axis=1)
    seen = pair_counts(x, 200).ravel() > 0
    cells = np.unique(as_sequences[:, :-1] * 200 + as_sequences[:, 1:])
    assert (~seen[cells]).sum() > 0


SMALL = {
    "seed": 3,
    "replications": 2,
    "intensities": [0, 0.5, 1],
    "synonyms": ["oracle", "empirical"],
    "shrinkage": False,
    "heldout_sequences": 20,
    "n_sequences": 60,
    "seq_len": 8,
    "dirichlet": 0.5,
    "threshold_factor": 2,
    "batch_unit": "pairs",
    "embedding_dim": 4,
    "hidden_dim": 4,
    "epochs": 1,
    "batch_size": 100,
}


def test_every_fit_records_what_its_copy_reaches():
    """fit_vocabulary's rows: 0 for the empirical arm at every intensity, 0 at alpha = 0, and the count of the
    oracle's copy recomputed from the same streams."""
    from workflow_lib.simulation.study import PERTURB, TRUTH, intensity_key, stream

    V = 40
    rows = fit_vocabulary(V, SMALL)
    empirical = [r for r in rows if r["arm"] == "empirical"]
    assert len(empirical) == 2 * 3 and all(r["n_unseen_pairs_reached"] == 0 for r in empirical)
    assert all(r["n_unseen_pairs_reached"] == 0 for r in rows if r["intensity"] == 0)
    oracle = {(r["replication"], r["intensity"]): r["n_unseen_pairs_reached"] for r in rows if r["arm"] == "oracle"}
    for (rep, alpha), reached in oracle.items():
        M, x = sample_truth(V, 60, 8, 0.5, np.random.default_rng(stream(3, V, rep, TRUTH)))
        rng = np.random.default_rng(stream(3, V, rep, PERTURB, intensity_key(alpha)))
        copy, *_ = perturbed_copy(x, synonym_table(M, x, 2.0), alpha, rng)
        assert reached == unseen_pairs_reached(copy, x, V)
    assert max(oracle.values()) > 0
