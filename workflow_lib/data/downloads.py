"""Where the files of a `source: url` dataset land: one answer for the Snakefile and for the data stage.

The rules need the paths to wire `fetch` -> `unpack` -> `download` at parse time, and the data stage needs the
same paths to read the files, so both ask this module (standard library only: every cluster job re-parses the
Snakefile). A dataset names its files in one of two ways:

- `files: {split: {url, sha256[, head_bytes]}}` (or a list of such entries): each URL is fetched to
  `results/downloads/<dataset>/<name>`, name = the URL's last path segment, decoded (`head<N>-<name>` for a head);
  a segment that is not a safe file name (`SAFE_NAME`: no space, quote or shell character) becomes
  `url-<12 hex of the URL's sha256>` with its suffixes where they are safe, and the provenance record keeps the
  URL's own name (`source_of`).
- `archive: {url, sha256}` with `files: {split: member path(s)}`: the archive is fetched once, and `unpack`
  extracts the members the dataset names into `results/downloads/<dataset>/unpacked/`.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import PurePosixPath
from urllib.parse import unquote, urlsplit

ROOT = "results/downloads"
UNPACKED = "unpacked"
# A fetched file's name as it may stand in a path and a command: letters, digits and . _ + -, not first . + -.
SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]*")


def as_list(files) -> list:
    return list(files) if isinstance(files, list) else [files]


def url_name(url: str) -> str:
    """The URL's own file name: its last path segment, decoded (`index` for none)."""
    return PurePosixPath(unquote(urlsplit(url).path)).name or "index"


def safe_name(url: str) -> str:
    """The URL's name where it is a safe file name; else `url-<12 hex of the URL's sha256>`, followed by the
    name's suffixes (`.txt`, `.tar.gz`: the readers and `unpack` go by them) as long as each is safe."""
    name = url_name(url)
    if SAFE_NAME.fullmatch(name):
        return name
    digest = hashlib.sha256(url.encode()).hexdigest()[:12]
    suffixes = PurePosixPath(name).suffixes
    while suffixes and not all(SAFE_NAME.fullmatch(s[1:]) for s in suffixes):
        suffixes = suffixes[1:]  # keep the trailing suffixes that are safe (`x;y.tar.gz` -> `.tar.gz`)
    return f"url-{digest}{''.join(suffixes)}"


def file_name(entry: dict) -> str:
    """The local name of a fetched URL (`safe_name`), marked when only the head is fetched (a head is a different
    file from the whole, so the two must never share a name or a cache entry)."""
    name = safe_name(entry["url"])
    return f"head{entry['head_bytes']}-{name}" if entry.get("head_bytes") else name


def fetched(spec: dict) -> dict[str, dict]:
    """Every URL a dataset fetches: local name -> its entry ({url, sha256, head_bytes})."""
    if spec.get("archive"):
        return {file_name(spec["archive"]): spec["archive"]}
    return {file_name(entry): entry for files in spec["files"].values() for entry in as_list(files)}


def members(spec: dict) -> list[str]:
    """The archive members a dataset reads, over all its splits, in a stable order."""
    return sorted({member for files in spec["files"].values() for member in as_list(files)})


def fetched_path(dataset: str, name: str) -> str:
    return f"{ROOT}/{dataset}/{name}"


def archive_path(dataset: str, spec: dict) -> str:
    return fetched_path(dataset, file_name(spec["archive"]))


def unpacked_dir(dataset: str) -> str:
    return f"{ROOT}/{dataset}/{UNPACKED}"


def split_paths(dataset: str, spec: dict, split: str) -> list[str]:
    """The local files one split of a url dataset is read from, in the order its `files` entry gives them."""
    files = as_list(spec["files"][split])
    if spec.get("archive"):
        return [f"{unpacked_dir(dataset)}/{member}" for member in files]
    return [fetched_path(dataset, file_name(entry)) for entry in files]


def source_of(dataset: str, spec: dict, split: str) -> list[dict]:
    """Where each file of a split came from (URL and its own file name, pinned sha256, archive member): the
    provenance record's."""
    if spec.get("archive"):
        return [{"url": spec["archive"]["url"], "member": member} for member in as_list(spec["files"][split])]
    return [
        {
            "url": entry["url"],
            "url_name": url_name(entry["url"]),
            "pinned_sha256": entry.get("sha256"),
            "head_bytes": entry.get("head_bytes"),
        }
        for entry in as_list(spec["files"][split])
    ]
