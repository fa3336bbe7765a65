"""The `file` synonym source: the user's pairs (synonyms.file) read onto a tokenizer, and every error naming the key
and the file."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from workflow_lib.cli import StageError
from workflow_lib.perturb.backends import backend
from workflow_lib.perturb.synonym_file import load_synonym_pairs, read_pairs


@pytest.fixture(scope="module")
def tokenizer():
    """A byte-level BPE that keeps the builtin language's words whole (with and without the leading space)."""
    from workflow_lib.data.builtin_corpus import build_grammar
    from workflow_lib.data.tokenization import train_bpe

    grammar = build_grammar(seed=3, words_per_class=4)
    texts = grammar.generate("train", n_docs=200, sentences_per_doc=10, seed=3)
    return train_bpe(texts + ["fono\nsebe\nroge\n" * 50] * 20, vocab_size=600)


def one(tokenizer, text: str) -> int:
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    assert len(ids) == 1, (text, ids)
    return ids[0]


def synonyms_of(table, token: int) -> dict[int, float]:
    start, end = table.offsets[token], table.offsets[token + 1]
    weights = np.diff(np.concatenate([[0.0], table.keys[start:end] - token]))
    return dict(zip(table.candidates[start:end].tolist(), weights.tolist(), strict=True))


def test_pairs_become_token_pairs_in_both_spellings_with_their_weights(tmp_path, tokenizer, caplog):
    path = tmp_path / "pairs.tsv"
    path.write_text(
        "word\tsynonym\tweight\n"  # a header
        "# my synonyms\n"
        "fono\tsebe\t3\n"
        "fono\troge\n"  # weight 1
        "\n"
        "fono\tsebe\t1\n"  # listed twice: 3 + 1
        "sebe\tfono\t2.5\n"
        "fono\tfono\n"  # itself: skipped
        "fono\tunbelievablyrare\n"  # not one token: skipped
    )
    with caplog.at_level(logging.INFO, logger="workflow_lib.perturb.synonym_file"):
        table = load_synonym_pairs(path, tokenizer)
    assert table.vocab_size == len(tokenizer)
    for space in (" ", ""):
        fono, sebe, roge = (one(tokenizer, space + w) for w in ("fono", "sebe", "roge"))
        assert synonyms_of(table, fono) == pytest.approx({sebe: 0.8, roge: 0.2})  # weights 4 : 1
        assert synonyms_of(table, sebe) == pytest.approx({fono: 1.0})  # one way only: sebe -> fono as listed
        assert synonyms_of(table, roge) == {}
    assert int(np.asarray(table.has_synonyms(backend(np.zeros(0)))).sum()) == 4
    assert "1 skipped because a side is not one token" in caplog.text and "unbelievablyrare" in caplog.text
    assert "1 skipped pairing a word with itself" in caplog.text


def test_a_csv_file_reads_commas(tmp_path):
    path = tmp_path / "pairs.csv"
    path.write_text("fono,sebe,2\nroge,fono\n")
    assert read_pairs(path) == [("fono", "sebe", 2.0), ("roge", "fono", 1.0)]


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ("fono\n", r"line 1: expected 2 or 3 columns separated by tabs .* got 1"),
        ("fono\tsebe\t1\textra\n", r"line 1: expected 2 or 3 columns .* got 4"),
        ("fono\tsebe\n\tsebe\n", r"line 2: expected 2 or 3 columns"),
        ("fono sebe\n", r"line 1: expected 2 or 3 columns separated by tabs"),
        ("fono\tsebe\tmany\n", r"line 1: the weight 'many' is not a number"),
        ("fono\tsebe\t-1\n", r"line 1: the weight '-1' must be a finite number > 0"),
        ("fono\tsebe\t0\n", r"line 1: the weight '0' must be a finite number > 0"),
        ("fono\tsebe\tnan\n", r"line 1: the weight 'nan' must be a finite number > 0"),
        ("# nothing\n\n", r"holds no pair"),
        ("unbelievablyrare\tfono\n", r"none of its 1 pairs has both sides as one token"),
    ],
)
def test_errors_name_the_key_the_file_and_the_line(tmp_path, tokenizer, content, problem):
    path = tmp_path / "pairs.tsv"
    path.write_text(content)
    with pytest.raises(StageError, match=rf"^config key synonyms\.file: {path}: {problem}"):
        load_synonym_pairs(path, tokenizer)


def test_a_missing_file_names_the_key(tmp_path, tokenizer):
    with pytest.raises(StageError, match=r"config key synonyms\.file: .*absent\.tsv: no such file"):
        load_synonym_pairs(tmp_path / "absent.tsv", tokenizer)


def test_the_config_check_asks_for_the_file(tmp_path):
    from workflow_lib.config import ConfigError
    from workflow_lib.config_checks import check_synonym_file

    with pytest.raises(ConfigError, match=r"config key synonyms\.file: required by experiments\.x\.train_pert"):
        check_synonym_file({"synonyms": {"file": None}}, "experiments.x.train_perturbation.synonyms", tmp_path)
    with pytest.raises(ConfigError, match=r"config key synonyms\.file: 'pairs\.tsv': no such file"):
        check_synonym_file({"synonyms": {"file": "pairs.tsv"}}, "experiments.x.train_perturbation.synonyms", tmp_path)
    (tmp_path / "pairs.tsv").write_text("fono\tsebe\n")
    check_synonym_file({"synonyms": {"file": "pairs.tsv"}}, "experiments.x.train_perturbation.synonyms", tmp_path)
