"""Benchmark of workflow_lib.data.fetch on a loopback server: what resumable, verified downloads cost over a plain loop.

The server is studies/httpserver.py in a child process (so it does not share the benchmark's GIL). Measured:
fetch() of 200 MB of random bytes (median of 3) against a plain `requests` iter_content loop into nothing
(the floor: no file, no checksum, no progress bar) and the same loop into a file (the floor with the disk);
sha256_file on the result; a head_bytes=8 MiB fetch of a 200 MB jsonl-like file with and without Range
support on the server (time, and bytes the server actually sent); and unpack() of two 5 MB members at the end
of a tar.gz of ~110 MB of text against `tar -xzf` of the same two members; and the fetch rule's command
on a 1 kB file (the cost of a job whatever its size) against `python -c pass`. Last line: `fetch: {json}`.

    python bench/fetch.py
"""

from __future__ import annotations

import io
import json
import multiprocessing
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from shared import REPO, timed

MB = 1_000_000
SIZE = 200 * MB
HEAD = 8 << 20
REPEAT = 3


def median_timed(repeat: int, remove: Path | None, fn, *args, **kwargs):
    """The last result and the median time of `repeat` runs: writing 200 MB through the page cache is noisy.
    `remove` is deleted before each run, untimed, so no run pays for freeing the previous run's file."""
    times = []
    for _ in range(repeat):
        if remove:
            remove.unlink(missing_ok=True)
            os.sync()
        out, seconds = timed(fn, *args, **kwargs)
        times.append(seconds)
    return out, statistics.median(times)


def jsonl_like(n_bytes: int) -> bytes:
    """Lines of uneven length, like a jsonl corpus: a 1 MB block of them repeated."""
    lines, size, i = [], 0, 0
    while size < MB:
        line = json.dumps({"id": i, "text": "word " * (5 + (i * 37) % 90)}).encode() + b"\n"
        lines.append(line)
        size, i = size + len(line), i + 1
    block = b"".join(lines)
    return block * (n_bytes // len(block) + 1)


def server_process(files: dict[str, bytes], range_support: bool, conn) -> None:
    """Serve `files` until told to stop; answer "requests" with what the server has seen so far."""
    from studies.httpserver import serve

    with serve(files, range_support=range_support) as server:
        conn.send(server.port)
        while conn.recv() != "stop":
            server.settle()
            conn.send(list(server.requests))


class ChildServer:
    def __init__(self, files: dict[str, bytes], range_support: bool = True) -> None:
        self.conn, child = multiprocessing.Pipe()
        self.process = multiprocessing.get_context("fork").Process(
            target=server_process, args=(files, range_support, child)
        )
        self.process.start()
        self.port = self.conn.recv()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}/{path}"

    def requests(self) -> list[dict]:
        self.conn.send("requests")
        return self.conn.recv()

    def close(self) -> None:
        self.conn.send("stop")
        self.process.join(timeout=30)


def plain_get(url: str, path: Path | None = None) -> int:
    """The floor: requests' own loop, into nothing or (to price the disk) into a file."""
    import requests

    received = 0
    with requests.get(url, stream=True, timeout=60) as response, open(path or os.devnull, "wb") as out:
        for chunk in response.iter_content(1 << 20):
            if path:
                out.write(chunk)
            received += len(chunk)
    return received


def text_like(n_bytes: int) -> bytes:
    """Hex lines: compresses about 2x under gzip, like text, and is quick to make."""
    raw = os.urandom(n_bytes // 2).hex().encode()
    return b"\n".join(raw[i : i + 99] for i in range(0, len(raw), 99))[:n_bytes]


def make_archive(path: Path) -> list[str]:
    """~100 MB of other members, then the two members a dataset would ask for (the worst case: read it all)."""
    wanted = ["corpus/test.src", "corpus/test.tgt"]
    with tarfile.open(path, "w:gz", compresslevel=6) as tar:
        members = [(f"corpus/train.{i:02d}.src", text_like(10 * MB)) for i in range(10)]
        members += [(name, text_like(5 * MB)) for name in wanted]
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return wanted


def main() -> None:
    import logging

    from workflow_lib.data.fetch import fetch
    from workflow_lib.data.unpacking import unpack
    from workflow_lib.files import sha256_file

    logging.basicConfig(level=logging.ERROR)
    random_body = os.urandom(SIZE)
    text_body = jsonl_like(SIZE)[:SIZE]
    result = {"bytes": SIZE, "head_bytes": HEAD}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        server = ChildServer({"random.bin": random_body, "corpus.jsonl": text_body, "small.txt": b"x" * 1000})
        try:
            plain_get(server.url("random.bin"))  # warm the server and the page cache of the code paths
            received, t_plain = median_timed(REPEAT, None, plain_get, server.url("random.bin"))
            assert received == SIZE
            _, t_plain_file = median_timed(
                REPEAT, tmp / "plain.bin", plain_get, server.url("random.bin"), tmp / "plain.bin"
            )
            (tmp / "plain.bin").unlink()
            record, t_fetch = median_timed(
                REPEAT,
                tmp / "random.bin",
                fetch,
                server.url("random.bin"),
                tmp / "random.bin",
                sha256=None,
                what="bench",
                timeout=60,
            )
            digest, t_sha = timed(sha256_file, tmp / "random.bin")
            assert record["bytes"] == SIZE and digest == record["sha256"]
            before = len(server.requests())
            head, t_head = timed(
                fetch, server.url("corpus.jsonl"), tmp / "head.jsonl", sha256=None, head_bytes=HEAD, what="bench"
            )
            head_sent = sum(r["sent"] for r in server.requests()[before:])
            # What one fetch job costs whatever the size: the rule's command on a 1 KB file, against starting
            # the same interpreter to do nothing.
            cli = [
                sys.executable,
                "-m",
                "workflow_lib.data.fetch",
                "download",
                "--what",
                "bench",
                "--url",
                server.url("small.txt"),
                "--output",
                str(tmp / "small.txt"),
            ]
            _, t_cli = median_timed(
                REPEAT, tmp / "small.txt", subprocess.run, cli, check=True, cwd=REPO, capture_output=True
            )
            _, t_python = median_timed(REPEAT, None, subprocess.run, [sys.executable, "-c", "pass"], check=True)
        finally:
            server.close()
        plain_server = ChildServer({"corpus.jsonl": text_body}, range_support=False)
        try:
            _, t_head_norange = timed(
                fetch, plain_server.url("corpus.jsonl"), tmp / "head2.jsonl", sha256=None, head_bytes=HEAD, what="bench"
            )
            head_sent_norange = sum(r["sent"] for r in plain_server.requests())
        finally:
            plain_server.close()
        assert (tmp / "head.jsonl").read_bytes() == (tmp / "head2.jsonl").read_bytes()

        wanted = make_archive(tmp / "archive.tar.gz")
        archive_bytes = (tmp / "archive.tar.gz").stat().st_size
        _, t_unpack = timed(unpack, tmp / "archive.tar.gz", wanted, tmp / "unpacked", what="bench")
        (tmp / "tar").mkdir()
        _, t_tar = timed(
            subprocess.run, ["tar", "-xzf", str(tmp / "archive.tar.gz"), "-C", str(tmp / "tar"), *wanted], check=True
        )
        _, t_archive_sha = timed(sha256_file, tmp / "archive.tar.gz")

    result.update(
        {
            "fetch_seconds": round(t_fetch, 3),
            "fetch_MB_per_s": round(SIZE / MB / t_fetch),
            "plain_seconds": round(t_plain, 3),
            "plain_MB_per_s": round(SIZE / MB / t_plain),
            "fetch_over_plain": round(t_fetch / t_plain, 2),
            "plain_to_file_seconds": round(t_plain_file, 3),
            "fetch_over_plain_to_file": round(t_fetch / t_plain_file, 2),
            "sha256_seconds": round(t_sha, 3),
            "sha256_MB_per_s": round(SIZE / MB / t_sha),
            "head_seconds": round(t_head, 3),
            "head_file_bytes": head["bytes"],
            "head_server_sent": head_sent,
            "head_no_range_seconds": round(t_head_norange, 3),
            "head_no_range_server_sent": head_sent_norange,
            "archive_bytes": archive_bytes,
            "unpack_seconds": round(t_unpack, 3),
            "unpack_archive_sha256_seconds": round(t_archive_sha, 3),
            "tar_xzf_seconds": round(t_tar, 3),
            "job_command_1kB_seconds": round(t_cli, 3),
            "python_start_seconds": round(t_python, 3),
        }
    )
    print(
        json.dumps(
            {
                k: result[k]
                for k in (
                    "fetch_MB_per_s",
                    "plain_MB_per_s",
                    "fetch_over_plain",
                    "unpack_seconds",
                    "tar_xzf_seconds",
                    "job_command_1kB_seconds",
                )
            }
        )
    )
    print("fetch: " + json.dumps(result))


if __name__ == "__main__":
    main()
