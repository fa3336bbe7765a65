"""Gather a sampling job's shards into its samples Parquet: the rows in order, the file the unsharded job writes.

Each shard records which rows it holds (`shards.shard_metadata`); the gather refuses shards that are not one job's
complete set in order (a missing, repeated or foreign shard), so a mixed-up gather cannot pass for samples.
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

from workflow_lib.cli import StageError, run
from workflow_lib.perturb.realised import REALISED_KEY, Realised
from workflow_lib.sample.shards import read_shard_metadata

log = logging.getLogger("workflow_lib.sample.gather")


def samples_schema(metadata: dict | None = None):
    """The samples file's columns (a shard's, with its `metadata`). Parquet reads a list's values back as `element`,
    Arrow writes them as `item`: the gather casts back, so that the bytes are the unsharded job's."""
    import pyarrow as pa

    columns = [("prompt_id", pa.int64()), ("run", pa.int32()), ("continuation_ids", pa.list_(pa.int32()))]
    return pa.schema([*columns, ("text", pa.string())], metadata=metadata)


def gather(paths: list[str]):
    """The shards' tables, checked to be shards 0..n-1 of n with contiguous rows, as one table whose only metadata is
    the job's realised perturbation: the shards' counts added up (perturb/realised.py), the same for any number of
    shards."""
    import pyarrow as pa

    from workflow_lib.files import read_parquet

    tables, end, realised = [], 0, []
    for position, path in enumerate(paths):
        table = read_parquet(path)
        try:
            index, count, start, stop = read_shard_metadata(table.schema.metadata, path)
        except ValueError as error:
            raise StageError(str(error)) from error
        if (index, count) != (position, len(paths)) or start != end or table.num_rows != stop - start:
            raise StageError(
                f"{path}: shard {index} of {count} (rows {start}-{stop}, {table.num_rows} written) is not shard "
                f"{position} of the {len(paths)} given, from row {end}: the shards of one job, in order"
            )
        tables.append(table.cast(samples_schema()))
        realised.append((table.schema.metadata or {}).get(REALISED_KEY))
        end = stop
    joined = pa.concat_tables(tables).combine_chunks()
    counts = [json.loads(part) for part in realised if part is not None]
    if not counts or len(counts) < len(realised):  # shards written before the count was kept
        return joined
    total = sum((Realised.from_dict(c) for c in counts[1:]), Realised.from_dict(counts[0]))
    return joined.replace_schema_metadata({REALISED_KEY: json.dumps(total.as_dict(), sort_keys=True)})


def shards_in(folder: str, count: int) -> list[str]:
    """The Parquet files of `folder` that are shards of a job of `count` shards, by the index each records (not by
    name: the command line stays short however many shards there are). Shards of another count (a run before the
    number changed) are left out; the gather refuses a missing one."""
    import pyarrow.parquet as pq

    found = []
    for path in sorted(Path(folder).glob("*.parquet")):
        try:
            index, shards, _, _ = read_shard_metadata(pq.read_schema(path).metadata, str(path))
        except ValueError as error:
            raise StageError(str(error)) from error
        if shards == count:
            found.append((index, str(path)))
    return [path for _, path in sorted(found)]


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m workflow_lib.sample.gather")
    parser.add_argument("--shards", nargs="+", help="the shards' Parquet files, in order")
    parser.add_argument("--folder", help="... or the folder that holds them (with --count)")
    parser.add_argument("--count", type=int, help="the number of shards in --folder")
    parser.add_argument("--output", required=True)
    args = parser.parse_args()
    if (args.shards is None) == (args.folder is None) or (args.folder is not None and args.count is None):
        parser.error("give --shards, or --folder and --count")

    from workflow_lib.files import write_parquet

    shards = args.shards or shards_in(args.folder, args.count)
    table = gather(shards)
    write_parquet(table, args.output)
    log.info("%d rows from %d shards", table.num_rows, len(shards))


if __name__ == "__main__":
    run(main)
