"""A study's metrics and perplexity files as the evaluate and perplexity jobs write them (a JSON beside its
per-prompt sidecar), under the layout's paths: for the report's tests of paired comparisons."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl

MODEL = "results/{kind}/tiny/syn/{obj}/{syn}/augment-m1/{st}-{ti}/seed1/"
SAMPLING = "{es}/{decoder}/{tsyn}/{tst}-{tti}-exact"


def _condition(kind, obj, ti, tti=None, es="test", decoder="unbiased"):
    syn, st = ("none", "none") if float(ti) == 0 else ("distributional", "insertion")
    path = MODEL.format(kind=kind, obj=obj, syn=syn, st=st, ti=ti)
    if tti is None:
        return path + es
    tsyn, tst = ("none", "none") if float(tti) == 0 else ("distributional", "insertion")
    return path + SAMPLING.format(es=es, decoder=decoder, tsyn=tsyn, tst=tst, tti=tti)


def write_metrics(root: Path, obj, ti, tti, mauve, rouge, es="test", decoder="unbiased") -> str:
    """A metrics JSON with per-run MAUVE and its per-prompt sidecar; rouge: [prompts, runs] ROUGE-1 (ROUGE-2/L
    are ROUGE-1 scaled)."""
    stem = root / _condition("metrics", obj, ti, tti, es, decoder)
    stem.parent.mkdir(parents=True, exist_ok=True)
    json_path = Path(f"{stem}.json")  # not with_suffix: "insertion-0.025-exact" has a dot of its own
    json_path.write_text(
        json.dumps(
            {"mauve": list(mauve), "run_ids": list(range(len(mauve))), "runs": len(mauve), "prompts": rouge.shape[0]}
        )
    )
    prompts, runs = np.meshgrid(np.arange(rouge.shape[0]), np.arange(rouge.shape[1]), indexing="ij")
    pl.DataFrame(
        {
            "prompt_id": prompts.ravel().astype(np.int64),
            "run": runs.ravel().astype(np.int64),
            "rouge1": rouge.ravel(),
            "rouge2": 0.5 * rouge.ravel(),
            "rougeL": 0.8 * rouge.ravel(),
        }
    ).write_parquet(f"{stem}.prompts.parquet")
    return str(json_path.relative_to(root))


def write_perplexity(root: Path, obj, ti, nll, tokens, es="test") -> str:
    stem = root / _condition("perplexity", obj, ti, es=es)
    stem.parent.mkdir(parents=True, exist_ok=True)
    json_path = Path(f"{stem}.json")
    json_path.write_text(json.dumps({"perplexity": float(np.exp(nll.sum() / tokens.sum()))}))
    pl.DataFrame(
        {"prompt_id": np.arange(len(nll), dtype=np.int64), "nll": nll, "tokens": tokens.astype(np.int64)}
    ).write_parquet(f"{stem}.prompts.parquet")
    return str(json_path.relative_to(root))
