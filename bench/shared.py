"""What the benchmarks share: the repository and the test support on sys.path (for workflow_lib, studies/ and
`support`, tests/support/), a timer, and the shapes of
the models they run. Each benchmark is a script (`python bench/<name>.py`), so this directory is on sys.path."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
for _folder in (REPO / "tests", REPO):
    if str(_folder) not in sys.path:
        sys.path.insert(0, str(_folder))

# GPT-2 shapes: the default study's tiny model (config.yaml `models.tiny`) and GPT-2 small.
TINY = {"n_layer": 2, "n_head": 2, "n_embd": 64, "n_positions": 256}
GPT2_SMALL = {"n_layer": 12, "n_head": 12, "n_embd": 768, "n_positions": 1024}


def mauve_defaults() -> dict:
    """The schema's defaults of `evaluation.mauve` (buckets, k-means, curve, seeds, floor, the controls' rule): what
    a study scores MAUVE with unless its config says otherwise."""
    from workflow_lib.config import load_schema

    keys = load_schema()["properties"]["evaluation"]["properties"]["mauve"]["properties"]
    defaults = {key: spec["default"] for key, spec in keys.items() if key != "controls"}
    return defaults | {"controls": {"must_detect": keys["controls"]["properties"]["must_detect"]["default"]}}


def timed(fn: Callable, *args: Any, **kwargs: Any) -> tuple[Any, float]:
    """fn's result and its wall time in seconds."""
    start = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - start


def best_of(fn: Callable[[], Any], repeat: int = 3) -> float:
    """The least wall time of `repeat` calls: the one least disturbed by the rest of a busy machine."""
    return min(timed(fn)[1] for _ in range(repeat))
