"""Which URLs may be fetched without a pinned sha256: one answer for the config check and the fetch job.

Over https the server's certificate vouches for the bytes; over plain http nothing does, and anyone on the path
can change them, so an http:// file must be pinned by its sha256. A loopback URL never leaves this machine (the
rehearsals serve their files from studies/httpserver.py on 127.0.0.1), so it may stay unpinned. Standard library
only: the Snakefile's config check imports this.
"""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit


def stays_on_this_machine(url: str) -> bool:
    """True for a URL whose host is a loopback address (127.0.0.0/8, ::1) or `localhost`."""
    host = urlsplit(url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def unpinned_http_refusal(url: str, sha256: str | None, key: str) -> str | None:
    """The error for a plain http:// URL that `key` leaves unpinned and that leaves this machine; None when the URL
    may be fetched (https, pinned, or loopback)."""
    if sha256 or urlsplit(url).scheme.lower() != "http" or stays_on_this_machine(url):
        return None
    return (
        f"{key}: {url} is plain http, which nothing protects in transit; set its sha256 (the file is then "
        "checked after the download) or use an https:// URL"
    )
