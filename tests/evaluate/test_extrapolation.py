"""The exact extrapolation error on the builtin corpus."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from workflow_lib.data.builtin_corpus import build_grammar
from workflow_lib.data.tokenization import train_bpe
from workflow_lib.evaluate.extrapolation import extrapolation_error, word_token_ids


@pytest.fixture(scope="module")
def world():
    grammar = build_grammar(seed=5, words_per_class=3)
    texts = grammar.generate("train", n_docs=300, sentences_per_doc=12, seed=5)
    tokenizer = train_bpe(texts, 600)
    assert (word_token_ids(tokenizer, grammar.vocabulary) >= 0).all()  # every word is one token here
    return grammar, tokenizer


class OracleModel(torch.nn.Module):
    """Predicts the grammar's true next-word law from the decoded prefix (a perfect extrapolator)."""

    def __init__(self, grammar, tokenizer, law):
        super().__init__()
        self.grammar, self.tokenizer, self.law = grammar, tokenizer, law
        self.config = SimpleNamespace(vocab_size=len(tokenizer))
        self.word_tokens = word_token_ids(tokenizer, grammar.vocabulary)
        self.dummy = torch.nn.Parameter(torch.zeros(1))

    def forward(self, input_ids, attention_mask, position_ids=None, logits_to_keep=0):
        texts = [self.tokenizer.decode(ids[mask > 0]) for ids, mask in zip(input_ids, attention_mask)]
        truth = self.grammar.next_word_probs(self.grammar.encode(texts), self.law)
        probs = np.full((len(texts), len(self.tokenizer)), 1e-12)
        probs[:, self.word_tokens] = np.nan_to_num(truth, nan=1.0 / truth.shape[1]) + 1e-12
        return SimpleNamespace(logits=torch.log(torch.as_tensor(probs))[:, None, :])


def references(grammar, split, n=15):
    return [" ".join(t.split()[:100]) for t in grammar.generate(split, n_docs=n, sentences_per_doc=20, seed=9)]


def test_a_perfect_model_has_zero_error_and_a_wrong_law_does_not(world):
    grammar, tokenizer = world
    none = {"strategy": "insertion", "intensity": 0.0}
    ood_refs = references(grammar, "ood")
    perfect = extrapolation_error(
        OracleModel(grammar, tokenizer, "ood"), tokenizer, grammar, ood_refs, "ood", none, None
    )
    assert perfect["tv_mean"] < 1e-6 and perfect["prefixes"] > 50 and perfect["coverage"] == pytest.approx(1.0)
    # A model that learnt only the in-support law is wrong on out-of-support prefixes.
    in_support = OracleModel(grammar, tokenizer, "in_support")
    wrong = extrapolation_error(in_support, tokenizer, grammar, ood_refs, "ood", none, None)
    assert wrong["tv_mean"] > 0.05
    right = extrapolation_error(in_support, tokenizer, grammar, references(grammar, "test"), "in_support", none, None)
    assert right["tv_mean"] < 1e-6


def test_each_references_mean_tv_is_written_for_the_paired_contrasts(world):
    """The per-reference sidecar (report.contrasts pairs the TV over references): each reference's mean over its
    possible prefixes, weighted by their count, gives back the overall mean; the out-of-support law's impossible
    prefixes are in no reference's count."""
    grammar, tokenizer = world
    none = {"strategy": "insertion", "intensity": 0.0}
    refs = references(grammar, "ood")
    result = extrapolation_error(
        OracleModel(grammar, tokenizer, "in_support"), tokenizer, grammar, refs, "ood", none, None
    )
    per = result["per_prompt"]
    assert per["prefixes"].sum() == result["prefixes"] and len(per["reference"]) <= len(refs)
    assert np.average(per["tv"], weights=per["prefixes"]) == pytest.approx(result["tv_mean"])
    assert (per["tv"] > 0).any() and (per["tv"] <= 1).all()


def test_perturbation_changes_the_model_law(world):
    from workflow_lib.perturb.synonym_table import SynonymTable

    grammar, tokenizer = world
    refs = references(grammar, "test", 5)
    model = OracleModel(grammar, tokenizer, "in_support")
    table = SynonymTable.uniform(len(tokenizer), tokenizer.all_special_ids)
    perturbed = extrapolation_error(
        model,
        tokenizer,
        grammar,
        refs,
        "in_support",
        {"strategy": "deletion", "intensity": 0.3},
        table,
        draws=4,
        seed=1,
    )
    assert perturbed["tv_mean"] > 0.01 and perturbed["draws"] == 4


class TwoLawModel(torch.nn.Module):
    """A model with a known perturbed law: on prefix i it predicts `unchanged[i]` when the perturbation left the prefix
    as it was (probability (1 - rho)^n_i under deletion at intensity rho, n_i its non-special tokens) and `changed[i]`
    when it deleted a token (the prefix got shorter). Rows come in prefix order, in one batch (at most 256)."""

    def __init__(self, tokenizer, lengths, unchanged, changed):
        super().__init__()
        self.config = SimpleNamespace(vocab_size=len(tokenizer))
        self.lengths = torch.as_tensor(lengths)
        self.unchanged, self.changed = torch.as_tensor(unchanged), torch.as_tensor(changed)
        self.dummy = torch.nn.Parameter(torch.zeros(1))

    def forward(self, input_ids, attention_mask, position_ids=None, logits_to_keep=0):
        assert len(input_ids) == len(self.lengths)
        shorter = (attention_mask.sum(1) < self.lengths)[:, None]
        return SimpleNamespace(logits=torch.log(torch.where(shorter, self.changed, self.unchanged))[:, None, :])


def binomial_mad(draws: int, share: np.ndarray) -> np.ndarray:
    """E|K / draws - share| for K ~ Binomial(draws, share), exactly."""
    from scipy.stats import binom

    k = np.arange(draws + 1)[:, None]
    return (np.abs(k / draws - share) * binom.pmf(k, draws, share)).sum(0)


def two_law_world(world, rho, n_refs=30):
    """A TwoLawModel whose perturbed law is the truth itself, so that all of the TV of a Monte Carlo mean is bias.

    With j, k the two likeliest words of prefix i, u = e_j - e_k, share = (1 - rho)^n_i and m = 0.9 min(p_j, p_k):
    unchanged = p + (1 - share) m u and changed = p - share m u, so share * unchanged + (1 - share) * changed = p, and
    the mean of D draws, K of them unchanged, lies at TV (K / D - share) m from p: E TV = m E|K / D - share|."""
    from workflow_lib.evaluate.extrapolation import evaluation_prefixes

    grammar, tokenizer = world
    refs = references(grammar, "test", n_refs)
    prefixes = evaluation_prefixes(refs, 20, 10)
    truth = grammar.next_word_probs(
        [np.asarray(ids) for ids in grammar.encode([" ".join(p) for p in prefixes])], "in_support"
    )
    assert not np.isnan(truth).any()
    encoded = tokenizer([" ".join(p) for p in prefixes], add_special_tokens=True)["input_ids"]
    special = set(tokenizer.all_special_ids)
    share = (1 - rho) ** np.array([sum(t not in special for t in ids) for ids in encoded])
    top = np.argsort(-truth, axis=1)[:, :2]
    rows = np.arange(len(truth))
    m = 0.9 * truth[rows[:, None], top].min(1)
    u = np.zeros_like(truth)
    u[rows, top[:, 0]], u[rows, top[:, 1]] = 1.0, -1.0
    unchanged, changed = np.full((2, len(truth), len(tokenizer)), 1e-12)
    tokens = word_token_ids(tokenizer, grammar.vocabulary)
    unchanged[:, tokens] += truth + ((1 - share) * m)[:, None] * u
    changed[:, tokens] += truth - (share * m)[:, None] * u
    assert (unchanged > 0).all() and (changed > 0).all()
    model = TwoLawModel(tokenizer, [len(ids) for ids in encoded], unchanged, changed)
    return model, refs, share, m


def test_the_bias_estimates_find_a_known_monte_carlo_bias(world):
    """The perturbed law is the truth (TV 0), so tv_mean is all Monte Carlo bias, whose expectation is known exactly;
    the split-half estimate and the cross-fitted TV land on their exact expectations (docs/method.md §4)."""
    from workflow_lib.perturb.synonym_table import SynonymTable

    grammar, tokenizer = world
    rho, draws = 0.015, 8
    model, refs, share, m = two_law_world(world, rho)
    assert 0.2 < share.min() and share.max() < 0.8  # no prefix is almost surely changed or unchanged
    table = SynonymTable.uniform(len(tokenizer), tokenizer.all_special_ids)
    result = extrapolation_error(
        model,
        tokenizer,
        grammar,
        refs,
        "in_support",
        {"strategy": "deletion", "intensity": rho},
        table,
        draws=draws,
        seed=3,
    )
    assert result["prefixes"] == len(share) and result["draws"] == draws
    expected_tv = (m * binomial_mad(draws, share)).mean()
    expected_excess = (m * (binomial_mad(draws // 2, share) - binomial_mad(draws, share))).mean()
    assert result["tv_mean"] == pytest.approx(expected_tv, abs=2 * result["tv_2se"])
    assert result["tv_bias_estimate"] == pytest.approx(expected_excess, abs=2 * result["tv_bias_estimate_2se"])
    assert result["tv_lower"] == pytest.approx(0.0, abs=2 * result["tv_lower_2se"])
    # the bias is found: both statistics are well above their noise, while the truth is 0
    assert result["tv_mean"] - result["tv_lower"] > 3 * max(result["tv_2se"], result["tv_lower_2se"])
    assert result["tv_bias_estimate"] > 3 * result["tv_bias_estimate_2se"] > 0


def test_more_draws_leave_less_bias(world):
    """The bias of the known case falls with the draws as its exact expectation does, and the split-half estimate with it."""
    from workflow_lib.perturb.synonym_table import SynonymTable

    grammar, tokenizer = world
    rho = 0.015
    model, refs, share, m = two_law_world(world, rho, n_refs=10)
    table = SynonymTable.uniform(len(tokenizer), tokenizer.all_special_ids)
    perturbation = {"strategy": "deletion", "intensity": rho}
    few, many = (
        extrapolation_error(model, tokenizer, grammar, refs, "in_support", perturbation, table, draws=d, seed=3)
        for d in (2, 32)
    )
    assert (m * binomial_mad(32, share)).mean() < 0.3 * (m * binomial_mad(2, share)).mean()
    assert many["tv_mean"] < 0.5 * few["tv_mean"] and many["tv_bias_estimate"] < 0.5 * few["tv_bias_estimate"]


def test_monte_carlo_bias_on_a_hand_example():
    from workflow_lib.evaluate.extrapolation import monte_carlo_bias

    truth = np.array([[0.5, 0.5, 0.0]])
    halves = np.array([[[0.7, 0.3, 0.0]], [[0.3, 0.7, 0.0]]])  # the mean is the truth; each half is 0.2 away
    tv, excess, cross_fitted = monte_carlo_bias(halves, truth)
    np.testing.assert_allclose([tv[0], excess[0], cross_fitted[0]], [0.0, 0.2, -0.2], atol=1e-12)
    agree = np.array([[[0.7, 0.3, 0.0]], [[0.6, 0.4, 0.0]]])  # both halves on one side: no bias, no excess
    np.testing.assert_allclose(monte_carlo_bias(agree, truth), [[0.15], [0.0], [0.15]], atol=1e-12)


def test_no_perturbation_is_exact_and_odd_draws_are_refused(world):
    from workflow_lib.cli import StageError

    grammar, tokenizer = world
    refs = references(grammar, "test", 5)
    model = OracleModel(grammar, tokenizer, "ood")
    exact = extrapolation_error(
        model, tokenizer, grammar, refs, "in_support", {"strategy": "insertion", "intensity": 0.0}, None
    )
    assert exact["draws"] == 1 and exact["tv_bias_estimate"] == 0.0 and exact["tv_lower"] == exact["tv_mean"] > 0
    with pytest.raises(StageError, match="odd"):
        extrapolation_error(
            model, tokenizer, grammar, refs, "in_support", {"strategy": "deletion", "intensity": 0.1}, None, draws=5
        )


def test_the_first_draws_of_more_are_the_same_draws_and_the_same_seed_gives_the_same_bytes(world, tmp_path):
    from workflow_lib.evaluate.extrapolation import model_next_word
    from workflow_lib.files import write_json
    from workflow_lib.perturb.synonym_table import SynonymTable

    grammar, tokenizer = world
    refs = references(grammar, "test", 5)
    model = OracleModel(grammar, tokenizer, "in_support")
    table = SynonymTable.uniform(len(tokenizer), tokenizer.all_special_ids)
    perturbation = {"strategy": "deletion", "intensity": 0.1}  # the oracle reads words: delete, never insert
    prefixes = [r.split()[:30] for r in refs]
    words = word_token_ids(tokenizer, grammar.vocabulary)
    four = model_next_word(model, tokenizer, prefixes, words, perturbation, table, 4, seed=7, blocks=4)
    eight = model_next_word(model, tokenizer, prefixes, words, perturbation, table, 8, seed=7, blocks=2)
    np.testing.assert_allclose(eight[0], four.mean(0), atol=1e-12)  # draws 0-3 are the first half of 8
    assert not np.allclose(four[0], four[1])  # the draws differ
    paths = []
    for i, seed in enumerate((7, 7, 8)):
        paths.append(tmp_path / f"{i}.json")
        write_json(
            extrapolation_error(model, tokenizer, grammar, refs, "in_support", perturbation, table, draws=4, seed=seed),
            paths[-1],
        )
    assert paths[0].read_bytes() == paths[1].read_bytes() != paths[2].read_bytes()


def test_support_shares_and_synonym_reach_on_the_reach_split():
    """`reach` prefixes are off the training support only through their words (a class-mate reaches them), `ood`'s
    through their classes; the oracle table's draws for a held-out subject are class-mates seen as subjects with the
    share of their weight, a table pointing elsewhere reaches nothing."""
    from workflow_lib.evaluate.extrapolation import support_shares, synonym_reach
    from workflow_lib.perturb.synonym_table import SynonymTable
    from workflow_lib.perturb.synonyms import oracle_synonyms

    grammar = build_grammar(seed=5, words_per_class=4, context_fraction=0.25)
    tokenizer = train_bpe(grammar.generate("train", n_docs=300, sentences_per_doc=12, seed=5), 600)
    for split, off_low, reachable in (("reach", 0.4, True), ("ood", 0.05, False), ("test", None, False)):
        refs = references(grammar, split)
        n = sum(len(range(20, len(r.split()), 10)) for r in refs)
        shares = support_shares(grammar, refs, 20, 10, np.ones(n, dtype=bool), np.linspace(0, 1, n))
        if off_low is None:
            assert shares["off_support_share"] == 0 and shares["tv_off_support"] is None
        else:
            assert shares["off_support_share"] > off_low
            assert shares["reachable_share"] == (shares["off_support_share"] if reachable else 0)
            assert 0 <= shares["tv_off_support"] <= 1
    table = oracle_synonyms(tokenizer, grammar)
    tokens = word_token_ids(tokenizer, grammar.vocabulary)
    held = np.flatnonzero(grammar.held_subject)
    expected = []
    for w in held:  # class-mates seen as subjects, by the grammar's weights
        mates = (grammar.word_class == grammar.word_class[w]) & (np.arange(len(tokens)) != w)
        expected.append(grammar.word_weight[mates & ~grammar.held_subject].sum() / grammar.word_weight[mates].sum())
    assert (tokens[held] >= 0).all()
    assert synonym_reach(grammar, tokenizer, table) == pytest.approx(np.mean(expected))
    # a table whose held-out words' synonyms are determiners reaches nothing; no table or no held words: None
    det = tokens[0]
    elsewhere = SynonymTable.from_rows(len(tokenizer), tokens[held], [[det]] * len(held), [[1.0]] * len(held))
    assert synonym_reach(grammar, tokenizer, elsewhere) == 0.0
    assert synonym_reach(grammar, tokenizer, None) is None
    assert synonym_reach(build_grammar(seed=5, words_per_class=4), tokenizer, table) is None
