"""Which rows a sampling shard continues, and how many shards an evaluation has. Standard library only: the
sampler, the gather job and the cost model (at Snakefile parse time) all read it.

A sampling job continues rows (prompt, run) in one order, run-major, in batches of `sampling.batch_size`
(`sampler.generate`). A shard is a run of whole batches of that order: shard i of n holds batches
floor(i B / n) .. floor((i + 1) B / n) - 1 of the B batches. Every batch of a shard is then the batch the unsharded
job would have run (the same rows, the same padding, the same shapes), so each row's floats, and so its tokens, are
the same, and the gathered samples are the unsharded ones byte for byte (tests/sample/test_shards.py). A shard
holds no batch where there are more shards than batches.
"""

from __future__ import annotations

import math


def batch_ranges(batches: int, count: int) -> list[tuple[int, int]]:
    """[start, stop) batch indices of each of `count` shards of `batches` batches: sizes differ by at most one."""
    if count < 1:
        raise ValueError(f"{count} shards: at least one")
    return [(index * batches // count, (index + 1) * batches // count) for index in range(count)]


def shard_rows(rows: int, batch_size: int, index: int, count: int) -> tuple[int, int]:
    """[start, stop) of shard `index` of `count` among `rows` rows batched by `batch_size`: whole batches (shard
    `index` of `batch_ranges`, computed alone: the cost model asks for every shard of a plan)."""
    if not 0 <= index < count:
        raise ValueError(f"shard {index} of {count}")
    batches = math.ceil(rows / batch_size)
    start, stop = index * batches // count, (index + 1) * batches // count
    return min(start * batch_size, rows), min(stop * batch_size, rows)


def shard_count(rows: int, batch_size: int, shard_batches: int | None) -> int:
    """The fewest shards of at most `shard_batches` batches (`sampling.shard_batches`; None: one) among `rows` rows
    batched by `batch_size`. Data only, so the cost model's settings and datasheets never move a shard: it checks the
    shards against the time limit, it does not choose them (issue 53)."""
    if shard_batches is None:
        return 1
    return max(1, math.ceil(math.ceil(rows / batch_size) / shard_batches))


def batches_that_fit(batch_seconds: float, fixed_seconds: float, limit_seconds: float) -> int:
    """The most batches one job (its batches x `batch_seconds`, plus `fixed_seconds`: start-up and loading) runs within
    `limit_seconds` (0 where even one batch does not fit)."""
    if batch_seconds <= 0:
        return 0 if fixed_seconds > limit_seconds else 2**31
    return max(0, math.floor((limit_seconds - fixed_seconds) / batch_seconds))


SHARD_KEY = b"perturbed_lm.shard"  # a shard file's schema metadata: which rows of which job it holds


def shard_metadata(index: int, count: int, rows: tuple[int, int]) -> dict[bytes, bytes]:
    return {SHARD_KEY: f"{index}/{count}/{rows[0]}/{rows[1]}".encode()}


def read_shard_metadata(metadata: dict[bytes, bytes] | None, name: str) -> tuple[int, int, int, int]:
    """(index, count, start, stop) that `shard_metadata` wrote; ValueError naming `name` for a file without it."""
    value = (metadata or {}).get(SHARD_KEY)
    if value is None:
        raise ValueError(f"{name}: not a sampling shard (no {SHARD_KEY.decode()} in its Parquet metadata)")
    index, count, start, stop = (int(n) for n in value.decode().split("/"))
    return index, count, start, stop
