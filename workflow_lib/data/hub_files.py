"""A hub model's released files, fetched at a pinned revision and checked against the sha256 the config records.

Each file of `models.<model>.files` comes from `<HF_ENDPOINT>/<name>/resolve/<revision>/<file>` through `fetch.fetch`
(resumed, capped by `download.max_bytes`, refused unless its sha256 is the pinned one), or from the Hugging Face
cache when its sha256 there is the pinned one, into `<output>.parts/`, and moves into the folder once every file is
checked: never two versions of a file. `hub.json` records name, revision, endpoint, each sha256 and size. The keys:
docs/config.md, `models.<name>.files`; the rule: docs/studies.md.

    python -m workflow_lib.data.hub_files --key smollm2 --hub '{"name": ..., "revision": ..., "files": {...}}' \
        [--max-bytes N] --output results/pretrained/smollm2
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
from pathlib import Path
from urllib.parse import quote

from workflow_lib.cli import StageError, parse_json_arg, run
from workflow_lib.data.fetch import DEFAULT_MAX_BYTES, fetch
from workflow_lib.files import atomic_path, sha256_file, write_json

log = logging.getLogger("workflow_lib.data.hub_files")
RECORD = "hub.json"


def offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").upper() in ("1", "ON", "YES", "TRUE")


def from_cache(hub: dict, file: str, sha256: str, staged: Path) -> bool:
    """Copy `file` of the pinned revision from the Hugging Face cache into `staged` when the cache holds it with the
    pinned sha256 (a cached file of another sha256 is left alone: the download replaces nothing there)."""
    from huggingface_hub import try_to_load_from_cache

    cached = try_to_load_from_cache(hub["name"], file, revision=hub["revision"])
    if not isinstance(cached, str) or sha256_file(cached) != sha256:
        return False
    staged.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(cached, staged)
    return True


def resolve_url(endpoint: str, name: str, revision: str, file: str) -> str:
    """The hub's URL of `file` at `revision` (huggingface_hub.hf_hub_url's, from an endpoint given here)."""
    return f"{endpoint.rstrip('/')}/{name}/resolve/{quote(revision, safe='')}/{quote(file)}"


def fetch_files(key: str, hub: dict, staging: Path, max_bytes: int = DEFAULT_MAX_BYTES) -> dict:
    """Each pinned file of `hub` ({name, revision, files}) into `staging`, checked; returns what hub.json records."""
    from huggingface_hub import constants

    from workflow_lib.hub import hub_unreachable

    files = {}
    for file, sha256 in sorted(hub["files"].items()):
        what = f"models.{key}.files.{file}"
        staged = staging / file
        if staged.is_file() and sha256_file(staged) == sha256:  # left by an earlier job that failed on a later file
            files[file] = {"sha256": sha256, "bytes": staged.stat().st_size, "from": "staged"}
            continue
        if from_cache(hub, file, sha256, staged):
            files[file] = {"sha256": sha256, "bytes": staged.stat().st_size, "from": "cache"}
            continue
        if offline():
            raise StageError(
                f"{what}: HF_HUB_OFFLINE is set and the Hugging Face cache has no {file!r} of {hub['name']!r} at "
                f"revision {hub['revision']} with the pinned sha256; without the network, name a local folder or a "
                "GGUF file (configs/real-local.yaml does)"
            )
        if why := hub_unreachable(hub["name"]):
            raise StageError(
                f"config key models.{key}.name: could not fetch {hub['name']!r}: {why}; without the network, name "
                "a local folder or a GGUF file (configs/real-local.yaml does)"
            )
        url = resolve_url(constants.ENDPOINT, hub["name"], hub["revision"], file)
        record = fetch(url, staged, sha256=sha256, what=what, max_bytes=max_bytes)
        files[file] = {"sha256": record["sha256"], "bytes": record["bytes"], "from": url}
    return {"name": hub["name"], "revision": hub["revision"], "endpoint": constants.ENDPOINT, "files": files}


def staging_folder(output: str | Path) -> Path:
    """Where the files are fetched before the folder is written: beside it, as a file's `.part` is."""
    output = Path(output)
    return output.with_name(f"{output.name}.parts")


def fetch_model(key: str, hub: dict, output: str | Path, max_bytes: int = DEFAULT_MAX_BYTES) -> dict:
    """The pinned files of `hub` as the folder `output` (written whole or not at all), with hub.json beside them."""
    staging = staging_folder(output)
    if RECORD in hub["files"]:
        raise StageError(f"models.{key}.files.{RECORD}: the name is the download's own record; it cannot be pinned")
    record = fetch_files(key, hub, staging, max_bytes)
    with atomic_path(output) as tmp:
        for file in hub["files"]:
            (tmp / file).parent.mkdir(parents=True, exist_ok=True)
            os.replace(staging / file, tmp / file)
        write_json(record, tmp / RECORD)
    shutil.rmtree(staging, ignore_errors=True)
    log.info(
        "%s: %s at %s, %d files (%.1f MB), each its pinned sha256, in %s",
        key,
        hub["name"],
        hub["revision"],
        len(record["files"]),
        sum(f["bytes"] for f in record["files"].values()) / 1e6,
        output,
    )
    return record


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m workflow_lib.data.hub_files", description=__doc__.splitlines()[0])
    parser.add_argument("--key", required=True, help="the model's key in `models`")
    parser.add_argument("--hub", required=True, help="the model's name, revision and files, as JSON (pretrained.py)")
    parser.add_argument("--max-bytes", type=int, default=DEFAULT_MAX_BYTES, help="download.max_bytes, per file")
    parser.add_argument("--output", required=True)
    args = parser.parse_args()
    fetch_model(args.key, parse_json_arg(args.hub, f"models.{args.key}"), args.output, max_bytes=args.max_bytes)


if __name__ == "__main__":
    run(main)
