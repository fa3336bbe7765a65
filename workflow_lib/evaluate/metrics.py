"""Evaluation: MAUVE, ROUGE and diversity of sampled continuations against human text (the `evaluate` job).

The CPU half of an evaluation: it holds no GPU. The features MAUVE clusters come from the GPU half
(workflow_lib.evaluate.features: the human references' once per eval set and featuriser, the model texts' in the
`sample_features` job's `.features.parquet` sidecar), read here in the samples file's row order. MAUVE is averaged
over `kmeans_seeds` clustering seeds per run (`variance_split` splits its variance) and is scored only where it can
resolve: enough texts per side and the eval set's controls seen (evaluate.control_scores); ROUGE and diversity
(evaluate.textstats) are computed either way. Settings, floor and controls: docs/method.md §4, "MAUVE" and "MAUVE's
controls"; the split from the GPU job: docs/cluster.md, "Each step on its resource"; outputs: docs/output.md.
"""

from __future__ import annotations

import argparse
import logging
import re
from collections import Counter
from typing import cast

import numpy as np

from workflow_lib.cli import StageError, parse_json_arg, run
from workflow_lib.evaluate.features import joined
from workflow_lib.evaluate.floor import MIN_TEXTS, fewest_texts, mauve_status
from workflow_lib.evaluate.textstats import continuation_tokens, text_stats
from workflow_lib.files import write_json, write_parquet
from workflow_lib.provenance import provenance

log = logging.getLogger("workflow_lib.evaluate.metrics")
ROUGE_TYPES = ("rouge1", "rouge2", "rougeL")
KMEANS_SEEDS, MAX_BUCKETS = 5, 500  # defaults of evaluation.mauve.kmeans_seeds / max_buckets


def mean_2se(values) -> tuple[float, float | None]:
    values = np.asarray(values, dtype=np.float64)
    if len(values) < 2:  # no spread from one run; None keeps the JSON valid
        return float(values.mean()), None
    return float(values.mean()), float(2 * values.std(ddof=1) / np.sqrt(len(values)))


def mauve_buckets(n_p: int, n_q: int, settings: dict) -> int:
    """The histogram size: the library's auto rule capped at max_buckets, or an explicit int as given."""
    cap = settings.get("max_buckets", MAX_BUCKETS)
    if settings["num_buckets"] == "auto":
        return min(cap, max(2, round(min(n_p, n_q) / 10)))
    if settings["num_buckets"] > cap:
        log.warning(
            "evaluation.mauve.num_buckets %d is above max_buckets %d; used as given", settings["num_buckets"], cap
        )
    return int(settings["num_buckets"])


def mauve_result(p_features: np.ndarray, q_features: np.ndarray, settings: dict, seed: int):
    """mauve-text's result (fields mauve, divergence_curve [points, 2], num_buckets) for one clustering seed."""
    import mauve

    return mauve.compute_mauve(
        p_features=p_features,
        q_features=q_features,
        num_buckets=mauve_buckets(len(p_features), len(q_features), settings),
        kmeans_num_redo=settings["kmeans_num_redo"],
        kmeans_max_iter=settings["kmeans_max_iter"],
        divergence_curve_discretization_size=settings["discretization"],
        mauve_scaling_factor=settings["scaling"],
        seed=seed,
        verbose=False,
    )


def mauve_score(p_features: np.ndarray, q_features: np.ndarray, settings: dict, seed: int) -> float:
    return float(mauve_result(p_features, q_features, settings, seed).mauve)


def curve_schema():
    """The columns of the divergence curves' table (an unscored cell writes it with no rows)."""
    import pyarrow as pa

    return pa.schema(
        {"run": pa.int64(), "kmeans_seed": pa.int64(), "point": pa.int64(), "x": pa.float64(), "y": pa.float64()}
    )


def mauve_over_seeds(p_features: np.ndarray, q_features: np.ndarray, settings: dict, seeds: list[int], run: int):
    """One run's MAUVE for each clustering seed: (scores, divergence curves as a table, num_buckets)."""
    import pyarrow as pa

    scores, curves = [], []
    for seed in seeds:
        result = mauve_result(p_features, q_features, settings, seed)
        scores.append(float(result.mauve))
        curve = np.asarray(result.divergence_curve, dtype=np.float64)  # [points, 2]: the extremes and the mixtures
        curves.append(
            pa.table(
                {
                    "run": np.full(len(curve), run, dtype=np.int64),
                    "kmeans_seed": np.full(len(curve), seed, dtype=np.int64),
                    "point": np.arange(len(curve), dtype=np.int64),
                    "x": curve[:, 0],
                    "y": curve[:, 1],
                },
                schema=curve_schema(),
            )
        )
    return scores, pa.concat_tables(curves), int(result.num_buckets)


def variance_split(scores: np.ndarray) -> dict:
    """How much of one MAUVE score's variance is the sampling run and how much the k-means seed, from an
    [R runs, K seeds] grid, as one-way random-effects (ANOVA) estimates:
        clustering = sigma^2_c = mean over runs of the within-run variance (ddof 1), unbiased;
        sampling   = sigma^2_s = var of the run means (ddof 1) - sigma^2_c / K, floored at 0,
    since a run mean's variance is sigma^2_s + sigma^2_c / K (with population variances, as before, a study
    with no sampling variance at all showed a sampling share near 1/K). Before the floor the sampling estimate is
    unbiased; the floor biases it upwards and makes it 0 whenever the run means vary no more than their clustering
    noise predicts, which with few runs happens often even when sigma^2_s > 0 (it rests on R - 1 degrees of
    freedom: at R = 3, K = 5 and a clustering share of 0.8, with probability 0.35, an F(2, 12) tail). A
    sampling of 0 is therefore "could not be separated", not "no sampling variance". total = sampling +
    clustering, the variance of one (run, seed) score; clustering_share = clustering / total (a ratio of
    estimates, not unbiased).
    A run's score averages K seeds, so its clustering part is sigma^2_c / K (`clustering_of_run_mean`);
    `kmeans_seeds_needed` is the fewest seeds that put it under sigma^2_s (None when the sampling estimate is
    0: no count follows from it). One seed cannot tell the two apart and one run has no sampling spread: those
    parts are None, never a guess."""
    scores = np.asarray(scores, dtype=np.float64)
    runs, seeds = scores.shape
    clustering = float(scores.var(axis=1, ddof=1).mean()) if seeds > 1 else None
    sampling = None
    if runs > 1 and clustering is not None:
        sampling = max(0.0, float(scores.mean(axis=1).var(ddof=1)) - clustering / seeds)
    split = {
        "total": None,
        "sampling": sampling,
        "clustering": clustering,
        "clustering_share": None,
        "clustering_of_run_mean": None if clustering is None else clustering / seeds,
        "kmeans_seeds_needed": None,
        "runs": runs,
        "kmeans_seeds": seeds,
    }
    if sampling is None:
        return split
    total = sampling + clustering
    split |= {"total": total, "clustering_share": clustering / total if total > 0 else None}
    if sampling > 0:  # the fewest K with sigma^2_c / K < sigma^2_s
        split["kmeans_seeds_needed"] = int(np.floor(clustering / sampling)) + 1
    return split


NON_ALPHANUMERIC = re.compile(r"[^a-z0-9]+")


def rouge_tokens(text: str) -> list[str]:
    """rouge-score's default tokenizer without stemming: lower case, and every run of characters outside [a-z0-9]
    separates two tokens."""
    return NON_ALPHANUMERIC.sub(" ", text.lower()).split()


def lcs_length(a: list[str], b: list[str]) -> int:
    """The length of a longest common subsequence of a and b, by the bit-vector recurrence (Crochemore et al.
    2001, "A fast and practical bit-vector algorithm for the longest common subsequence problem"; Hyyro 2004):
    one big-integer step per token of b instead of len(a) cells of the dynamic-programming table."""
    match: dict[str, int] = {}
    for i, token in enumerate(a):
        match[token] = match.get(token, 0) | (1 << i)
    full = (1 << len(a)) - 1
    row = full  # bit i clear: position i of a ends a common subsequence one longer than before it
    for token in b:
        hits = row & match.get(token, 0)
        row = ((row + hits) | (row - hits)) & full
    return len(a) - row.bit_count()


def f_measure(overlap: int, prediction_total: int, reference_total: int) -> float:
    """rouge-score's precision, recall and F of an overlap count, in its order of operations (the same floats)."""
    precision = overlap / max(prediction_total, 1)
    recall = overlap / max(reference_total, 1)
    return 2 * precision * recall / (precision + recall) if precision + recall > 0 else 0.0


def ngram_counts(tokens: list[str], n: int) -> Counter:
    return Counter(tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1))


def rouge_f(predictions: list[str], references: list[str]) -> dict[str, np.ndarray]:
    """ROUGE-1, ROUGE-2 and ROUGE-L F of each prediction against its reference, as rouge-score computes them
    without stemming (tests/evaluate/test_metrics.py compares every score with rouge-score's, bit for bit). Computed here
    because rouge-score imports nltk (0.2-0.8 s per evaluation job) and fills the LCS table cell by cell in Python
    (0.3 s for 150 texts; here 0.03 s)."""
    scores = {name: np.zeros(len(predictions), dtype=np.float64) for name in ROUGE_TYPES}
    for row, (prediction, reference) in enumerate(zip(predictions, references, strict=True)):
        pred, ref = rouge_tokens(prediction), rouge_tokens(reference)
        for n, name in ((1, "rouge1"), (2, "rouge2")):
            pred_grams, ref_grams = ngram_counts(pred, n), ngram_counts(ref, n)
            overlap = sum(min(count, pred_grams[gram]) for gram, count in ref_grams.items())
            scores[name][row] = f_measure(overlap, sum(pred_grams.values()), sum(ref_grams.values()))
        if pred and ref:  # rouge-score scores an empty side 0
            scores["rougeL"][row] = f_measure(lcs_length(ref, pred), len(pred), len(ref))
    return scores


def summarise(name: str, per_run) -> dict:
    """`name`: the per-run list, `name_mean` and `name_2se`; a non-finite value stops the job."""
    per_run = [float(v) for v in per_run]
    if not np.isfinite(per_run).all():
        raise StageError(f"evaluation: {name} is not finite for these samples; no metric is written")
    mean, se = mean_2se(per_run)
    return {name: per_run, f"{name}_mean": mean, f"{name}_2se": se}


def features_in_order(table, prompt_id: np.ndarray, run: np.ndarray) -> np.ndarray:
    """[n, d] features of the samples (prompt_id[i], run[i]), in that order, from a features table (prompt_id,
    run, features; features.py); a sample it lacks, holds twice or holds null is an error naming it."""
    import polars as pl

    have = cast(pl.DataFrame, pl.from_arrow(table.select(["prompt_id", "run"]))).cast(pl.Int64).with_row_index("at")
    want = pl.DataFrame({"prompt_id": prompt_id, "run": run}).cast(pl.Int64)
    found = want.join(have, on=["prompt_id", "run"], how="left", maintain_order="left")
    if found.height != want.height or have.height != want.height or found["at"].null_count():
        missing = found.filter(pl.col("at").is_null()).select("prompt_id", "run").head(1).rows()
        raise StageError(
            f"evaluation: the features file does not hold each sample once ({table.num_rows} rows for "
            f"{want.height} samples{'; none for (prompt_id, run) ' + str(missing[0]) if missing else ''}): rerun "
            "its sample_features job"
        )
    column = table.column("features").combine_chunks()
    if column.null_count:
        raise StageError(
            "evaluation: the features file has null features for a cell MAUVE scores: rerun its sample_features job"
        )
    matrix = np.asarray(column.flatten()).reshape(len(column), -1)
    return matrix[found["at"].to_numpy()]


def evaluate(
    samples, prompts, human_features: np.ndarray, model_features, settings: dict, seed: int, blind: str | None = None
):
    """Metrics of one sample file against its eval set's human references: (summary dict, curves table,
    per-prompt table); `model_features` is the samples' features table (features.py), read only where MAUVE is
    scored; `blind`, the eval set's controls' status (evaluate/control_scores.py: MAUVE cannot see a must-detect control
    here), refuses MAUVE as too few texts do (docs/method.md §4). Clustering seeds are seed, seed + 1, ..."""
    import polars as pl
    import pyarrow as pa

    frame = joined(samples, prompts)
    order = {int(p): i for i, p in enumerate(prompts.column("prompt_id").to_pylist())}
    runs, run_index = np.unique(samples.column("run").to_numpy(), return_inverse=True)  # run_index: per sample row
    run_of_row = frame["run"].to_numpy()
    texts = fewest_texts(run_of_row)
    status = mauve_status(texts, settings["mauve"]) or blind
    q_all = None
    if status is None:  # an unresolvable cell is not scored, and was not featurised (docs/method.md §4, the floor)
        q_all = features_in_order(model_features, frame["prompt_id"].to_numpy(), run_of_row)
        if not np.isfinite(q_all).all():  # features.py refuses these; a file from elsewhere is checked again
            raise StageError(
                "evaluation: the model-text features are not finite for these samples; no metric is written"
            )
    prediction = frame["model_text"] if settings["rouge_include_prefix"] else frame["text"]
    reference = (
        frame["reference"]
        if settings["rouge_include_prefix"]
        else pl.Series([r[len(p) :].strip() for r, p in zip(frame["reference"], frame["prefix"])])
    )
    rouge = rouge_f(prediction.to_list(), reference.to_list())

    seeds = [seed + k for k in range(settings["mauve"].get("kmeans_seeds", KMEANS_SEEDS))]
    seed_scores: list = []
    rouge_per_run: dict[str, list[float]] = {name: [] for name in ROUGE_TYPES}
    curves: list = []
    buckets: set = set()
    for r in runs:
        rows = np.flatnonzero(run_of_row == r)
        for name in ROUGE_TYPES:
            rouge_per_run[name].append(float(rouge[name][rows].mean()))
        if q_all is None:
            continue
        human_rows = [order[int(p)] for p in frame["prompt_id"].to_numpy()[rows]]
        scores, run_curves, num_buckets = mauve_over_seeds(
            human_features[human_rows], q_all[rows], settings["mauve"], seeds, int(r)
        )
        curves.append(run_curves)
        buckets.add(num_buckets)
        log.info("run %s: MAUVE %s over %d clustering seeds", r, " ".join(f"{s:.3f}" for s in scores), len(seeds))
        seed_scores.append(scores)
    common = {
        "kmeans_seeds": seeds,
        "mauve_texts": texts,
        "mauve_min_texts": settings["mauve"].get("min_texts", MIN_TEXTS),
        "mauve_status": status,
    }
    if status:
        log.warning("MAUVE not scored (%s), and the report shows it as such", status)
        summary = {
            "mauve": None,
            "mauve_mean": None,
            "mauve_2se": None,
            "mauve_by_seed": None,
            "mauve_variance": None,
            "num_buckets": None,
            **common,
        }
        curves = [curve_schema().empty_table()]
    else:
        by_seed = np.asarray(seed_scores, dtype=np.float64)
        if not np.isfinite(by_seed).all():
            raise StageError("evaluation: MAUVE is not finite for these samples; no metric is written")
        summary = {
            **summarise("mauve", by_seed.mean(axis=1)),
            "mauve_by_seed": by_seed.tolist(),
            "mauve_variance": variance_split(by_seed),
            "num_buckets": buckets.pop() if len(buckets) == 1 else sorted(buckets),
            **common,
        }

    diversity = text_stats(*continuation_tokens(samples), run_index, len(runs))
    for name in ROUGE_TYPES:
        summary |= summarise(name, rouge_per_run[name])
    for name, per_run in diversity.items():  # every registered text statistic, in its order
        summary |= summarise(name, per_run)
    summary |= {
        "run_ids": [int(r) for r in runs],
        "runs": len(runs),
        "prompts": len(order),
        "featuriser": settings["featuriser_label"],
        "settings": settings,
        "provenance": provenance(settings, settings["featuriser_label"]),
    }
    per_prompt = pa.table(
        {
            "prompt_id": frame["prompt_id"].cast(pl.Int64).to_numpy(),
            "run": frame["run"].cast(pl.Int64).to_numpy(),
            **rouge,
        }
    ).sort_by([("prompt_id", "ascending"), ("run", "ascending")])
    return summary, pa.concat_tables(curves), per_prompt


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m workflow_lib.evaluate.metrics", description="MAUVE, ROUGE and diversity of one samples file"
    )
    parser.add_argument("--samples", required=True)
    parser.add_argument("--prompts", required=True)
    parser.add_argument("--human-features", required=True, help=".npy: the eval set's human references' features")
    parser.add_argument("--features", required=True, help="Parquet: the samples' features (features.py samples)")
    parser.add_argument("--controls", required=True, help="JSON: the eval set's MAUVE controls (control_scores.py)")
    parser.add_argument("--settings", required=True)
    parser.add_argument("--output", required=True, help="metrics JSON")
    parser.add_argument("--curves", required=True, help="Parquet: MAUVE divergence curve of every (run, k-means seed)")
    parser.add_argument("--per-prompt", required=True, help="Parquet: ROUGE of every sample, for paired comparisons")
    args = parser.parse_args()

    import json
    from pathlib import Path

    from workflow_lib.files import read_parquet

    settings = parse_json_arg(args.settings, "evaluation")
    samples = read_parquet(args.samples)
    summary, curves, per_prompt = evaluate(
        samples,
        read_parquet(args.prompts),
        np.load(args.human_features),
        read_parquet(args.features),
        settings,
        settings["seed"],
        json.loads(Path(args.controls).read_text())["status"],
    )
    mauve = (
        f"MAUVE {summary['mauve_status']}: not scored"
        if summary["mauve_status"]
        else f"MAUVE {summary['mauve_mean']:.3f} +- {summary['mauve_2se']} (clustering share of its variance "
        f"{summary['mauve_variance']['clustering_share']})"
    )
    log.info(
        "%s, ROUGE-1 %.3f, distinct-4 %.3f over %d runs",
        mauve,
        summary["rouge1_mean"],
        summary["distinct_4_mean"],
        summary["runs"],
    )
    from workflow_lib.perturb.realised import REALISED_KEY

    realised = (samples.schema.metadata or {}).get(REALISED_KEY)  # the sampler's perturbation, realised
    summary["realised"] = json.loads(realised) if realised else None
    write_parquet(curves, args.curves)
    write_parquet(per_prompt, args.per_prompt)
    write_json(summary, args.output)


if __name__ == "__main__":
    run(main)
