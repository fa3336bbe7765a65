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
    perfect = extrapolation_error(OracleModel(grammar, tokenizer, "ood"), tokenizer, grammar, ood_refs, "ood", none, None)
    assert perfect["tv_mean"] < 1e-6 and perfect["prefixes"] > 50 and perfect["coverage"] == pytest.approx(1.0)
    # A model that learnt only the in-support law is wrong on out-of-support prefixes.
    in_support = OracleModel(grammar, tokenizer, "in_support")
    wrong = extrapolation_error(in_support, tokenizer, grammar, ood_refs, "ood", none, None)
    assert wrong["tv_mean"] > 0.05
    right = extrapolation_error(in_support, tokenizer, grammar, references(grammar, "test"), "in_support", none, None)
    assert right["tv_mean"] < 1e-6


def test_perturbation_changes_the_model_law(world):
    from workflow_lib.perturb.synonym_table import SynonymTable

    grammar, tokenizer = world
    refs = references(grammar, "test", 5)
    model = OracleModel(grammar, tokenizer, "in_support")
    table = SynonymTable.uniform(len(tokenizer), tokenizer.all_special_ids)
    perturbed = extrapolation_error(model, tokenizer, grammar, refs, "in_support", {"strategy": "deletion", "intensity": 0.3},
                                    table, draws=4, seed=1)
    assert perturbed["tv_mean"] > 0.01 and perturbed["draws"] == 4
