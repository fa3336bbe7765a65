"""MAUVE's floor: the fewest texts per side of a reported MAUVE (docs/method.md §4).

A run with fewer than `evaluation.mauve.min_texts` texts on a side is quantised into a histogram of a few buckets,
whose score cannot tell a clear difference from none (bench/mauve_floor.py), so such a cell is not scored: neither
featurised (features.py) nor clustered (metrics.py), and its contrasts are not tested. One home for the rule, which
both halves of an evaluation, the cost model and the plan (inputs.py) apply; it imports nothing heavy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

MIN_TEXTS = 50  # default of evaluation.mauve.min_texts: the fewest texts per side of a reported MAUVE


def mauve_status(texts: int, settings: dict) -> str | None:
    """None when a run with `texts` texts on its smaller side can resolve MAUVE; else the cell's text,
    "too few texts (n)". The floor is `min_texts`, not a bucket count, so that it means the same whether num_buckets
    is auto or explicit."""
    return None if texts >= settings.get("min_texts", MIN_TEXTS) else f"too few texts ({texts})"


def mauve_never_resolves(max_prompts: int | None, settings: dict) -> bool:
    """True when an eval set capped at `max_prompts` prompts can never reach MAUVE's floor: a run has at most one
    text per prompt on a side, so every MAUVE of it is "too few texts" whatever the data, and a contrast on it
    cannot be tested (the workflow plans no mauve_contrast job for it). With no cap (None): False; the data decide."""
    return max_prompts is not None and mauve_status(max_prompts, settings) is not None


def fewest_texts(run_of_row: np.ndarray) -> int:
    """The fewest samples in a run: MAUVE's smaller side (one human text per sample)."""
    import numpy as np

    _, counts = np.unique(run_of_row, return_counts=True)
    return int(counts.min())
