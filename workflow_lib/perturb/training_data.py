"""Perturbed training data: token blocks -> the training set of one perturbation condition (the `perturb` rule).

Two modes: `augment`, the paper's own implementation (D plus m perturbed copies, ordinary causal-LM rows), and
`prefix`, Algorithm 1 exactly (m copies in which every original token is a target once, from its own perturbed
prefix; `target_positions`, `target_ids`). Every row keeps what an audit needs (`source_positions`,
`perturbed_positions`). A strategy of the embedding space changes no token: its rows are the unperturbed ones,
`perturbed_positions` the positions the trainer noises, and the table's metadata (`EMBEDDING_KEY`) carries the
noise's settings. The modes: docs/method.md §1, "Training"; the files: docs/usage.md, "The perturbation".
"""

from __future__ import annotations

import argparse
import json
import logging
import zlib

import numpy as np

from workflow_lib.cli import parse_json_arg, run
from workflow_lib.files import write_json, write_parquet
from workflow_lib.perturb.perturber import perturb, prefix_targets, sequence_ids
from workflow_lib.perturb.realised import REALISED_KEY, Realised, check_realised, count_positions, table_settings
from workflow_lib.perturb.strategies import get as get_strategy
from workflow_lib.perturb.synonym_table import SynonymTable

log = logging.getLogger("workflow_lib.perturb.training_data")
MODES = ("augment", "prefix")
EMBEDDING_KEY = b"embedding_perturbation"  # the Parquet metadata key of an embedding-space condition's settings


def condition_rng(seed: int, key: str, copy: int) -> np.random.Generator:
    """A generator for one copy of one condition: seeded by the config seed and the condition's wildcards."""
    return np.random.default_rng(np.random.SeedSequence([seed, zlib.crc32(key.encode()), copy]))


def _ragged_lists(values: np.ndarray, offsets: np.ndarray):
    import pyarrow as pa

    return pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), pa.array(values.astype(np.int32)))


def _positions(mask: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Local positions where `mask` is true, ragged per sequence."""
    where = np.flatnonzero(mask)
    local = where - offsets[sequence_ids(offsets, _np())[where]] if len(where) else where
    counts = np.cumsum(np.concatenate([[0], mask.astype(np.int64)]))[offsets]
    return local, counts


def _np():
    from workflow_lib.perturb.backends import backend

    return backend(np.zeros(0))


def perturb_blocks(
    blocks: np.ndarray,
    mode: str,
    strategy: str,
    intensity: float,
    table: SynonymTable,
    copies: int,
    seed: int,
    key: str,
    special_ids=(),
    include_original: bool = True,
    embedding: dict | None = None,
):
    """All rows of one condition as a pyarrow Table (see the module docstring for the columns); `embedding`: an
    embedding-space strategy's noise settings (`perturb.settings.embedding_settings`), kept in its metadata."""
    import pyarrow as pa

    if mode not in MODES:
        raise ValueError(f"unknown perturbation mode {mode!r}; allowed: {', '.join(MODES)}")
    n_blocks, width = blocks.shape
    values = blocks.reshape(-1).astype(np.int32)  # token ids as stored; indices stay int64
    offsets = np.arange(0, (n_blocks + 1) * width, width, dtype=np.int64)
    block_id = np.arange(n_blocks, dtype=np.int64)
    parts = []
    if mode == "augment" and include_original:
        empty = np.zeros(n_blocks + 1, dtype=np.int64)
        parts.append(
            {
                "block_id": block_id,
                "copy": np.zeros(n_blocks, np.int32),
                "input_ids": _ragged_lists(values, offsets),
                "source_positions": _ragged_lists(np.zeros(0), empty),
                "perturbed_positions": _ragged_lists(np.zeros(0), empty),
            }
        )
    position = "after_source" if mode == "prefix" else "uniform"
    rule = get_strategy(strategy)
    if rule.in_embeddings and intensity > 0 and embedding is None:
        raise ValueError(f"strategy {strategy}: its noise settings (embedding_perturbation) are missing")
    selecting = 0.0 if rule.every_position else intensity  # NEFTune: no position to list, it noises them all
    for copy in range(1, copies + 1):
        out = perturb(
            values, offsets, strategy, selecting, table, condition_rng(seed, key, copy), special_ids, position
        )
        src, src_off = _positions(out.selected, offsets)
        pert, pert_off = _positions(out.perturbed_mask(), out.offsets)
        row = {
            "block_id": block_id,
            "copy": np.full(n_blocks, copy, np.int32),
            "input_ids": _ragged_lists(out.values, out.offsets),
            "source_positions": _ragged_lists(src, src_off),
            "perturbed_positions": _ragged_lists(pert, pert_off),
        }
        if mode == "prefix":
            positions, targets, target_offsets = prefix_targets(values, offsets, out)
            row["target_positions"] = _ragged_lists(positions, target_offsets)
            row["target_ids"] = _ragged_lists(targets, target_offsets)
        parts.append(row)
    tables = [pa.table({k: (v if isinstance(v, pa.Array) else pa.array(v)) for k, v in part.items()}) for part in parts]
    table_out = pa.concat_tables(tables) if len(tables) > 1 else tables[0]
    selected = sum(len(part["source_positions"].values) for part in parts[len(parts) - copies :])
    realised = blocks_realised(blocks, strategy, intensity, table, special_ids, copies, selected)
    metadata = {REALISED_KEY: json.dumps(realised.as_dict(), sort_keys=True)}
    if rule.in_embeddings and intensity > 0:
        metadata[EMBEDDING_KEY] = json.dumps(embedding, sort_keys=True)
    return table_out.replace_schema_metadata(metadata)


def blocks_realised(
    blocks: np.ndarray, strategy: str, intensity: float, table: SynonymTable, special_ids, copies: int, selected: int
) -> Realised:
    """The realised perturbation of `copies` perturbed copies of `blocks` with `selected` positions selected in all
    (perturb/realised.py: perturbable and eligible positions counted on the blocks, once per copy)."""
    rule = get_strategy(strategy)
    has_synonyms = np.asarray(table.has_synonyms(_np())) if rule.needs_synonyms else None
    perturbable, eligible = count_positions(blocks.reshape(-1), special_ids, has_synonyms)
    return Realised(
        float(intensity), int(perturbable) * copies, int(selected), int(eligible) * copies, rule.every_position
    )


def read_realised(table) -> Realised:
    """The realised perturbation a perturbed training table records in its metadata (`perturb_blocks`)."""
    return Realised.from_dict(json.loads(table.schema.metadata[REALISED_KEY]))


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m workflow_lib.perturb.training_data")
    parser.add_argument("--tokens", required=True, help="token blocks Parquet")
    parser.add_argument("--tokenizer", required=True, help="tokenizer folder (for its special tokens)")
    parser.add_argument("--synonyms", help="synonym table Parquet (not needed at intensity 0)")
    parser.add_argument(
        "--condition", required=True, help="JSON: mode, strategy, intensity, copies, include_original, seed"
    )
    parser.add_argument("--key", required=True, help="the condition's identity (its output path); seeds the draws")
    parser.add_argument("--output", required=True)
    parser.add_argument("--meta", required=True)
    args = parser.parse_args()

    from transformers import AutoTokenizer

    from workflow_lib.files import read_parquet

    cond = parse_json_arg(args.condition, "perturbation condition")
    tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
    ids = read_parquet(args.tokens, columns=["input_ids"]).column("input_ids").combine_chunks()
    blocks = ids.values.to_numpy().reshape(len(ids), -1)
    settings = None
    if args.synonyms:
        stored = read_parquet(args.synonyms)
        table, settings = SynonymTable.from_arrow(stored), table_settings(stored.schema.metadata)
    else:
        table = SynonymTable.from_rows(len(tokenizer), [], [], [])
    out = perturb_blocks(
        blocks,
        cond["mode"],
        cond["strategy"],
        cond["intensity"],
        table,
        cond["copies"],
        cond["seed"],
        args.key,
        sorted(set(tokenizer.all_special_ids)),
        cond.get("include_original", True),
        cond.get("embedding"),
    )
    realised = read_realised(out)
    lengths = np.diff(out.column("input_ids").combine_chunks().offsets.to_numpy())
    stats = {
        "condition": cond,
        "rows": out.num_rows,
        "blocks": int(blocks.shape[0]),
        "tokens_in": int(blocks.size),
        "tokens_out": int(lengths.sum()),
        "eligible_tokens": realised.eligible,
        "selected_tokens": realised.selected,
        "selected_rate_among_eligible": float(realised.selected / max(realised.eligible or 0, 1)),
        "realised": realised.as_dict(),
    }
    log.info("%s", stats)
    check_realised(
        realised, f"training data {args.key} ({cond['strategy']} at {cond['intensity']:g})", settings, args.synonyms
    )
    write_parquet(out, args.output)
    write_json(stats, args.meta)


if __name__ == "__main__":
    run(main)
