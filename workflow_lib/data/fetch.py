"""Downloading one URL, and unpacking the named members of an archive, so that a finished file is the right file.

Every `source: url` dataset starts here, and a cluster job on a flaky network must neither leave a file that
looks finished nor throw away an hour of transfer:

- bytes go to `<output>.part` and are renamed onto the output only when complete and verified;
- an interrupted transfer (dropped connection, timeout, short body, 5xx) resumes from what the .part holds with
  a Range request, in this job or in a later one, but only with `If-Range` and the validator saved beside the
  .part (`resume.py`): a remote file that changed meanwhile is downloaded again from zero, never spliced;
- the sha256 pinned in the config is checked; a file that is not pinned logs the value to pin, and a plain
  http:// file must be pinned (`pinning.py`);
- no file grows past `download.max_bytes` (`--max-bytes`; DEFAULT_MAX_BYTES when the config leaves it null);
- `head_bytes` fetches the first whole lines of a large line-based file without downloading the rest.

    python -m workflow_lib.data.fetch download --what datasets.x.files.test --url URL [--sha256 HEX] \\
        [--head-bytes N] [--max-bytes N] --output PATH [--record PATH.json]
    python -m workflow_lib.data.fetch unpack --what datasets.x.archive --archive PATH --members '["a/b.txt"]' --output DIR
"""

from __future__ import annotations

import argparse
import hashlib
import http.client
import logging
import lzma
import os
import re
import sys
import tarfile
import time
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

import requests
import urllib3
from tqdm import tqdm

from workflow_lib.cli import StageError, parse_json_arg, run
from workflow_lib.data import resume
from workflow_lib.data.pinning import unpinned_http_refusal
from workflow_lib.files import atomic_path, sha256_file, write_json

log = logging.getLogger("workflow_lib.data.fetch")

CHUNK = 1 << 20
RETRY_STATUS = frozenset({408, 429})
DEFAULT_MAX_BYTES = 20 * 2**30  # download.max_bytes when the config leaves it null: 20 GiB
MAX_BYTES_KEY = "download.max_bytes"


class Interrupted(Exception):
    """The transfer stopped before the bytes asked for arrived: resume from what the .part holds."""


class RetryableStatus(Exception):
    """The server answered a status that may well be different next time (5xx, 408, 429)."""


class TooLarge(Exception):
    """The file would grow past the download cap: stop, whatever the retries left."""


# How requests and urllib3 report a transfer that stopped half-way. A body shorter than its Content-Length
# arrives as urllib3's IncompleteRead wrapped in ProtocolError ("Connection broken: IncompleteRead(...)");
# requests wraps that in ChunkedEncodingError only inside iter_content, which we do not use (see write_body).
INTERRUPTED = (
    requests.ConnectionError,
    requests.Timeout,
    requests.exceptions.ChunkedEncodingError,
    urllib3.exceptions.ProtocolError,
    urllib3.exceptions.ReadTimeoutError,
    http.client.IncompleteRead,
    Interrupted,
)


@dataclass
class Transfer:
    """What the attempts of one download have learnt so far."""

    attempts: int = 0
    resumed_bytes: int = 0  # bytes of a .part from before this call that are still the start of the file
    remote_size: int | None = None  # the size of the whole remote file, when the server said


def part_path(output: Path) -> Path:
    return output.with_name(output.name + ".part")


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


def download(
    session: requests.Session,
    url: str,
    part: Path,
    transfer: Transfer,
    *,
    head_bytes: int | None,
    max_bytes: int,
    retries: int,
    timeout: float,
    backoff: float,
    what: str,
    desc: str,
) -> None:
    """Fill `part` with the bytes of `url` (its first head_bytes), retrying interruptions and passing errors.

    The .part stays when the retries run out: the next job resumes it.
    """
    last_error = ""
    for attempt in range(retries + 1):
        transfer.attempts += 1
        try:
            request_once(
                session,
                url,
                part,
                transfer,
                head_bytes=head_bytes,
                max_bytes=max_bytes,
                timeout=timeout,
                what=what,
                desc=desc,
            )
            return
        except INTERRUPTED as error:
            last_error = f"transfer interrupted: {describe(error)}"
        except RetryableStatus as error:
            last_error = str(error)
        if attempt == retries:
            break
        delay = backoff * 2**attempt
        have = part.stat().st_size if part.exists() else 0
        log.warning(
            "%s: attempt %d of %d for %s failed (%s); retrying from byte %d in %.2f s",
            what,
            attempt + 1,
            retries + 1,
            url,
            last_error,
            have,
            delay,
        )
        time.sleep(delay)
    raise StageError(f"{what}: could not download {url} after {retries + 1} attempts: {last_error}")


def request_once(
    session: requests.Session,
    url: str,
    part: Path,
    transfer: Transfer,
    *,
    head_bytes: int | None,
    max_bytes: int,
    timeout: float,
    what: str,
    desc: str,
) -> None:
    """One GET that continues `part` from its current size; raises Interrupted/RetryableStatus to be retried.

    A resume asks for the rest only If-Range the file is still the version the .part started from; a fresh start
    saves the response's validator for the next resume."""
    have = part.stat().st_size if part.exists() else 0
    saved = resume.load(part, url) if have else None
    if_range = saved.if_range() if saved else None
    if have and if_range is None:
        log.warning(
            "%s: %s holds %d bytes but no ETag or Last-Modified of %s to prove the remote file is the same; "
            "downloading it again from byte 0",
            what,
            part,
            have,
            url,
        )
        restart(part, transfer)
        have, saved = 0, None
    if head_bytes and have >= head_bytes:
        with open(part, "r+b") as handle:
            handle.truncate(head_bytes)
        return
    # Identity encoding: the file's own bytes are what the sha256 pins and what Range offsets count.
    headers = {"Accept-Encoding": "identity"}
    if have or head_bytes:
        headers["Range"] = f"bytes={have}-{head_bytes - 1 if head_bytes else ''}"
    if have and if_range:
        headers["If-Range"] = if_range

    with session.get(url, headers=headers, stream=True, timeout=timeout) as response:
        status = response.status_code
        if saved is not None and status in (206, 416) and not saved.same_version(response.headers):
            restart(part, transfer)
            raise Interrupted(f"the server answered {status} for another version of the file than the partial one")
        if status == 416:
            total = content_range(response.headers.get("Content-Range"))[2]
            if total == have or (total is None and have > 0):
                part.touch()
                transfer.remote_size = have
                return
            if total is not None and total < have:
                restart(part, transfer)
                raise Interrupted(f"the partial file ({have} bytes) is longer than the remote file ({total} bytes)")
        if status in RETRY_STATUS or status >= 500:
            raise RetryableStatus(f"HTTP {status} {response.reason}")
        if status not in (200, 206):
            raise StageError(f"{what}: {url} answered HTTP {status} {response.reason}")

        start = 0
        if status == 206:
            first, _, total = content_range(response.headers.get("Content-Range"))
            if first is None or first != have:
                restart(part, transfer)
                raise Interrupted(f"asked for bytes from {have}, the server sent bytes from {first}")
            start = first
            transfer.remote_size = total or transfer.remote_size
        else:
            if have:
                log.warning(
                    "%s: the server answered the whole of %s (it changed since the partial download, or ignores "
                    "Range requests); downloading it again from byte 0",
                    what,
                    url,
                )
                restart(part, transfer)
            elif head_bytes:
                log.info(
                    "%s: the server ignored the Range request; reading the first %d bytes of %s and hanging up",
                    what,
                    head_bytes,
                    url,
                )
            transfer.remote_size = content_length(response)
        check_size(transfer.remote_size, head_bytes, max_bytes)
        if start == 0:
            resume.save(part, resume.of_response(url, response.headers))
        encoding = response.headers.get("Content-Encoding", "identity")
        if encoding != "identity":
            log.warning("%s: %s is sent with Content-Encoding %s; keeping the bytes as sent", what, url, encoding)
        write_body(response, part, start, head_bytes, max_bytes, desc)


def check_size(remote_size: int | None, head_bytes: int | None, max_bytes: int) -> None:
    """Refuse up front a file the server says is larger than the cap (what will be written: at most the head)."""
    if remote_size is None:
        return
    size = min(remote_size, head_bytes) if head_bytes else remote_size
    if size > max_bytes:
        raise TooLarge(f"{size} bytes (as the server announces it)")


def write_body(
    response: requests.Response, part: Path, start: int, head_bytes: int | None, max_bytes: int, desc: str
) -> None:
    """Append the body to `part` (which holds `start` bytes); stop reading at head_bytes, closing the connection
    so the server sends no more, and at max_bytes, whatever the server announced. raw.stream without decoding:
    the exact bytes, as iter_content would decode a Content-Encoding and break both the sha256 and the Range
    offsets."""
    length = content_length(response)
    wanted = head_bytes - start if head_bytes else None
    total = start + length if length is not None else None
    if head_bytes:
        total = min(total, head_bytes) if total is not None else head_bytes
    received = 0
    with (
        open(part, "ab" if start else "wb") as out,
        tqdm(
            total=total, initial=start, unit="B", unit_scale=True, mininterval=5, desc=desc, file=sys.stderr
        ) as progress,
    ):
        for chunk in response.raw.stream(CHUNK, decode_content=False):
            if wanted is not None and received + len(chunk) >= wanted:
                chunk = chunk[: wanted - received]
            if start + received + len(chunk) > max_bytes:
                raise TooLarge(f"more than {max_bytes} bytes (the body went on past them)")
            out.write(chunk)
            received += len(chunk)
            progress.update(len(chunk))
            if wanted is not None and received >= wanted:
                return
    if length is not None and received < length:
        raise Interrupted(f"the body ended after {received} of {length} bytes")


def describe(error: Exception) -> str:
    """The message of an error: urllib3's ProtocolError prints as a tuple of message and cause."""
    first = error.args[0] if error.args else None
    return first if isinstance(first, str) else str(error) or type(error).__name__


def restart(part: Path, transfer: Transfer) -> None:
    """Empty `part` (and forget its validator): the next bytes written are the file's first."""
    part.write_bytes(b"")
    resume.forget(part)
    transfer.resumed_bytes = 0


def discard(part: Path) -> None:
    """Remove `part` and its validator: nothing of this download is worth resuming."""
    part.unlink(missing_ok=True)
    resume.forget(part)


def content_length(response: requests.Response) -> int | None:
    value = response.headers.get("Content-Length")
    return int(value) if value and value.isdigit() else None


def content_range(header: str | None) -> tuple[int | None, int | None, int | None]:
    """`bytes first-last/total` (or `bytes */total`) as (first, last, total); None for what is not given."""
    match = re.fullmatch(r"bytes\s+(?:(\d+)-(\d+)|\*)/(\d+|\*)", (header or "").strip())
    if not match:
        return None, None, None
    first, last, total = match.groups()
    return (int(first) if first else None, int(last) if last else None, int(total) if total and total != "*" else None)


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


def unpack(archive: str | Path, members: list[str], output_dir: str | Path, *, what: str) -> dict:
    """Extract exactly the named regular-file members of a tar (any compression) or zip archive to output_dir/<member>.

    One streaming pass that stops once every member is out; output_dir appears only when all of them are there.
    """
    archive = Path(archive)
    if not archive.is_file():
        raise StageError(f"{what}: archive {archive} does not exist")
    wanted = {safe_member(member, what) for member in members}
    if not wanted:
        raise StageError(f"{what}: no archive members to extract from {archive}")
    found: dict[str, dict] = {}
    held: list[str] = []
    with atomic_path(output_dir) as tmp:
        tmp.mkdir()
        if zipfile.is_zipfile(archive):
            unzip_members(archive, wanted, tmp, found, held, what)
        else:
            try:
                with tarfile.open(archive, "r|*") as tar:
                    for info in tar:
                        name = str(PurePosixPath(info.name))
                        if info.isfile() and len(held) < 10:
                            held.append(name)
                        if name not in wanted:
                            continue
                        if not info.isfile():
                            raise StageError(f"{what}: member {name} of {archive} is not a regular file")
                        found[name] = extract_member(tar.extractfile(info), info.size, tmp / name)
                        if len(found) == len(wanted):
                            break
            except (tarfile.TarError, EOFError, zlib.error, lzma.LZMAError) as error:
                raise StageError(f"{what}: {archive} is not a readable tar or zip archive ({error})") from error
        missing = sorted(wanted - set(found))
        if missing:
            raise StageError(
                f"{what}: {archive} has no member {', '.join(missing)}; it holds e.g. "
                f"{', '.join(held) or 'no regular files'}"
            )
    return {
        "archive": str(archive),
        "archive_sha256": sha256_file(archive),
        "members": {name: found[name] for name in sorted(found)},
    }


def safe_member(member: str, what: str) -> str:
    """A member path that stays inside the output folder (no absolute path, no ..), normalised like tar names."""
    path = PurePosixPath(member)
    if not member or path.is_absolute() or ".." in path.parts:
        raise StageError(f"{what}: archive member {member!r} must be a relative path without '..'")
    return str(path)


def unzip_members(archive: Path, wanted: set[str], tmp: Path, found: dict, held: list[str], what: str) -> None:
    """The zip branch of `unpack` (WikiText's archives are zip files): the same members, checks and records."""
    try:
        with zipfile.ZipFile(archive) as bundle:
            for info in bundle.infolist():
                name = str(PurePosixPath(info.filename))
                if not info.is_dir() and len(held) < 10:
                    held.append(name)
                if name not in wanted:
                    continue
                if info.is_dir():
                    raise StageError(f"{what}: member {name} of {archive} is not a regular file")
                with bundle.open(info) as source:
                    found[name] = extract_member(source, info.file_size, tmp / name)
    except (zipfile.BadZipFile, EOFError, zlib.error) as error:
        raise StageError(f"{what}: {archive} is not a readable zip archive ({error})") from error


def extract_member(source, size: int, target: Path) -> dict:
    target.parent.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256()
    with open(target, "wb") as out:
        while block := source.read(CHUNK):
            digest.update(block)
            out.write(block)
    return {"bytes": size, "sha256": digest.hexdigest()}


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
