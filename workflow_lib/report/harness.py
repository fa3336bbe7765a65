"""The `lm_eval_report` step: the lm-evaluation-harness's scores of every evaluated model, and its contrasts.

Each lm_eval job (evaluate/harness.py) wrote, per task, the scores lm-eval aggregates (`<task>.json`) and each
document's value (`<task>.prompts.parquet`). Here the scores become one table (a row per model and task metric), and
the study's designed model pairs (`comparisons.pairs`, as perplexity's: the perturbation against none, each
objective against MLE, in Table 1's conditions) are compared over the task's documents, paired by doc_id:
a mean-aggregated metric (accuracy) by the sign-flip permutation test of its mean difference, a perplexity
(word_perplexity, byte_perplexity) as report/contrasts.py compares perplexities, from each document's
log-likelihood and weight. Any other aggregation (bits_per_byte, a corpus BLEU) is "not testable". Holm within
each (family, task, metric) table. docs/usage.md, "lm-evaluation-harness".

    python -m workflow_lib.report.harness --intensity X --table T.md --csv T.csv --contrasts C.csv @ARGUMENTS
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path
from typing import Any

import polars as pl

from workflow_lib.cli import StageError, run
from workflow_lib.comparisons import RESAMPLES, condition_rows, pair_identity, pairs, resamples_for
from workflow_lib.evaluate.harness import MEAN, PERPLEXITY
from workflow_lib.files import atomic_path, read_parquet
from workflow_lib.layout import sidecar
from workflow_lib.report.statistics import (
    ALPHA,
    Permutations,
    detectable,
    holm,
    permutation_mean_differences,
    permutation_perplexity_difference,
)

log = logging.getLogger("workflow_lib.report.harness")

CONDITION = ["model", "dataset", "objective", "train_strategy", "train_intensity", "train_synonyms", "seed"]
CONTRAST_COLUMNS = ["family", "task", "metric", "model", "dataset", "objective", "seed", "a", "b"]
CONTRAST_COLUMNS += ["difference", "low", "high", "p", "p_holm", "detectable", "documents", "not_testable", "favours"]
FLOATS = ("difference", "low", "high", "p", "p_holm", "detectable")


def _read(path: str) -> dict:
    return json.loads(Path(path).read_text())


def condition_label(row: dict) -> str:
    """A model as the tables name it: objective, training perturbation, seed."""
    if not row["train_intensity"]:
        trained = "no perturbation"
    else:
        trained = f"{row['train_strategy']} {row['train_intensity']:g} ({row['train_synonyms']})"
    return f"{row['model']} {row['objective']}, {trained}, seed {row['seed']}"


def scores(paths: list[str]) -> pl.DataFrame:
    """One row per (model, task, metric): lm-eval's aggregate, its standard error (None where lm-eval gives none),
    its direction and the documents scored."""
    rows = []
    for condition in condition_rows(paths):
        result = _read(condition["path"])
        for metric, info in result["metrics"].items():
            rows.append(
                {k: condition[k] for k in CONDITION}
                | {
                    "condition": condition_label(condition),
                    "task": result["task"],
                    "metric": metric,
                    "value": info["value"],
                    "stderr": info["stderr"],
                    "higher_is_better": info["higher_is_better"],
                    "documents": result["documents"],
                }
            )
    if not rows:
        raise StageError("lm_eval_report: no lm_eval result to report")
    return pl.DataFrame(rows, infer_schema_length=None).sort(["task", "metric", "condition"])


def _documents(pair: dict) -> tuple[pl.DataFrame, dict, dict]:
    a, b = _read(pair["path_a"]), _read(pair["path_b"])
    docs_a = pl.DataFrame(pl.from_arrow(read_parquet(sidecar(pair["path_a"], ".prompts.parquet"))))
    docs_b = pl.DataFrame(pl.from_arrow(read_parquet(sidecar(pair["path_b"], ".prompts.parquet"))))
    return docs_a.join(docs_b, on="doc_id", suffix="_b").sort("doc_id"), a, b


def compare(pair: dict, resamples: int) -> list[dict]:
    """One row per metric both models have: the difference a - b over the shared documents, its 95% interval and
    its permutation p (None, with the reason in not_testable, where the metric's aggregation has no paired test)."""
    both, a, b = _documents(pair)
    permutations = Permutations(both.height, resamples, pair_identity(pair))
    out = []
    for metric, info in a["metrics"].items():
        if metric not in b["metrics"]:
            continue
        base = {k: pair[k] for k in ("family", "model", "dataset", "objective", "seed", "a", "b")}
        base |= {"task": pair["eval_set"], "metric": metric, "documents": both.height}
        estimate, reason = None, None
        if info["pairing"] == MEAN and metric in both.columns:
            estimate = permutation_mean_differences(
                both[metric].to_numpy()[None, :], both[f"{metric}_b"].to_numpy()[None, :], permutations
            )[0]
        elif info["pairing"] == PERPLEXITY and f"{metric}.weight" in both.columns:
            estimate = permutation_perplexity_difference(
                -both[f"{metric}.loglikelihood"].to_numpy(),
                both[f"{metric}.weight"].to_numpy(),
                -both[f"{metric}.loglikelihood_b"].to_numpy(),
                both[f"{metric}.weight_b"].to_numpy(),
                permutations,
            )
        elif info.get("aggregation") == "bits_per_byte":
            reason = "log2 of byte_perplexity: its row is the test"
        else:
            reason = f"no paired test of a {info.get('aggregation')} aggregation"
        if estimate is None:
            out.append(base | {"difference": a["metrics"][metric]["value"] - b["metrics"][metric]["value"]})
            out[-1]["not_testable"] = reason
            continue
        out.append(
            base
            | {
                "difference": estimate.difference,
                "low": estimate.low,
                "high": estimate.high,
                "p": estimate.p,
                "not_testable": estimate.untested,
                "higher_is_better": info["higher_is_better"],
            }
        )
    return out


def _favours(row: dict) -> str | None:
    if row.get("p_holm") is None or row["p_holm"] >= ALPHA or row.get("higher_is_better") is None:
        return None
    better = row["difference"] if row["higher_is_better"] else -row["difference"]
    return row["a"] if better > 0 else row["b"]


def contrasts(paths: list[str], intensity: float, resamples: int = RESAMPLES) -> pl.DataFrame:
    """The designed model pairs, compared on every task metric; Holm within each (family, task, metric)."""
    designed = pairs(condition_rows(paths), intensity)
    sizes: dict[tuple, int] = {}
    for pair in designed:
        sizes[(pair["family"], pair["eval_set"])] = sizes.get((pair["family"], pair["eval_set"]), 0) + 1
    rows = [
        r
        for pair in designed
        for r in compare(pair, resamples_for(sizes[(pair["family"], pair["eval_set"])], resamples))
    ]
    tables: dict[tuple, list[dict]] = {}
    for r in rows:
        tables.setdefault((r["family"], r["task"], r["metric"]), []).append(r)
    for table in tables.values():
        tested = sum(r.get("p") is not None for r in table)
        for r, adjusted in zip(table, holm([r.get("p") for r in table])):
            r["p_holm"] = adjusted
            r["favours"] = _favours(r)
            # the smallest |a - b| its test detects at 80% power, Holm's first step in its table (t over documents)
            r["detectable"] = detectable(r.get("low"), r.get("high"), r["documents"] - 1, tested) if tested else None
    schema: dict[str, Any] = {c: (pl.Float64 if c in FLOATS else pl.Utf8) for c in CONTRAST_COLUMNS}
    schema |= {"seed": pl.Int64, "documents": pl.Int64}
    frame = pl.DataFrame([{c: r.get(c) for c in CONTRAST_COLUMNS} for r in rows], schema=schema, orient="row")
    return frame.sort(
        ["family", "task", "metric", "objective", "a", "b", "seed"],
        descending=[True, False, False, False, False, False, False],
    )


def markdown(table: pl.DataFrame, compared: pl.DataFrame) -> str:
    """The scores (a row per model, a column per task metric: value ± its standard error) and the contrasts."""
    lines = [
        "## lm-evaluation-harness",
        "",
        "Each evaluated model's lm-eval scores (value ± lm-eval's standard error, where it gives one; the direction "
        "after each metric: ↑ higher is better, ↓ lower). Documents per task: "
        + ", ".join(f"{t} {n}" for t, n in table.group_by("task").agg(pl.col("documents").max()).sort("task").rows())
        + ".",
        "",
    ]
    arrow = {True: " ↑", False: " ↓", None: ""}
    for task in table["task"].unique(maintain_order=True):
        rows = table.filter(pl.col("task") == task)
        metrics = rows.select("metric", "higher_is_better").unique(maintain_order=True).rows()
        lines += [f"**{task}**", "", "| model | " + " | ".join(f"{m}{arrow[h]}" for m, h in metrics) + " |"]
        lines.append("|---|" + "---|" * len(metrics))
        for condition in rows["condition"].unique(maintain_order=True):
            cells = []
            for metric, _ in metrics:
                hit = rows.filter((pl.col("condition") == condition) & (pl.col("metric") == metric))
                value, stderr = (hit["value"][0], hit["stderr"][0]) if hit.height else (None, None)
                cells.append("" if value is None else f"{value:.4g}" + ("" if stderr is None else f" ± {stderr:.2g}"))
            lines.append(f"| {condition} | " + " | ".join(cells) + " |")
        lines.append("")
    lines += ["### Paired over documents", ""]
    if compared.height == 0:
        lines.append(
            "No designed pair of models in this study (a perturbation against none, an objective against MLE)."
        )
        return "\n".join(lines) + "\n"
    lines += [
        (
            "Each designed pair of models (as perplexity's: the perturbation against none, each objective against MLE), "
            "its difference a - b on the documents both scored, the 95% interval, the permutation p and Holm's p within "
            "its family, task and metric; `favours` names the better side where p_holm < 0.05, and `could see` the "
            "smallest difference its test detects with 80% power: where no side is favoured, a difference that large "
            "would have been detected four times in five."
        ),
        "",
        "| family | task | metric | objective | seed | a | b | a - b [95%] | p | p_holm | could see | favours |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in compared.iter_rows(named=True):
        if r["not_testable"]:
            effect = f"{r['difference']:+.4g} (not testable: {r['not_testable']})"
        else:
            effect = f"{r['difference']:+.4g} [{r['low']:+.4g}, {r['high']:+.4g}]"
        p = "" if r["p"] is None else f"{r['p']:.3g}"
        p_holm = "" if r["p_holm"] is None else f"{r['p_holm']:.3g}"
        seen = "" if r["detectable"] is None else f"{r['detectable']:.3g}"
        lines.append(
            f"| {r['family']} | {r['task']} | {r['metric']} | {r['objective']} | {r['seed']} | {r['a']} | {r['b']} | "
            f"{effect} | {p} | {p_holm} | {seen} | {r['favours'] or ''} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m workflow_lib.report.harness", fromfile_prefix_chars="@")
    parser.add_argument("--intensity", type=float, required=True, help="the headline intensity (report.intensity)")
    parser.add_argument("--table", required=True, help="the markdown table (scores and contrasts)")
    parser.add_argument("--csv", required=True, help="the scores, one row per model, task and metric")
    parser.add_argument("--contrasts", required=True, help="the contrasts, one row per pair, task and metric")
    parser.add_argument("paths", nargs="+", help="the lm_eval jobs' <task>.json files")
    args = parser.parse_args()
    table = scores(args.paths)
    compared = contrasts(args.paths, args.intensity)
    for frame, path in ((table.drop("path", strict=False), args.csv), (compared, args.contrasts)):
        with atomic_path(path) as tmp:
            frame.write_csv(tmp)
    with atomic_path(args.table) as tmp:
        tmp.write_text(markdown(table, compared), encoding="utf-8")
    log.info("%d scores, %d contrasts", table.height, compared.height)


if __name__ == "__main__":
    run(main)
