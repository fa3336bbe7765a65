"""A study's result files as the paired comparisons read them (report.contrasts): each metrics, extrapolation or
perplexity JSON with its per-prompt sidecar, read once per `contrasts` call, and the two sides' shared prompts."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import polars as pl

from workflow_lib.layout import sidecar
from workflow_lib.metric_registry import PROMPT_PAIRED

log = logging.getLogger("workflow_lib.report.study_files")


def per_prompt_path(path: str) -> Path:
    return Path(sidecar(str(path), ".prompts.parquet"))


class StudyFiles:
    """A study's metrics files and their per-prompt sidecars, each read once for as long as this object lives (one
    `contrasts` call: a pair's side is in several comparisons). Not a module-level cache: another call, or another
    study with the same relative paths, reads its own files afresh."""

    def __init__(self) -> None:
        self._metrics: dict[str, dict] = {}
        self._per_prompt: dict[str, pl.DataFrame | None] = {}

    def metrics(self, path: str) -> dict:
        if path not in self._metrics:
            self._metrics[path] = json.loads(Path(path).read_text())
        return self._metrics[path]

    def per_prompt(self, path: str) -> pl.DataFrame | None:
        """A metrics file's ROUGE per (prompt_id, run) or a perplexity file's NLL and tokens per prompt_id; None
        (and a warning) when the sidecar is missing."""
        if path not in self._per_prompt:
            sidecar = per_prompt_path(path)
            if not sidecar.exists():
                log.warning(
                    "%s: no per-prompt sidecar %s; its prompt-paired comparisons are left out", path, sidecar.name
                )
                self._per_prompt[path] = None
            else:
                table = pl.read_parquet(sidecar)
                self._per_prompt[path] = table.sort([c for c in ("prompt_id", "run") if c in table.columns])
        return self._per_prompt[path]


def shared_prompts(a: pl.DataFrame, b: pl.DataFrame, pair: dict) -> pl.DataFrame:
    """The prompts both sides have, one row each, sorted. ROUGE: only the (prompt, run) samples both sides
    have, then each side's mean over those runs, so a run one side lacks never enters the other's mean."""
    if "run" not in a.columns:
        return a.join(b, on="prompt_id", suffix="_b").sort("prompt_id")
    both = a.join(b, on=["prompt_id", "run"], suffix="_b").sort(["prompt_id", "run"])
    if both.height < max(a.height, b.height):
        log.warning(
            "%s vs %s: %d and %d (prompt, run) samples, %d on both sides; ROUGE is paired on those",
            pair["path_a"],
            pair["path_b"],
            a.height,
            b.height,
            both.height,
        )
    # Mean over runs with bincount, which adds in row order: the same bytes on every rerun.
    ids, prompt = np.unique(both["prompt_id"].to_numpy(), return_inverse=True)
    counts = np.bincount(prompt, minlength=len(ids))
    columns = [c for metric in PROMPT_PAIRED if metric in a.columns for c in (metric, f"{metric}_b")]
    return pl.DataFrame(
        {
            "prompt_id": ids,
            **{c: np.bincount(prompt, weights=both[c].to_numpy(), minlength=len(ids)) / counts for c in columns},
        }
    )


def mauve_by_run(data: dict) -> dict[int, float]:
    """A metrics file's MAUVE per run id; empty when its MAUVE is flagged "too few texts (n)", which takes no
    part in any comparison (workflow_lib.evaluate.floor.mauve_status)."""
    if data.get("mauve_status"):
        return {}
    scores = data.get("mauve") or []
    return dict(zip(data.get("run_ids") or range(len(scores)), scores))
