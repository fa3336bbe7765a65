"""Training rows as torch sees them: ragged Arrow columns, padding into batches, an epoch shuffle that a resumed
run repeats exactly, and the longest row checked against the model's context.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from workflow_lib.cli import StageError
from workflow_lib.perturb.strategies import get as get_strategy

# ---- data ----------------------------------------------------------------------------------------------------


@dataclass
class Ragged:
    """Variable-length int lists as one flat array plus offsets (row i is values[offsets[i]:offsets[i+1]])."""

    values: np.ndarray
    offsets: np.ndarray

    @classmethod
    def from_arrow(cls, column) -> Ragged:
        column = column.combine_chunks()
        return cls(column.values.to_numpy(zero_copy_only=False), column.offsets.to_numpy().astype(np.int64))

    def row(self, i: int) -> np.ndarray:
        return self.values[self.offsets[i] : self.offsets[i + 1]]

    def __len__(self) -> int:
        return len(self.offsets) - 1


class TrainingRows(torch.utils.data.Dataset):
    """Rows of a perturbed Parquet (or plain token blocks): input ids and, in prefix mode, explicit targets."""

    def __init__(self, path: str, max_length: int):
        import json

        from workflow_lib.files import read_parquet
        from workflow_lib.perturb.realised import REALISED_KEY
        from workflow_lib.perturb.training_data import EMBEDDING_KEY

        table = read_parquet(path)
        self.inputs = Ragged.from_arrow(table.column("input_ids"))
        # An embedding-space perturbation (perturb.training_data): its settings, and the positions it noises.
        found = (table.schema.metadata or {}).get(EMBEDDING_KEY)
        self.embedding: dict | None = json.loads(found) if found else None
        realised = (table.schema.metadata or {}).get(
            REALISED_KEY
        )  # what the perturbation realised (perturb/realised.py)
        self.realised: dict | None = json.loads(realised) if realised else None
        noising = self.embedding is not None and not get_strategy(self.embedding["strategy"]).hooked
        self.noised = Ragged.from_arrow(table.column("perturbed_positions")) if noising else None
        self.prefix_mode = "target_positions" in table.column_names
        if self.prefix_mode:
            self.positions = Ragged.from_arrow(table.column("target_positions"))
            self.targets = Ragged.from_arrow(table.column("target_ids"))
        self.max_length = max_length

    def __len__(self) -> int:
        return len(self.inputs)

    def __getitem__(self, i: int) -> tuple[np.ndarray, ...]:
        """input ids, target positions, target ids and the positions whose embeddings are noised (none unless an
        embedding-space perturbation lists them)."""
        ids = self.inputs.row(i)[: self.max_length]
        noised = self.noised.row(i) if self.noised is not None else np.zeros(0, dtype=np.int64)
        noised = noised[noised < len(ids)]
        if self.prefix_mode:
            pos, tgt = self.positions.row(i), self.targets.row(i)
            keep = pos < len(ids)  # a truncated row loses the targets past max_length
            return ids, pos[keep], tgt[keep], noised
        return ids, np.arange(len(ids) - 1), ids[1:], noised


def collate(rows, pad_id: int) -> dict[str, torch.Tensor]:
    """Right-padded input_ids, attention_mask and noise_mask [B, L] (the positions an embedding-space perturbation
    noises), flat targets: batch row, position, id [N]."""
    width = max(len(row[0]) for row in rows)
    input_ids = np.full((len(rows), width), pad_id, dtype=np.int64)
    mask = np.zeros((len(rows), width), dtype=np.int64)
    noise = np.zeros((len(rows), width), dtype=bool)
    for b, (ids, _, _, noised) in enumerate(rows):
        input_ids[b, : len(ids)] = ids
        mask[b, : len(ids)] = 1
        noise[b, noised] = True
    return {
        "input_ids": torch.from_numpy(input_ids),
        "attention_mask": torch.from_numpy(mask),
        "noise_mask": torch.from_numpy(noise),
        "target_row": torch.from_numpy(
            np.concatenate([np.full(len(row[1]), b) for b, row in enumerate(rows)]).astype(np.int64)
        ),
        "target_pos": torch.from_numpy(np.concatenate([row[1] for row in rows]).astype(np.int64)),
        "target_ids": torch.from_numpy(np.concatenate([row[2] for row in rows]).astype(np.int64)),
    }


class EpochShuffle(torch.utils.data.Sampler):
    """A permutation per epoch from (seed, epoch) alone, so a resumed run sees the same order."""

    def __init__(self, n: int, seed: int):
        self.n, self.seed, self.epoch = n, seed, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self):
        return iter(np.random.default_rng([self.seed, self.epoch]).permutation(self.n).tolist())

    def __len__(self) -> int:
        return self.n


def check_context(lm, settings: dict, datasets: list[TrainingRows]) -> None:
    """The longest row this job trains or validates on (cut at training.max_length) fits the model's context: a
    perturbed row is longer than its block, and a checkpoint's context may be known only once it is loaded."""
    from workflow_lib.sample.loops import context_length

    context = context_length(lm)
    offsets = [d.inputs.offsets for d in datasets]
    longest = min(settings["max_length"], max((int((o[1:] - o[:-1]).max()) for o in offsets if len(o) > 1), default=0))
    if context is not None and longest > context:
        raise StageError(
            f"training.max_length: the longest training row is {longest} tokens (rows are cut at training.max_length "
            f"= {settings['max_length']}), beyond the model's context of {context} positions; lower "
            f"training.max_length to {context} or less (and tokenize.block_size below it, to leave room for insertions)"
        )
