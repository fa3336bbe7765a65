"""Downloads and archive members: a finished file is the verified file, and interruptions resume, not restart.

Everything runs against studies/httpserver.py on the loopback interface: no test touches the network.
"""

from __future__ import annotations

import hashlib
import io
import json
import random
import subprocess
import sys
import tarfile

import pytest

from studies.httpserver import VALIDATORS, serve, version_headers
from workflow_lib.cli import StageError
from workflow_lib.data.fetch import fetch
from workflow_lib.data.pinning import unpinned_http_refusal
from workflow_lib.data.resume import of_response, save
from workflow_lib.data.unpacking import unpack

FAST = {"backoff": 0.01, "timeout": 10.0}


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def random_bytes(n: int, seed: int = 0) -> bytes:
    return random.Random(seed).randbytes(n)


def jsonl(n_bytes: int, seed: int = 0) -> bytes:
    """Lines of uneven length, like a jsonl corpus, about n_bytes long."""
    rng = random.Random(seed)
    lines, size = [], 0
    while size < n_bytes:
        line = json.dumps({"id": len(lines), "text": "w" * rng.randint(10, 400)}).encode() + b"\n"
        lines.append(line)
        size += len(line)
    return b"".join(lines)


def test_full_download_is_verified_renamed_and_recorded(tmp_path):
    body = random_bytes(3_000_000)
    output = tmp_path / "sub" / "data.bin"
    with serve({"data.bin": body}) as server:
        record = fetch(server.url("data.bin"), output, sha256=sha(body).upper(), what="datasets.d.files.test", **FAST)
    assert output.read_bytes() == body
    assert not (tmp_path / "sub" / "data.bin.part").exists()
    assert record["sha256"] == sha(body) and record["pinned"] is True
    assert record["bytes"] == len(body) and record["attempts"] == 1 and record["resumed_bytes"] == 0
    assert record["head_bytes"] is None and record["url"] == server.url("data.bin") and record["seconds"] >= 0
    assert [r["range"] for r in server.requests] == [None]


def test_unpinned_download_logs_the_value_to_pin(tmp_path, caplog):
    body = b"line\n" * 10
    with serve({"x.txt": body}) as server:
        record = fetch(server.url("x.txt"), tmp_path / "x.txt", sha256=None, what="datasets.d.files.train", **FAST)
    assert record["pinned"] is False and record["sha256"] == sha(body)
    assert f"sha256: {sha(body)}" in caplog.text and "datasets.d.files.train" in caplog.text


def test_wrong_sha256_fails_naming_the_key_and_leaves_nothing(tmp_path):
    output = tmp_path / "data.bin"
    with serve({"data.bin": b"abc" * 1000}) as server, pytest.raises(StageError) as error:
        fetch(server.url("data.bin"), output, sha256="0" * 64, what="datasets.d.files.test", **FAST)
    message = str(error.value)
    assert "datasets.d.files.test" in message and server.url("data.bin") in message and sha(b"abc" * 1000) in message
    assert not output.exists() and not (tmp_path / "data.bin.part").exists()
    assert len(server.requests) == 1  # nothing was resumed, so nothing to retry from zero


def test_dropped_connection_resumes_where_it_stopped(tmp_path):
    body = random_bytes(2_000_001)
    with serve({"data.bin": body}, drop_first={"data.bin"}) as server:
        record = fetch(server.url("data.bin"), tmp_path / "data.bin", sha256=sha(body), what="k", **FAST)
    assert (tmp_path / "data.bin").read_bytes() == body
    first, second = server.requests
    assert first["range"] is None and 0 < first["sent"] < len(body)
    assert second["range"] == f"bytes={first['sent']}-" and second["status"] == 206
    assert record["attempts"] == 2 and record["resumed_bytes"] == 0


def test_dropped_connection_without_range_support_starts_again(tmp_path):
    body = random_bytes(1_000_000)
    with serve({"data.bin": body}, drop_first={"data.bin"}, range_support=False) as server:
        record = fetch(server.url("data.bin"), tmp_path / "data.bin", sha256=sha(body), what="k", **FAST)
    assert (tmp_path / "data.bin").read_bytes() == body
    assert [r["status"] for r in server.requests] == [200, 200] and server.requests[1]["range"].startswith("bytes=")
    assert record["attempts"] == 2


def test_server_error_is_retried(tmp_path):
    with serve({"x.txt": b"hello\n"}, fail_first={"x.txt": 503}) as server:
        record = fetch(server.url("x.txt"), tmp_path / "x.txt", sha256=sha(b"hello\n"), what="k", **FAST)
    assert (tmp_path / "x.txt").read_bytes() == b"hello\n"
    assert [r["status"] for r in server.requests] == [503, 200] and record["attempts"] == 2


def test_not_found_fails_at_once(tmp_path):
    with serve({}) as server, pytest.raises(StageError) as error:
        fetch(server.url("missing.txt"), tmp_path / "x.txt", sha256=None, what="datasets.d.files.test", **FAST)
    message = str(error.value)
    assert "datasets.d.files.test" in message and server.url("missing.txt") in message and "404" in message
    assert len(server.requests) == 1 and not (tmp_path / "x.txt").exists()


@pytest.mark.parametrize("misbehaviour", [{"fail_always": {"x.bin": 503}}, {"drop_always": {"x.bin"}}])
def test_retries_run_out_and_the_part_is_kept_for_later(tmp_path, misbehaviour):
    body = random_bytes(100_000)
    with serve({"x.bin": body}, **misbehaviour) as server, pytest.raises(StageError) as error:
        fetch(
            server.url("x.bin"),
            tmp_path / "x.bin",
            sha256=sha(body),
            what="datasets.d.files.test",
            retries=2,
            **FAST,
        )
    url = server.url("x.bin")
    assert str(error.value).startswith(f"datasets.d.files.test: could not download {url} after 3 attempts")
    assert len(server.requests) == 3 and not (tmp_path / "x.bin").exists()
    if "drop_always" in misbehaviour:  # each attempt added half of what it was asked for
        part = (tmp_path / "x.bin.part").read_bytes()
        assert 0 < len(part) < len(body) and body.startswith(part)


def interrupted(server, name: str, output) -> bytes:
    """What a job leaves when the server drops its connection half-way and its retries are spent: the .part."""
    with pytest.raises(StageError, match="could not download"):
        fetch(server.url(name), output, sha256=None, what="k", retries=0, **FAST)
    assert not output.exists()
    return output.with_name(output.name + ".part").read_bytes()


@pytest.mark.parametrize("validators", [{"etag"}, {"last-modified"}], ids=["etag", "last-modified"])
def test_a_part_of_a_file_that_changed_since_is_not_spliced_onto_the_new_version(tmp_path, validators):
    """Issue 64: version 1 is cut off half-way; version 2 (same size, another ETag or Last-Modified) is there when
    the next job resumes. Its If-Range names version 1, so the server sends version 2 whole: no splice."""
    old, new = random_bytes(400_000, seed=1), random_bytes(400_000, seed=2)
    output = tmp_path / "x.bin"
    with serve({"x.bin": old}, drop_first={"x.bin"}, validators=validators) as server:
        part = interrupted(server, "x.bin", output)
        assert 0 < len(part) < len(old) and old.startswith(part)
        server.files["/x.bin"] = new
        record = fetch(server.url("x.bin"), output, sha256=None, what="k", **FAST)
    assert output.read_bytes() == new
    _, second = server.requests
    assert second["range"] == f"bytes={len(part)}-" and second["if_range"] is not None
    assert second["status"] == 200 and record["resumed_bytes"] == 0
    assert not (tmp_path / "x.bin.part").exists() and not (tmp_path / "x.bin.part.json").exists()


def test_a_part_without_a_validator_starts_again_from_zero(tmp_path):
    """A server that names no version (no ETag, no Last-Modified): nothing proves the .part is the start of what
    it serves now, so the next job asks for the whole file."""
    old, new = random_bytes(300_000, seed=1), random_bytes(300_000, seed=2)
    output = tmp_path / "x.bin"
    with serve({"x.bin": old}, drop_first={"x.bin"}, validators=frozenset()) as server:
        interrupted(server, "x.bin", output)
        assert not (tmp_path / "x.bin.part.json").exists()
        server.files["/x.bin"] = new
        record = fetch(server.url("x.bin"), output, sha256=None, what="k", **FAST)
    assert output.read_bytes() == new
    assert [(r["range"], r["status"]) for r in server.requests] == [(None, 200), (None, 200)]
    assert record["resumed_bytes"] == 0


def test_an_unchanged_file_resumes_with_range_and_if_range(tmp_path):
    body = random_bytes(500_000)
    output = tmp_path / "x.bin"
    with serve({"x.bin": body}, drop_first={"x.bin"}) as server:
        part = interrupted(server, "x.bin", output)
        saved = json.loads((tmp_path / "x.bin.part.json").read_text())
        record = fetch(server.url("x.bin"), output, sha256=sha(body), what="k", **FAST)
    assert output.read_bytes() == body
    _, second = server.requests
    assert saved["url"] == server.url("x.bin") and saved["etag"] and saved["last_modified"]
    assert second["range"] == f"bytes={len(part)}-" and second["if_range"] == saved["etag"]
    assert second["status"] == 206 and second["sent"] == len(body) - len(part)
    assert record["resumed_bytes"] == len(part) and record["attempts"] == 1
    assert not (tmp_path / "x.bin.part.json").exists()


def test_a_server_that_ignores_if_range_is_caught_by_the_version_it_names(tmp_path):
    """A server that honours Range whatever If-Range says still names the new version in its 206: the client
    throws the .part away instead of appending the new file's tail."""
    old, new = random_bytes(300_000, seed=1), random_bytes(300_000, seed=2)
    output = tmp_path / "x.bin"
    with serve({"x.bin": old}, drop_first={"x.bin"}, if_range_support=False) as server:
        part = interrupted(server, "x.bin", output)
        server.files["/x.bin"] = new
        fetch(server.url("x.bin"), output, sha256=None, what="k", **FAST)
    assert output.read_bytes() == new
    assert [(r["range"], r["status"]) for r in server.requests[1:]] == [(f"bytes={len(part)}-", 206), (None, 200)]


def test_a_complete_part_is_finished_by_a_416(tmp_path):
    body = random_bytes(10_000)
    (tmp_path / "x.bin.part").write_bytes(body)
    with serve({"x.bin": body}) as server:
        save(tmp_path / "x.bin.part", of_response(server.url("x.bin"), version_headers(body, VALIDATORS)))
        record = fetch(server.url("x.bin"), tmp_path / "x.bin", sha256=sha(body), what="k", **FAST)
    assert (tmp_path / "x.bin").read_bytes() == body
    assert [r["status"] for r in server.requests] == [416] and record["bytes"] == len(body)


def test_a_stale_part_the_server_cannot_tell_apart_is_discarded_once_by_its_sha256(tmp_path):
    """The last defence, for a server that names no version in its 206 and ignores If-Range: the pinned sha256
    fails after the resume, so the download starts once more from zero."""
    new = random_bytes(300_000, seed=2)
    (tmp_path / "x.bin.part").write_bytes(random_bytes(100_000, seed=1))
    with serve({"x.bin": new}, validators=frozenset(), if_range_support=False) as server:
        save(tmp_path / "x.bin.part", of_response(server.url("x.bin"), {"ETag": '"old"'}))
        record = fetch(server.url("x.bin"), tmp_path / "x.bin", sha256=sha(new), what="k", **FAST)
    assert (tmp_path / "x.bin").read_bytes() == new
    assert [r["range"] for r in server.requests] == ["bytes=100000-", None]
    assert record["resumed_bytes"] == 0 and record["attempts"] == 2


def test_plain_http_beyond_this_machine_needs_a_sha256(tmp_path):
    """The refusal comes before any request (example.invalid would not resolve anyway); pinned, or over https,
    or on the loopback interface (every other test here), the URL is fetched."""
    with pytest.raises(StageError, match=r"^datasets\.d\.files\.test: http://example\.invalid/x\.bin is plain http"):
        fetch("http://example.invalid/x.bin", tmp_path / "x.bin", sha256=None, what="datasets.d.files.test", **FAST)
    assert not list(tmp_path.iterdir())
    assert unpinned_http_refusal("http://example.invalid/x.bin", "a" * 64, "k") is None
    assert unpinned_http_refusal("https://example.invalid/x.bin", None, "k") is None
    assert unpinned_http_refusal("http://localhost:8000/x.bin", None, "k") is None
    assert unpinned_http_refusal("http://[::1]:8000/x.bin", None, "k") is None
    assert unpinned_http_refusal("HTTP://10.0.0.1/x.bin", None, "k") is not None


@pytest.mark.parametrize("unannounced", [False, True], ids=["content-length", "body-runs-on"])
def test_a_file_over_the_size_cap_fails_naming_the_key_and_keeps_nothing(tmp_path, unannounced):
    body = random_bytes(200_000)
    output = tmp_path / "x.bin"
    unannounced_paths = {"x.bin"} if unannounced else frozenset()
    with serve({"x.bin": body}, unannounced=unannounced_paths) as server, pytest.raises(StageError) as error:
        fetch(server.url("x.bin"), output, sha256=None, what="datasets.d", max_bytes=150_000, **FAST)
    message = str(error.value)
    assert message.startswith(f"datasets.d: {server.url('x.bin')} is ")
    assert "download.max_bytes = 150000 bytes" in message
    assert ("more than 150000 bytes" if unannounced else "200000 bytes (as the server announces it)") in message
    assert len(server.requests) == 1 and not list(tmp_path.iterdir())


def test_a_file_at_the_size_cap_and_a_head_under_it_are_fetched(tmp_path):
    body = jsonl(100_000)
    with serve({"c.jsonl": body}) as server:
        fetch(server.url("c.jsonl"), tmp_path / "all", sha256=sha(body), what="k", max_bytes=len(body), **FAST)
        fetch(server.url("c.jsonl"), tmp_path / "head", sha256=None, head_bytes=10_000, max_bytes=20_000, what="k")
    assert (tmp_path / "all").read_bytes() == body
    assert body.startswith((tmp_path / "head").read_bytes())


def test_head_bytes_asks_for_a_range_and_keeps_whole_lines(tmp_path):
    body = jsonl(2_000_000)
    n = 100_000
    with serve({"c.jsonl": body}) as server:
        record = fetch(server.url("c.jsonl"), tmp_path / "h.jsonl", sha256=None, head_bytes=n, what="k", **FAST)
    head = (tmp_path / "h.jsonl").read_bytes()
    assert head == body[: body[:n].rindex(b"\n") + 1] and head.endswith(b"\n") and len(head) < n
    assert [r["range"] for r in server.requests] == [f"bytes=0-{n - 1}"]
    assert record["bytes"] == len(head) and record["head_bytes"] == n


def test_head_bytes_without_range_support_stops_reading_early(tmp_path):
    body = jsonl(1_000_000) * 64
    n = 100_000
    with serve({"c.jsonl": body}, range_support=False) as server:
        fetch(server.url("c.jsonl"), tmp_path / "h.jsonl", sha256=None, head_bytes=n, what="k", **FAST)
        server.settle()
    assert (tmp_path / "h.jsonl").read_bytes() == body[: body[:n].rindex(b"\n") + 1]
    (request,) = server.requests
    # What was sent beyond the head filled the loopback socket buffers (4-8 MB here) before the client hung up.
    assert request["status"] == 200 and request["sent"] < len(body) // 4


def test_head_bytes_past_the_end_is_the_whole_file(tmp_path):
    body = b"one\ntwo\nthree without newline"
    with serve({"s.txt": body}) as server:
        record = fetch(server.url("s.txt"), tmp_path / "s.txt", sha256=sha(body), head_bytes=1000, what="k", **FAST)
    assert (tmp_path / "s.txt").read_bytes() == body and record["bytes"] == len(body)


def test_head_bytes_exactly_the_file_size_is_not_trimmed(tmp_path):
    body = b"one\ntwo\nlast"
    with serve({"s.txt": body}) as server:
        fetch(server.url("s.txt"), tmp_path / "s.txt", sha256=sha(body), head_bytes=len(body), what="k", **FAST)
    assert (tmp_path / "s.txt").read_bytes() == body


def test_head_bytes_smaller_than_a_line_is_an_error(tmp_path):
    too_small = r"datasets\.d\.files\.test: head_bytes=100 is smaller than one line"
    with serve({"s.txt": b"x" * 1000 + b"\n"}) as server, pytest.raises(StageError, match=too_small):
        fetch(
            server.url("s.txt"),
            tmp_path / "s.txt",
            sha256=None,
            head_bytes=100,
            what="datasets.d.files.test",
            **FAST,
        )
    assert not (tmp_path / "s.txt").exists() and not (tmp_path / "s.txt.part").exists()


def make_tar(path, members: dict[str, bytes], mode: str = "w:gz") -> None:
    with tarfile.open(path, mode) as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


MEMBERS = {"a/test.src": b"source test\n", "a/test.tgt": b"target test\n", "a/train.src": b"train\n" * 1000}


def test_unpack_extracts_exactly_the_named_members(tmp_path):
    make_tar(tmp_path / "a.tar.gz", MEMBERS)
    record = unpack(tmp_path / "a.tar.gz", ["a/test.tgt", "a/test.src"], tmp_path / "out", what="k")
    files = sorted(str(p.relative_to(tmp_path / "out")) for p in (tmp_path / "out").rglob("*") if p.is_file())
    assert files == ["a/test.src", "a/test.tgt"]
    for name in files:
        assert (tmp_path / "out" / name).read_bytes() == MEMBERS[name]
        assert record["members"][name] == {"bytes": len(MEMBERS[name]), "sha256": sha(MEMBERS[name])}
    assert record["archive_sha256"] == sha((tmp_path / "a.tar.gz").read_bytes())


def test_unpack_matches_members_stored_with_a_dot_slash_prefix(tmp_path):
    make_tar(tmp_path / "a.tar.xz", {"./" + name: data for name, data in MEMBERS.items()}, mode="w:xz")
    unpack(tmp_path / "a.tar.xz", ["a/train.src"], tmp_path / "out", what="k")
    assert (tmp_path / "out" / "a" / "train.src").read_bytes() == MEMBERS["a/train.src"]


def test_unpack_names_missing_members_and_what_the_archive_holds(tmp_path):
    make_tar(tmp_path / "a.tar.gz", MEMBERS)
    with pytest.raises(StageError) as error:
        unpack(tmp_path / "a.tar.gz", ["a/test.src", "a/valid.src"], tmp_path / "out", what="datasets.d.archive")
    message = str(error.value)
    assert "datasets.d.archive" in message and "a.tar.gz" in message and "a/valid.src" in message
    assert all(name in message for name in MEMBERS)
    assert not (tmp_path / "out").exists() and list(tmp_path.iterdir()) == [tmp_path / "a.tar.gz"]


@pytest.mark.parametrize("member", ["../x", "/etc/passwd", "a/../../x"])
def test_unpack_refuses_paths_outside_the_folder(tmp_path, member):
    make_tar(tmp_path / "a.tar.gz", MEMBERS)
    with pytest.raises(StageError, match="datasets.d.archive"):
        unpack(tmp_path / "a.tar.gz", [member], tmp_path / "out", what="datasets.d.archive")


def test_unpack_of_a_file_that_is_not_a_tar(tmp_path):
    (tmp_path / "a.tar.gz").write_bytes(b"<html>not found</html>")
    with pytest.raises(StageError, match=r"datasets\.d\.archive: .*a\.tar\.gz is not a readable tar or zip archive"):
        unpack(tmp_path / "a.tar.gz", ["a/test.src"], tmp_path / "out", what="datasets.d.archive")
    assert not (tmp_path / "out").exists()


def fetch_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "workflow_lib.data.fetch", *args], capture_output=True, text=True, timeout=60
    )


def test_cli_download_failure_is_one_line_naming_the_key_and_url(tmp_path):
    with serve({"x.txt": b"hello\n"}) as server:
        done = fetch_cli(
            "download",
            "--what",
            "datasets.d.files.test",
            "--url",
            server.url("x.txt"),
            "--sha256",
            "f" * 64,
            "--output",
            str(tmp_path / "x.txt"),
        )
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert "datasets.d.files.test" in last and server.url("x.txt") in last and "sha256 mismatch" in last
    assert not (tmp_path / "x.txt").exists()


def test_cli_download_and_unpack_write_their_outputs(tmp_path):
    make_tar(tmp_path / "src.tar.gz", MEMBERS)
    archive = (tmp_path / "src.tar.gz").read_bytes()
    with serve({"a.tar.gz": archive}) as server:
        download = fetch_cli(
            "download",
            "--what",
            "k",
            "--url",
            server.url("a.tar.gz"),
            "--sha256",
            sha(archive),
            "--output",
            str(tmp_path / "d" / "a.tar.gz"),
            "--record",
            str(tmp_path / "d" / "a.json"),
        )
    assert download.returncode == 0, download.stderr
    assert json.loads((tmp_path / "d" / "a.json").read_text())["sha256"] == sha(archive)
    extract = fetch_cli(
        "unpack",
        "--what",
        "k",
        "--archive",
        str(tmp_path / "d" / "a.tar.gz"),
        "--members",
        '["a/test.src"]',
        "--output",
        str(tmp_path / "d" / "unpacked"),
    )
    assert extract.returncode == 0, extract.stderr
    assert (tmp_path / "d" / "unpacked" / "a" / "test.src").read_bytes() == MEMBERS["a/test.src"]


def make_zip(path, members: dict[str, bytes]) -> None:
    import zipfile

    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as bundle:
        bundle.writestr("a/", b"")  # a folder entry, as WikiText's zip files have
        for name, body in members.items():
            bundle.writestr(name, body)


def test_unpack_extracts_named_members_of_a_zip_archive_with_their_checksums(tmp_path):
    make_zip(tmp_path / "w.zip", MEMBERS)
    record = unpack(tmp_path / "w.zip", ["a/train.src", "a/test.src"], tmp_path / "out", what="k")
    assert (tmp_path / "out" / "a" / "test.src").read_bytes() == MEMBERS["a/test.src"]
    assert record["members"]["a/train.src"] == {
        "bytes": len(MEMBERS["a/train.src"]),
        "sha256": sha(MEMBERS["a/train.src"]),
    }
    assert sorted(p.name for p in (tmp_path / "out" / "a").iterdir()) == ["test.src", "train.src"]


def test_unpack_of_a_zip_names_missing_members_and_a_folder_member(tmp_path):
    make_zip(tmp_path / "w.zip", MEMBERS)
    with pytest.raises(StageError, match=r"datasets\.d\.archive: .*w\.zip has no member a/none\.src; it holds e\.g\. "):
        unpack(tmp_path / "w.zip", ["a/none.src"], tmp_path / "out", what="datasets.d.archive")
    with pytest.raises(StageError, match=r"member a of .*w\.zip is not a regular file"):
        unpack(tmp_path / "w.zip", ["a/"], tmp_path / "out", what="datasets.d.archive")
    assert not (tmp_path / "out").exists()


def test_unpack_of_a_truncated_zip_fails_naming_the_key(tmp_path):
    make_zip(tmp_path / "w.zip", {name: body * 2000 for name, body in MEMBERS.items()})
    data = (tmp_path / "w.zip").read_bytes()
    (tmp_path / "w.zip").write_bytes(data[: len(data) // 2] + data[-22:])  # the end record kept: still "a zip"
    with pytest.raises(StageError, match=r"datasets\.d\.archive: .*w\.zip is not a readable"):
        unpack(tmp_path / "w.zip", list(MEMBERS), tmp_path / "out", what="datasets.d.archive")
    assert not (tmp_path / "out").exists()
