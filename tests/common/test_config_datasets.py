"""Config validation of datasets and eval sets: the datasets and splits an experiment names, local files, and
datasets downloaded from a URL (their entries, plain http, the download cap, the files they name)."""

from __future__ import annotations

from pathlib import Path

import pytest

from support.config_errors import check, error_of
from support.workflow_runs import tiny_config


def test_unknown_dataset_referenced_by_experiment():
    config = tiny_config()
    config["experiments"]["main"]["train_dataset"] = "wiki"
    message = error_of(config)
    assert "experiments.main.train_dataset" in message and "'wiki'" in message and "synthetic" in message


def test_unknown_eval_set_and_split():
    config = tiny_config()
    config["experiments"]["main"]["eval_sets"] = ["syn-test", "nope"]
    assert "experiments.main.eval_sets[1]" in error_of(config)
    config = tiny_config()
    config["eval_sets"]["syn-test"]["split"] = "dev"
    message = error_of(config)
    assert "eval_sets.syn-test.split" in message and "ood" in message
    # `reach` exists only where a share of the words is held out of the subject role
    config["eval_sets"]["syn-test"]["split"] = "reach"
    message = error_of(config)
    assert "eval_sets.syn-test.split" in message and "no split 'reach'" in message
    builtin = next(d for d in config["datasets"].values() if d["source"] == "builtin").setdefault("builtin", {})
    builtin["context_fraction"] = 0.25
    check(config)
    builtin["context_fraction"] = 1
    assert "context_fraction" in error_of(config)


def test_missing_local_file_names_key_and_path(tmp_path):
    config = tiny_config()
    config["datasets"]["wiki"] = {"source": "local", "format": "wikitext", "files": {"test": "nowhere/wiki.test.raw"}}
    message = error_of(config, tmp_path)
    assert "datasets.wiki.files.test" in message and "nowhere/wiki.test.raw" in message


def test_writingprompts_needs_two_files(tmp_path):
    (tmp_path / "a.wp_source").write_text("x\n")
    config = tiny_config()
    config["datasets"]["wp"] = {"source": "local", "format": "writingprompts", "files": {"test": "a.wp_source"}}
    assert "takes 2 file(s)" in error_of(config, tmp_path)


def test_hf_dataset_requires_path():
    config = tiny_config()
    config["datasets"]["wiki"] = {"source": "hf", "splits": {"test": "test"}}
    assert "'path' is a required property" in error_of(config)


def url_dataset(**changes) -> dict:
    return {
        "source": "url",
        "format": "jsonl",
        "cleaning": "webtext",
        "files": {"test": {"url": "https://example.org/v1/webtext.test.jsonl", "sha256": "a" * 64}},
        **changes,
    }


@pytest.mark.parametrize(
    "dataset, expected",
    [
        (
            url_dataset(files={"test": {"url": "ftp://example.org/x.jsonl", "sha256": None}}),
            "does not match '^https?://'",
        ),
        (
            url_dataset(files={"test": {"url": "https://example.org/x.jsonl", "sha256": "abc"}}),
            "datasets.web.files.test",
        ),
        (url_dataset(files={"test": {"url": "https://example.org/x.jsonl"}}), "datasets.web.files.test"),
        (
            url_dataset(files={"test": "data/webtext.test.jsonl"}),
            "datasets.web.files.test: source: url takes {url: ..., sha256: ...} entries",
        ),
        (
            url_dataset(
                format="parquet", files={"test": {"url": "https://e.org/x.parquet", "sha256": None, "head_bytes": 4096}}
            ),
            "datasets.web.files.test.head_bytes: a head is cut to whole lines",
        ),
        (
            url_dataset(
                files={
                    "test": {"url": "https://a.org/x.jsonl", "sha256": None},
                    "train": {"url": "https://b.org/x.jsonl", "sha256": None},
                }
            ),
            "would both be saved as 'x.jsonl'",
        ),
        (
            url_dataset(
                format="writingprompts",
                archive={"url": "https://e.org/wp.tar.gz", "sha256": None},
                files={"test": ["wp/test.wp_source", "../test.wp_target"]},
            ),
            "must be a relative path without '..'",
        ),
        (
            url_dataset(
                format="writingprompts",
                archive={"url": "https://e.org/wp.tar.gz", "sha256": None},
                files={"test": ["wp/test.wp_source"]},
            ),
            "format 'writingprompts' takes 2 files",
        ),
        (
            url_dataset(archive={"url": "https://e.org/wp.tar.gz", "sha256": None}),
            "with `archive`, files are the archive's member paths",
        ),
        (
            {"source": "local", "format": "jsonl", "files": {"test": {"url": "https://e.org/x.jsonl", "sha256": None}}},
            "{url, sha256} entries need source: url",
        ),
        (
            url_dataset(files={"test": {"url": "http://example.org/x.jsonl", "sha256": None}}),
            "config key datasets.web.files.test: http://example.org/x.jsonl is plain http",
        ),
        (
            url_dataset(
                format="writingprompts",
                archive={"url": "http://e.org/wp.tar.gz", "sha256": None},
                files={"test": ["wp/test.wp_source", "wp/test.wp_target"]},
            ),
            "config key datasets.web.archive: http://e.org/wp.tar.gz is plain http",
        ),
    ],
)
def test_url_datasets_are_checked_before_any_job(dataset, expected):
    config = tiny_config()
    config["datasets"]["web"] = dataset
    assert expected in error_of(config)


def test_plain_http_passes_the_check_when_pinned_or_served_from_this_machine():
    config = tiny_config()
    config["datasets"]["web"] = url_dataset(files={"test": {"url": "http://example.org/x.jsonl", "sha256": "a" * 64}})
    config["datasets"]["local"] = url_dataset(files={"test": {"url": "http://127.0.0.1:8000/x.jsonl", "sha256": None}})
    assert check(config)["datasets"]["web"]["files"]["test"]["url"] == "http://example.org/x.jsonl"


def test_the_download_cap_defaults_to_the_fetchs_own_and_reaches_the_fetch_jobs_only_where_set():
    """download.max_bytes null (the default) adds no option, so a study that leaves it alone keeps its fetch jobs'
    params; a value goes to every fetch, a dataset's file or a GGUF checkpoint; 0 is refused naming the key."""
    from types import SimpleNamespace

    from workflow_lib.inputs import Inputs

    config = tiny_config()
    config["datasets"]["web"] = url_dataset()
    config["models"]["smol"] = {
        "source": "hf",
        "tokenizer": next(iter(config["tokenizers"])),
        "gguf": {"url": "https://example.org/smol.gguf", "sha256": "b" * 64},
    }
    file = SimpleNamespace(dataset="web", file="webtext.test.jsonl")
    gguf = SimpleNamespace(gguf_model="smol")
    checked = check(config)
    assert checked["download"] == {"max_bytes": None}
    assert Inputs(checked, Path(".")).fetch_options(file) == f"--sha256 {'a' * 64}"
    assert Inputs(checked, Path(".")).gguf_fetch_options(gguf) == f"--sha256 {'b' * 64}"
    config["download"] = {"max_bytes": 5000}
    checked = check(config)
    assert Inputs(checked, Path(".")).fetch_options(file) == f"--sha256 {'a' * 64} --max-bytes 5000"
    assert Inputs(checked, Path(".")).gguf_fetch_options(gguf) == f"--sha256 {'b' * 64} --max-bytes 5000"
    config["download"] = {"max_bytes": 0}
    assert "download.max_bytes" in error_of(config)


def test_the_schema_states_the_fetchs_default_cap():
    """The reference says what null means; the number lives in fetch.py, so the two must agree."""
    from workflow_lib.config import load_schema
    from workflow_lib.data.fetch import DEFAULT_MAX_BYTES

    described = load_schema()["properties"]["download"]["properties"]["max_bytes"]["description"]
    assert f"null = {DEFAULT_MAX_BYTES} (20 GiB)" in described and DEFAULT_MAX_BYTES == 20 * 2**30


def test_url_datasets_need_no_local_file_and_name_their_downloads():
    from workflow_lib.data.downloads import fetched, split_paths

    config = tiny_config()
    head = {"url": "https://e.org/v1/webtext.train.jsonl?x=1", "sha256": None, "head_bytes": 8192}
    config["datasets"]["web"] = url_dataset(
        files={"test": {"url": "https://e.org/v1/webtext.test.jsonl", "sha256": None}, "train": head}
    )
    config["datasets"]["wp"] = {
        "source": "url",
        "format": "writingprompts",
        "archive": {"url": "https://e.org/data/writingPrompts.tar.gz", "sha256": "b" * 64},
        "files": {"test": ["writingPrompts/test.wp_source", "writingPrompts/test.wp_target"]},
    }
    datasets = check(config)["datasets"]
    assert set(fetched(datasets["web"])) == {"webtext.test.jsonl", "head8192-webtext.train.jsonl"}
    assert split_paths("web", datasets["web"], "train") == ["results/downloads/web/head8192-webtext.train.jsonl"]
    assert list(fetched(datasets["wp"])) == ["writingPrompts.tar.gz"]
    assert split_paths("wp", datasets["wp"], "test") == [
        "results/downloads/wp/unpacked/writingPrompts/test.wp_source",
        "results/downloads/wp/unpacked/writingPrompts/test.wp_target",
    ]
