"""Synonym tables from each source."""

from __future__ import annotations

import numpy as np
import pytest

from workflow_lib.cli import StageError
from workflow_lib.models import load_input_embeddings
from workflow_lib.perturb.backends import backend
from workflow_lib.perturb.synonym_table import SynonymTable
from workflow_lib.perturb.synonyms import distributional_synonyms, embedding_synonyms


def row(table: SynonymTable, token: int) -> tuple[list[int], np.ndarray]:
    start, end = table.offsets[token], table.offsets[token + 1]
    keys = table.keys[start:end] - token
    return table.candidates[start:end].tolist(), np.diff(np.concatenate([[0.0], keys]))


def test_distributional_finds_tokens_that_share_contexts():
    # Tokens 1/2 fill one slot, 3/4 another, with distinct neighbours: "5 {1|2} 6 {3|4} 7".
    rng = np.random.default_rng(0)
    n = 4000
    blocks = np.stack(
        [np.full(n, 5), rng.choice([1, 2], n), np.full(n, 6), rng.choice([3, 4], n), np.full(n, 7)], axis=1
    )
    table = distributional_synonyms(blocks, vocab_size=9, k=3, special_ids=[0], min_count=5)
    cands, weights = row(table, 1)
    assert cands[0] == 2 and weights[0] == weights.max()
    assert row(table, 3)[0][0] == 4
    assert not table.has_synonyms(backend(blocks))[[0, 8]].any()  # special and unseen tokens get none
    assert all(c != 1 for c in row(table, 1)[0])  # never itself


def test_embedding_neighbours_by_cosine_without_self_or_specials():
    emb = np.array([[1, 0], [1, 0.1], [0.9, 0.0], [0, 1], [0.1, 1], [-1, 0]], dtype=np.float32)
    table = embedding_synonyms(emb, k=2, special_ids=[2])
    cands, weights = row(table, 0)
    assert cands == [1, 4]  # 2 is special, 3 orthogonal (cosine 0), 5 opposite: only positive similarity
    assert weights[0] > weights[1] and np.isclose(weights.sum(), 1)
    assert row(table, 3)[0] == [4, 1]
    assert 2 not in table.candidates.tolist()


def test_embedding_from_a_local_model_folder_uses_the_hub_code_path(tmp_path):
    from transformers import GPT2Config, GPT2LMHeadModel

    model = GPT2LMHeadModel(GPT2Config(vocab_size=30, n_positions=16, n_embd=8, n_layer=1, n_head=1))
    model.save_pretrained(tmp_path / "m")
    emb = load_input_embeddings({"key": "local", "source": "hf", "name": str(tmp_path / "m")})
    assert np.allclose(emb, model.get_input_embeddings().weight.detach().numpy())


def test_embedding_from_hub_offline_names_the_model_key():
    with pytest.raises(StageError, match=r"(?s)models\.gpt2\.name.*local folder"):
        load_input_embeddings({"key": "gpt2", "source": "hf", "name": "nobody/no-such-model-xyz"})
    with pytest.raises(StageError, match="pretrained"):
        load_input_embeddings({"key": "tiny", "source": "scratch"})


def test_oracle_synonyms_are_the_grammar_classes():
    from workflow_lib.data.builtin_corpus import build_grammar
    from workflow_lib.data.tokenization import train_bpe
    from workflow_lib.perturb.synonyms import oracle_synonyms

    grammar = build_grammar(seed=3, words_per_class=4)
    texts = grammar.generate("train", n_docs=200, sentences_per_doc=10, seed=3)
    tokenizer = train_bpe(texts, vocab_size=600)
    table = oracle_synonyms(tokenizer, grammar)
    word_of = {tid: tokenizer.convert_tokens_to_string([tok]) for tok, tid in tokenizer.get_vocab().items()}
    class_of = {w: c for c, cls in enumerate(grammar.synonym_classes()) for w in (grammar.vocabulary[i] for i in cls)}
    checked = 0
    for token in np.flatnonzero(table.has_synonyms(backend(np.zeros(0)))):
        word = word_of[token]
        cands, _weights = row(table, int(token))
        for c in cands:
            assert word_of[c].startswith(" ") == word.startswith(" ")  # same spelling convention
            assert class_of[word_of[c].strip()] == class_of[word.strip()] and word_of[c] != word
        checked += 1
    # every content word of the grammar that is a single token (with a leading space) has synonyms
    spaced = {word_of[t] for t in np.flatnonzero(table.has_synonyms(backend(np.zeros(0))))}
    content = [w for cls in grammar.synonym_classes() if len(cls) > 1 for w in (grammar.vocabulary[i] for i in cls)]
    single = [w for w in content if len(tokenizer(" " + w)["input_ids"]) == 1]
    assert single and all(" " + w in spaced for w in single)
    assert checked >= len(single)
