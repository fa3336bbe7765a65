"""Where the files of a `source: url` dataset land: one answer for the Snakefile and for the data stage.

The rules need the paths to wire `fetch` -> `unpack` -> `download` at parse time, and the data stage needs the
same paths to read the files, so both ask this module (standard library only: every cluster job re-parses the
Snakefile). A dataset names its files in one of two ways:

- `files: {split: {url, sha256[, head_bytes]}}` (or a list of such entries): each URL is fetched to
  `results/downloads/<dataset>/<name>`, name = the URL's last path segment (`head<N>-<name>` for a head).
- `archive: {url, sha256}` with `files: {split: member path(s)}`: the archive is fetched once, and `unpack`
  extracts the members the dataset names into `results/downloads/<dataset>/unpacked/`.
"""

from __future__ import annotations

from pathlib import PurePosixPath
from urllib.parse import unquote, urlsplit

ROOT = "results/downloads"
UNPACKED = "unpacked"


def as_list(files) -> list:
    return list(files) if isinstance(files, list) else [files]


def file_name(entry: dict) -> str:
    """The local name of a fetched URL: its last path segment, marked when only the head is fetched (a head is
    a different file from the whole, so the two must never share a name or a cache entry)."""
    name = PurePosixPath(unquote(urlsplit(entry["url"]).path)).name or "index"
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
    """Where each file of a split came from (URL, pinned sha256, archive member): the provenance record's."""
    if spec.get("archive"):
        return [{"url": spec["archive"]["url"], "member": member} for member in as_list(spec["files"][split])]
    return [
        {"url": entry["url"], "pinned_sha256": entry.get("sha256"), "head_bytes": entry.get("head_bytes")}
        for entry in as_list(spec["files"][split])
    ]
