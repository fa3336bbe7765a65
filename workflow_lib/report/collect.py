"""The `collect_metrics` step: every metrics, extrapolation and perplexity JSON file -> one tidy table.

Each condition is recovered from its path (`conditions.parse_path`); a combination the config does not have is
an empty cell, never a zero.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import polars as pl

from workflow_lib.metric_registry import SAMPLE_METRICS
from workflow_lib.report.conditions import KEYS, MODEL_KEYS, parse_path, typed

VERSIONS = ["python", "torch", "transformers", "mauve-text", "rouge-score", "workflow"]

log = logging.getLogger("workflow_lib.report.collect")


def version_column(package: str) -> str:
    return f"version_{package.replace('-', '_')}"


PROVENANCE = {
    "git_commit": pl.Utf8,
    "git_dirty": pl.Boolean,
    **{version_column(v): pl.Utf8 for v in VERSIONS},
    "featuriser": pl.Utf8,
    "settings_sha256": pl.Utf8,
}
SCHEMA = (
    {k: pl.Utf8 for k in KEYS}
    | {"train_intensity": pl.Float64, "test_intensity": pl.Float64, "copies": pl.Int64, "seed": pl.Int64}
    | {f"{m}_{s}": pl.Float64 for m in SAMPLE_METRICS for s in ("mean", "2se")}
    | {
        "mauve_clustering_share": pl.Float64,
        "num_buckets": pl.Int64,
        "mauve_texts": pl.Int64,
        "mauve_min_texts": pl.Int64,
        "mauve_status": pl.Utf8,
        "runs": pl.Int64,
        "prompts": pl.Int64,
        "perplexity": pl.Float64,
        "tv_mean": pl.Float64,
        "tv_2se": pl.Float64,
        "tv_law": pl.Utf8,
        "tv_bias_estimate": pl.Float64,
        "tv_draws": pl.Int64,
        # where the eval set's prefixes lie against the training support (evaluate.extrapolation.support_shares)
        "off_support_share": pl.Float64,
        "reachable_share": pl.Float64,
        "tv_off_support": pl.Float64,
        "synonym_reach": pl.Float64,
        "test_realised_share": pl.Float64,
    }
    | PROVENANCE
)


def _metric_fields(data: dict) -> dict:
    """The tidy columns of one metrics JSON; a field an older file lacks is null."""
    row = {f"{m}_{s}": data.get(f"{m}_{s}") for m in SAMPLE_METRICS for s in ("mean", "2se")}
    buckets = data.get("num_buckets")
    if isinstance(buckets, list):  # runs with different histogram sizes: the largest
        buckets = max(buckets) if buckets else None
    provenance = data.get("provenance") or {}
    versions = provenance.get("versions") or {}
    featuriser = provenance.get("featuriser", data.get("featuriser"))
    row |= {
        "mauve_clustering_share": (data.get("mauve_variance") or {}).get("clustering_share"),
        "num_buckets": buckets,
        # "too few texts (n)" where the runs were too small for MAUVE to resolve (report.resolution)
        "mauve_texts": data.get("mauve_texts"),
        "mauve_min_texts": data.get("mauve_min_texts"),
        "mauve_status": data.get("mauve_status"),
        "runs": data.get("runs"),
        "prompts": data.get("prompts"),
        "git_commit": provenance.get("git_commit"),
        "git_dirty": provenance.get("git_dirty"),
        "featuriser": featuriser,  # its label (evaluate/settings.py `featuriser_settings`)
        "settings_sha256": provenance.get("settings_sha256"),
        # the share of positions the sampler's perturbation selected (perturb/realised.py), beside test_intensity
        "test_realised_share": (data.get("realised") or {}).get("realised_share"),
    }
    return row | {version_column(v): versions.get(v) for v in VERSIONS}


def collect(paths: list[str]) -> pl.DataFrame:
    """One row per (condition, eval set, decoder, test condition): metrics, TV and the model's perplexity on
    the eval set (which depends on neither decoder nor sampling) side by side."""
    rows: dict[tuple, dict] = {}
    perplexity: dict[tuple, float] = {}
    for path in paths:
        fields = parse_path(path)
        data = json.loads(Path(path).read_text())
        if fields["kind"] == "perplexity":
            perplexity[tuple(fields[k] for k in MODEL_KEYS + ["eval_set"])] = data.get("perplexity")
            continue
        row = rows.setdefault(tuple(fields[k] for k in KEYS), {k: fields[k] for k in KEYS})
        if fields["kind"] == "metrics":
            row.update(_metric_fields(data))
        else:
            row.update(
                {
                    "tv_mean": data["tv_mean"],
                    "tv_2se": data["tv_2se"],
                    "tv_law": data["law"],
                    # the split-half estimate of the Monte Carlo bias left (0 for an exact, unperturbed law)
                    "tv_bias_estimate": data.get("tv_bias_estimate"),
                    "tv_draws": data.get("draws"),
                    "off_support_share": data.get("off_support_share"),
                    "reachable_share": data.get("reachable_share"),
                    "tv_off_support": data.get("tv_off_support"),
                    "synonym_reach": data.get("synonym_reach"),
                }
            )
    joined = set()
    for row in rows.values():
        key = tuple(row[k] for k in MODEL_KEYS + ["eval_set"])
        if key in perplexity:
            row["perplexity"] = perplexity[key]
            joined.add(key)
    for key in sorted(set(perplexity) - joined):
        log.warning("perplexity of %s on %s has no metrics row to join; it is in no table", "/".join(key[:-1]), key[-1])
    strings = {k: pl.Utf8 if k in KEYS else v for k, v in SCHEMA.items()}
    frame = pl.DataFrame([{k: r.get(k) for k in strings} for r in rows.values()], schema=strings, orient="row")
    return typed(frame).sort(KEYS)


def read_metrics(path: str) -> pl.DataFrame:
    """The CSV of `collect`, with its types (a column empty in this study still reads as numbers)."""
    frame = pl.read_csv(path, schema_overrides={k: v for k, v in SCHEMA.items() if k not in ("copies", "seed")})
    return frame.with_columns(pl.col("copies", "seed").cast(pl.Int64))
