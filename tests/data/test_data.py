"""The download stage: every source gives the same normalised shape, with provenance and clear errors."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from support.workflow_runs import tiny_builtin
from workflow_lib.cli import StageError
from workflow_lib.config import validate_config
from workflow_lib.data.prepare import build_prompts, normalise
from workflow_lib.files import sha256_file

WIKI = " = Title = \n \n A first line of text .\n \n = = Section = = \n Another line .\n"


def filled(ds: dict) -> dict:
    """The dataset section as the rules pass it: checked, with the schema's defaults filled."""
    config = {
        "datasets": {"d": ds, "syn": tiny_builtin()},
        "tokenizers": {"t": {"source": "hf", "name": "x"}},
        "models": {"m": {"source": "hf", "name": "x", "tokenizer": "t"}},
        "eval_sets": {"s": {"dataset": "syn", "split": "test"}},
        "experiments": {"e": {"models": ["m"], "train_dataset": "syn", "eval_sets": ["s"]}},
    }
    return validate_config(config)["datasets"]["d"]


def test_local_wikitext_keeps_hub_row_semantics_and_records_sha256(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "wiki.train.raw").write_text(WIKI)
    spec = filled(
        {"source": "local", "format": "wikitext", "files": {"train": "wiki.train.raw"}, "cleaning": "wikitext"}
    )
    table, meta = normalise("wiki", spec, "train")
    assert table.column("text").to_pylist() == [
        " = Title = \n",
        "",
        " A first line of text .\n",
        "",
        " = = Section = = \n",
        " Another line .\n",
    ]
    assert table.column("doc_id").to_pylist() == list(range(6))
    assert meta["provenance"]["files"][0]["sha256"] == sha256_file(tmp_path / "wiki.train.raw")
    assert meta["rows_loaded"] == meta["rows_written"] == 6


def test_max_rows_keeps_the_first_rows_after_cleaning(tmp_path, monkeypatch):
    """raw: max_rows cuts the cleaned rows, so N rows survive however many the cleaning drops first."""
    monkeypatch.chdir(tmp_path)
    rows = [json.dumps({"text": "word " * n}) for n in (10, 60, 2000, 70, 80)]
    (tmp_path / "web.jsonl").write_text("\n".join(rows) + "\n")
    spec = filled(
        {"source": "local", "format": "jsonl", "files": {"test": "web.jsonl"}, "cleaning": "webtext", "max_rows": 2}
    )
    table, meta = normalise("web", spec, "test")
    assert [len(t.split()) for t in table.column("text").to_pylist()] == [60, 70]
    assert meta["rows_loaded"] == 5 and meta["rows_written"] == 2 and meta["recipe"] == "raw"
    assert [s["rows"] for s in meta["steps"]] == [5, 3, 2]
    assert meta["steps"][1]["dropped_length"] == 2


def test_max_rows_per_split_caps_each_split_by_its_own_number(tmp_path, monkeypatch):
    """max_rows {train: 3, validation: 1}: each split keeps its own first rows; a split it omits keeps all; the
    config refuses a split the dataset lacks and a per-split cap on recipe mixce; the data job's params see only
    its split's cap, so changing train's cap leaves validation's job as it was."""
    from workflow_lib.config import ConfigError
    from workflow_lib.config_datasets import check_recipe
    from workflow_lib.data.splits import split_spec

    monkeypatch.chdir(tmp_path)
    for split in ("train", "validation", "test"):
        (tmp_path / f"{split}.jsonl").write_text(
            "".join(json.dumps({"text": f"{split} row {i}"}) + "\n" for i in range(5))
        )
    files = {split: f"{split}.jsonl" for split in ("train", "validation", "test")}
    spec = filled({"source": "local", "format": "jsonl", "files": files, "max_rows": {"train": 3, "validation": 1}})
    assert [normalise("web", spec, s)[1]["rows_written"] for s in ("train", "validation", "test")] == [3, 1, 5]
    assert normalise("web", spec, "validation")[1]["max_rows"] == 1
    assert split_spec(spec, "validation") == split_spec(
        {**spec, "max_rows": {"train": 9, "validation": 1}}, "validation"
    )
    assert split_spec(spec, "train") != split_spec({**spec, "max_rows": {"train": 9, "validation": 1}}, "train")
    check_recipe("web", spec)
    with pytest.raises(ConfigError, match=r"datasets\.web\.max_rows: dataset 'web' has no split 'tset'"):
        check_recipe("web", {**spec, "max_rows": {"tset": 2}})
    with pytest.raises(ConfigError, match=r"datasets\.web\.max_rows: a cap per split is part of recipe 'raw'"):
        check_recipe("web", {**spec, "recipe": "mixce", "cleaning": "webtext", "max_rows": {"test": 2}})


def test_empty_result_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "short.jsonl").write_text(json.dumps({"text": "too short"}) + "\n")
    spec = filled({"source": "local", "format": "jsonl", "files": {"test": "short.jsonl"}, "cleaning": "webtext"})
    with pytest.raises(StageError, match=r"datasets\.web split 'test': no text left after recipe 'raw'"):
        normalise("web", spec, "test")


def test_hf_source_reads_a_local_copy_through_datasets(tmp_path):
    folder = tmp_path / "wikitext-copy" / "data"
    folder.mkdir(parents=True)
    pq.write_table(pa.table({"text": [" a line .\n", "", " b line .\n"]}), folder / "test-00000-of-00001.parquet")
    pq.write_table(pa.table({"text": [" c .\n"]}), folder / "train-00000-of-00001.parquet")
    spec = filled({"source": "hf", "path": str(tmp_path / "wikitext-copy"), "splits": {"test": "test"}})
    table, meta = normalise("wiki", spec, "test")
    assert table.column("text").to_pylist() == [" a line .\n", "", " b line .\n"]
    assert meta["provenance"]["hub_split"] == "test" and meta["provenance"]["fingerprint"]


def test_hf_source_offline_names_the_key_and_the_local_alternative():
    spec = filled(
        {"source": "hf", "path": "Salesforce/wikitext-does-not-exist", "name": "x", "splits": {"test": "test"}}
    )
    with pytest.raises(StageError) as info:
        normalise("wikitext2", spec, "test")
    message = str(info.value)
    assert "datasets.wikitext2" in message and "source: local" in message


def test_builtin_source_is_deterministic():
    spec = filled(tiny_builtin())
    a, meta = normalise("syn", spec, "train")
    b, _ = normalise("syn", spec, "train")
    assert a.equals(b) and a.num_rows == 60
    assert meta["provenance"]["grammar"]


def test_prompts_error_names_the_eval_set():
    table = pa.table({"doc_id": [0, 1], "text": ["short", "also short"]})
    with pytest.raises(StageError, match="eval_sets.webtext"):
        build_prompts(
            "webtext",
            table,
            prefix_words=20,
            reference_words=80,
            min_chars=100,
            extra_words=10,
            forbidden="==",
            max_prompts=None,
        )


def test_a_split_with_fewer_rows_than_prompts_asked_names_its_files_and_format(tmp_path, monkeypatch):
    """Three documents, one per line, read as `text` (paragraphs) are one row: the prompts job says so, naming the
    file and the format's row rule; as `lines` they are three rows and pass a floor of 3."""
    monkeypatch.chdir(tmp_path)
    doc = " ".join(f"word{i}" for i in range(120))
    (tmp_path / "docs.txt").write_text(f"{doc}\n{doc}\n{doc}\n")
    settings = {
        "prefix_words": 20,
        "reference_words": 80,
        "min_chars": 100,
        "extra_words": 10,
        "forbidden": "==",
        "max_prompts": 30,
    }
    text = filled({"source": "local", "format": "text", "files": {"test": "docs.txt"}})
    table, meta = normalise("mine", text, "test")
    assert table.num_rows == 1
    with pytest.raises(StageError) as error:
        build_prompts("mine-test", table, **settings, min_prompts=3, source=meta)
    assert str(error.value) == (
        "eval_sets.mine-test: datasets.mine split test has 1 row (docs.txt, format text: a row is one paragraph: the "
        "lines up to a blank line (for one document per line, use format: lines)), fewer than the 3 prompts the eval "
        "set asks for (prompts.min_prompts, or its max_prompts where smaller)"
    )
    lines = filled({"source": "local", "format": "lines", "files": {"test": "docs.txt"}})
    table, meta = normalise("mine", lines, "test")
    frame, _ = build_prompts("mine-test", table, **settings, min_prompts=3, source=meta)
    assert frame.height == 3
