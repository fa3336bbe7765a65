"""The embedding space's perturbation: the noise's law and keys, where it is added, and the training data that names
it (NEFTune's and the continuous noise's)."""

from __future__ import annotations

import json
import math

import numpy as np
import pyarrow.compute as pc
import pytest
import torch
from scipy import stats

from workflow_lib.perturb.embedding import (
    activate,
    embedding_rms,
    keyed_noise,
    noised_embeddings,
    random_noise,
)
from workflow_lib.perturb.synonym_table import SynonymTable
from workflow_lib.perturb.training_data import EMBEDDING_KEY, perturb_blocks

NOISE = {"strategy": "embedding-noise", "noise": "gaussian", "scale": 0.5}


@pytest.mark.parametrize("kind", ["gaussian", "uniform"])
def test_keyed_noise_has_the_stated_law_and_depends_on_its_key_alone(kind):
    keys = torch.arange(4000, dtype=torch.long) * 7919 + 3
    noise = keyed_noise(keys, 16, kind)
    assert noise.shape == (4000, 16) and noise.dtype == torch.float32
    flat = noise.double().flatten().numpy()
    law = stats.norm() if kind == "gaussian" else stats.uniform(-math.sqrt(3), 2 * math.sqrt(3))
    assert stats.kstest(flat, law.cdf).pvalue > 1e-3
    # coordinates and keys uncorrelated: no structure a model could learn from the noise
    assert abs(np.corrcoef(flat[:-1], flat[1:])[0, 1]) < 0.02
    # a key's noise is its own, whatever else is drawn beside it
    assert torch.equal(keyed_noise(keys[[5, 17]], 16, kind), noise[[5, 17]])
    assert not torch.equal(noise[0], noise[1])
    # the training generator draws the same law
    drawn = random_noise((4000, 16), kind, "cpu").double().flatten().numpy()
    assert stats.ks_2samp(flat, drawn).pvalue > 1e-3


def test_an_unknown_noise_is_refused_naming_the_key():
    with pytest.raises(ValueError, match="embedding_perturbation.noise"):
        keyed_noise(torch.arange(3), 4, "laplace")


def test_noise_is_added_at_the_marked_positions_only_in_units_of_the_embeddings_rms():
    torch.manual_seed(0)
    model = torch.nn.Module()
    table = torch.nn.Embedding(20, 8)
    model.get_input_embeddings = lambda: table
    ids = torch.randint(0, 20, (3, 5))
    where = torch.zeros(3, 5, dtype=torch.bool)
    where[0, 1] = where[2, 4] = True
    noise = torch.ones(2, 8)
    out = noised_embeddings(model, ids, where, noise, NOISE)
    clean = table(ids)
    rms = float(table.weight.detach().pow(2).mean().sqrt())
    assert torch.allclose(out[where] - clean[where], torch.full((2, 8), 0.5 * rms), atol=1e-6)
    assert torch.equal(out[~where], clean[~where])
    assert float(embedding_rms(model)) == pytest.approx(rms)
    assert torch.equal(noised_embeddings(model, ids, torch.zeros_like(where), noise[:0], NOISE), clean)


def test_neftune_is_transformers_hook_active_in_training_mode_only():
    from transformers import GPT2Config, GPT2LMHeadModel

    model = GPT2LMHeadModel(GPT2Config(vocab_size=30, n_layer=1, n_head=2, n_embd=16, n_positions=32))
    assert activate(model, NOISE) is None  # the continuous noise needs no hook: the trainer adds it
    handle = activate(model, {"strategy": "neftune", "neftune_alpha": 5.0})
    ids = torch.randint(0, 30, (2, 10))
    embed = model.get_input_embeddings()
    model.train()
    noisy = embed(ids) - embed.weight[ids]
    bound = 5.0 / math.sqrt(10 * 16)  # alpha / sqrt(L d)
    assert 0.5 * bound < float(noisy.detach().abs().max()) <= bound + 1e-6
    model.eval()
    assert torch.equal(embed(ids), embed.weight[ids])
    handle.remove()


def blocks_and_table():
    rng = np.random.default_rng(0)
    blocks = rng.integers(3, 50, size=(400, 16))
    blocks[:, 0] = 1  # a special token, never selected
    return blocks, SynonymTable.from_rows(50, [], [], [])


@pytest.mark.parametrize("mode", ["augment", "prefix"])
def test_embedding_noise_data_keeps_the_tokens_and_lists_the_noised_positions(mode):
    """Algorithm 1 with T on embeddings: the tokens and targets are the unperturbed ones; the positions to noise
    are each non-special position with probability alpha, and the data carries the noise's settings."""
    blocks, table = blocks_and_table()
    out = perturb_blocks(blocks, mode, "embedding-noise", 0.3, table, 2, 5, "k", [1], embedding=NOISE)
    assert json.loads(out.schema.metadata[EMBEDDING_KEY]) == NOISE
    copies = out.filter(pc.greater(out.column("copy"), 0))
    assert copies.num_rows == 800
    ids = np.array(copies.column("input_ids").to_pylist())
    assert np.array_equal(ids, np.concatenate([blocks, blocks]))  # no token changes
    noised = copies.column("perturbed_positions").to_pylist()
    assert noised == copies.column("source_positions").to_pylist()  # in place: the selected positions themselves
    flat = np.concatenate([np.asarray(p) for p in noised])
    assert 0 not in flat  # the special token
    assert stats.binomtest(len(flat), 800 * 15, 0.3).pvalue > 1e-3
    if mode == "prefix":  # every original token a target once, from its own position
        assert copies.column("target_ids").to_pylist()[0] == blocks[0, 1:].tolist()
    other = perturb_blocks(blocks, mode, "embedding-noise", 0.3, table, 2, 6, "k", [1], embedding=NOISE)
    assert other.column("perturbed_positions") != out.column("perturbed_positions")  # the seed draws them


def test_neftune_data_is_the_unperturbed_data_naming_alpha():
    blocks, table = blocks_and_table()
    settings = {"strategy": "neftune", "neftune_alpha": 5.0}
    out = perturb_blocks(blocks, "augment", "neftune", 1.0, table, 1, 5, "k", [1], embedding=settings)
    plain = perturb_blocks(blocks, "augment", "insertion", 0.0, table, 1, 5, "k", [1])
    assert out.select(["input_ids", "perturbed_positions"]).equals(plain.select(["input_ids", "perturbed_positions"]))
    assert json.loads(out.schema.metadata[EMBEDDING_KEY]) == settings
    assert plain.schema.metadata is None or EMBEDDING_KEY not in plain.schema.metadata
    with pytest.raises(ValueError, match="embedding_perturbation"):
        perturb_blocks(blocks, "augment", "embedding-noise", 0.3, table, 1, 5, "k", [1])
