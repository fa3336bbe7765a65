"""The study's paired comparisons: the differences its tables imply, each with a paired test, Holm-corrected per table.

A comparison pairs two conditions that share everything else (model, eval set, decoder, seed): perturbation or
none, each objective against MLE, each ablation arm against NoPerturb (the pairs: workflow_lib.comparisons).
MAUVE comes from the pair's report.joint_mauve job (without one, a paired t over runs); ROUGE, perplexity and the
exact TV from a paired permutation test over prompts (report.statistics); report.seeds adds the rows across
training seeds, and report.paired_tables writes their Markdown. The tests, B, `detectable` and "not testable":
docs/method.md §4, "Paired comparisons" and after; the columns: docs/output.md, "Paired comparisons".
"""

from __future__ import annotations

import argparse
import json
import logging
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

import polars as pl

from workflow_lib.cli import StageError, run
from workflow_lib.comparisons import (  # which conditions the study compares: decided with the grid, read here
    KEYS,
    NULL,
    RESAMPLES,
    condition_rows,
    pair_id,
    pair_identity,
    pairs,
    resamples_for,
)
from workflow_lib.files import atomic_path
from workflow_lib.metric_registry import LOWER_IS_BETTER, PROMPT_PAIRED
from workflow_lib.report.conditions import typed
from workflow_lib.report.seeds import seed_rows
from workflow_lib.report.statistics import (
    ALPHA,
    Estimate,
    Permutations,
    detectable,
    detectable_interval,
    holm,
    paired_t,
    permutation_mean_differences,
    permutation_perplexity_difference,
    plural,
)
from workflow_lib.report.study_files import StudyFiles, mauve_by_run, shared_prompts

log = logging.getLogger("workflow_lib.report.contrasts")

FAMILIES = ["perturbation", "ablation", "objective", NULL]
# A contrast's unit: one pair of checkpoints (a training seed), its prompts and runs the replicates; or the training
# seeds of the two arms, each seed's difference the replicate (report.seeds).
CHECKPOINT, SEEDS = "checkpoint", "seeds"
PAIRED_T, PERMUTATION = "paired t over runs", "paired permutation test over prompts"
JOINT = "paired permutation test over (prompt, run) on one shared quantisation"
COLUMNS = {
    "family": pl.Utf8,
    "metric": pl.Utf8,
    "model": pl.Utf8,
    "dataset": pl.Utf8,
    "objective": pl.Utf8,
    "eval_set": pl.Utf8,
    "decoder": pl.Utf8,
    "seed": pl.Int64,
    "a": pl.Utf8,
    "b": pl.Utf8,
    "difference": pl.Float64,
    "low": pl.Float64,
    "high": pl.Float64,
    "p": pl.Float64,
    "p_holm": pl.Float64,
    "significant": pl.Boolean,
    "favours": pl.Utf8,
    "n": pl.Int64,
    "resamples": pl.Int64,
    "method": pl.Utf8,
    "not_testable": pl.Utf8,
    "unit": pl.Utf8,
    "spread": pl.Float64,
    "detectable": pl.Float64,
    "detectable_low": pl.Float64,
    "detectable_high": pl.Float64,
}
IDENTITY = ["family", "metric", "unit", "model", "dataset", "objective", "eval_set", "decoder", "seed", "a", "b"]


# ---- pairing the study's conditions --------------------------------------------------------------------


def conditions(paths: list[str]) -> pl.DataFrame:
    """One row per metrics, extrapolation or perplexity file (`comparisons.condition_rows`), as a frame."""
    schema = {k: pl.Utf8 for k in ["kind", *KEYS, "path"]}
    rows = [{k: (None if v is None else str(v)) for k, v in r.items()} for r in condition_rows(paths)]
    return typed(pl.DataFrame(rows, schema=schema, orient="row"))


# ---- reading the files and computing ------------------------------------------------------------------


def _joint_estimate(result: dict) -> Estimate | None:
    """A report.joint_mauve job's result as an Estimate; None when its MAUVE could not resolve (too few texts)."""
    if result.get("status"):
        return None
    return Estimate(
        result["difference"], result["low"], result["high"], result["p"], result["n"], result.get("untested")
    )


def compare(
    pair: dict, resamples: int = RESAMPLES, joint: dict | None = None, files: StudyFiles | None = None
) -> list[dict]:
    """One row per metric of a comparison: the estimate and how it was had (p_holm etc. come later).
    `resamples`: this comparison's permutation B (its table's, from `resamples_for`). `joint`: the MAUVE contrast on
    a shared quantisation (report.joint_mauve's result), which the workflow always computes; without it (a study
    read by hand), MAUVE falls back to the paired t over runs of the separately clustered scores. `files`: the
    study's files as read so far (a fresh reader when None)."""
    files = files or StudyFiles()
    identity = pair_identity(pair)
    rows = []
    permutations: Permutations | None = None

    def row(metric: str, estimate: Estimate, method: str, draws: int | None = None) -> None:
        smallest_p = None
        if method == PERMUTATION:
            assert permutations is not None, "permutation rows come after the swaps are set"
            draws, smallest_p = permutations.draws, permutations.smallest_p
        fields = estimate._asdict()
        untested = fields.pop("untested")
        rows.append(
            {k: pair[k] for k in IDENTITY if k not in ("metric", "unit")}
            | {"metric": metric}
            | fields
            | {
                "method": method,
                "not_testable": untested,
                "unit": CHECKPOINT,
                "resamples": draws,
                # Not a column: the least p this row's test can give, for its table's check (`contrasts`).
                "smallest_p": smallest_p,
            }
        )

    if pair["kind"] == "metrics" and joint is not None:
        if (estimate := _joint_estimate(joint)) is not None:
            row("mauve", estimate, JOINT, joint["resamples"])
    elif pair["kind"] == "metrics":
        a_runs, b_runs = mauve_by_run(files.metrics(pair["path_a"])), mauve_by_run(files.metrics(pair["path_b"]))
        common = sorted(set(a_runs) & set(b_runs))
        if common:
            row("mauve", paired_t([a_runs[r] for r in common], [b_runs[r] for r in common]), PAIRED_T)
    a, b = files.per_prompt(pair["path_a"]), files.per_prompt(pair["path_b"])
    if a is None or b is None:
        return rows
    both = shared_prompts(a, b, pair)
    if both.height == 0:
        log.warning("%s and %s share no prompt; no prompt-paired comparison", pair["path_a"], pair["path_b"])
        return rows
    permutations = Permutations(both.height, resamples, identity)
    try:
        if pair["kind"] == "extrapolation":
            # Each reference's mean TV over its prefixes (evaluate.extrapolation): the prefixes of one reference
            # share its words, so the reference, not the prefix, is the unit a swap exchanges.
            tv = permutation_mean_differences(both["tv"].to_numpy(), both["tv_b"].to_numpy(), permutations)[0]
            row("tv", tv, PERMUTATION)
        elif pair["kind"] == "metrics":
            metrics = [m for m in PROMPT_PAIRED if m in both.columns]
            estimates = permutation_mean_differences(
                both.select(metrics).to_numpy().T, both.select([f"{m}_b" for m in metrics]).to_numpy().T, permutations
            )
            for metric, estimate in zip(metrics, estimates):
                row(metric, estimate, PERMUTATION)
        else:
            row(
                "perplexity",
                permutation_perplexity_difference(
                    both["nll"].to_numpy(),
                    both["tokens"].to_numpy(),
                    both["nll_b"].to_numpy(),
                    both["tokens_b"].to_numpy(),
                    permutations,
                ),
                PERMUTATION,
            )
    except ValueError as error:
        raise StageError(f"{pair['path_a']} vs {pair['path_b']}: {error}") from error
    return rows


def _favours(row: dict) -> str:
    """Which side the difference points to; "neither" for a zero difference, which has no direction."""
    better = -row["difference"] if row["metric"] in LOWER_IS_BETTER else row["difference"]
    if better == 0:
        return "neither"
    if row["family"] == "objective":
        return row["objective"] if better > 0 else "mle"
    if row["family"] == NULL:  # one method against itself: the half of its seeds the difference points to
        return row["a"] if better > 0 else row["b"]
    return "perturbation" if better > 0 else "no perturbation"


def contrasts(
    paths: list[str], intensity: float, resamples: int = RESAMPLES, mauve: Sequence[str] = (), null: bool = False
) -> pl.DataFrame:
    """The study's paired comparisons (columns COLUMNS), sorted, Holm-corrected per (family, metric).
    `resamples`: the least permutation B; a table of m comparisons gets resamples_for(m, resamples). A pair of
    a family and kind (metrics: the ROUGE tables; perplexity) is one row of each of that kind's tables, so m is
    their count (an upper bound when a sidecar is missing, which only makes B larger). `mauve`: the results of
    report.joint_mauve's jobs, named by pair id; a metrics pair without one falls back to the paired t. `null`: the
    A/A null's family too (`report.aa_null`, comparisons.null_pairs)."""
    files = StudyFiles()
    designed = pairs(conditions(paths), intensity, null)
    table_size: defaultdict[tuple[str, str], int] = defaultdict(int)
    for pair in designed:
        table_size[(pair["family"], pair["kind"])] += 1
    for (family, kind), m in sorted(table_size.items()):
        log.info("%s (%s): %d comparisons, at most %d random swaps each", family, kind, m, resamples_for(m, resamples))
    joint = {Path(p).stem: json.loads(Path(p).read_text()) for p in mauve}
    rows = [
        r
        for pair in designed
        for r in compare(
            pair,
            resamples_for(table_size[(pair["family"], pair["kind"])], resamples),
            joint.get(pair_id(pair)) if pair["kind"] == "metrics" else None,
            files,
        )
    ]
    rows += seed_rows(rows, [k for k in IDENTITY if k not in ("seed", "unit")], SEEDS)
    by_table = defaultdict(list)
    for r in rows:
        by_table[(r["family"], r["metric"], r["unit"])].append(r)
    for table in by_table.values():
        _untestable_table(table)
        for r, adjusted in zip(table, holm([r["p"] if r["not_testable"] is None else None for r in table])):
            r |= {"p_holm": adjusted, "significant": adjusted is not None and adjusted < ALPHA, "favours": _favours(r)}
        tested = sum(r["p_holm"] is not None for r in table)
        for r in table:
            if r["p_holm"] is not None and r["high"] != r["low"]:  # a zero-width interval: identical arms, no test
                # The percentile interval of the joint MAUVE contrast has no degrees of freedom: read as normal.
                df = None if r["method"] == JOINT else r["n"] - 1
                r["detectable"] = detectable(r["low"], r["high"], df, tested)
                r["detectable_low"], r["detectable_high"] = detectable_interval(r["detectable"], df)
    frame = pl.DataFrame([{k: r.get(k) for k in COLUMNS} for r in rows], schema=COLUMNS, orient="row")
    return frame.sort(IDENTITY)


def _untestable_table(table: list[dict]) -> None:
    """In place: where no row of a Holm table can be marked, every tested row becomes "not testable (n prompts for
    a table of m)". Holm marks nothing unless the table's smallest p is below ALPHA / m; when every swap test of
    the table has a least attainable p at or above that (all 2^n swaps of n prompts give 2 / 2^n), no data can
    mark a row, and "no detectable difference" would report a test that could not have detected anything. A
    table with a row that could reach it keeps all its rows: Holm's later steps ask less of the others."""
    tested = [r for r in table if r["p"] is not None and r["not_testable"] is None]
    least = [r["smallest_p"] for r in tested]
    if not tested or None in least or min(least) * len(tested) < ALPHA:
        return
    for r in tested:
        r["not_testable"] = f"{plural(r['n'], 'prompt')} for a table of {len(tested)}"


def read_contrasts(path: str) -> pl.DataFrame:
    return pl.read_csv(path, schema=COLUMNS)


def main() -> None:
    # @FILE: arguments read from FILE, one a line (the workflow's contrasts job gets its paths so).
    parser = argparse.ArgumentParser(prog="python -m workflow_lib.report.contrasts", fromfile_prefix_chars="@")
    parser.add_argument("--intensity", type=float, required=True, help="the headline intensity (insertion)")
    parser.add_argument("--output", required=True, help="CSV of the paired comparisons")
    parser.add_argument(
        "--resamples",
        type=int,
        default=RESAMPLES,
        help="the least permutation B; a table of m comparisons gets max(B, 200 m)",
    )
    parser.add_argument(
        "--mauve",
        nargs="*",
        default=[],
        help="report.joint_mauve results (<pair id>.json): MAUVE contrasts on a shared quantisation",
    )
    parser.add_argument(
        "--null", type=int, choices=(0, 1), default=0, help="1: the A/A null's family too (report.aa_null)"
    )
    parser.add_argument("paths", nargs="*", help="metrics and perplexity JSON (their .prompts.parquet beside them)")
    args = parser.parse_args()
    frame = contrasts(args.paths, args.intensity, args.resamples, args.mauve, bool(args.null))
    with atomic_path(args.output) as tmp:
        frame.write_csv(tmp)
    log.info(
        "%d contrasts (%d significant after Holm) from %d files",
        frame.height,
        frame["significant"].sum(),
        len(args.paths),
    )


if __name__ == "__main__":
    run(main)
