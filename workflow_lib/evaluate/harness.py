"""lm-evaluation-harness on one model (`evaluation.lm_eval`): each task's scores and its per-document values.

The `lm_eval` rule runs this on every evaluated model, trained and untrained, as the perplexity job does. The model is
loaded by the workflow's own loader (a GGUF base as its dequantised folder, the study's precision) and handed to
lm-eval's `HFLM`, so the harness scores the very weights the study samples from. Each task gets two files:
`<task>.json` (its metrics as lm-eval aggregates them, their standard errors, the documents scored) and
`<task>.prompts.parquet` (one row per document: `doc_id` and each metric's per-document value, which
report/harness.py pairs across two models). docs/usage.md, "lm-evaluation-harness".

    python -m workflow_lib.evaluate.harness --model PATH_OR_HUB_ID [--revision REV] --settings JSON \
        [--include-path TASKS_FOLDER] --output-dir DIR
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import math
import shutil
from numbers import Real
from pathlib import Path

from workflow_lib.cli import StageError, parse_json_arg, run
from workflow_lib.files import write_json, write_parquet
from workflow_lib.provenance import provenance

log = logging.getLogger("workflow_lib.evaluate.harness")

# How a per-document value pairs across two models (report/harness.py), by lm-eval's aggregation of the metric:
# a mean of per-document scores (accuracy, exact match), or a perplexity of summed log-likelihoods over summed
# weights (words or bytes; lm-eval's per-document value is the pair).
MEAN, PERPLEXITY = "mean", "perplexity"
PAIRINGS = {"mean": MEAN, "weighted_perplexity": PERPLEXITY}


def metric_name(key: str) -> str:
    """lm-eval's "metric,filter" as the report names it: the metric alone under the default filter ("none")."""
    metric, _, kept = key.partition(",")
    return metric if kept in ("", "none") else f"{metric} ({kept})"


def _number(value) -> float | None:
    return float(value) if isinstance(value, Real) and not isinstance(value, bool) else None


def _name(aggregation) -> str | None:
    """An aggregation as its name: lm-eval's config holds a name, or the function its registry gave a default."""
    return getattr(aggregation, "__name__", aggregation)


def task_scores(task: str, result: dict, aggregations: dict, higher: dict, counts: dict) -> dict:
    """One task's JSON: {metric: value, stderr, higher_is_better, pairing} for each aggregated metric, and the
    documents scored. A non-finite score stops the job: a wrong number must not look like a result."""
    metrics = {}
    for key, value in result.items():
        if "," not in key or "_stderr," in key or key.startswith("alias"):
            continue
        metric = key.partition(",")[0]
        score = _number(value)
        if score is None:
            continue
        if not math.isfinite(score):
            raise StageError(f"lm_eval: task {task!r} gives {metric_name(key)} = {value}; nothing is written")
        stderr = _number(result.get(key.replace(",", "_stderr,", 1)))
        metrics[metric_name(key)] = {
            "value": score,
            "stderr": stderr if stderr is not None and math.isfinite(stderr) else None,
            "higher_is_better": higher.get(metric),
            "aggregation": (aggregation := _name(aggregations.get(metric))),
            "pairing": PAIRINGS.get(aggregation) if aggregation else None,
        }
    if not metrics:
        raise StageError(f"lm_eval: task {task!r} gave no numeric score; nothing is written")
    return {"task": task, "documents": counts.get("effective"), "of": counts.get("original"), "metrics": metrics}


def document_table(samples: list[dict], metrics: dict):
    """One row per document: doc_id, and per metric its value (a mean's) or its log-likelihood and weight (a
    perplexity's, as `<metric>.loglikelihood` and `<metric>.weight`). lm-eval logs one sample per document and
    filter; a metric under a filter reads that filter's samples."""
    import pyarrow as pa

    columns: dict[str, list] = {}
    ids: list[int] | None = None
    for name, info in metrics.items():
        metric, _, kept = name.partition(" (")
        kept = kept.rstrip(")") or "none"
        rows = sorted((s for s in samples if s.get("filter", "none") == kept), key=lambda s: s["doc_id"])
        doc_ids = [int(s["doc_id"]) for s in rows]
        if ids is None:
            ids = doc_ids
        elif doc_ids != ids:
            raise StageError(f"lm_eval: metric {name!r} was logged for other documents than the task's first metric")
        values: list = [s.get(metric) for s in rows]
        if info["pairing"] == PERPLEXITY:
            columns[f"{name}.loglikelihood"] = [float(v[0]) for v in values]
            columns[f"{name}.weight"] = [float(v[1]) for v in values]
        elif info["pairing"] == MEAN and all(_number(v) is not None for v in values):
            columns[name] = [float(v) for v in values]
    table = {"doc_id": pa.array(ids or [], pa.int64())}
    for name, values in columns.items():
        if not all(math.isfinite(v) for v in values):
            raise StageError(f"lm_eval: a document's {name} is not finite; nothing is written")
        table[name] = pa.array(values, pa.float64())
    return pa.table(table)


def eval_set_task(name: str, prompts: str) -> dict:
    """An eval set's human references as an lm-eval task (evaluation.lm_eval.eval_sets): rolling log-likelihood, as
    lm-eval's wikitext task scores its documents, each reference one document."""
    return {
        "task": name,
        "dataset_path": "parquet",
        "dataset_kwargs": {"data_files": {"test": str(Path(prompts).resolve())}},
        "test_split": "test",
        "output_type": "loglikelihood_rolling",
        "doc_to_text": "",
        "doc_to_target": "{{reference}}",
        "metric_list": [{"metric": m} for m in ("word_perplexity", "byte_perplexity", "bits_per_byte")],
    }


def evaluate(model, tokenizer, settings: dict, include: str | None = None, own: dict | None = None) -> dict:
    """lm_eval.simple_evaluate on the loaded model: the settings' tasks (lm-eval's own, and those of the folder
    `include` of task YAML files; only the latter with local_only) and the eval sets `own` ({name: prompts}) as
    tasks of their own, every seed the settings' seed."""
    import lm_eval
    from lm_eval.models.huggingface import HFLM
    from lm_eval.tasks import TaskManager

    include = str(Path(include).resolve()) if include else None
    local = settings.get("local_only", False) or not settings["tasks"]  # the eval sets' tasks alone: index nothing
    manager = TaskManager(include_path=include, include_defaults=not local)
    unknown = [t for t in settings["tasks"] if t not in manager.all_tasks]
    if unknown:
        raise StageError(
            f"evaluation.lm_eval.tasks: {unknown} are not tasks lm-evaluation-harness knows"
            + (f" (nor in evaluation.lm_eval.include_path {include!r})" if include else "")
        )
    tasks = [*settings["tasks"], *(eval_set_task(n, p) for n, p in (own or {}).items())]  # paths resolved here
    seed = int(settings.get("seed", 0))
    with contextlib.chdir(include or "."):  # a task's data_files are relative to its folder
        return lm_eval.simple_evaluate(
            model=HFLM(pretrained=model, tokenizer=tokenizer, batch_size=int(settings.get("batch_size", 8))),
            tasks=tasks,
            num_fewshot=settings.get("num_fewshot"),
            limit=settings.get("limit"),
            task_manager=manager,
            log_samples=True,
            random_seed=seed,
            numpy_random_seed=seed,
            torch_random_seed=seed,
            fewshot_random_seed=seed,
        )


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m workflow_lib.evaluate.harness")
    parser.add_argument("--model", required=True, help="model folder (with its tokenizer) or hub id")
    parser.add_argument("--revision", help="hub revision of an untrained hub model")
    parser.add_argument(
        "--settings",
        required=True,
        help="JSON: tasks, limit, num_fewshot, local_only, batch_size, precision (fp32 | bf16), seed",
    )
    parser.add_argument("--include-path", help="a folder of task YAML files (evaluation.lm_eval.include_path)")
    parser.add_argument(
        "--eval-sets", nargs="+", default=[], metavar="EVAL_SET=PATH", help="eval sets scored as tasks of their own"
    )
    parser.add_argument(
        "--output-dir",
        required=True,
        type=Path,
        help="folder of <task>.json (the task's scores) and <task>.prompts.parquet (per-document values)",
    )
    args = parser.parse_args()

    import torch
    from transformers import AutoTokenizer

    from workflow_lib.evaluate.perplexity import eval_set_prompts
    from workflow_lib.sample.sampler import PRECISIONS, load_model

    settings = parse_json_arg(args.settings, "lm_eval settings")
    precision = settings.get("precision", "fp32")
    if precision not in PRECISIONS:
        raise StageError(f"lm_eval: precision {precision!r} is not one of {sorted(PRECISIONS)}")
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = load_model(args.model, device, precision, args.revision)
    tokenizer = AutoTokenizer.from_pretrained(args.model, revision=args.revision)
    own = eval_set_prompts(args.eval_sets)
    results = evaluate(model, tokenizer, settings, args.include_path, own)
    part = args.output_dir.with_name(args.output_dir.name + ".part")
    shutil.rmtree(part, ignore_errors=True)
    part.mkdir(parents=True)
    try:
        for task in [*settings["tasks"], *own]:
            scores = task_scores(
                task,
                results["results"][task],
                _aggregations(results, task),
                results["higher_is_better"].get(task, {}),
                results["n-samples"].get(task, {}),
            )
            scores |= {"lm_eval": results.get("lm_eval_version"), "provenance": provenance(settings)}
            write_parquet(document_table(results["samples"][task], scores["metrics"]), part / f"{task}.prompts.parquet")
            write_json(scores, part / f"{task}.json")
            log.info("%s: %s", task, ", ".join(f"{m} {v['value']:.4g}" for m, v in scores["metrics"].items()))
    except BaseException:
        shutil.rmtree(part, ignore_errors=True)
        raise
    shutil.rmtree(args.output_dir, ignore_errors=True)
    part.rename(args.output_dir)


def _aggregations(results: dict, task: str) -> dict:
    """{metric: aggregation name} from the task's config as lm-eval ran it (its metric_list; a metric without an
    aggregation there takes lm-eval's default for it, which the run logged in the config too)."""
    from lm_eval.api.registry import get_metric_aggregation

    out = {}
    for entry in results["configs"][task].get("metric_list", []):
        metric = entry["metric"]
        aggregation = entry.get("aggregation")
        if aggregation is None:
            try:
                aggregation = get_metric_aggregation(metric)
            except Exception:  # noqa: BLE001 - a metric lm-eval has no default for: not paired
                aggregation = None
        out[metric] = aggregation
    return out


if __name__ == "__main__":
    run(main)
