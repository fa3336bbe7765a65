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


def sha256_file(path: str | os.PathLike, chunk: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)
    return digest.hexdigest()
