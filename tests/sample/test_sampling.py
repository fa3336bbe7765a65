"""Perturbed sampling: the law it samples, plain sampling at intensity 0, batch-size invariance, and exact mode's reuse
of the unperturbed key/value cache (the full recompute's laws, and where it falls back to it)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from scipy import stats

from workflow_lib.perturb.backends import hash_uniform
from workflow_lib.perturb.perturber import perturb
from workflow_lib.perturb.synonym_table import SynonymTable
from workflow_lib.sample import loops, reuse, sampler, steps
from workflow_lib.sample.decoding import DRAW_PURPOSE, decoded_probs, draw, row_keys, step_keys
from workflow_lib.sample.loops import Cached, Recompute
from workflow_lib.sample.sampler import generate
from workflow_lib.sample.steps import Batch, Mode, sample

V = 8
SPECIAL = 0  # pad / end of text
SYN = {1: ([2, 3], [0.25, 0.75]), 4: ([5], [1.0])}
TABLE = SynonymTable.from_rows(V, sorted(SYN), [SYN[t][0] for t in sorted(SYN)], [SYN[t][1] for t in sorted(SYN)])
LAW = torch.softmax(torch.randn(V, V, generator=torch.Generator().manual_seed(0)) * 2, dim=-1)
LAW[:, SPECIAL] = 0
LAW = LAW / LAW.sum(-1, keepdim=True)


pytestmark = pytest.mark.usefixtures("one_thread")  # conftest.py: tiny models on one thread


class LastTokenModel(torch.nn.Module):
    """P(next | prefix) = LAW[last real token of the prefix]: a model whose dependence on the prefix is known."""

    def __init__(self):
        super().__init__()
        self.dummy = torch.nn.Parameter(torch.zeros(1))

    def forward(
        self, input_ids, attention_mask, position_ids=None, past_key_values=None, use_cache=False, logits_to_keep=0
    ):
        # The law at each position is that of the last real token up to it (masked slots repeat the previous one).
        idx = (
            torch.where(attention_mask[:, -input_ids.shape[1] :] > 0, torch.arange(input_ids.shape[1]), -1)
            .cummax(1)
            .values
        )
        last = input_ids.gather(1, idx.clamp(min=0))
        if past_key_values is not None:
            last = torch.where(idx >= 0, last, past_key_values[:, None])
        logits = LAW[last].log()
        return SimpleNamespace(logits=logits, past_key_values=last[:, -1])


def first_tokens(mode: Mode, prompt, strategy, alpha, n=6000):
    values = torch.tensor(prompt * n)
    offsets = torch.arange(0, len(prompt) * n + 1, len(prompt))
    keys = torch.arange(n) * 7 + 11
    perturbation = {"strategy": strategy, "intensity": alpha}
    batch = Batch(values, offsets, keys, 1, perturbation, TABLE.to("cpu"), [SPECIAL], SPECIAL, [SPECIAL])
    out = sample(LastTokenModel(), batch, mode)
    return np.bincount(out[:, 0].numpy(), minlength=V)


@pytest.mark.parametrize("mode", [Recompute, Cached])
def test_replacement_samples_the_mixture_over_perturbed_prefixes(mode):
    # Last token 4 is replaced by 5 with probability alpha: the law is (1 - alpha) LAW[4] + alpha LAW[5].
    alpha = 0.3
    mixture = (1 - alpha) * LAW[4] + alpha * LAW[5]
    counts = first_tokens(mode, [1, 6, 4], "replacement", alpha)
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
    counts = first_tokens(Recompute, prompt, "insertion", alpha)
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
    assert (
        cold[3] > 0.6
        and (hot.max() - hot.min()) < 0.1
        and torch.isclose(cold.sum(), torch.tensor(1.0, dtype=torch.float64))
    )


def test_neutral_decoder_settings_draw_what_unbiased_draws(tiny_lm):
    """At temperature 1, top_p 1, top_k 0 and typical_p 1 are the law itself: the same samples as `unbiased`."""
    model, tokenizer, table = tiny_lm
    args = (
        model,
        tokenizer,
        [" the cat", " a dog"],
        np.array([3, 8]),
        4,
        6,
        {"strategy": "insertion", "intensity": 0.3},
        table,
    )
    unbiased = generate(*args, seed=2)["continuation_ids"]
    neutral = generate(*args, seed=2, decoder={"temperature": 1.0, "top_p": 1.0, "top_k": 0, "typical_p": 1.0})
    np.testing.assert_array_equal(unbiased, neutral["continuation_ids"])
    greedy = generate(*args, seed=2, decoder={"top_k": 1})["continuation_ids"]
    assert not np.array_equal(greedy, unbiased)


@pytest.fixture(scope="module")
def tiny_lm():
    from transformers import GPT2Config, GPT2LMHeadModel

    from workflow_lib.data.tokenization import train_bpe

    texts = [" the cat sat on the mat .", " a dog ran in the park .", " the bird sang a song ."] * 20
    tokenizer = train_bpe(texts, 280, min_frequency=1)
    torch.manual_seed(0)
    model = GPT2LMHeadModel(
        GPT2Config(vocab_size=len(tokenizer), n_layer=1, n_head=2, n_embd=16, n_positions=64)
    ).eval()
    table = SynonymTable.uniform(len(tokenizer), tokenizer.all_special_ids)
    return model, tokenizer, table


def test_intensity_zero_is_plain_ancestral_sampling(tiny_lm):
    model, tokenizer, table = tiny_lm
    runs = 3000
    ours = generate(
        model,
        tokenizer,
        [" the cat"],
        np.array([0]),
        runs,
        2,
        {"strategy": "insertion", "intensity": 0.0},
        table,
        seed=5,
        batch_size=1000,
    )["continuation_ids"]
    torch.manual_seed(5)
    ids = torch.tensor([tokenizer(" the cat")["input_ids"]] * runs)
    hf = model.generate(
        ids,
        attention_mask=torch.ones_like(ids),
        do_sample=True,
        top_k=0,
        top_p=1.0,
        temperature=1.0,
        max_new_tokens=2,
        min_new_tokens=2,
        pad_token_id=tokenizer.pad_token_id,
    )[:, -2:].numpy()
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
    args = (
        model,
        tokenizer,
        prompts,
        np.array([10, 11, 12]),
        4,
        12,
        {"strategy": strategy, "intensity": 0.3},
        table,
        9,
        mode,
    )
    small, big = generate(*args, batch_size=2), generate(*args, batch_size=12)
    order_small = np.lexsort((small["prompt_id"], small["run"]))
    order_big = np.lexsort((big["prompt_id"], big["run"]))
    assert np.array_equal(small["continuation_ids"][order_small], big["continuation_ids"][order_big])
    other_seed = generate(*args[:-2], 10, mode, batch_size=12)
    assert not np.array_equal(other_seed["continuation_ids"], big["continuation_ids"])
    assert big["continuation_ids"].shape == (12, 12) and (big["continuation_ids"] != tokenizer.eos_token_id).all()


def test_cached_and_exact_agree_at_intensity_zero(tiny_lm):
    model, tokenizer, table = tiny_lm
    args = (
        model,
        tokenizer,
        [" the cat", " a dog ran"],
        np.array([0, 1]),
        3,
        10,
        {"strategy": "insertion", "intensity": 0.0},
        table,
        2,
    )
    assert np.array_equal(generate(*args, "exact")["continuation_ids"], generate(*args, "cached")["continuation_ids"])


class ForwardWidths:
    """Wraps a model's forward: the width of the ids each call was fed."""

    def __init__(self, model):
        self.widths = []
        self.forward = model.forward

    def __call__(self, *args, **kwargs):
        self.widths.append(kwargs["input_ids"].shape[1])
        return self.forward(*args, **kwargs)


@pytest.fixture(scope="module")
def family_lm():
    """family -> (model, tokenizer): the tests' tiny random checkpoints of GPT-2 and of a Llama (untied head,
    grouped-query attention, rotary positions, BOS prepended, no pad token), built in memory."""
    from transformers import AutoModelForCausalLM

    from studies.families import make_config, make_tokenizer
    from workflow_lib.data.builtin_corpus import build_grammar

    corpus = build_grammar(seed=3, words_per_class=4).generate("train", 20, 8, 0)
    built = {}
    for index, family in enumerate(("gpt2", "llama")):
        tokenizer = make_tokenizer(family, corpus)
        torch.manual_seed(index)
        built[family] = (AutoModelForCausalLM.from_config(make_config(family, tokenizer)).eval(), tokenizer)
    words = corpus[1].split()
    return built, [" ".join(words[i : i + n]) for i, n in enumerate((3, 9, 17, 26))]  # left padding of 23 words


def sample_zero(model, tokenizer, prompts, mode, new_tokens, decoder=None, batch_size=5):
    return generate(
        model,
        tokenizer,
        prompts,
        np.arange(len(prompts)) * 10,
        3,
        new_tokens,
        {"strategy": "insertion", "intensity": 0.0},
        None,
        7,
        mode,
        batch_size,
        decoder,
    )


@pytest.mark.parametrize("family", ["gpt2", "llama"])
@pytest.mark.parametrize(
    "decoder", [{}, {"top_k": 5}, {"temperature": 0.7, "top_k": 20}, {"top_p": 0.8}, {"typical_p": 0.9}]
)
def test_intensity_zero_samples_with_a_cache_and_mostly_the_uncached_tokens(family_lm, family, decoder, monkeypatch):
    """Both modes, every decoder (top-p and typical included), run intensity 0 through loops.Ancestral: the prompts
    once, then one token fed per drawn token. With the cache switched off, exact mode recomputes the whole left-padded
    batch at every step. The cached logits differ from the uncached ones by float32 rounding (~1e-6), which changes a
    draw only where its uniform lies that close to a CDF bound: on these tiny float32 models no token differed (0 of
    38,400 over 20 seeds, measured); a row may, so one row in 12 is allowed. A wrong layout changes most rows."""
    built, prompts = family_lm
    model, tokenizer = built[family]
    new_tokens = 16
    forwards, calls = ForwardWidths(model), []
    monkeypatch.setattr(model, "forward", forwards)
    ancestral = loops.Ancestral
    monkeypatch.setattr(sampler, "Ancestral", lambda *args, **kwargs: calls.append(1) or ancestral(*args, **kwargs))
    cached = {mode: sample_zero(model, tokenizer, prompts, mode, new_tokens, decoder) for mode in ("exact", "cached")}
    assert len(calls) == 2 * 3  # 2 modes x 3 batches
    assert sorted(set(forwards.widths)) == [1, *sorted({w for w in forwards.widths if w > 1})]
    assert forwards.widths.count(1) == 2 * 3 * (new_tokens - 1)  # 2 modes x 3 batches x one feed per drawn token
    np.testing.assert_array_equal(cached["exact"]["continuation_ids"], cached["cached"]["continuation_ids"])
    forwards.widths.clear()
    monkeypatch.setattr(sampler, "cache_fits", lambda *args: False)
    uncached = sample_zero(model, tokenizer, prompts, "exact", new_tokens, decoder)
    assert 1 not in forwards.widths and len(forwards.widths) == 3 * new_tokens and len(calls) == 2 * 3
    for column in ("prompt_id", "run"):
        np.testing.assert_array_equal(cached["exact"][column], uncached[column])
    ids = cached["exact"]["continuation_ids"]
    assert (ids != uncached["continuation_ids"]).any(1).sum() <= 1
    assert ids.shape == (12, new_tokens) and not np.isin(ids, [tokenizer.eos_token_id]).any()
    assert len(np.unique(ids)) > new_tokens  # a real sample, not one token repeated


def test_intensity_zero_gives_the_same_samples_for_the_same_seed_only(family_lm):
    """The computation is deterministic given the batch: the same config and seed give the same tokens, another
    seed other tokens."""
    built, prompts = family_lm
    model, tokenizer = built["gpt2"]
    zero = {"strategy": "insertion", "intensity": 0.0}
    first, again, other = (
        generate(model, tokenizer, prompts, np.arange(4), 3, 12, zero, None, seed, "exact", 5) for seed in (4, 4, 5)
    )
    for column in ("prompt_id", "run", "continuation_ids"):
        np.testing.assert_array_equal(first[column], again[column])
    assert (first["continuation_ids"] != other["continuation_ids"]).mean() > 0.5


def chi_square_pvalue(tokens: np.ndarray, law: torch.Tensor) -> float:
    """Pearson's test of draws against a law, the cells expected fewer than 5 times pooled into one (and a
    token of probability 0 never drawn)."""
    counts = np.bincount(tokens, minlength=len(law)).astype(float)
    expected = law.numpy() * len(tokens)
    assert counts[expected == 0].sum() == 0
    keep = expected >= 5
    observed, expected = np.append(counts[keep], counts[~keep].sum()), np.append(expected[keep], expected[~keep].sum())
    if expected[-1] == 0:
        observed, expected = observed[:-1], expected[:-1]
    return float(stats.chisquare(observed, expected / expected.sum() * observed.sum()).pvalue)


def test_intensity_zero_draws_follow_the_models_law(family_lm):
    """20,000 draws of two tokens after one prompt (the second drawn from the cache), against the model's law
    computed without a cache: P(x1), and P(x2) = sum over x1 of P(x1) P(x2 | x1). Draws at temperature 0.5 fail the
    same test against the temperature-1 law: it tells a wrong law."""
    built, prompts = family_lm
    model, tokenizer = built["gpt2"]  # weights of std 0.2: laws far from uniform
    prompt = tokenizer(prompts[1])["input_ids"]

    def law(logits: torch.Tensor) -> torch.Tensor:
        logits = logits.float().clone()
        logits[..., tokenizer.eos_token_id] = float("-inf")  # suppressed, as the sampler does
        return torch.softmax(logits, dim=-1, dtype=torch.float64)

    with torch.no_grad():
        first = law(model(input_ids=torch.tensor([prompt])).logits[0, -1])
        vocab = len(first)
        then = torch.cat([torch.tensor([prompt]).expand(vocab, -1), torch.arange(vocab)[:, None]], dim=1)
        second = first @ law(model(input_ids=then).logits[:, -1])

    def draws(decoder: dict) -> np.ndarray:
        return generate(
            model,
            tokenizer,
            [prompts[1]],
            np.array([0]),
            20_000,
            2,
            {"strategy": "insertion", "intensity": 0.0},
            None,
            11,
            "exact",
            5000,
            decoder,
        )["continuation_ids"]

    ours, cold = draws({}), draws({"temperature": 0.5})
    for step, expected in enumerate((first, second)):
        assert chi_square_pvalue(ours[:, step], expected) > 1e-3
        assert chi_square_pvalue(cold[:, step], expected) < 1e-6


def test_intensity_zero_beyond_the_context_keeps_the_uncached_sampler(family_lm, monkeypatch):
    """prompt + new_tokens - 1 positions fit: the cache; one more token: exact mode recomputes (keeping the last
    tokens of the prefix, as it always did) and cached mode refuses."""
    from transformers import AutoModelForCausalLM

    from studies.families import make_config

    built, prompts = family_lm
    _, tokenizer = built["gpt2"]
    config = make_config("gpt2", tokenizer)
    config.n_positions = 40
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config).eval()
    prompts = prompts[:2]  # 10 and 28 tokens
    longest = max(len(tokenizer(p)["input_ids"]) for p in prompts)
    fits = model.config.n_positions - longest + 1
    assert fits > 4
    assert loops.cache_fits(model, longest, fits) and not loops.cache_fits(model, longest, fits + 1)
    calls = []
    ancestral = loops.Ancestral
    monkeypatch.setattr(sampler, "Ancestral", lambda *args, **kwargs: calls.append(1) or ancestral(*args, **kwargs))
    at_context = sample_zero(model, tokenizer, prompts, "exact", fits)
    assert len(calls) == 2  # two batches of 5 (prompt, run) rows
    beyond = sample_zero(model, tokenizer, prompts, "exact", fits + 1)
    assert len(calls) == 2
    with pytest.raises(ValueError, match="use mode exact"):
        sample_zero(model, tokenizer, prompts, "cached", fits + 1)
    monkeypatch.setattr(sampler, "cache_fits", lambda *args: False)
    uncached = sample_zero(model, tokenizer, prompts, "exact", fits)["continuation_ids"]
    np.testing.assert_array_equal(uncached, at_context["continuation_ids"])  # measured; rounding could flip a draw
    # Beyond the context the first `fits` tokens are drawn from untruncated prefixes: the same as at the context.
    np.testing.assert_array_equal(beyond["continuation_ids"][:, :fits], uncached)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_in_place_gelu_new_is_transformers_gelu_new_bit_for_bit(dtype):
    from transformers.activations import NewGELUActivation

    from workflow_lib.models import gelu_new_in_place, use_in_place_activations

    generator = torch.Generator().manual_seed(0)
    x = torch.cat([torch.randn(150 * 70 * 16, generator=generator) * scale for scale in (0.1, 1.0, 4.0, 30.0)])
    x = torch.cat([x, torch.tensor([0.0, -0.0, 1e-40, -1e-40, 3e38, -3e38, float("inf"), float("-inf"), float("nan")])])
    x = x.to(dtype)
    expected = NewGELUActivation()(x)
    assert torch.equal(
        gelu_new_in_place(x).view(torch.int16 if dtype == torch.bfloat16 else torch.int32),
        expected.view(torch.int16 if dtype == torch.bfloat16 else torch.int32),
    )  # NaNs bit for bit too
    from transformers import GPT2Config, GPT2LMHeadModel

    model = use_in_place_activations(GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=50)).eval())
    ids = torch.arange(12)[None] % 50
    with torch.no_grad():
        fast = model(input_ids=ids).logits
    slow = model(input_ids=ids).logits  # under autograd: transformers' own activation, whose backward training uses
    slow.sum().backward()
    assert torch.equal(fast, slow.detach()) and model.transformer.wte.weight.grad is not None


class ExactBatch:
    """One `exact` batch as `generate` lays it out, with the model it samples."""

    def __init__(self, model, batch: Batch):
        self.model, self.batch = model, batch

    @classmethod
    def of(cls, model, tokenizer, prompts: list[str], copies: int, perturbation: dict, new_tokens: int):
        """prompts, each `copies` times under its own key."""
        encoded = [tokenizer(p)["input_ids"] for p in prompts] * copies
        return cls(
            model,
            Batch(
                torch.tensor([t for ids in encoded for t in ids]),
                torch.tensor(np.concatenate([[0], np.cumsum([len(ids) for ids in encoded])])),
                row_keys(5, torch.arange(len(encoded)), torch.zeros(len(encoded), dtype=torch.long)),
                new_tokens,
                perturbation,
                SynonymTable.uniform(len(tokenizer), tokenizer.all_special_ids).to("cpu"),
                sorted(set(tokenizer.all_special_ids)),
                tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id,
                [tokenizer.eos_token_id],
            ),
        )

    def sample(self, mode: Mode) -> torch.Tensor:
        return sample(self.model, self.batch, mode)

    def full_logits(self, generated: torch.Tensor, step: int) -> torch.Tensor:
        """Step `step`'s logits as `loops.Recompute` computes them (the whole perturbed prefix, no cache)."""
        with torch.no_grad():
            logits = loops.prefix_logits(self.model, self.batch, generated[:, :step], step_keys(self.batch.keys, step))
        logits[:, self.batch.suppress] = float("-inf")
        return logits


def reused_against_full(batch: ExactBatch, monkeypatch, call_tokens: int = 8):
    """Samples with `reuse.Reuse`, recording each step's logits, then recomputes every step's logits as
    `loops.Recompute` does on the same prefixes: (the largest difference of their next-token probabilities, the
    tokens the full recompute's logits draw otherwise, the sample, the (start, fed) of every group fed).
    `call_tokens` (`reuse.CALL_TOKENS`): 8, a cheap call, makes several groups of suffix lengths in a small batch."""
    logits, groups = [], []
    recorded_draw, suffix = steps.draw, reuse.suffix_logits
    monkeypatch.setattr(reuse, "CALL_TOKENS", call_tokens)
    monkeypatch.setattr(steps, "draw", lambda x, u, decoder=None: logits.append(x.clone()) or recorded_draw(x, u))
    monkeypatch.setattr(
        reuse,
        "suffix_logits",
        lambda model, past, rows, first_slot, start, fed, *rest: (
            groups.append((start, fed)) or suffix(model, past, rows, first_slot, start, fed, *rest)
        ),
    )
    sampled = batch.sample(reuse.start_reuse)
    worst, other = 0.0, 0
    for step in range(batch.batch.new_tokens):
        full = batch.full_logits(sampled, step)
        worst = max(worst, float((decoded_probs(full) - decoded_probs(logits[step])).abs().max()))
        u = hash_uniform(step_keys(batch.batch.keys, step) * 31 + DRAW_PURPOSE)
        other += int((draw(full, u) != sampled[:, step]).sum())
    return worst, other, sampled, groups


@pytest.mark.parametrize("family", ["gpt2", "llama"])
@pytest.mark.parametrize("strategy", ["insertion", "replacement", "deletion"])
def test_exact_reusing_the_cache_has_the_full_recomputes_laws(family_lm, family, strategy, monkeypatch):
    """At every step the reusing sampler's next-token probabilities are the full recompute's (the same perturbed
    prefixes, the same draws) within float32 rounding: at most 4.2e-7 apart over the six cases, measured (< 1e-5
    asserted). So the tokens drawn from either agree except where a uniform lies that close to a CDF bound: none
    of the 1,152 draws here did, and none is allowed (a row that did would go on from another prefix). Intensity
    0.2 makes every case happen: rows no edit touched (the unperturbed logits), rows edited at their first token
    (no cache slot kept), several groups of suffix lengths. The test fails on a reuse that is wrong: attending to
    the unperturbed slots past the first edit (the cache not cropped), keeping one slot too few, or position ids
    off by one moved the probabilities by 0.04 to 0.45 (tried)."""
    built, prompts = family_lm
    batch = ExactBatch.of(*built[family], prompts, 4, {"strategy": strategy, "intensity": 0.2}, 12)
    worst, other, sample, groups = reused_against_full(batch, monkeypatch)
    assert worst < 1e-5 and other == 0, (worst, other)
    assert sum(len(fed) for _, fed in groups) < sample.numel()  # some rows took the unperturbed logits
    lowest = min(int(start.min()) for start, _ in groups)
    assert lowest == (1 if family == "llama" else 0)  # an edit at the first token; Llama's BOS is never edited
    assert len(groups) > batch.batch.new_tokens  # some steps fed several groups
    np.testing.assert_array_equal(batch.sample(Recompute), sample)  # and so, here, the same samples


def family_model(family: str, tokenizer, **config):
    from transformers import AutoModelForCausalLM

    from studies.families import make_config

    settings = make_config(family, tokenizer)
    for key, value in config.items():
        setattr(settings, key, value)
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(settings).eval()


def test_exact_reuses_the_cache_only_where_it_is_safe(family_lm, monkeypatch):
    """`generate` in mode exact reuses the unperturbed cache for a perturbed batch of a globally attending model
    whose prompt plus new tokens fit its context, and recomputes every step (`loops.Recompute`) otherwise: at
    intensity 0 beyond the context (within it the ancestral sampler runs), for GPT-Neo (its local layers count the
    masked slots between a row's kept cache and its suffix against their window of 8: forced to reuse, in one
    group, its laws moved by 0.055, measured, > 1e-3 asserted), and beyond the context."""
    from studies.families import make_tokenizer
    from workflow_lib.data.builtin_corpus import build_grammar

    built, prompts = family_lm
    prompts = prompts[:2]  # 10 and 28 tokens
    gpt2, tokenizer = built["gpt2"]
    corpus = build_grammar(seed=3, words_per_class=4).generate("train", 20, 8, 0)
    neo_tokenizer = make_tokenizer("gpt-neo", corpus)
    neo = family_model("gpt-neo", neo_tokenizer)
    short = family_model("gpt2", tokenizer, n_positions=40)
    longest = max(len(tokenizer(p)["input_ids"]) for p in prompts)
    fits = 40 - longest + 1  # new tokens whose prefix fits 40 positions
    assert reuse.reuse_fits(gpt2, longest, 16, 0.025) and reuse.reuse_fits(short, longest, fits, 0.025)
    assert not reuse.reuse_fits(gpt2, longest, 16, 0.0)
    assert not reuse.reuse_fits(short, longest, fits + 1, 0.025)
    assert not reuse.reuse_fits(neo, longest, 16, 0.025)

    ran = []
    for name in ("start_reuse", "Recompute"):  # as reuse.exact_steps looks them up
        original = getattr(reuse, name)
        monkeypatch.setattr(
            reuse, name, lambda *args, name=name, original=original, **kw: ran.append(name) or original(*args, **kw)
        )

    def exact(model, tokenizer, new_tokens: int, intensity: float = 0.025) -> list[str]:
        ran.clear()
        perturbation = {"strategy": "insertion", "intensity": intensity}
        table = SynonymTable.uniform(len(tokenizer), tokenizer.all_special_ids)
        generate(model, tokenizer, prompts, np.arange(2), 2, new_tokens, perturbation, table, 3, "exact", 4)
        return ran

    assert exact(gpt2, tokenizer, 16) == ["start_reuse"]
    assert exact(short, tokenizer, fits) == ["start_reuse"]
    assert exact(short, tokenizer, fits + 1) == ["Recompute"]
    assert exact(short, tokenizer, fits + 1, 0.0) == ["Recompute"]
    assert exact(neo, neo_tokenizer, 16) == ["Recompute"]
    forced = ExactBatch.of(neo, neo_tokenizer, prompts, 4, {"strategy": "insertion", "intensity": 0.05}, 8)
    assert reused_against_full(forced, monkeypatch, 10**6)[0] > 1e-3  # one group: gaps of masked slots


def test_exact_reusing_recomputes_a_step_whose_perturbed_prefix_outgrows_the_context(family_lm, monkeypatch):
    """The unperturbed prefix fits 40 positions, but insertion at 0.2 makes some perturbed prefixes longer: those
    steps recompute the whole batch as `loops.Recompute` does (keeping the last 40 tokens), the others reuse the
    cache, and every step's law is the full recompute's."""
    built, prompts = family_lm
    prompts = prompts[:2]  # 10 and 28 tokens
    tokenizer = built["gpt2"][1]
    model = family_model("gpt2", tokenizer, n_positions=40)
    longest = max(len(tokenizer(p)["input_ids"]) for p in prompts)
    batch = ExactBatch.of(model, tokenizer, prompts, 2, {"strategy": "insertion", "intensity": 0.2}, 40 - longest + 1)
    full_steps = []
    full = reuse.full_logits
    monkeypatch.setattr(reuse, "full_logits", lambda *args: full_steps.append(1) or full(*args))
    worst, other, _, groups = reused_against_full(batch, monkeypatch)
    assert worst < 1e-5 and other == 0, (worst, other)
    assert 0 < len(full_steps) < batch.batch.new_tokens and groups


def test_exact_reusing_recomputes_where_the_cache_is_not_per_position():
    """A model whose cache is not transformers' plain per-position one (here the toy model's, one tensor) cannot
    be sliced: the batch runs the full recompute, the same tokens."""
    perturbation = {"strategy": "insertion", "intensity": 0.4}
    values, offsets, keys = torch.tensor([1, 6, 4] * 50), torch.arange(0, 151, 3), torch.arange(50) * 7 + 11
    batch = ExactBatch(
        LastTokenModel(), Batch(values, offsets, keys, 3, perturbation, TABLE.to("cpu"), [SPECIAL], SPECIAL, [SPECIAL])
    )
    with torch.no_grad():
        assert type(reuse.start_reuse(batch.model, batch.batch)) is Recompute
    assert torch.equal(batch.sample(reuse.start_reuse), batch.sample(Recompute))


def test_first_edits_find_where_a_perturbed_row_leaves_its_prefix():
    rows = [[5, 6, 7, 8], [5, 6, 7, 8], [5, 6, 7, 8], [5, 6, 7, 8], [5, 6, 7, 8], [5]]
    edited = [[5, 6, 7, 8], [5, 9, 7, 8], [9, 5, 6, 7, 8], [5, 6, 7], [5, 6, 7, 8, 9], []]
    first = reuse.first_edits(*ragged(rows), *ragged(edited))
    assert first.tolist() == [4, 1, 0, 3, 4, 0]  # untouched: its length; a prefix of the other: the shorter length


def ragged(rows: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.tensor([t for row in rows for t in row], dtype=torch.long), torch.tensor(
        np.concatenate([[0], np.cumsum([len(row) for row in rows])])
    )


def test_groups_are_the_cheapest_split_into_at_most_the_allowed_number():
    """plan_groups against every split of the sorted lengths (brute force): the least padded tokens plus the cost
    of a call per group."""
    from itertools import combinations, pairwise

    rng = np.random.default_rng(0)
    for _ in range(30):
        fed = np.sort(rng.integers(1, 40, size=int(rng.integers(1, 12))))
        call, most = int(rng.integers(0, 60)), int(rng.integers(1, 5))

        def cost(bounds, fed=fed, call=call) -> float:
            return sum((hi - lo) * fed[hi - 1] + call for lo, hi in pairwise(bounds))

        splits = [
            [0, *cut, len(fed)]
            for groups in range(1, min(most, len(fed)) + 1)
            for cut in combinations(range(1, len(fed)), groups - 1)
        ]
        bounds = list(reuse.plan_groups(fed, call, most))
        assert bounds[0] == 0 and bounds[-1] == len(fed) and len(bounds) - 1 <= most
        assert cost(bounds) == min(cost(split) for split in splits)
