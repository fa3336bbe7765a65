"""Compare two finished studies' results/ folders: the same files, with the same content, provenance and timings aside.

    python tools/compare_results.py A/results B/results

What a refactor must leave unchanged ("existing results stay valid"): JSON compared without its `provenance`
blocks, Parquet by its table (not its schema metadata, which records versions), every other file as bytes; logs,
benchmarks, the HTML report, tracker folders, checkpoints and the argument files are left out. A training log's
`tokens_per_s` column is a timing, so `train_log.csv` rows are compared without it. Exit status 1 when a file
differs or exists on one side only.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import sys
from pathlib import Path

SKIPPED = ("logs/", "benchmarks/", ".snakemake", "report.html", "tracking/", "checkpoints/", "report/args/")
TIMINGS = {"tokens_per_s"}


def result_files(root: Path) -> set[str]:
    files = (str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())
    return {f for f in files if not any(s in f for s in SKIPPED)}


def _without_provenance(value):
    if isinstance(value, dict):
        return {k: _without_provenance(v) for k, v in value.items() if k != "provenance"}
    if isinstance(value, list):
        return [_without_provenance(v) for v in value]
    return value


def _csv_rows(data: bytes) -> list[dict]:
    return [{k: v for k, v in row.items() if k not in TIMINGS} for row in csv.DictReader(io.StringIO(data.decode()))]


def same(a: Path, b: Path) -> bool:
    x, y = a.read_bytes(), b.read_bytes()
    if x == y:
        return True
    if a.suffix == ".json":
        return _without_provenance(json.loads(x)) == _without_provenance(json.loads(y))
    if a.suffix == ".parquet":
        import pyarrow.parquet as pq

        return pq.read_table(a).replace_schema_metadata(None).equals(pq.read_table(b).replace_schema_metadata(None))
    if a.name == "train_log.csv":
        return _csv_rows(x) == _csv_rows(y)
    return False


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("a", type=Path)
    parser.add_argument("b", type=Path)
    args = parser.parse_args()
    fa, fb = result_files(args.a), result_files(args.b)
    differ = [f for f in sorted(fa & fb) if not same(args.a / f, args.b / f)]
    for label, only in (("only in A", fa - fb), ("only in B", fb - fa), ("differ", differ)):
        for f in sorted(only):
            print(f"{label}: {f}")
    print(f"{len(fa & fb) - len(differ)} of {len(fa | fb)} files the same (provenance and timings aside)")
    return 1 if differ or fa != fb else 0


if __name__ == "__main__":
    sys.exit(main())
