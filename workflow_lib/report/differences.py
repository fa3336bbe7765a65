"""Each perturbed condition's difference from its baseline, with an interval: what the extrapolation figure draws.

The baseline of a condition is the same model, objective, eval set, decoder and training mode with no perturbation at
training or sampling. The interval is the paired one of `results/report/contrasts.csv` where the report has the pair
(report.contrasts: the t interval over prompts for the TV, 95%), found by the labels comparisons.pairs gives the same
two conditions; otherwise the difference of the two means with +/- 2 SE of a difference of independent means,
sqrt(2se_a^2 + 2se_b^2): wider than the paired interval when the two share prompts, never narrower. `paired` says
which each row has.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from workflow_lib.report.figure_styles import Perturbation

# What a condition shares with its baseline (comparisons.pairs' `same_model`, with the decoder).
MATCH = ["model", "dataset", "objective", "eval_set", "decoder", "train_mode", "copies", "seed"]
CONTRAST_KEYS = ["family", "model", "dataset", "objective", "eval_set", "decoder", "seed", "a", "b"]
SIDES = ("training only", "sampling only", "training and sampling")


def side(train: Perturbation, test: Perturbation) -> str:
    """Where a condition is perturbed: one of SIDES."""
    return SIDES[2] if not (train.none or test.none) else SIDES[0] if test.none else SIDES[1]


def _contrast_index(frame: pl.DataFrame, contrasts: pl.DataFrame, metric: str, intensity: float) -> dict:
    """(arm row, baseline row) positions in `frame` -> (low, high) of their paired contrast."""
    from workflow_lib.comparisons import pairs

    if "seed" not in frame.columns or frame["seed"].null_count():  # pooled seeds: contrasts are per seed
        return {}
    rows = [r | {"kind": "extrapolation", "path": str(i)} for i, r in enumerate(frame.to_dicts())]
    designed = pl.DataFrame(pairs(rows, intensity), infer_schema_length=None)
    if not designed.height:
        return {}
    found = contrasts.filter(pl.col("metric") == metric).select([*CONTRAST_KEYS, "low", "high"])
    designed = designed.with_columns(pl.col("seed").cast(found["seed"].dtype), pl.col("decoder").cast(pl.Utf8))
    joined = designed.join(found.with_columns(pl.col("decoder").fill_null("")), on=CONTRAST_KEYS)
    return {
        (int(r["path_a"]), int(r["path_b"])): (r["low"], r["high"])
        for r in joined.iter_rows(named=True)
        if r["low"] is not None and r["high"] is not None
    }


def baseline_differences(
    frame: pl.DataFrame, metric: str = "tv", contrasts: pl.DataFrame | None = None, intensity: float = 0.025
) -> pl.DataFrame:
    """One row per perturbed condition that has a baseline and a value: its condition columns, `side`, `difference`
    (its mean minus the baseline's), `low`, `high` and `paired` (the interval from contrasts.csv, or unpaired)."""
    mean, se = f"{metric}_mean", f"{metric}_2se"
    match = [k for k in MATCH if k in frame.columns]
    indexed = frame.with_row_index("_row").filter(pl.col(mean).is_not_null())
    plain = (pl.col("train_intensity") == 0) & (pl.col("test_intensity") == 0)
    base = indexed.filter(plain).select(
        [*match, pl.col("_row").alias("_base"), pl.col(mean).alias("_base_mean"), pl.col(se).alias("_base_se")]
    )
    base = base.unique(subset=match, keep="first", maintain_order=True)
    arms = indexed.filter(~plain).join(base, on=match, how="inner", nulls_equal=True)
    paired = _contrast_index(frame, contrasts, metric, intensity) if contrasts is not None else {}
    out = []
    for r in arms.iter_rows(named=True):
        difference = r[mean] - r["_base_mean"]
        interval = paired.get((r["_row"], r["_base"]))
        if interval is None:
            half = ((r[se] or 0.0) ** 2 + (r["_base_se"] or 0.0) ** 2) ** 0.5
            interval = (difference - half, difference + half)
        train, test = Perturbation.of(r, "train"), Perturbation.of(r, "test")
        out.append(
            {k: v for k, v in r.items() if not k.startswith("_")}
            | {
                "side": side(train, test),
                "difference": difference,
                "low": interval[0],
                "high": interval[1],
                "paired": (r["_row"], r["_base"]) in paired,
            }
        )
    columns = [*frame.columns, "side", "difference", "low", "high", "paired"]
    if not out:
        empty: dict[str, Any] = {
            **frame.schema,
            "side": pl.Utf8,
            **dict.fromkeys(columns[-4:-1], pl.Float64),
            "paired": pl.Boolean,
        }
        return pl.DataFrame(schema=empty)
    return pl.DataFrame(out, schema_overrides=frame.schema, infer_schema_length=None).select(columns)
