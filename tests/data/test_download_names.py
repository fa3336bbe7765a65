"""A fetched URL's local name is safe in a path and a command (issue 64): the URL's own name where it is one,
else `url-<12 hex>` with its safe suffixes; two URLs never share a name unless the config is refused."""

from __future__ import annotations

import hashlib

import pytest

from workflow_lib.config import ConfigError
from workflow_lib.config_datasets import check_url_dataset
from workflow_lib.data.downloads import SAFE_NAME, file_name, safe_name, source_of, split_paths, url_name

HOSTILE = "http://127.0.0.1:8/files/a%3Btouch%20x%24%28id%29%60id%60%27q%22.tar.gz"


def test_a_safe_url_name_is_kept():
    assert safe_name("https://example.org/v1/webtext.test.jsonl") == "webtext.test.jsonl"
    assert safe_name("https://example.org/wiki.train+raw_2.txt?x=1#y") == "wiki.train+raw_2.txt"
    assert file_name({"url": "https://example.org/a.jsonl", "head_bytes": 100}) == "head100-a.jsonl"


@pytest.mark.parametrize(
    ("url", "suffix"),
    [
        (HOSTILE, ".tar.gz"),
        ("https://h/my%20data.jsonl", ".jsonl"),
        ("https://h/a;b.t$x.gz", ".gz"),
        ("https://h/%24%28id%29", ""),
        ("https://h/a%2F..", ""),  # decodes to a/..: the name '..'
        ("https://h/.hidden.txt", ".txt"),
        ("https://h/-rf", ""),
    ],
)
def test_an_unsafe_url_name_becomes_a_digest_with_its_safe_suffixes(url, suffix):
    name = safe_name(url)
    assert name == f"url-{hashlib.sha256(url.encode()).hexdigest()[:12]}{suffix}"
    assert SAFE_NAME.fullmatch(name)


def test_the_provenance_keeps_the_urls_own_name():
    spec = {"files": {"test": {"url": HOSTILE, "sha256": "0" * 64}}}
    (record,) = source_of("web", spec, "test")
    assert record["url"] == HOSTILE and record["url_name"] == "a;touch x$(id)`id`'q\".tar.gz" == url_name(HOSTILE)
    assert split_paths("web", spec, "test") == [f"results/downloads/web/{safe_name(HOSTILE)}"]


def entries(*urls: str) -> dict:
    return {"source": "url", "format": "jsonl", "files": {f"s{i}": {"url": u} for i, u in enumerate(urls)}}


def test_two_unsafe_urls_get_two_names_and_two_safe_ones_of_one_name_are_refused():
    check_url_dataset("web", entries("https://h/a%20b.jsonl", "https://h/a%3Bb.jsonl"))
    with pytest.raises(ConfigError, match=r"datasets\.web\.files\.s1: .* would both be saved as 'x\.jsonl'"):
        check_url_dataset("web", entries("https://a/x.jsonl", "https://b/x.jsonl"))
