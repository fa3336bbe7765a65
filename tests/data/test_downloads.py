"""The workflow fetches datasets by URL (no network: a loopback server), unpacks archives, builds the sets by
recipe and makes prompts; a wrong checksum stops it before any later job; a second study reuses the cache.

The server drops the first connection for two of the files half-way, so every successful run here also proves
a resume. What the sets must contain is computed by MixCE's own WebText script (test_recipes), not by ours.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import random
import tarfile

import pyarrow.parquet as pq
import pytest
from test_recipes import mixce_webtext_reference

from studies.httpserver import serve
from support.workflow_runs import snakemake, tiny_config, write_config

pytestmark = pytest.mark.workflow

WORDS = [
    "the",
    "a",
    "of",
    "river",
    "stone",
    "quick",
    "light",
    "house",
    "ran",
    "over",
    "under",
    "and",
    "story",
    "night",
    "city",
    "wind",
    "old",
    "new",
]
HEAD_BYTES = 40_000
WP_MEMBERS = ["writingPrompts/test.wp_source", "writingPrompts/test.wp_target"]


def words(n: int, rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


def fixture_files() -> dict[str, bytes]:
    """A WebText-like test and train jsonl and a WritingPrompts-like tar.gz (with members nobody asks for)."""
    rng = random.Random(11)
    lengths = [30, 150, 200, 40, 180, 1500, 160, 20, 170, 190, 220, 140]  # five outside 50 < words < 1000 (and 2 \r)
    test = [words(n, rng) + ("\r" + words(120, rng) if i == 4 else "") for i, n in enumerate(lengths)]
    train = [words(rng.choice([10, 130, 160, 250]), rng) for _ in range(400)]
    jsonl = lambda rows: "".join(json.dumps({"id": i, "length": len(t), "text": t}) + "\n" for i, t in enumerate(rows))
    stories = [words(n, rng).replace("river", "river <newline>") for n in [20, 150, 170, 15, 200, 180, 160]]
    members = {
        "writingPrompts/test.wp_source": "".join(f"[ WP ] A prompt , number {i} .\n" for i in range(len(stories))),
        "writingPrompts/test.wp_target": "".join(s + "\n" for s in stories),
        "writingPrompts/train.wp_source": "[ WP ] not asked for\n",
        "writingPrompts/train.wp_target": "nor this\n",
    }
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, content in members.items():
            data = content.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return {
        "/v1/webtext.test.jsonl": jsonl(test).encode(),
        "/v1/webtext.train.jsonl": jsonl(train).encode(),
        "/fairseq/writingPrompts.tar.gz": buffer.getvalue(),
    }


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def study(server, files: dict[str, bytes], key: str = "webtext", **overrides) -> dict:
    head = files["/v1/webtext.train.jsonl"][:HEAD_BYTES]
    head = head[: head.rindex(b"\n") + 1]
    config = tiny_config()
    config["datasets"][key] = {
        "source": "url",
        "format": "jsonl",
        "cleaning": "webtext",
        "recipe": "mixce",
        "max_rows": 10,
        "top_up": "train",
        "files": {
            "test": {"url": server.url("/v1/webtext.test.jsonl"), "sha256": sha(files["/v1/webtext.test.jsonl"])},
            "train": {"url": server.url("/v1/webtext.train.jsonl"), "sha256": sha(head), "head_bytes": HEAD_BYTES},
        },
        **overrides,
    }
    config["datasets"]["wp"] = {
        "source": "url",
        "format": "writingprompts",
        "cleaning": "writingprompts",
        "recipe": "mixce",
        "max_rows": 4,
        "archive": {
            "url": server.url("/fairseq/writingPrompts.tar.gz"),
            "sha256": sha(files["/fairseq/writingPrompts.tar.gz"]),
        },
        "files": {"test": WP_MEMBERS},
    }
    config["prompts"]["min_prompts"] = 4  # wp keeps max_rows 4 rows
    config["eval_sets"].update(
        {"web": {"dataset": key, "split": "test"}, "wp": {"dataset": "wp", "split": "test", "prefix_words": 35}}
    )
    return config


TARGETS = ("results/prompts/web.parquet", "results/prompts/wp.parquet")


@pytest.fixture(scope="module")
def files():
    return fixture_files()


def test_downloaded_sets_are_mixces_and_a_second_study_takes_them_from_the_cache(tmp_path, files):
    cache = tmp_path / "cache"
    cache.mkdir()
    env = {**os.environ, "SNAKEMAKE_OUTPUT_CACHE": str(cache)}
    first, second = tmp_path / "first", tmp_path / "second"
    with serve(files, drop_first={"/v1/webtext.test.jsonl", "/fairseq/writingPrompts.tar.gz"}) as server:
        first.mkdir()
        write_config(first, study(server, files))
        run = snakemake(first, *TARGETS, "--cache", env=env)
        assert run.returncode == 0, run.stderr[-4000:]
        server.settle()
        seen = list(server.requests)

        # Resumed, not restarted: the second request for a dropped file starts where the first one stopped.
        for path in ("/v1/webtext.test.jsonl", "/fairseq/writingPrompts.tar.gz"):
            asked = [r for r in seen if r["path"] == path]
            assert len(asked) == 2 and asked[0]["range"] is None, asked
            assert asked[1]["range"] == f"bytes={asked[0]['sent']}-" and asked[1]["status"] == 206
        downloads = first / "results/downloads"
        assert (downloads / "webtext/webtext.test.jsonl").read_bytes() == files["/v1/webtext.test.jsonl"]
        assert not list(downloads.rglob("*.part"))
        # Only the head of train travelled, and it was cut to whole lines.
        [train_request] = [r for r in seen if r["path"] == "/v1/webtext.train.jsonl"]
        assert train_request["range"] == f"bytes=0-{HEAD_BYTES - 1}" and train_request["sent"] == HEAD_BYTES
        head = (downloads / f"webtext/head{HEAD_BYTES}-webtext.train.jsonl").read_bytes()
        assert files["/v1/webtext.train.jsonl"].startswith(head) and head.endswith(b"\n") and len(head) < HEAD_BYTES
        # Exactly the members the dataset names were unpacked (and snakemake's marker of a directory output).
        unpacked = sorted(
            str(p.relative_to(downloads / "wp/unpacked"))
            for p in (downloads / "wp/unpacked").rglob("*")
            if p.is_file() and p.name != ".snakemake_timestamp"
        )
        assert unpacked == WP_MEMBERS

        # The WebText set is what MixCE's script makes of the same files: filtered, then topped up from train.
        for name, body in files.items():
            if name.startswith("/v1/"):
                (tmp_path / name.split("/")[-1]).write_bytes(body)
        (tmp_path / "webtext.valid.jsonl").write_text("")
        expected = mixce_webtext_reference(tmp_path, rows=10)["test"]
        web = pq.read_table(first / "results/data/webtext/test.parquet")
        assert web.column("text").to_pylist() == expected
        record = json.loads((first / "results/data/webtext/test.json").read_text())
        assert record["rows_sha256"] == sha("\n".join(expected).encode())
        assert 0 < record["top_up"]["rows"] < 10 and record["top_up"]["first_doc_id"] == 10 - record["top_up"]["rows"]
        assert [s["rows"] for s in record["steps"]][-1] == 10 and record["recipe"] == "mixce"
        source = record["provenance"]["files"][0]
        assert (source["url"], source["sha256"], source["pinned_sha256"]) == (
            server.url("/v1/webtext.test.jsonl"),
            sha(files["/v1/webtext.test.jsonl"]),
            sha(files["/v1/webtext.test.jsonl"]),
        )
        assert record["top_up_provenance"]["files"][0]["head_bytes"] == HEAD_BYTES
        wp = json.loads((first / "results/data/wp/test.json").read_text())
        assert wp["provenance"]["archive"]["sha256"] == sha(files["/fairseq/writingPrompts.tar.gz"])
        assert [s["rows"] for s in wp["steps"]] == [7, 5, 4]  # 7 stories, 2 too short, the first 4 of the rest
        for target in TARGETS:
            assert pq.read_table(first / target).num_rows > 0, target

        # Another study, another name for the same data: the downloads come from the cache, no request is made.
        second.mkdir()
        write_config(second, study(server, files, key="web-again"))
        run = snakemake(second, *TARGETS, "--cache", env=env)
        assert run.returncode == 0, run.stderr[-4000:]
        server.settle()
        assert server.requests == seen
        again = second / "results/downloads/web-again/webtext.test.jsonl"
        assert again.read_bytes() == files["/v1/webtext.test.jsonl"]
        assert pq.read_table(second / "results/data/web-again/test.parquet").column("text").to_pylist() == expected


def test_a_wrong_checksum_fails_the_download_naming_the_dataset_before_any_later_job(tmp_path, files):
    with serve(files) as server:
        config = study(server, files)
        url = server.url("/v1/webtext.test.jsonl")
        config["datasets"]["webtext"]["files"]["test"]["sha256"] = "0" * 64
        write_config(tmp_path, config)
        run = snakemake(tmp_path, "results/prompts/web.parquet")
    assert run.returncode != 0
    log = (tmp_path / "results/logs/downloads/webtext/webtext.test.jsonl.log").read_text()
    last = log.strip().splitlines()[-1]
    assert "datasets.webtext" in last and url in last and "sha256 mismatch" in last and "0" * 64 in last
    assert "datasets.webtext" in run.stderr + run.stdout  # snakemake shows the failed job's log
    assert not (tmp_path / "results/downloads/webtext/webtext.test.jsonl").exists()
    assert not list((tmp_path / "results/downloads").rglob("*.part"))
    assert not (tmp_path / "results/data/webtext").exists() and not (tmp_path / "results/prompts").exists()
