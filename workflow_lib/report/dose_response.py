"""The dose-response: one test of the trend across perturbation intensities, with training seeds as its unit.

The paper reads its intensity sweep by eye (tex lines 883-924). Here, within each training seed, the least-squares
slope of the metric on log2(alpha) over one arm's doses alpha > 0 (`seed_slopes`; the same strategy and intensity at
training and sampling), and across the seeds present at every dose the mean slope with its t interval and the
one-sample t-test of slope 0 (statistics.across_seeds), Holm across the study's trend rows. Fewer than 3 doses or 3
seeds: not testable. The test, its level and the paper's prediction: docs/method.md §4, "The dose-response".
"""

from __future__ import annotations

import math

import numpy as np
import polars as pl

from workflow_lib import metric_registry
from workflow_lib.report.statistics import across_seeds, detectable, holm


def trended_metrics() -> list[tuple[str, str, bool]]:
    """(column, label, True where higher is better) of the metrics a trend is tested on, where the study has them:
    the registry's metrics with a `finding`, in its order (read from metric_registry.REGISTRY when called)."""
    return [(m.mean_column, m.label, not m.lower_is_better) for m in metric_registry.REGISTRY if m.finding is not None]


# What tells one dose-response arm from another: every identity column but the intensities and the seed.
ARM = [
    "model",
    "dataset",
    "objective",
    "train_synonyms",
    "train_mode",
    "copies",
    "train_strategy",
    "eval_set",
    "decoder",
    "test_mode",
]
MIN_DOSES = 3
# By label: the paper's curve over 0.025-0.4 (docs/method.md §4); no other metric has one.
PREDICTED = {metric_registry.BY_NAME["mauve"].label: "falls"}


def seed_slopes(doses: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Least-squares slope of each row of `values` ([seeds, doses]) on log2(doses): the change per doubling."""
    x = np.log2(np.asarray(doses, dtype=np.float64))
    x = x - x.mean()
    y = np.asarray(values, dtype=np.float64)
    if not np.isfinite(y).all():
        raise ValueError("dose-response: a non-finite metric value; no slope is made")
    return (y - y.mean(axis=1, keepdims=True)) @ x / float(x @ x)


def _matched(frame: pl.DataFrame) -> pl.DataFrame:
    """The perturbed rows that apply one perturbation at training and sampling: the paper's sweep."""
    return frame.filter(
        (pl.col("train_intensity") > 0)
        & (pl.col("train_intensity") == pl.col("test_intensity"))
        & (pl.col("train_strategy") == pl.col("test_strategy"))
        & (pl.col("train_synonyms") == pl.col("test_synonyms"))
    )


def trend_rows(frame: pl.DataFrame) -> pl.DataFrame:
    """One row per (arm with >= 3 perturbed doses, metric it has): the mean per-seed slope per doubling of alpha, its
    interval, p, Holm's p over every tested row, the slope it could have seen, or why it is not testable."""
    rows: list[dict] = []
    matched = _matched(frame)
    if not matched.height:
        return pl.DataFrame()
    for key, arm in matched.group_by(ARM, maintain_order=True):
        doses = sorted(set(arm["train_intensity"].to_list()))
        if len(doses) < MIN_DOSES:
            continue
        for column, name, higher in trended_metrics():
            if column not in arm.columns:
                continue
            cells = arm.filter(pl.col(column).is_not_null())
            # seeds with a value at every dose (a refused MAUVE, or a missing job, drops the seed from the trend)
            seeds = sorted(
                s
                for s in set(cells["seed"].to_list())
                if cells.filter(pl.col("seed") == s)["train_intensity"].n_unique() == len(doses)
            )
            if not seeds:
                continue
            values = np.array(
                [
                    [
                        cells.filter((pl.col("seed") == s) & (pl.col("train_intensity") == d))[column].mean()
                        for d in doses
                    ]
                    for s in seeds
                ],
                dtype=np.float64,
            )
            estimate = across_seeds(seed_slopes(np.array(doses), values))
            rows.append(
                dict(zip(ARM, key))
                | {
                    "metric": name,
                    "higher_is_better": higher,
                    "doses": ", ".join(f"{d:g}" for d in doses),
                    "seeds": len(seeds),
                    "slope": estimate.difference,
                    "low": estimate.low,
                    "high": estimate.high,
                    "p": estimate.p,
                    "not_testable": estimate.untested,
                    "at_dose": [float(v) for v in values.mean(axis=0)],
                }
            )
    if not rows:
        return pl.DataFrame()
    adjusted = holm([r["p"] for r in rows])
    tested = sum(p is not None for p in adjusted)
    for r, p_holm in zip(rows, adjusted):
        r["p_holm"] = p_holm
        r["detectable"] = detectable(r["low"], r["high"], r["seeds"] - 1, tested) if p_holm is not None else None
    return pl.DataFrame(rows)


def _number(x: float) -> str:
    return f"{x:+.3g}" if abs(x) >= 1e-3 else f"{x:+.1e}"


def verdict(row: dict) -> str:
    """What the row shows, in the paper's terms where it predicts (`PREDICTED`)."""
    if row["p_holm"] is None:
        return f"not testable ({row['not_testable']})"
    direction = "rises" if row["slope"] > 0 else "falls"
    if row["p_holm"] < 0.05:
        shown = f"{direction} (p_holm {row['p_holm']:.3g})"
        predicted = PREDICTED.get(row["metric"])
        return shown + ("" if predicted is None else "; agrees" if predicted == direction else "; disagrees")
    seen = f"; it could have seen a slope of ±{row['detectable']:.3g}" if row.get("detectable") is not None else ""
    return f"no trend detected (p_holm {row['p_holm']:.3g}){seen}"


def _arm(row: dict) -> str:
    return (
        f"{row['model']} {row['objective']}, {row['train_strategy']} ({row['train_synonyms']}, {row['train_mode']} "
        f"m={row['copies']}, sampling {row['test_mode']}) on {row['eval_set']}"
    )


def trend_findings(rows: pl.DataFrame) -> list[str]:
    """The summary's sentences: per arm, the paper's prediction first, then each metric's slope and verdict."""
    if not rows.height:
        return []
    out = []
    for _key, arm in rows.group_by(ARM, maintain_order=True):
        first = arm.row(0, named=True)
        parts = []
        for r in arm.iter_rows(named=True):
            interval = (
                f" (95% CI {_number(r['low'])} to {_number(r['high'])})"
                if r["low"] is not None and r["high"] is not None
                else ""
            )
            parts.append(f"{r['metric']} {_number(r['slope'])} per doubling{interval}: {verdict(r)}")
        out.append(
            f"{_arm(first)}, α = {first['doses']} from {first['seeds']} training seed{'s' * (first['seeds'] != 1)}: "
            "the paper predicts MAUVE "
            f"falls over this range (its top is at 0.025). Measured: " + "; ".join(parts) + "."
        )
    return out


def trend_table(rows: pl.DataFrame) -> str:
    """Markdown: one line per trend row, with the mean at each dose beside the slope."""
    if not rows.height:
        return ""
    lines = [
        "| arm | metric | α | mean at each α | slope per doubling (95% CI) | seeds | verdict |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows.iter_rows(named=True):
        means = ", ".join(f"{v:.4g}" for v in r["at_dose"])
        ci = (
            f"{_number(r['slope'])} ({_number(r['low'])} to {_number(r['high'])})"
            if r["low"] is not None and r["high"] is not None and not math.isnan(r["low"])
            else _number(r["slope"])
        )
        lines.append(f"| {_arm(r)} | {r['metric']} | {r['doses']} | {means} | {ci} | {r['seeds']} | {verdict(r)} |")
    return "\n".join(lines) + "\n"
