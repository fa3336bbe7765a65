"""Writing outputs so that a killed job never leaves a file that looks finished.

Every output goes to a temporary sibling first and is renamed into place when complete (rename is atomic on
one filesystem). Parquet is written with pyarrow and a fixed set of options, so the same table gives the
same bytes.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path


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
    and importing `pyarrow.dataset` costs every job about 0.3 s (BENCHMARKS.md, "Test suite time")."""
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
