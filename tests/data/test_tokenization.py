"""Tokenizers and run_clm-style blocks."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from workflow_lib.cli import StageError
from workflow_lib.data.tokenization import blocks_table, group_blocks, load_hub_tokenizer, token_ids, train_bpe
from workflow_lib.files import write_parquet

TEXTS = [" the cat sat on the mat .\n", "", " a dog ran to the park .\n", " the cat ran .\n"] * 50


def test_group_blocks_drops_the_remainder_like_run_clm():
    ids = np.arange(10, dtype=np.int32)
    blocks = group_blocks(ids, 4)
    assert blocks.tolist() == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert group_blocks(ids, 11).shape == (0, 11)


def test_token_ids_concatenate_rows_without_eos():
    tokenizer = train_bpe(TEXTS, vocab_size=300, min_frequency=1)
    ids, offsets = token_ids(tokenizer, TEXTS[:4], batch_size=3)
    expected = [t for text in TEXTS[:4] for t in tokenizer(text)["input_ids"]]
    assert ids.tolist() == expected
    assert offsets.tolist()[2] == offsets.tolist()[1]  # the empty row adds no token
    assert tokenizer.eos_token_id not in ids.tolist()
    assert tokenizer.decode(ids[offsets[0] : offsets[1]]) == TEXTS[0]


def test_trained_bpe_is_deterministic_and_round_trips(tmp_path):
    a, b = train_bpe(TEXTS, 300), train_bpe(TEXTS, 300)
    a.save_pretrained(tmp_path / "a")
    b.save_pretrained(tmp_path / "b")
    assert (tmp_path / "a" / "tokenizer.json").read_bytes() == (tmp_path / "b" / "tokenizer.json").read_bytes()
    assert a.decode(a(" the dog sat .")["input_ids"]) == " the dog sat ."
    assert a.pad_token_id == a.eos_token_id == a.bos_token_id


def test_hub_tokenizer_code_path_loads_a_local_folder(tmp_path):
    train_bpe(TEXTS, 300).save_pretrained(tmp_path / "tok")
    loaded = load_hub_tokenizer("mine", str(tmp_path / "tok"), None)
    assert loaded(" the cat")["input_ids"] == train_bpe(TEXTS, 300)(" the cat")["input_ids"]


def test_hub_tokenizer_offline_fails_fast_naming_the_key():
    with pytest.raises(StageError) as info:
        load_hub_tokenizer("gpt2", "openai-community/no-such-model-xyz", None)
    message = str(info.value)
    assert "tokenizers.gpt2.name" in message and "local folder" in message


def test_blocks_table_is_list_int32_and_deterministic(tmp_path):
    blocks = group_blocks(np.arange(12, dtype=np.int32), 4)
    write_parquet(blocks_table(blocks), tmp_path / "a.parquet")
    write_parquet(blocks_table(blocks), tmp_path / "b.parquet")
    table = pq.read_table(tmp_path / "a.parquet")
    field_type = table.schema.field("input_ids").type
    assert pa.types.is_list(field_type) and field_type.value_type == pa.int32()
    assert table.column("input_ids").to_pylist() == blocks.tolist()
    assert (tmp_path / "a.parquet").read_bytes() == (tmp_path / "b.parquet").read_bytes()
