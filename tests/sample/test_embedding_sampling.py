"""Algorithm 2 with T on the prefix's input embeddings (sample/embedded.py): the law each mode samples, exact mode's
fresh perturbation at every step against cached mode's persistent one, and the keyed draws (batch size, seed)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from scipy import stats

from workflow_lib.sample.embedded import NoisedCached, NoisedRecompute
from workflow_lib.sample.sampler import generate
from workflow_lib.sample.steps import Batch, sample

V, D = 6, 4
SPECIAL = 0
NOISE = {"strategy": "embedding-noise", "noise": "gaussian", "scale": 1.5}
pytestmark = pytest.mark.usefixtures("one_thread")  # conftest.py: tiny models on one thread


class LastEmbeddingModel(torch.nn.Module):
    """P(next | prefix) = softmax(W e_last), e_last the input embedding of the prefix's last real position: a model
    whose dependence on the perturbed embeddings is known. Records every call's input embeddings."""

    def __init__(self):
        super().__init__()
        generator = torch.Generator().manual_seed(0)
        self.embed = torch.nn.Embedding(V, D)
        self.embed.weight.data = torch.randn(V, D, generator=generator)
        self.head = torch.randn(V, D, generator=generator) * 2
        self.calls: list[torch.Tensor] = []

    def get_input_embeddings(self):
        return self.embed

    def law(self, embeds: torch.Tensor) -> torch.Tensor:
        logits = embeds @ self.head.T
        logits[..., SPECIAL] = float("-inf")
        return torch.log_softmax(logits, -1)

    def forward(
        self, inputs_embeds, attention_mask, position_ids=None, past_key_values=None, use_cache=False, logits_to_keep=0
    ):
        self.calls.append(inputs_embeds.detach().clone())
        return SimpleNamespace(logits=self.law(inputs_embeds), past_key_values=past_key_values or object())


def batch_of(prompt: list[int], n: int, alpha: float, new_tokens: int = 1) -> Batch:
    values = torch.tensor(prompt * n)
    offsets = torch.arange(0, len(prompt) * n + 1, len(prompt))
    keys = torch.arange(n) * 7 + 11
    perturbation = {"strategy": "embedding-noise", "intensity": alpha, "embedding": NOISE}
    return Batch(values, offsets, keys, new_tokens, perturbation, None, [SPECIAL], SPECIAL, [SPECIAL])


@pytest.mark.parametrize("mode", [NoisedRecompute, NoisedCached])
def test_each_mode_samples_the_mixture_over_noised_prefixes(mode):
    """The first token's law is E_T[P(. | e~)] = (1 - alpha) P(. | e) + alpha E_eps[P(. | e + s rms eps)], estimated
    here by Monte Carlo with torch's own Gaussian, not the sampler's keyed noise; and it is not the unperturbed law."""
    alpha, n, prompt = 0.4, 6000, [2, 3, 4]
    model = LastEmbeddingModel()
    counts = np.bincount(sample(model, batch_of(prompt, n, alpha), mode)[:, 0].numpy(), minlength=V)
    e = model.embed.weight[4].detach()
    rms = float(model.embed.weight.detach().pow(2).mean().sqrt())
    eps = torch.randn(200_000, D, generator=torch.Generator().manual_seed(1))
    noised = model.law(e + NOISE["scale"] * rms * eps).exp().mean(0)
    mixture = ((1 - alpha) * model.law(e).exp() + alpha * noised).double().numpy()
    keep = mixture > 1e-4
    expected = mixture[keep] / mixture[keep].sum() * counts[keep].sum()
    assert stats.chisquare(counts[keep], expected).pvalue > 1e-3
    plain = model.law(e).exp().double().numpy()
    support = plain > 0
    assert stats.chisquare(counts[support], plain[support] / plain[support].sum() * counts.sum()).pvalue < 1e-6


def noised_rows(call: torch.Tensor, clean: torch.Tensor) -> torch.Tensor:
    """[B, L] which positions of a call's embeddings differ from the clean ones."""
    return (call - clean).abs().amax(-1) > 0


def test_exact_perturbs_the_whole_prefix_afresh_at_every_step_and_cached_once():
    model = LastEmbeddingModel()
    prompt, alpha = [2, 3, 4, 5, 2, 3], 0.5
    sample(model, batch_of(prompt, 64, alpha, new_tokens=3), NoisedRecompute)
    clean = model.embed.weight.detach()[torch.tensor(prompt)]
    first, second = (noised_rows(call[:, : len(prompt)], clean) for call in model.calls[:2])
    assert len(model.calls) == 3  # every step recomputes the whole prefix, prompt included
    rate = float(first.float().mean())
    assert 0.35 < rate < 0.65  # about alpha of the positions
    assert not torch.equal(first, second)  # a fresh draw at the next step
    model.calls.clear()
    sample(model, batch_of(prompt, 64, alpha, new_tokens=3), NoisedCached)
    assert [c.shape[1] for c in model.calls] == [len(prompt), 1, 1]  # the prompt once, then each drawn token once
    assert 0.35 < float(noised_rows(model.calls[0], clean).float().mean()) < 0.65


def test_no_special_token_is_ever_noised():
    model = LastEmbeddingModel()
    prompt = [SPECIAL, 3, SPECIAL, 4]
    sample(model, batch_of(prompt, 200, 1.0), NoisedRecompute)
    noised = noised_rows(model.calls[0], model.embed.weight.detach()[torch.tensor(prompt)])
    assert noised[:, [1, 3]].all() and not noised[:, [0, 2]].any()


@pytest.fixture(scope="module")
def tiny_gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel

    from workflow_lib.data.tokenization import train_bpe

    texts = [" the cat sat on the mat .", " a dog ran in the park .", " the bird sang a song ."] * 20
    tokenizer = train_bpe(texts, 280, min_frequency=1)
    torch.manual_seed(0)
    config = GPT2Config(vocab_size=len(tokenizer), n_layer=1, n_head=2, n_embd=16, n_positions=64)
    return GPT2LMHeadModel(config).eval(), tokenizer


@pytest.mark.parametrize("mode", ["exact", "cached"])
def test_samples_do_not_depend_on_batch_size_and_follow_the_seed(tiny_gpt2, mode):
    model, tokenizer = tiny_gpt2
    perturbation = {"strategy": "embedding-noise", "intensity": 0.3, "embedding": NOISE}
    args = (model, tokenizer, [" the cat sat", " a dog", " the bird sang a song ."], np.array([10, 11, 12]), 4, 12)
    small = generate(*args, perturbation, None, 9, mode, batch_size=2)
    big = generate(*args, perturbation, None, 9, mode, batch_size=12)
    assert np.array_equal(small["continuation_ids"], big["continuation_ids"])
    assert not np.array_equal(
        generate(*args, perturbation, None, 10, mode, 12)["continuation_ids"], big["continuation_ids"]
    )
    plain = generate(*args, {"strategy": "insertion", "intensity": 0.0}, None, 9, mode, 12)
    assert not np.array_equal(plain["continuation_ids"], big["continuation_ids"])  # the noise changes samples


def test_a_batch_without_its_noise_settings_is_refused(tiny_gpt2):
    model, tokenizer = tiny_gpt2
    with pytest.raises(ValueError, match="embedding_perturbation"):
        generate(
            model,
            tokenizer,
            [" the cat"],
            np.array([0]),
            1,
            2,
            {"strategy": "embedding-noise", "intensity": 0.3},
            None,
            1,
        )
    with pytest.raises(ValueError, match="synonym table"):  # a token strategy still needs its table
        generate(
            model, tokenizer, [" the cat"], np.array([0]), 1, 2, {"strategy": "insertion", "intensity": 0.3}, None, 1
        )
