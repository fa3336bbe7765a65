"""studies/httpserver.py: the loopback server the studies download from answers ranges as real servers do (206, 416)
and misbehaves only where asked; every request is recorded."""

from __future__ import annotations

import urllib.error
import urllib.request

import pytest

from studies.httpserver import parse_range, serve


@pytest.mark.parametrize(
    ("header", "parsed"),
    [
        ("bytes=2-4", (2, 4)),
        ("bytes=2-", (2, 9)),
        ("bytes=-3", (7, 9)),
        ("bytes=5-99", (5, 9)),
        ("bytes=10-", "unsatisfiable"),
        ("bytes=-0", "unsatisfiable"),
        ("bytes=4-2", None),
        ("bytes=-", None),
        ("items=1-2", None),
    ],
)
def test_range_headers_parse_as_rfc_9110_reads_them(header, parsed):
    assert parse_range(header, 10) == parsed


def get(url: str, headers: dict | None = None) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers or {}), timeout=10) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, b""


def test_whole_bodies_ranges_and_failures_are_answered_and_recorded():
    body = bytes(range(256)) * 4
    with serve({"a/b.bin": body}) as server:
        assert get(server.url("a/b.bin")) == (200, body)
        assert get(server.url("a/b.bin"), {"Range": "bytes=1000-"}) == (206, body[1000:])
        assert get(server.url("a/b.bin"), {"Range": "bytes=2000-"})[0] == 416
        assert get(server.url("missing")) == (404, b"")
    with serve({"c.txt": b"text"}, fail_first={"c.txt": 503}) as server:
        assert [get(server.url("c.txt")) for _ in range(2)] == [(503, b""), (200, b"text")]
        server.settle()
        assert [r["status"] for r in server.requests] == [503, 200]
    with serve({"a.bin": body}, range_support=False) as server:
        assert get(server.url("a.bin"), {"Range": "bytes=1000-"}) == (200, body)  # the range ignored
