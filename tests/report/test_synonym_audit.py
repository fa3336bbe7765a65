"""The synonym audit (report/synonym_audit.py): a seeded sample of each table's sources with their synonyms as text,
and the share of the training tokens that have a synonym."""

from __future__ import annotations

import csv
import json
import subprocess
import sys

import numpy as np
import pytest

from workflow_lib.files import write_parquet
from workflow_lib.perturb.backends import backend
from workflow_lib.perturb.synonym_table import SynonymTable
from workflow_lib.report.synonym_audit import audit, markdown, shown, table_name, write_audit


def small_table() -> SynonymTable:
    # tokens 1..30 have synonyms (token t -> t+1 weight 3, t+2 weight 1); 31..39 none; vocabulary 40
    tokens = list(range(1, 31))
    return SynonymTable.from_rows(40, tokens, [[t + 2, t + 1] for t in tokens], [[1.0, 3.0] for _ in tokens])


def test_the_share_counts_training_tokens_with_a_synonym_and_the_sample_is_seeded():
    counts = np.zeros(40, dtype=np.int64)
    counts[[1, 2, 3]] = [10, 5, 5]  # 20 tokens with synonyms in the data
    counts[[0, 35]] = [60, 20]  # 80 without
    counts[10:20] = 1  # 10 more with
    result = audit(small_table().to_arrow(), counts, seed=42, name="tok/data/distributional", size=5)
    assert result.with_synonyms == 30 and result.vocab_size == 40
    assert result.training_tokens == 110 and result.share == pytest.approx(30 / 110)
    picked = [r[0] for r in result.rows]
    assert len(picked) == 5 and len(set(picked)) == 5
    assert all(1 <= t <= 30 and counts[t] > 0 for t in picked)  # sources with synonyms that the data holds
    assert [r[1] for r in result.rows] == sorted((counts[t] for t in picked), reverse=True)  # most frequent first
    for token, _count, cands, weights in result.rows:
        assert cands == [token + 1, token + 2] and weights == pytest.approx([0.75, 0.25])  # heaviest first
    again = audit(small_table().to_arrow(), counts, seed=42, name="tok/data/distributional", size=5)
    assert again == result
    others = [audit(small_table().to_arrow(), counts, seed=s, name="tok/data/distributional", size=5) for s in range(5)]
    assert any({r[0] for r in o.rows} != set(picked) for o in others)  # the seed moves the sample


def test_without_training_tokens_the_share_is_not_counted():
    result = audit(small_table().to_arrow(), None, seed=1, name="tok/none/embedding", size=50)
    assert result.share is None and result.training_tokens is None
    assert sorted(r[0] for r in result.rows) == list(range(1, 31))  # every source, at most `size`
    text = markdown([result], {"tok/none/embedding": {t: f" w{t}" for t in range(40)}}, seed=1)
    assert "not counted" in text and "| ␣w1 | 1 |  | ␣w2 0.75, ␣w3 0.25 |" in text


def test_a_uniform_table_draws_from_every_token():
    table = SynonymTable.uniform(10, special_ids=[0]).to_arrow()
    counts = np.array([5, 1, 1, 1, 1, 1, 0, 0, 0, 0])
    result = audit(table, counts, seed=3, name="tok/data/uniform", size=3)
    assert result.with_synonyms == 9 and result.share == pytest.approx(5 / 10)
    assert all(1 <= r[0] <= 5 and not r[2] for r in result.rows)
    text = markdown([result], {"tok/data/uniform": {t: f" w{t}" for t in range(10)}}, seed=3)
    assert "any of the 9 tokens, 0.11 each" in text


def test_shown_makes_spaces_and_markdown_visible():
    assert shown(" the") == "␣the"
    assert shown("a|b\n") == "a\\|b\\n"
    assert shown("**") == "\\*\\*"
    assert shown("") == "(empty)"
    assert table_name("results/synonyms/gpt2/wiki/embedding-words.parquet") == "gpt2/wiki/embedding-words"


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """A trained tokenizer's folder, its training tokens and its distributional table, as the workflow writes them."""
    import pyarrow as pa

    from workflow_lib.data.builtin_corpus import build_grammar
    from workflow_lib.data.tokenization import train_bpe
    from workflow_lib.perturb.synonyms import distributional_synonyms

    folder = tmp_path_factory.mktemp("audit")
    grammar = build_grammar(seed=3, words_per_class=4)
    tokenizer = train_bpe(grammar.generate("train", n_docs=100, sentences_per_doc=10, seed=3), vocab_size=600)
    tokenizer.save_pretrained(folder / "tokenizer")
    texts = grammar.generate("train", n_docs=100, sentences_per_doc=10, seed=4)
    flat = np.concatenate([np.asarray(ids) for ids in tokenizer(texts)["input_ids"]])
    blocks = flat[: len(flat) // 32 * 32].reshape(-1, 32)
    write_parquet(pa.table({"input_ids": pa.array(blocks.tolist(), pa.list_(pa.int32()))}), folder / "train.parquet")
    table = distributional_synonyms(blocks, len(tokenizer), k=3, special_ids=tokenizer.all_special_ids, min_count=5)
    table_path = folder / "synonyms/bpe/data/distributional.parquet"
    write_parquet(table.to_arrow(), table_path)
    return folder, tokenizer, blocks, table, table_path


def test_the_audit_files_show_words_and_repeat_byte_for_byte(built, tmp_path):
    folder, tokenizer, blocks, table, table_path = built
    specs = [(str(table_path), str(folder / "tokenizer"), str(folder / "train.parquet"))]
    text = write_audit(specs, seed=42, stem=str(tmp_path / "synonyms"))
    assert (tmp_path / "synonyms.md").read_text() == text
    first = (tmp_path / "synonyms.csv").read_bytes()
    write_audit(specs, seed=42, stem=str(tmp_path / "again"))
    assert (tmp_path / "again.csv").read_bytes() == first and (tmp_path / "again.md").read_text() == text

    rows = list(csv.DictReader((tmp_path / "synonyms.csv").open()))
    assert len(rows) == 20 and {r["table"] for r in rows} == {"bpe/data/distributional"}
    has = np.asarray(table.has_synonyms(backend(blocks)))
    counts = np.bincount(blocks.reshape(-1), minlength=len(tokenizer))
    share = counts[has].sum() / counts.sum()
    assert float(rows[0]["share_of_training_tokens_with_synonyms"]) == pytest.approx(share, abs=1e-6)
    assert f"{share:.1%} of the {counts.sum():,} training tokens have a synonym" in text
    for r in rows:
        token = int(r["token_id"])
        assert r["token"] == tokenizer.decode([token]) and int(r["training_occurrences"]) == counts[token] > 0
        ids = [int(i) for i in json.loads(r["synonym_ids"])]
        assert json.loads(r["synonyms"]) == [tokenizer.decode([i]) for i in ids]
        assert shown(r["token"]) in text


def test_the_command_line_writes_an_audit_of_no_tables(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "workflow_lib.report.synonym_audit", "--seed", "1", "--stem", str(tmp_path / "s")],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert "draws no synonyms" in (tmp_path / "s.md").read_text()
    assert (tmp_path / "s.csv").read_text().startswith("table,token_id,token,")


def test_the_summary_shows_the_audit_after_what_mauve_can_see(tmp_path):
    from test_resolution import ENOUGH, study

    from workflow_lib.report.summary import StudyResults, summary
    from workflow_lib.report.tables import tables

    frame = study(tmp_path / "s", ENOUGH)
    written = tables(frame, str(tmp_path / "tables"), 0.025, ["test"])
    config = {"models": {"mle": {"source": "scratch"}}, "eval_sets": {}, "datasets": {}}
    audit_text = "### `tok/data/distributional`\n\n| token | id | in training | synonyms (weight) |\n"
    text = summary(StudyResults(frame, written | {"synonyms": audit_text}), config, 0.025)
    assert text.index("## What MAUVE can see here") < text.index("## The synonyms the perturbation draws")
    assert text.index("## The synonyms the perturbation draws\n\n" + audit_text) < text.index("## Provenance")
    assert "## The synonyms the perturbation draws" not in summary(StudyResults(frame, written), config, 0.025)
