"""Perturbed sampling: the law it samples, plain sampling at intensity 0, and batch-size invariance."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from scipy import stats

from workflow_lib.perturb import SynonymTable, perturb
from workflow_lib.sampling import decoded_probs, draw, generate, sample_cached, sample_exact

V = 8
SPECIAL = 0  # pad / end of text
SYN = {1: ([2, 3], [0.25, 0.75]), 4: ([5], [1.0])}
TABLE = SynonymTable.from_rows(V, sorted(SYN), [SYN[t][0] for t in sorted(SYN)], [SYN[t][1] for t in sorted(SYN)])
LAW = torch.softmax(torch.randn(V, V, generator=torch.Generator().manual_seed(0)) * 2, dim=-1)
LAW[:, SPECIAL] = 0
LAW = LAW / LAW.sum(-1, keepdim=True)


class LastTokenModel(torch.nn.Module):
    """P(next | prefix) = LAW[last real token of the prefix]: a model whose dependence on the prefix is known."""

    def __init__(self):
        super().__init__()
        self.dummy = torch.nn.Parameter(torch.zeros(1))

    def forward(self, input_ids, attention_mask, position_ids=None, past_key_values=None, use_cache=False, logits_to_keep=0):
        # The law at each position is that of the last real token up to it (masked slots repeat the previous one).
        idx = torch.where(attention_mask[:, -input_ids.shape[1]:] > 0, torch.arange(input_ids.shape[1]), -1).cummax(1).values
        last = input_ids.gather(1, idx.clamp(min=0))
        if past_key_values is not None:
            last = torch.where(idx >= 0, last, past_key_values[:, None])
        logits = LAW[last].log()
        return SimpleNamespace(logits=logits, past_key_values=last[:, -1])


def first_tokens(sampler, prompt, strategy, alpha, n=6000):
    values = torch.tensor(prompt * n)
    offsets = torch.arange(0, len(prompt) * n + 1, len(prompt))
    keys = torch.arange(n) * 7 + 11
    out = sampler(LastTokenModel(), values, offsets, keys, 1, {"strategy": strategy, "intensity": alpha}, TABLE.to("cpu"),
                  [SPECIAL], SPECIAL, [SPECIAL])
    return np.bincount(out[:, 0].numpy(), minlength=V)


@pytest.mark.parametrize("sampler", [sample_exact, sample_cached])
def test_replacement_samples_the_mixture_over_perturbed_prefixes(sampler):
    # Last token 4 is replaced by 5 with probability alpha: the law is (1 - alpha) LAW[4] + alpha LAW[5].
    alpha = 0.3
    mixture = (1 - alpha) * LAW[4] + alpha * LAW[5]
    counts = first_tokens(sampler, [1, 6, 4], "replacement", alpha)
    keep = (mixture > 0).numpy()
    expected = mixture.double().numpy()[keep]
    assert stats.chisquare(counts[keep], expected / expected.sum() * counts[keep].sum()).pvalue > 1e-3


def test_exact_insertion_samples_the_mixture_estimated_from_the_perturber():
    """E_T[P(. | X~)] by Monte Carlo over the perturber alone, against the sampler's first tokens."""
    alpha, prompt = 0.4, [1, 4, 6]
    rng = np.random.default_rng(1)
    n = 200_000
    out = perturb(np.array(prompt * n), np.arange(0, 3 * n + 1, 3), "insertion", alpha, TABLE, rng, [SPECIAL])
    last = out.values[out.offsets[1:] - 1]
    mixture = LAW[torch.from_numpy(last)].mean(0)
    counts = first_tokens(sample_exact, prompt, "insertion", alpha)
    keep = (mixture > 1e-4).numpy()
    expected = mixture.double().numpy()[keep]
    expected = expected / expected.sum() * counts[keep].sum()
    assert stats.chisquare(counts[keep], expected).pvalue > 1e-3
    plain = LAW[6].double().numpy()  # and it is not the unperturbed law
    support = plain > 0
    assert stats.chisquare(counts[support], plain[support] / plain[support].sum() * counts[support].sum()).pvalue < 1e-6


def test_draw_is_inverse_cdf_and_respects_every_decoder():
    logits = torch.log(torch.tensor([[0.1, 0.2, 0.3, 0.4]])).expand(5, 4)
    u = torch.tensor([0.05, 0.15, 0.35, 0.65, 0.95])
    assert draw(logits, u).tolist() == [0, 1, 2, 3, 3]
    assert draw(logits, u, {"top_k": 2}).tolist() == [2, 2, 2, 3, 3]  # 0.3 / 0.7 below 0.35
    assert draw(logits, u, {"top_k": 1}).tolist() == [3] * 5  # top-1 is greedy
    assert set(draw(logits, u, {"top_p": 0.5}).tolist()) <= {2, 3}
    # Typical sampling keeps the tokens whose surprisal is nearest the entropy (1.28 nats): 0.3 (1.20) and 0.2 (1.61).
    assert set(draw(logits, u, {"typical_p": 0.5}).tolist()) == {1, 2}
    # A low temperature sharpens towards the mode; a high one flattens towards uniform.
    cold, hot = decoded_probs(logits[:1], {"temperature": 0.25})[0], decoded_probs(logits[:1], {"temperature": 4.0})[0]
    assert cold[3] > 0.6 and (hot.max() - hot.min()) < 0.1 and torch.isclose(cold.sum(), torch.tensor(1.0, dtype=torch.float64))


def test_neutral_decoder_settings_draw_what_unbiased_draws(tiny_lm):
    """At temperature 1, top_p 1, top_k 0 and typical_p 1 are the law itself: the same samples as `unbiased`."""
    model, tokenizer, table = tiny_lm
    args = (model, tokenizer, [" the cat", " a dog"], np.array([3, 8]), 4, 6, {"strategy": "insertion", "intensity": 0.3},
            table)
    unbiased = generate(*args, seed=2)["continuation_ids"]
    neutral = generate(*args, seed=2, decoder={"temperature": 1.0, "top_p": 1.0, "top_k": 0, "typical_p": 1.0})
    np.testing.assert_array_equal(unbiased, neutral["continuation_ids"])
    greedy = generate(*args, seed=2, decoder={"top_k": 1})["continuation_ids"]
    assert not np.array_equal(greedy, unbiased)


@pytest.fixture(scope="module")
def tiny_lm():
    from transformers import GPT2Config, GPT2LMHeadModel

    from workflow_lib.tokenization import train_bpe

    texts = [" the cat sat on the mat .", " a dog ran in the park .", " the bird sang a song ."] * 20
    tokenizer = train_bpe(texts, 280, min_frequency=1)
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=len(tokenizer), n_layer=1, n_head=2, n_embd=16, n_positions=64)).eval()
    table = SynonymTable.uniform(len(tokenizer), tokenizer.all_special_ids)
    return model, tokenizer, table


def test_intensity_zero_is_plain_ancestral_sampling(tiny_lm):
    model, tokenizer, table = tiny_lm
    runs = 3000
    ours = generate(model, tokenizer, [" the cat"], np.array([0]), runs, 2, {"strategy": "insertion", "intensity": 0.0}, table,
                    seed=5, batch_size=1000)["continuation_ids"]
    torch.manual_seed(5)
    ids = torch.tensor([tokenizer(" the cat")["input_ids"]] * runs)
    hf = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=True, top_k=0, top_p=1.0, temperature=1.0,
                        max_new_tokens=2, min_new_tokens=2, pad_token_id=tokenizer.pad_token_id)[:, -2:].numpy()
    for step in range(2):  # the same marginal law at each step
        a = np.bincount(ours[:, step], minlength=len(tokenizer))
        b = np.bincount(hf[:, step], minlength=len(tokenizer))
        keep = (a + b) > 0
        assert stats.chi2_contingency(np.stack([a[keep], b[keep]])).pvalue > 1e-3


@pytest.mark.parametrize("mode", ["exact", "cached"])
@pytest.mark.parametrize("strategy", ["insertion", "replacement", "deletion"])
def test_samples_do_not_depend_on_batch_size(tiny_lm, mode, strategy):
    model, tokenizer, table = tiny_lm
    prompts = [" the cat sat", " a dog", " the bird sang a song ."]
    args = (model, tokenizer, prompts, np.array([10, 11, 12]), 4, 12, {"strategy": strategy, "intensity": 0.3}, table, 9, mode)
    small, big = generate(*args, batch_size=2), generate(*args, batch_size=12)
    order_small = np.lexsort((small["prompt_id"], small["run"]))
    order_big = np.lexsort((big["prompt_id"], big["run"]))
    assert np.array_equal(small["continuation_ids"][order_small], big["continuation_ids"][order_big])
    other_seed = generate(*args[:-2], 10, mode, batch_size=12)
    assert not np.array_equal(other_seed["continuation_ids"], big["continuation_ids"])
    assert big["continuation_ids"].shape == (12, 12) and (big["continuation_ids"] != tokenizer.eos_token_id).all()


def test_cached_and_exact_agree_at_intensity_zero(tiny_lm):
    model, tokenizer, table = tiny_lm
    args = (model, tokenizer, [" the cat", " a dog ran"], np.array([0, 1]), 3, 10, {"strategy": "insertion", "intensity": 0.0}, table, 2)
    assert np.array_equal(generate(*args, "exact")["continuation_ids"], generate(*args, "cached")["continuation_ids"])
