"""The `lm_eval_report` step: the lm-evaluation-harness's scores of every evaluated model, and its contrasts.

The lm_eval jobs (evaluate/harness.py) wrote each task's aggregates (`<task>.json`) and each document's value
(`<task>.prompts.parquet`). Here they become one table, and the study's designed model pairs (`comparisons.pairs`)
are compared per seed over the documents (unit "checkpoint": accuracy by the sign-flip test, a perplexity from each
document's log-likelihood and weight; bits_per_byte and other aggregations "not testable") and across seeds (unit
"seeds": report.seeds' paired t). Holm within each (family, task, metric, unit). docs/usage.md, "lm-evaluation-harness".

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
from workflow_lib.report.contrasts import CHECKPOINT, SEEDS
from workflow_lib.report.seeds import seed_rows
from workflow_lib.report.statistics import (
    ALPHA,
    Permutations,
    detectable,
    detectable_interval,
    holm,
    permutation_mean_differences,
    permutation_perplexity_difference,
)

log = logging.getLogger("workflow_lib.report.harness")

CONDITION = ["model", "dataset", "objective", "train_strategy", "train_intensity", "train_synonyms", "seed"]
IDENTITY = ["family", "task", "metric", "unit", "model", "dataset", "objective", "seed", "a", "b"]
CONTRAST_COLUMNS = IDENTITY + ["difference", "low", "high", "p", "p_holm", "detectable", "detectable_low"]
CONTRAST_COLUMNS += ["detectable_high", "documents", "seeds", "not_testable", "favours"]
FLOATS = ("difference", "low", "high", "p", "p_holm", "detectable", "detectable_low", "detectable_high")


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
        base |= {"task": pair["eval_set"], "metric": metric, "unit": CHECKPOINT, "documents": both.height}
        base |= {"higher_is_better": info["higher_is_better"]}
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
        if estimate is None:  # the metric itself has no paired test: not at one seed, nor across seeds
            out.append(base | {"difference": a["metrics"][metric]["value"] - b["metrics"][metric]["value"]})
            out[-1] |= {"not_testable": reason, "untestable_metric": reason}
            continue
        out.append(
            base
            | {
                "difference": estimate.difference,
                "low": estimate.low,
                "high": estimate.high,
                "p": estimate.p,
                "not_testable": estimate.untested,
            }
        )
    return out


def _favours(row: dict) -> str | None:
    if row.get("p_holm") is None or row["p_holm"] >= ALPHA or row.get("higher_is_better") is None:
        return None
    better = row["difference"] if row["higher_is_better"] else -row["difference"]
    return row["a"] if better > 0 else row["b"]


def across_seeds(rows: list[dict]) -> list[dict]:
    """The methods' rows (unit "seeds"): per (family, task, metric, pair of conditions) trained from two or more
    seeds, the paired t over the seeds' checkpoint differences (report.seeds). A metric with no paired test at one
    seed (bits_per_byte) has none across seeds either: it keeps the checkpoint rows' reason."""
    group = [k for k in IDENTITY if k not in ("seed", "unit")]
    out = []
    for r in seed_rows(rows, group, SEEDS):
        members = [m for m in rows if all(m[k] == r[k] for k in group)]
        found = {"higher_is_better": members[0]["higher_is_better"], "seeds": r["n"]}
        found |= {"documents": min(m["documents"] for m in members)}
        reasons = sorted({m["untestable_metric"] for m in members if m.get("untestable_metric")})
        if reasons:
            found |= {"low": None, "high": None, "p": None, "not_testable": "; ".join(reasons)}
        out.append(r | found)
    return out


def contrasts(paths: list[str], intensity: float, resamples: int = RESAMPLES) -> pl.DataFrame:
    """The designed model pairs, compared on every task metric per checkpoint and across seeds; Holm within each
    (family, task, metric, unit)."""
    designed = pairs(condition_rows(paths), intensity)
    sizes: dict[tuple, int] = {}
    for pair in designed:
        sizes[(pair["family"], pair["eval_set"])] = sizes.get((pair["family"], pair["eval_set"]), 0) + 1
    rows = [
        r
        for pair in designed
        for r in compare(pair, resamples_for(sizes[(pair["family"], pair["eval_set"])], resamples))
    ]
    rows += across_seeds(rows)
    tables: dict[tuple, list[dict]] = {}
    for r in rows:
        tables.setdefault((r["family"], r["task"], r["metric"], r["unit"]), []).append(r)
    for table in tables.values():
        tested = sum(r.get("p") is not None for r in table)
        for r, adjusted in zip(table, holm([r.get("p") for r in table])):
            r["p_holm"] = adjusted
            r["favours"] = _favours(r)
            if not tested or r.get("low") is None:
                continue
            # the smallest |a - b| its test detects at 80% power, Holm's first step in its table (t over documents,
            # or over seeds), and that figure's 95% interval (statistics.detectable_interval)
            df = r["documents"] - 1 if r["unit"] == CHECKPOINT else r["seeds"] - 1
            r["detectable"] = detectable(r["low"], r["high"], df, tested)
            r["detectable_low"], r["detectable_high"] = detectable_interval(r["detectable"], df)
    schema: dict[str, Any] = {c: (pl.Float64 if c in FLOATS else pl.Utf8) for c in CONTRAST_COLUMNS}
    schema |= {"seed": pl.Int64, "documents": pl.Int64, "seeds": pl.Int64}
    frame = pl.DataFrame([{c: r.get(c) for c in CONTRAST_COLUMNS} for r in rows], schema=schema, orient="row")
    return frame.sort(
        ["family", "task", "metric", "objective", "a", "b", "unit", "seed"],
        descending=[True, False, False, False, False, False, True, False],
        nulls_last=True,
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
    lines += ["### Paired over documents, and across training seeds", ""]
    if compared.height == 0:
        lines.append(
            "No designed pair of models in this study (a perturbation against none, an objective against MLE)."
        )
        return "\n".join(lines) + "\n"
    lines += [
        (
            "Each designed pair of models (as perplexity's: the perturbation against none, each objective against MLE), "
            "its difference a - b, the 95% interval, the p and Holm's p within its family, task, metric and unit. A row "
            "of one seed compares that seed's two checkpoints over the documents both scored (a permutation test): it "
            "speaks of those checkpoints. A row of `all k seeds` tests the training methods: the paired t over the k "
            "seeds' differences (report.seeds; fewer than 3 seeds: not testable). `favours` names the better side "
            "where p_holm < 0.05, and `could see` the smallest difference its test detects with 80% power (in "
            "brackets, that figure's 95% interval where it rests on few seeds): where no side is favoured, a "
            "difference that large would have been detected four times in five."
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
        if seen and r["unit"] == SEEDS and r["detectable_high"] is not None:
            seen += f" [{r['detectable_low']:.3g}, {r['detectable_high']:.3g}]"
        seed = f"all {r['seeds']} seeds" if r["unit"] == SEEDS else str(r["seed"])
        lines.append(
            f"| {r['family']} | {r['task']} | {r['metric']} | {r['objective']} | {seed} | {r['a']} | {r['b']} | "
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
