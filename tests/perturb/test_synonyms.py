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


@pytest.fixture(scope="module")
def small_bpe():
    """A byte-level BPE trained on the builtin language with too few merges to keep every word whole, so its
    vocabulary holds pieces (" fo", " de"), merge steps (" th" on the way to " the") and whole words; and the
    tokenized training text as blocks."""
    from workflow_lib.data.builtin_corpus import build_grammar
    from workflow_lib.data.tokenization import train_bpe

    grammar = build_grammar(seed=3, words_per_class=4)
    texts = grammar.generate("train", n_docs=200, sentences_per_doc=10, seed=3)
    tokenizer = train_bpe(texts, vocab_size=330)
    flat = np.concatenate([np.asarray(ids) for ids in tokenizer(texts)["input_ids"]])
    blocks = flat[: len(flat) // 64 * 64].reshape(-1, 64)
    return grammar, tokenizer, blocks


def test_word_tokens_are_the_words_of_the_text_and_no_pieces(small_bpe):
    from workflow_lib.perturb.synonyms import token_texts, word_tokens

    grammar, tokenizer, blocks = small_bpe
    texts = token_texts(tokenizer)
    words = word_tokens(texts, blocks)
    found = {texts[t] for t in np.flatnonzero(words)}
    whole = {" " + w for w in grammar.vocabulary if w.isalpha()}
    assert found <= whole  # no piece, no merge step
    # every word of the grammar the tokenizer emits as one token (after a space) is found
    emitted = {texts[t] for t in np.unique(blocks)}
    assert found == whole & emitted and len(found) >= 10
    # what the spelling alone would let in: pieces followed by the rest of their word, and unseen merge steps
    spelled = {t for t in texts if len(t) > 1 and t[0] == " " and t[1:].isalpha()}
    assert spelled - whole, "the tokenizer should hold word-like pieces for this test to mean anything"


def test_word_level_sources_only_hold_words(small_bpe):
    from workflow_lib.perturb.synonyms import token_texts, word_tokens

    grammar, tokenizer, blocks = small_bpe
    texts = token_texts(tokenizer)
    words = word_tokens(texts, blocks)
    special = sorted(set(tokenizer.all_special_ids))
    rng = np.random.default_rng(1)
    embeddings = rng.normal(size=(len(tokenizer), 16))
    tables = {
        "distributional": distributional_synonyms(blocks, len(tokenizer), 5, special, 5),
        "distributional-words": distributional_synonyms(blocks, len(tokenizer), 5, special, 5, words),
        "embedding": embedding_synonyms(embeddings, 5, special, len(tokenizer)),
        "embedding-words": embedding_synonyms(embeddings, 5, special, len(tokenizer), words),
    }

    def members(table):
        sources = np.flatnonzero(table.has_synonyms(backend(np.zeros(0))))
        return set(sources) | set(table.candidates.tolist())

    whole = {" " + w for w in grammar.vocabulary if w.isalpha()}
    for name in ("distributional-words", "embedding-words"):
        held = members(tables[name])
        assert held and {texts[t] for t in held} <= whole, name
        assert len(held) > 5
    for name in ("distributional", "embedding"):  # the plain sources hold pieces and punctuation too
        assert {texts[t] for t in members(tables[name])} - whole, name
    # the word-level embedding table is the plain one's neighbours among words: same cosine order
    plain_words = embedding_synonyms(embeddings * words[:, None], 5, special, len(tokenizer))
    source = int(np.flatnonzero(words)[0])
    assert row(tables["embedding-words"], source)[0] == [c for c in row(plain_words, source)[0] if words[c]][:5]
