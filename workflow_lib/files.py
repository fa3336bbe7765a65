"""Writing outputs so that a killed job never leaves a file that looks finished.

Every output goes to a temporary sibling first and is renamed into place when complete (rename is atomic on
one filesystem); a killed job's temporary is removed by the next writer of that output (`remove_stale_temporaries`).
Folders that must survive a crash of the machine are flushed to disk before they replace the old one (`fsync_tree`,
`replace_folder`). Parquet is written with pyarrow and a fixed set of options, so the same table gives the same bytes.
"""

from __future__ import annotations

import contextlib
import glob
import hashlib
import json
import logging
import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

log = logging.getLogger("workflow_lib.files")


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path next to `path`; move it onto `path` only if the block succeeds."""
    final = Path(path)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.with_name(f".{final.name}.tmp-{os.getpid()}")
    if tmp.is_dir():
        shutil.rmtree(tmp)
    try:
        yield tmp
        if final.is_dir():
            shutil.rmtree(final)
        os.replace(tmp, final)
    finally:
        if tmp.is_dir():
            shutil.rmtree(tmp, ignore_errors=True)
        elif tmp.exists():
            tmp.unlink()


def process_alive(pid: int) -> bool:
    """Whether a process of this id runs on this machine (one of another user's counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale_temporaries(path: str | os.PathLike) -> list[Path]:
    """Remove the temporaries that `atomic_path` left beside `path` for processes that no longer run (a job killed
    while writing: `.<name>.tmp-<pid>`), logging each; returns them. A live process's temporary is left alone."""
    final = Path(path)
    pattern = re.compile(rf"\.{re.escape(final.name)}\.tmp-(\d+)")
    removed = []
    for entry in sorted(final.parent.glob(f".{glob.escape(final.name)}.tmp-*")):
        match = pattern.fullmatch(entry.name)
        if match is None or int(match.group(1)) == os.getpid() or process_alive(int(match.group(1))):
            continue
        log.info("removing %s: the temporary of process %s, which no longer runs", entry, match.group(1))
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()
        removed.append(entry)
    return removed


def fsync_folder(folder: str | os.PathLike) -> None:
    """Flush a folder's entries (the names created, renamed or removed in it) to disk."""
    handle = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(handle)
    finally:
        os.close(handle)


def fsync_tree(folder: str | os.PathLike) -> None:
    """Flush every file under `folder`, then every folder in it and `folder` itself, to disk: after a crash of the
    machine a tree written before this call reads back whole, not as the empty or short files of unwritten pages."""
    for root, _, names in os.walk(str(folder), topdown=False):
        for name in names:
            with open(os.path.join(root, name), "rb") as handle:
                os.fsync(handle.fileno())
        fsync_folder(root)


def replace_folder(tmp: str | os.PathLike, final: str | os.PathLike) -> None:
    """Put the complete folder `tmp` in place of `final`, flushed to disk first; the old `final` is moved aside to
    `<final>.old` and removed only once `tmp` has its place, so a kill at any moment leaves one of the two whole
    (`<final>.old` without `<final>`: the old one, which the next reader puts back)."""
    tmp, final = Path(tmp), Path(final)
    aside = final.with_name(final.name + ".old")
    fsync_tree(tmp)
    shutil.rmtree(aside, ignore_errors=True)
    if final.exists():
        os.replace(final, aside)
    os.replace(tmp, final)
    fsync_folder(final.parent)
    shutil.rmtree(aside, ignore_errors=True)


def write_parquet(table, path: str | os.PathLike) -> None:
    """Write a pyarrow Table (or polars DataFrame) deterministically and atomically."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if not isinstance(table, pa.Table):
        table = table.to_arrow()
    # Keep our own metadata, drop pandas' (it carries library versions that would change the bytes).
    metadata = {k: v for k, v in (table.schema.metadata or {}).items() if k != b"pandas"}
    table = table.replace_schema_metadata(metadata or None)
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp, compression="zstd", write_statistics=True)


def read_parquet(path: str | os.PathLike, columns: list[str] | None = None):
    """One Parquet file as a pyarrow Table. Through `ParquetFile`, not `pq.read_table`: the latter builds a dataset,
    and importing `pyarrow.dataset` costs every job about 0.3 s (docs/benchmarks.md, "Test suite time")."""
    import pyarrow.parquet as pq

    with pq.ParquetFile(path) as handle:
        return handle.read(columns=columns)


def write_json(obj, path: str | os.PathLike) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")


def write_argument_file(arguments: list[str], path: str | os.PathLike, log: str | os.PathLike | None = None) -> None:
    """An argument file for argparse's `@file` (one argument a line): how a gather job gets its list of paths, which
    on its command line would pass the kernel's limit for one argument (128 KiB) in a large study."""
    if any("\n" in a or a == "" for a in arguments):
        raise ValueError(f"{path}: an argument file cannot hold an empty argument or a newline")
    with atomic_path(path) as tmp:
        tmp.write_text("".join(f"{a}\n" for a in arguments))
    if log is not None:
        Path(log).parent.mkdir(parents=True, exist_ok=True)
        Path(log).write_text(f"{len(arguments)} arguments written to {path}\n")


def sha256_file(path: str | os.PathLike, chunk: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)
    return digest.hexdigest()
