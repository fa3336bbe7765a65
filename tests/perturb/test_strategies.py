"""The strategy registry: what it refuses, what the three strategies derive from it, and a new strategy registered in
a test, which the perturber (numpy and torch), the prefix targets and cached sampling then run with no other change.

A test of a new strategy copies `test_a_registered_strategy_runs_through_the_perturber` and its neighbours; the
workflow test tests/workflow/test_new_strategy.py runs one through a whole study.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

from workflow_lib.config import load_schema
from workflow_lib.perturb.perturber import perturb, prefix_targets
from workflow_lib.perturb.strategies import STRATEGIES, Strategy, get, register, wildcard_pattern
from workflow_lib.perturb.synonym_table import SynonymTable
from workflow_lib.sample.loops import Cached, fed_chunk
from workflow_lib.sample.steps import Batch, sample

V = 20
SPECIAL = [0]
CANDIDATES = {t: ([(t + 1) % V or 1, (t + 2) % V or 2], [0.5, 0.5]) for t in range(1, 12)}  # 12..19: no synonym


def table() -> SynonymTable:
    tokens = sorted(CANDIDATES)
    return SynonymTable.from_rows(V, tokens, [CANDIDATES[t][0] for t in tokens], [CANDIDATES[t][1] for t in tokens])


def batch(n_seq=300, length=20, seed=0):
    rng = np.random.default_rng(seed)
    seqs = rng.integers(1, V, size=(n_seq, length))
    seqs[:, 0] = 0
    return seqs.reshape(-1).astype(np.int64), np.arange(0, (n_seq + 1) * length, length, dtype=np.int64)


def split(values, offsets):
    return [values[offsets[i] : offsets[i + 1]].tolist() for i in range(len(offsets) - 1)]


@pytest.fixture
def registered():
    """register(...) for the length of one test: the registry is left as it was."""
    added = []

    def add(strategy: Strategy) -> Strategy:
        added.append(register(strategy))
        return strategy

    yield add
    for strategy in added:
        STRATEGIES.pop(strategy.name)


def test_the_schema_lists_exactly_the_registered_strategies():
    schema = load_schema()  # the registry's names filled (workflow_lib/registries.py)
    assert schema["$defs"]["strategies"]["items"]["enum"] == list(STRATEGIES)
    assert wildcard_pattern().split("|") == [re.escape(name) for name in [*STRATEGIES, "none"]]


def test_the_papers_strategies_derive_what_the_other_stages_need():
    insertion, replacement, deletion = get("insertion"), get("replacement"), get("deletion")
    assert [s.needs_synonyms for s in (insertion, replacement, deletion)] == [True, True, False]
    assert [s.fed_per_token for s in (insertion, replacement, deletion)] == [2, 1, 1]
    assert [s.masks_slots for s in (insertion, replacement, deletion)] == [True, False, True]
    assert [s.length_factor(0.2) for s in (insertion, replacement, deletion)] == [1.2, 1.0, 0.8]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"name": "swap/2", "keep": "token", "insert": "token"}, "a name as the config writes one"),
        ({"name": "none", "keep": "synonym"}, "not 'none'"),
        ({"name": "-shift", "keep": "synonym"}, "a name as the config writes one"),
        ({"name": "move", "keep": None, "insert": "token"}, "moves it"),
        ({"name": "same", "keep": "token"}, "changes nothing"),
        ({"name": "odd", "keep": "antonym"}, "keep must be one of"),
    ],
)
def test_a_strategy_the_perturber_cannot_run_is_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Strategy(**kwargs)


def test_unknown_and_twice_registered_names_are_refused(registered):
    with pytest.raises(
        ValueError, match="unknown perturbation strategy 'swap'; allowed: insertion, replacement, deletion"
    ):
        perturb(*batch(2), "swap", 0.1, table(), np.random.default_rng(0))
    with pytest.raises(ValueError, match="registered twice"):
        registered(Strategy("insertion", keep="synonym"))


def test_a_registered_strategy_runs_through_the_perturber(registered):
    """`duplication` (a copy of each selected token inserted at a random gap) needs no synonym: tokens without one
    are eligible too. Removing the inserted tokens gives the original back, and each inserted token is its source."""
    registered(Strategy("duplication", keep="token", insert="token"))
    values, offsets = batch()
    for xp_values, xp_offsets, tab, rng in [
        (values, offsets, table(), np.random.default_rng(1)),
        (torch.from_numpy(values), torch.from_numpy(offsets), table().to("cpu"), torch.Generator().manual_seed(1)),
    ]:
        out = perturb(xp_values, xp_offsets, "duplication", 0.3, tab, rng, SPECIAL)
        new_values, new_offsets, origin = (np.asarray(x) for x in (out.values, out.offsets, out.origin))
        selected = np.asarray(out.selected)
        assert selected[values >= 12].any()  # no synonym, still eligible
        assert not selected[values == 0].any()
        assert len(new_values) == len(values) + selected.sum()
        for orig, new, org in zip(split(values, offsets), split(new_values, new_offsets), split(origin, new_offsets)):
            assert [t for t, o in zip(new, org) if o >= 0] == orig
        assert np.array_equal(new_values[origin < 0], values[np.asarray(out.sources)])
        mask = np.asarray(out.perturbed_mask())
        assert np.array_equal(mask, origin < 0)
        assert abs(selected.mean() - 0.3 * (values != 0).mean()) < 0.03


def test_a_strategy_that_replaces_and_inserts_keeps_its_maps_consistent(registered):
    """A synonym in the token's place and another inserted: the maps (origin, slot, perturbed_mask) cover both."""
    registered(Strategy("echo", keep="synonym", insert="synonym"))
    values, offsets = batch()
    out = perturb(values, offsets, "echo", 0.3, table(), np.random.default_rng(2), SPECIAL, "after_source")
    selected, origin, slot = out.selected, out.origin, out.slot
    assert np.array_equal(origin[slot], np.arange(len(values)))  # slot and origin are inverse on the originals
    kept = out.values[slot]
    assert np.array_equal(kept[~selected], values[~selected])
    assert all(k in CANDIDATES[int(v)][0] for k, v in zip(kept[selected], values[selected]))
    mask = out.perturbed_mask()
    assert mask.sum() == 2 * selected.sum() and mask[slot[selected]].all() and mask[origin < 0].all()
    positions, targets, target_offsets = prefix_targets(values, offsets, out)
    assert np.array_equal(targets, values[(np.arange(len(values)) - offsets[:-1].repeat(20)) >= 1])
    # the prefix of each target ends at its own place's predecessor: the next output token is the target's place
    seq_of_target = np.repeat(np.arange(len(offsets) - 1), np.diff(target_offsets))
    assert (origin[out.offsets[seq_of_target] + positions + 1] >= 0).all()


@pytest.mark.parametrize("name", ["insertion", "replacement", "deletion", "duplication"])
def test_cached_sampling_feeds_what_the_strategy_writes(registered, name):
    if name == "duplication":
        registered(Strategy("duplication", keep="token", insert="token"))
    token, synonym = torch.tensor([5, 6, 7]), torch.tensor([15, 16, 17])
    selected = torch.tensor([True, False, True])
    chunk, mask = fed_chunk(get(name), token, selected, synonym, pad_id=0, perturbing=True)
    expected = {
        "insertion": ([[5, 15], [6, 0], [7, 17]], [[1, 1], [1, 0], [1, 1]]),
        "replacement": ([[15], [6], [17]], [[1], [1], [1]]),
        "deletion": ([[0], [6], [0]], [[0], [1], [0]]),
        "duplication": ([[5, 5], [6, 0], [7, 7]], [[1, 1], [1, 0], [1, 1]]),
    }[name]
    assert (chunk.tolist(), mask.tolist()) == expected


def test_cached_sampling_runs_a_registered_strategy(registered):
    from transformers import GPT2Config, GPT2LMHeadModel

    registered(Strategy("duplication", keep="token", insert="token"))
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=V, n_layer=1, n_head=1, n_embd=16, n_positions=64)).eval()
    prompts, offsets, keys = torch.randint(1, V, (30,)), torch.tensor([0, 10, 30]), torch.tensor([11, 12])
    run = lambda alpha: sample(
        model,
        Batch(
            prompts,
            offsets,
            keys,
            10,
            {"strategy": "duplication", "intensity": alpha},
            table().to("cpu"),
            SPECIAL,
            0,
            [],
        ),
        Cached,
    )
    a, b = run(0.5), run(0.5)
    assert a.shape == (2, 10) and torch.equal(a, b)
    assert not torch.equal(run(1.0), run(0.0))  # every drawn token fed twice: the model sees another prefix


def test_a_strategy_of_the_embedding_space_reads_only_its_own_settings():
    from workflow_lib.perturb.settings import embedding_settings

    config = {"embedding_perturbation": {"noise": "gaussian", "scale": 1, "neftune_alpha": 5}}
    assert embedding_settings(config, "embedding-noise") == {
        "strategy": "embedding-noise",
        "noise": "gaussian",
        "scale": 1.0,
    }
    assert embedding_settings(config, "neftune") == {"strategy": "neftune", "neftune_alpha": 5.0}
    # NEFTune is applied by transformers' hook, at every position: the data lists no position for it.
    assert get("neftune").hooked and not get("embedding-noise").hooked and not get("insertion").hooked
