"""One download's HTTP transfer: retried GETs that fill `<output>.part`, resuming it with a Range request.

An interrupted transfer (dropped connection, timeout, short body, 5xx, 408, 429) is retried with backoff from what
the .part holds, but only with `If-Range` and the validator saved beside the .part (`resume.py`): a remote file
that changed meanwhile is downloaded again from zero, never spliced. No body grows past the download cap
(`TooLarge`); a `head_bytes` request stops reading after that many bytes. `fetch.py` checks and renames the
result. docs/usage.md, "Real data and hub models", says what a user sees.
"""

from __future__ import annotations

import http.client
import logging
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import requests
import urllib3
from tqdm import tqdm

from workflow_lib.cli import StageError
from workflow_lib.data import resume

# The fetch job's logger: its lines read the same whichever of its modules writes them.
log = logging.getLogger("workflow_lib.data.fetch")

CHUNK = 1 << 20
RETRY_STATUS = frozenset({408, 429})


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
