"""Recipes: MixCE's order (filter, then cut, then top up from train) and raw, checked against MixCE's scripts.

`mixce_webtext_reference` is bloomberg/MixCE-acl2023 data/webtext_data.py's `preprocess`, restated line by line
on files on disk (its file round trip included), so the comparison is with what MixCE's script writes, not with
a restatement of our own code.
"""

from __future__ import annotations

import hashlib
import json
import random
import re

import pytest
from test_data import filled

from workflow_lib.cli import StageError
from workflow_lib.config import ConfigError, validate_config
from workflow_lib.data import recipes
from workflow_lib.data.prepare import normalise
from workflow_lib.data.readers import read_rows

WORDS = ["the", "a", "of", "river", "stone", "quick", "light", "house", "ran", "over", "under", "and"]


def text(n_words: int, rng: random.Random, cr: bool = False) -> str:
    words = [rng.choice(WORDS) for _ in range(n_words)]
    if cr:  # a carriage return inside a document, as a few WebText documents have
        words[n_words // 2] += "\r"
    return " ".join(words) + "\n\nmore " + " ".join(rng.choice(WORDS) for _ in range(5))


def write_jsonl(path, texts) -> None:
    path.write_text("".join(json.dumps({"id": i, "text": t}) + "\n" for i, t in enumerate(texts)))


def mixce_webtext_reference(folder, rows: int) -> dict[str, list[str]]:
    """data/webtext_data.py `preprocess`, with 5000 as `rows`, on folder/webtext.{train,test,valid}.jsonl."""
    for datasplit in ["train", "valid", "test"]:
        outputs = []
        with open(folder / f"webtext.{datasplit}.jsonl") as f:
            lines = f.readlines()
        for line in lines:
            line = json.loads(line.strip())
            t = line["text"].replace("\n", " ").strip()
            if 50 < len(t.split()) < 1000:
                outputs.append(t)
        with open(folder / f"webtext.{datasplit}.txt", "w") as f:
            f.write("\n".join(outputs))
    with open(folder / "webtext.train.txt") as f:
        train = [line.strip() for line in f]
    with open(folder / "webtext.test.txt") as f:
        test = [line.strip() for line in f]
    with open(folder / "webtext.valid.txt") as f:
        validation = [line.strip() for line in f]
    remain_test = rows - len(test)
    remain_validation = rows - len(validation)
    test += train[:remain_test]
    validation += train[remain_test : remain_test + remain_validation]
    train = train[remain_test + remain_validation :]
    return {"train": train, "test": test, "validation": validation}


@pytest.fixture
def webtext(tmp_path, monkeypatch):
    """WebText-like splits: short (< 50 words) and long (>= 1000) documents among ordinary ones, some with \\r."""
    monkeypatch.chdir(tmp_path)
    rng = random.Random(3)
    lengths = {
        "test": [20, 80, 30, 1200, 90, 60, 40, 70],
        "valid": [75, 10, 85, 95, 12],
        "train": [5, 65, 55, 999, 45, 100, 110, 120, 33, 130, 140, 150],
    }
    for split, ns in lengths.items():
        write_jsonl(tmp_path / f"webtext.{split}.jsonl", [text(n, rng, cr=i in (1, 2)) for i, n in enumerate(ns)])
    return tmp_path


def webtext_spec(**extra) -> dict:
    return filled(
        {
            "source": "local",
            "format": "jsonl",
            "cleaning": "webtext",
            "recipe": "mixce",
            "max_rows": 6,
            "top_up": "train",
            "files": {
                s: f"webtext.{f}.jsonl" for s, f in (("test", "test"), ("validation", "valid"), ("train", "train"))
            },
            **extra,
        }
    )


def test_mixce_webtext_is_mixces_script(webtext):
    """Every split, row for row, as MixCE's script writes it: filter first, carriage returns split by its file
    round trip, test then validation topped up from train's head, train minus what it gave."""
    expected = mixce_webtext_reference(webtext, rows=6)
    spec = webtext_spec()
    for split in ("test", "validation", "train"):
        table, meta = normalise("webtext", spec, split)
        assert table.column("text").to_pylist() == expected[split], split
        assert meta["rows_sha256"] == hashlib.sha256("\n".join(expected[split]).encode()).hexdigest()
    assert any("\r" in json.loads(line)["text"] for line in (webtext / "webtext.test.jsonl").read_text().splitlines())


def test_mixce_counts_each_step_and_the_top_up(webtext):
    table, meta = normalise("webtext", webtext_spec(), "test")
    steps = {s["step"].split(" (")[0]: s for s in meta["steps"]}
    # 8 rows of 20, 80, 30, 1200, 90, 60, 40, 70 words + 6: four are outside 50 < words < 1000; the second,
    # which has a carriage return, comes back from MixCE's file round trip as two rows.
    assert steps["load"]["rows"] == 8
    assert steps["clean and 50 < words < 1000"]["rows"] == 4
    assert steps["clean and 50 < words < 1000"]["dropped_length"] == 4
    assert steps["split at carriage returns"]["rows"] == 5
    assert (
        meta["top_up"]["rows"] == table.num_rows - meta["top_up"]["first_doc_id"] == 6 - meta["top_up"]["first_doc_id"]
    )
    assert meta["top_up"]["split"] == "train" and meta["top_up"]["skipped"] == 0
    assert meta["steps"][-1] == {"step": "top-up from train", "rows": 6, "added": meta["top_up"]["rows"]}
    assert meta["top_up_provenance"]["files"][0]["path"] == "webtext.train.jsonl"
    validation = normalise("webtext", webtext_spec(), "validation")[1]
    assert validation["top_up"]["skipped"] == meta["top_up"]["rows"]  # validation's rows follow test's


def test_mixce_cuts_after_filtering_not_before(tmp_path, monkeypatch):
    """WritingPrompts-style: 5000 (here 3) rows kept AFTER the filter, so short rows at the head cost nothing."""
    monkeypatch.chdir(tmp_path)
    rng = random.Random(0)
    lengths = [10, 12, 14, 60, 70, 80, 90, 100]
    (tmp_path / "test.wp_source").write_text("".join(f"[ WP ] prompt {i} .\n" for i in range(len(lengths))))
    (tmp_path / "test.wp_target").write_text(
        "".join(" ".join(rng.choice(WORDS) for _ in range(n)) + " <newline> end .\n" for n in lengths)
    )
    spec = filled(
        {
            "source": "local",
            "format": "writingprompts",
            "cleaning": "writingprompts",
            "recipe": "mixce",
            "max_rows": 3,
            "files": {"test": ["test.wp_source", "test.wp_target"]},
        }
    )
    table, meta = normalise("wp", spec, "test")
    assert [re.search(r"prompt (\d)", row)[1] for row in table.column("text").to_pylist()] == ["3", "4", "5"]
    assert [s["rows"] for s in meta["steps"]] == [8, 5, 3] and meta["top_up"] is None
    # The old order (cut the raw rows to 3, then filter) would have kept none.
    raw_rows = read_rows("writingprompts", ["test.wp_source", "test.wp_target"])[0]
    assert recipes.mixce_filtered(raw_rows[:3], "writingprompts")[0] == []


def test_top_up_that_runs_short_names_the_split_and_head_bytes(webtext):
    spec = webtext_spec(max_rows=40)
    with pytest.raises(
        StageError,
        match=r"datasets\.webtext split 'test' \(recipe 'mixce'\): the top-up of 'test' "
        r"needs 35 filtered 'train' rows.*head_bytes",
    ):
        normalise("webtext", spec, "test")


def test_raw_keeps_every_cleaned_row():
    rows = ["a b c", "", " = Heading = \n", "x " * 2000]
    kept, steps = recipes.raw(rows, "wikitext", None)
    assert kept == rows and [s["rows"] for s in steps] == [4, 4]
    kept, steps = recipes.raw(rows, "plain", 2)
    assert kept == ["a b c", "= Heading ="] and [s["rows"] for s in steps] == [4, 3, 2]


def test_file_round_trip_is_pythons_reader(tmp_path):
    rows = ["plain row", "one\rtwo", "ends with cr\r", "crlf\r\ninside", " padded ", "", "last"]
    (tmp_path / "f.txt").write_text("\n".join(rows))
    with open(tmp_path / "f.txt") as f:
        expected = [line.strip() for line in f]
    assert recipes.file_round_trip(rows) == expected
    assert recipes.file_round_trip([]) == []


def test_chunked_top_up_matches_filtering_everything():
    rng = random.Random(5)
    rows = [text(rng.choice([5, 30, 60, 80, 1500]), rng, cr=rng.random() < 0.1) for _ in range(3000)]
    full = recipes.mixce_filtered(rows, "webtext")[0]
    for need in (1, 17, 300, len(full)):
        head, read = recipes._head_filtered(rows, "webtext", need)
        assert head == full[:need] and read <= len(rows)
    assert recipes._head_filtered(rows, "webtext", 17)[1] < len(rows)  # it did not clean everything for 17 rows


@pytest.mark.parametrize(
    "change, message",
    [
        ({"cleaning": "wikitext"}, r"datasets\.webtext\.recipe: 'mixce' filters MixCE's cleaned text"),
        ({"recipe": "raw"}, r"datasets\.webtext\.top_up: topping up is part of recipe 'mixce'"),
        ({"top_up": "extra"}, r"datasets\.webtext\.top_up: dataset 'webtext' has no split 'extra'"),
    ],
)
def test_recipe_config_errors_name_the_key(webtext, change, message):
    spec = {
        "source": "local",
        "format": "jsonl",
        "cleaning": "webtext",
        "recipe": "mixce",
        "top_up": "train",
        "files": {"test": "webtext.test.jsonl", "train": "webtext.train.jsonl"},
        **change,
    }
    config = {
        "datasets": {"webtext": spec},
        "tokenizers": {"t": {"source": "hf", "name": "x"}},
        "models": {"m": {"source": "hf", "name": "x", "tokenizer": "t"}},
        "experiments": {"e": {"models": ["m"], "train_dataset": "webtext", "eval_sets": ["s"]}},
        "eval_sets": {"s": {"dataset": "webtext", "split": "test"}},
    }
    with pytest.raises(ConfigError, match=message):
        validate_config(config)


def test_mixce_defaults_to_mixces_5000_rows(webtext):
    spec = filled(
        {
            "source": "local",
            "format": "jsonl",
            "cleaning": "webtext",
            "recipe": "mixce",
            "files": {"test": "webtext.test.jsonl"},
        }
    )
    assert spec["max_rows"] == 5000 and spec["top_up"] is None


def mixce_wikitext103_reference(folder, splits: dict[str, list[str]], rows: int) -> dict[str, list[str]]:
    """data/wikitext_data.py `preprocess` on hub rows, files on disk; sacremoses stands in for detokenizer.perl
    (line by line, as the perl script reads its input) and Python for the two `sed` passes."""
    from sacremoses import MosesDetokenizer

    detok = MosesDetokenizer(lang="en")
    for datasplit in ["train", "test", "validation"]:
        outputs = []
        for item in splits[datasplit]:
            item = item.replace("\n", " ").replace("\r", " ").strip()
            if item and item[0] != "=":
                outputs.append(item)
        text = "\n".join(outputs).replace(" @", "").replace("@ ", "")
        text = "\n".join(detok.detokenize(line.split()) for line in text.split("\n"))
        (folder / f"{datasplit}.txt").write_text(text)
        with open(folder / f"{datasplit}.txt") as f:
            lines = f.readlines()
        after_filter = [line.strip() for line in lines if 50 < len(line.strip().split()) < 1000]
        (folder / f"{datasplit}.txt").write_text("\n".join(after_filter))
    read = {
        s: [line.strip() for line in (folder / f"{s}.txt").read_text().splitlines()]
        for s in ("train", "test", "validation")
    }
    train, test, validation = read["train"], read["test"], read["validation"]
    remain_test, remain_validation = rows - len(test), rows - len(validation)
    test += train[:remain_test]
    validation += train[remain_test : remain_test + remain_validation]
    train = train[remain_test + remain_validation :]
    return {"train": train, "test": test, "validation": validation}


def test_mixce_wikitext103_from_the_hub_is_mixces_script(tmp_path):
    """The hub path: a hub-shaped dataset folder (Parquet shards, loaded by `datasets`), WikiText's tokenised
    text with headings, @-@ joiners and empty rows; MixCE's WikiText-103 recipe with its top-up from train."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = random.Random(9)

    def article(n_paragraphs: int) -> list[str]:
        out = [" = Some Title = \n", ""]
        for _ in range(n_paragraphs):
            n = rng.choice([20, 60, 90, 140])
            body = " ".join(
                rng.choice(WORDS + ["1 @,@ 000", "well @-@ known", "( a )", '" quoted "', "it 's"]) for _ in range(n)
            )
            out += [f" {body} . \n", "", " = = Section = = \n", ""]
        return out

    splits = {"train": article(40), "test": article(6), "validation": article(5)}
    data = tmp_path / "wikitext-copy" / "wikitext-103-raw-v1"
    data.mkdir(parents=True)
    for split, rows in splits.items():
        pq.write_table(pa.table({"text": rows}), data / f"{split}-00000-of-00001.parquet")
    # The dataset card's front matter maps configs to shards, as Salesforce/wikitext's README.md does.
    (data.parent / "README.md").write_text(
        "---\nconfigs:\n- config_name: wikitext-103-raw-v1\n  data_files:\n"
        + "".join(f"  - split: {s}\n    path: wikitext-103-raw-v1/{s}-*\n" for s in splits)
        + "---\n"
    )
    expected = mixce_wikitext103_reference(tmp_path, splits, rows=8)
    spec = filled(
        {
            "source": "hf",
            "path": str(tmp_path / "wikitext-copy"),
            "name": "wikitext-103-raw-v1",
            "splits": {s: s for s in splits},
            "cleaning": "wikitext103",
            "recipe": "mixce",
            "max_rows": 8,
            "top_up": "train",
        }
    )
    for split in ("test", "validation", "train"):
        table, _meta = normalise("wikitext103", spec, split)
        assert table.column("text").to_pylist() == expected[split], split
    test = normalise("wikitext103", spec, "test")[1]
    assert test["top_up"]["rows"] > 0 and test["top_up_provenance"]["hub_split"] == "train"
    assert len(expected["test"]) == len(expected["validation"]) == 8 and len(expected["train"]) > 10
    assert any("1,000" in row or "well-known" in row for row in expected["test"])  # joiners were undone
