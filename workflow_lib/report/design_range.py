"""Whether a row labelled with a method ran that method as designed: NEFTune's noise against the embeddings.

NEFTune (Jain et al. 2023) adds uniform noise of per-coordinate RMS alpha / sqrt(3 L d) to the input embeddings; its
authors tuned alpha 5-15 on ~4,096-wide models, where that noise is a small share of the embeddings' RMS. On a narrow
model the same alpha is far larger than the embeddings themselves. Each NEFTune training records the ratio when it
started and at its end (train_summary.json's `ran.neftune`, perturb.embedding.neftune_scale); the summary prints it
beside alpha and says whether it lies in DESIGN_RANGE, or that the row is off-design (docs/method.md §1).
"""

from __future__ import annotations

import json
from pathlib import Path

DESIGN_RANGE = (0.05, 0.5)  # noise RMS / embeddings' RMS


def neftune_record(model_dir: str) -> dict | None:
    """The `ran.neftune` record of a trained model folder, or None (no NEFTune, or no summary)."""
    path = Path(model_dir) / "train_summary.json"
    if not path.exists():
        return None
    return (json.loads(path.read_text()).get("ran") or {}).get("neftune")


def in_design(record: dict) -> bool:
    low, high = DESIGN_RANGE
    return all(low <= record[k] <= high for k in ("ratio", "ratio_end"))


def neftune_lines(model_dirs: list[str]) -> list[str]:
    """One sentence per NEFTune training: alpha, the noise's ratio to the embeddings' RMS at start and end, and
    whether that is NEFTune's design range or off it."""
    lines = []
    for model_dir in sorted(model_dirs):
        record = neftune_record(model_dir)
        if record is None:
            continue
        low, high = DESIGN_RANGE
        where = (
            f"in NEFTune's design range ({low:g}-{high:g})"
            if in_design(record)
            else f"**off NEFTune's design range** ({low:g}-{high:g}): its rows describe that noise, not NEFTune as designed"
        )
        lines.append(
            f"NEFTune in `{model_dir}`: alpha {record['alpha']:g} on {record['width']}-wide embeddings and rows of "
            f"{record['length']} tokens puts its noise at {record['ratio']:.2f}x the embeddings' RMS when training "
            f"started and {record['ratio_end']:.2f}x at its end, {where}."
        )
    return lines
