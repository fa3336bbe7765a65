"""Downloading one URL, and unpacking the named members of an archive, so that a finished file is the right file.

The `fetch` and `unpack` rules' command line, and `fetch()` (docs/usage.md, "Real data and hub models"; the cap
`download.max_bytes`: docs/config.md, "`download`"). Bytes go to `<output>.part` (`transfer.py`: retried, resumed
with If-Range) and are renamed onto the output only when complete and verified against the sha256 pinned in the
config; an unpinned file logs the value to pin, and a plain http:// file must be pinned (`pinning.py`). Archives
are unpacked by `unpacking.py`.

    python -m workflow_lib.data.fetch download --what datasets.x.files.test --url URL [--sha256 HEX] \\
        [--head-bytes N] [--max-bytes N] --output PATH [--record PATH.json]
    python -m workflow_lib.data.fetch unpack --what datasets.x.archive --archive PATH --members '["a/b.txt"]' --output DIR
"""

from __future__ import annotations

import argparse
import logging
import os
import time
from pathlib import Path
from typing import Any

import requests

from workflow_lib.cli import StageError, parse_json_arg, run
from workflow_lib.data import resume
from workflow_lib.data.pinning import unpinned_http_refusal
from workflow_lib.data.transfer import CHUNK, TooLarge, Transfer, discard, download, part_path
from workflow_lib.data.unpacking import unpack
from workflow_lib.files import sha256_file, write_json

log = logging.getLogger("workflow_lib.data.fetch")

DEFAULT_MAX_BYTES = 20 * 2**30  # download.max_bytes when the config leaves it null: 20 GiB
MAX_BYTES_KEY = "download.max_bytes"


def fetch(
    url: str,
    output: str | Path,
    *,
    sha256: str | None,
    what: str,
    head_bytes: int | None = None,
    max_bytes: int = DEFAULT_MAX_BYTES,
    retries: int = 4,
    timeout: float = 60.0,
    backoff: float = 1.0,
) -> dict:
    """Download `url` (or its first `head_bytes`, cut to whole lines) to `output`, verified against `sha256`.

    `what` is the config key that names the file, so every error says what to fix. A .part left by an earlier
    interrupted job is resumed if the server confirms (If-Range) that the file is the one it started from; if the
    result still fails the checksum, the download starts once more from zero before the mismatch is an error.
    More than `max_bytes` (download.max_bytes) is an error, and leaves neither output nor .part.
    """
    output = Path(output)
    part = part_path(output)
    if head_bytes is not None and head_bytes <= 0:
        raise StageError(f"{what}: head_bytes must be a positive number of bytes, not {head_bytes}")
    refusal = unpinned_http_refusal(url, sha256, what)
    if refusal:
        raise StageError(refusal)
    output.parent.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    transfer = Transfer(resumed_bytes=part.stat().st_size if part.exists() else 0)
    if transfer.resumed_bytes:
        log.info("%s: resuming %s from the %d bytes already in %s", what, url, transfer.resumed_bytes, part)
    options: dict[str, Any] = {
        "head_bytes": head_bytes,
        "retries": retries,
        "timeout": timeout,
        "backoff": backoff,
        "max_bytes": max_bytes,
        "what": what,
        "desc": output.name,
    }

    with requests.Session() as session:
        try:
            download(session, url, part, transfer, **options)
            actual = finish_part(part, url, transfer, head_bytes, what)
            if sha256 and actual != sha256.lower() and transfer.resumed_bytes:
                log.warning(
                    "%s: sha256 mismatch after resuming %d bytes of an earlier download of %s; the remote file "
                    "may have changed since, so starting again from zero",
                    what,
                    transfer.resumed_bytes,
                    url,
                )
                discard(part)
                transfer.resumed_bytes = 0
                download(session, url, part, transfer, **options)
                actual = finish_part(part, url, transfer, head_bytes, what)
        except TooLarge as error:
            discard(part)
            raise StageError(
                f"{what}: {url} is {error}, over the download cap {MAX_BYTES_KEY} = {max_bytes} bytes; nothing "
                f"was kept. Raise {MAX_BYTES_KEY} if the file is meant to be this large."
            ) from None

    size = part.stat().st_size
    if sha256 and actual != sha256.lower():
        discard(part)
        raise StageError(
            f"{what}: sha256 mismatch for {url}: expected {sha256}, got {actual} ({size} bytes). The file "
            "changed upstream or the transfer was corrupted; check the URL, or set the new sha256 if the "
            "change is expected."
        )
    if not sha256:
        log.warning("%s: %s is not pinned; to pin the file just fetched, set sha256: %s", what, url, actual)
    os.replace(part, output)
    resume.forget(part)
    return {
        "url": url,
        "sha256": actual,
        "pinned": bool(sha256),
        "bytes": size,
        "head_bytes": head_bytes,
        "attempts": transfer.attempts,
        "resumed_bytes": transfer.resumed_bytes,
        "seconds": round(time.perf_counter() - started, 3),
    }


def finish_part(part: Path, url: str, transfer: Transfer, head_bytes: int | None, what: str) -> str:
    """Cut a head that stopped mid-file back to whole lines, then hash what will be the output."""
    if head_bytes and part.stat().st_size == head_bytes and transfer.remote_size != head_bytes:
        trim_to_whole_lines(part, url, head_bytes, what)
    return sha256_file(part)


def trim_to_whole_lines(part: Path, url: str, head_bytes: int, what: str) -> None:
    """Truncate after the last newline: the head's last line was most likely cut by the byte limit."""
    with open(part, "r+b") as handle:
        end = handle.seek(0, os.SEEK_END)
        while end > 0:
            begin = max(end - CHUNK, 0)
            handle.seek(begin)
            newline = handle.read(end - begin).rfind(b"\n")
            if newline >= 0:
                handle.truncate(begin + newline + 1)
                return
            end = begin
    discard(part)
    raise StageError(
        f"{what}: head_bytes={head_bytes} is smaller than one line of {url} (no newline in the first "
        f"{head_bytes} bytes); raise head_bytes"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    get = commands.add_parser("download", help="fetch one URL to a file, verified")
    get.add_argument("--what", required=True, help="the config key of the file, named in errors")
    get.add_argument("--url", required=True)
    get.add_argument("--sha256")
    get.add_argument("--head-bytes", type=int)
    get.add_argument(
        "--max-bytes", type=int, default=DEFAULT_MAX_BYTES, help=f"the size cap ({MAX_BYTES_KEY}); default 20 GiB"
    )
    get.add_argument("--output", required=True)
    get.add_argument("--record", help="write the download record here as JSON")
    extract = commands.add_parser("unpack", help="extract named members of a tar or zip archive")
    extract.add_argument("--what", required=True)
    extract.add_argument("--archive", required=True)
    extract.add_argument("--members", required=True, help="JSON list of member paths")
    extract.add_argument("--output", required=True)
    args = parser.parse_args()

    if args.command == "download":
        record = fetch(
            args.url,
            args.output,
            sha256=args.sha256 or None,
            what=args.what,
            head_bytes=args.head_bytes,
            max_bytes=args.max_bytes,
        )
        log.info(
            "%s: fetched %s to %s: %d bytes in %.1f s (%.1f MB/s), %d attempt(s), sha256 %s",
            args.what,
            args.url,
            args.output,
            record["bytes"],
            record["seconds"],
            record["bytes"] / 1e6 / max(record["seconds"], 1e-9),
            record["attempts"],
            record["sha256"],
        )
        if args.record:
            write_json(record, args.record)
    else:
        members = parse_json_arg(args.members, f"{args.what} (--members)")
        if not isinstance(members, list) or not all(isinstance(m, str) for m in members):
            raise StageError(f"{args.what}: --members must be a JSON list of member paths, not {args.members}")
        started = time.perf_counter()
        record = unpack(args.archive, members, args.output, what=args.what)
        total = sum(m["bytes"] for m in record["members"].values())
        log.info(
            "%s: unpacked %d member(s), %d bytes, from %s (sha256 %s) to %s in %.1f s",
            args.what,
            len(members),
            total,
            args.archive,
            record["archive_sha256"],
            args.output,
            time.perf_counter() - started,
        )


if __name__ == "__main__":
    run(main)
