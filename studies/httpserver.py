"""A loopback HTTP file server: `make rehearsal` and `make real` serve their downloads from it, and the tests and
benchmarks test downloads with it, without the network.

It serves a dict of path -> bytes on 127.0.0.1 (a free port) from a daemon thread, answers `Range:` requests
the way real servers do (206, 416), names each body's version with an ETag and a Last-Modified date derived from
its bytes (`validators` says which), honours `If-Range` (the whole body, 200, when the version named is not the
current one), and can misbehave on purpose: drop a connection half-way through a body, answer an error status,
or ignore `Range` altogether. A test changes a file by assigning `server.files[path]`. Every request is recorded
(path, Range and If-Range headers, status, body bytes actually sent) so a test can tell a resume from a restart,
or see that a client stopped reading.

Workflow tests run snakemake as a subprocess; it connects to this server in the pytest process.

    with serve({"/data.txt": b"..."}, drop_first={"/data.txt"}) as server:
        fetch(server.url("/data.txt"), ...)
        server.settle()
        assert server.requests[1]["range"] == "bytes=...-"
"""

from __future__ import annotations

import contextlib
import email.utils
import functools
import hashlib
import re
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

SEND_CHUNK = 64 * 1024
VALIDATORS = frozenset({"etag", "last-modified"})


@functools.lru_cache(maxsize=64)
def version_headers(body: bytes, validators: frozenset[str]) -> dict[str, str]:
    """The ETag and Last-Modified of a body, both derived from its bytes: a changed file gets new ones (cached:
    the rehearsals serve files of hundreds of megabytes)."""
    digest = hashlib.sha256(body).hexdigest()
    headers = {}
    if "etag" in validators:
        headers["ETag"] = f'"{digest[:16]}"'
    if "last-modified" in validators:
        headers["Last-Modified"] = email.utils.formatdate(1_000_000_000 + int(digest[:7], 16), usegmt=True)
    return headers


class Server:
    """The running server: its URL, the requests it saw, and the behaviour it was asked to show."""

    def __init__(
        self,
        files: dict[str, bytes],
        *,
        range_support: bool,
        drop_first: set[str],
        drop_always: set[str],
        fail_first: dict[str, int],
        fail_always: dict[str, int],
        validators: frozenset[str] | set[str] = VALIDATORS,
        if_range_support: bool = True,
        unannounced: frozenset[str] | set[str] = frozenset(),
        port: int = 0,
    ) -> None:
        self.files = files
        self.range_support = range_support
        self.validators = frozenset(validators)
        self.if_range_support = if_range_support
        self.unannounced = set(unannounced)
        self.drop_first = set(drop_first)
        self.drop_always = set(drop_always)
        self.fail_first = dict(fail_first)
        self.fail_always = dict(fail_always)
        self.requests: list[dict] = []
        self._lock = threading.Condition()
        self._active = 0
        self._seen: set[str] = set()
        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), self._handler_class())
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, args=(0.05,), name="test-httpserver", daemon=True
        )

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}/{path.lstrip('/')}"

    def settle(self, timeout: float = 10.0) -> None:
        """Wait until no request is being answered: a client that hung up early leaves the handler writing
        into a closed socket for a moment, and its `sent` count is final only after that."""
        with self._lock:
            if not self._lock.wait_for(lambda: self._active == 0, timeout):
                raise TimeoutError("test HTTP server still answering requests")

    def _first_time(self, path: str) -> bool:
        with self._lock:
            first = path not in self._seen
            self._seen.add(path)
            return first

    def _begin(self, record: dict) -> None:
        with self._lock:
            self._active += 1
            self.requests.append(record)

    def _end(self) -> None:
        with self._lock:
            self._active -= 1
            self._lock.notify_all()

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(FileHandler):
            owner = server

        return Handler


class FileHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    owner: Server

    def log_message(self, format: str, *args) -> None:
        pass

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        record = {
            "path": path,
            "range": self.headers.get("Range"),
            "if_range": self.headers.get("If-Range"),
            "status": None,
            "sent": 0,
        }
        self.owner._begin(record)
        try:
            self.answer(path, record)
        finally:
            self.owner._end()

    def answer(self, path: str, record: dict) -> None:
        owner = self.owner
        first = owner._first_time(path)
        status = owner.fail_always.get(path) or (owner.fail_first.get(path) if first else None)
        if path not in owner.files:
            status = 404
        if status:
            record["status"] = status
            self.send_response(status)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return

        body = owner.files[path]
        version = version_headers(body, owner.validators)
        start, end = 0, len(body) - 1
        current = not owner.if_range_support or record["if_range"] in (None, *version.values())
        ranged = owner.range_support and record["range"] and current
        requested = parse_range(record["range"], len(body)) if ranged else None
        if requested == "unsatisfiable":
            record["status"] = 416
            self.send_response(416)
            self.send_version(version)
            self.send_header("Content-Range", f"bytes */{len(body)}")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if isinstance(requested, tuple):
            start, end = requested
            record["status"] = 206
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{end}/{len(body)}")
        else:
            record["status"] = 200
            self.send_response(200)
        self.send_version(version)
        if path not in owner.unannounced:
            self.send_header("Content-Length", str(end + 1 - start))
        self.send_header("Accept-Ranges", "bytes" if owner.range_support else "none")
        drop = path in owner.drop_always or (path in owner.drop_first and first)
        if drop or path in owner.unannounced:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        # A dropped connection: the headers promised the whole body, half of it arrives, then the socket closes.
        stop = start + (end + 1 - start) // 2 if drop else end + 1
        self.send_body(memoryview(body)[start:stop], record)

    def send_version(self, version: dict[str, str]) -> None:
        for name, value in version.items():
            self.send_header(name, value)

    def send_body(self, body: memoryview, record: dict) -> None:
        try:
            for offset in range(0, len(body), SEND_CHUNK):
                self.wfile.write(body[offset : offset + SEND_CHUNK])
                record["sent"] += len(body[offset : offset + SEND_CHUNK])
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True


def parse_range(header: str, size: int) -> tuple[int, int] | str | None:
    """`bytes=a-b`, `bytes=a-` or `bytes=-n` as (first, last) byte, clipped to the body; "unsatisfiable" past
    its end; None for anything else (a server then answers the whole body, as RFC 9110 allows)."""
    match = re.fullmatch(r"bytes=(\d*)-(\d*)", header.strip())
    if not match or match.groups() == ("", ""):
        return None
    first, last = match.groups()
    if first == "":
        start, end = max(size - int(last), 0), size - 1
        return (start, end) if size and int(last) else "unsatisfiable"
    if last and int(last) < int(first):
        return None
    start, end = int(first), min(int(last), size - 1) if last else size - 1
    return "unsatisfiable" if start >= size else (start, end)


@contextlib.contextmanager
def serve(
    files: dict[str, bytes],
    *,
    range_support: bool = True,
    drop_first: frozenset[str] | set[str] = frozenset(),
    drop_always: frozenset[str] | set[str] = frozenset(),
    fail_first: dict[str, int] | None = None,
    fail_always: dict[str, int] | None = None,
    validators: frozenset[str] | set[str] = VALIDATORS,
    if_range_support: bool = True,
    unannounced: frozenset[str] | set[str] = frozenset(),
    port: int = 0,
) -> Iterator[Server]:
    """Serve `files` (path -> body) on a loopback port (`port`; 0 = a free one) until the block ends.

    drop_first / drop_always: paths whose first (every) GET sends the full Content-Length but half the body.
    fail_first / fail_always: path -> HTTP status answered on the first (every) request for it.
    validators: which of "etag" and "last-modified" name a body's version (none: a server that sends neither).
    if_range_support: False for a server that answers Range requests whatever version If-Range names.
    unannounced: paths answered without a Content-Length, the body ending when the connection closes.
    """

    def rooted(path: str) -> str:
        return "/" + path.lstrip("/")

    server = Server(
        {rooted(p): body for p, body in files.items()},
        range_support=range_support,
        drop_first={rooted(p) for p in drop_first},
        drop_always={rooted(p) for p in drop_always},
        fail_first={rooted(p): s for p, s in (fail_first or {}).items()},
        fail_always={rooted(p): s for p, s in (fail_always or {}).items()},
        validators=validators,
        if_range_support=if_range_support,
        unannounced={rooted(p) for p in unannounced},
        port=port,
    )
    server.thread.start()
    try:
        yield server
    finally:
        server.httpd.shutdown()
        server.httpd.server_close()
        server.thread.join(timeout=10)
