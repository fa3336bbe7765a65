"""The simulation study's summary: mean +- 2 SE over replications, paired differences to intensity 0, the paired
tests and their conclusions, the figure (the `simulation_summary` rule).

Every arm of a replication shares its truth, data and initial weights, so each difference to alpha = 0 (the
`shrinkage` control's included) is taken within a replication. Reading (a) exists only in replications that leave
unseen rows: its mean is over those (`n_unseen_rows_reps`), and where none do the summary and figure say so. The
tests (statistics.py) are on unseen pairs and, a family of their own, the held-out log-loss; what each copy reaches
has a table too. docs/theory.md, "The simulation study"; docs/method.md §5.
"""

from __future__ import annotations

import argparse
import math

import polars as pl

from workflow_lib.cli import run
from workflow_lib.files import atomic_path
from workflow_lib.simulation.conclusions import conclusions, evidence, number, p_value
from workflow_lib.simulation.statistics import (
    CONTROL,
    LEVEL,
    MAE,
    NLL,
    PANEL,
    POWER,
    READING,
    VS_UNPERTURBED,
    reach_summary,
    study_tests,
    tuning_summary,
)

READINGS = ("unseen_rows", "unseen_pairs", "all")
SCORES = [f"mae_{r}" for r in READINGS] + [NLL]  # each gets its mean ± 2 SE and its paired difference to alpha = 0
KEYS = ["vocab_size", "arm", "intensity"]


def _mean_2se(column: str, name: str) -> list[pl.Expr]:
    col = pl.col(column)
    n = col.count()
    return [
        col.mean().alias(f"{name}_mean"),
        pl.when(n > 1).then(2 * col.std(ddof=1) / n.sqrt()).otherwise(None).alias(f"{name}_2se"),
    ]


def summarize(results: pl.DataFrame, tests: pl.DataFrame | None = None) -> pl.DataFrame:
    """One row per (vocab_size, arm, intensity); the control's intensity is null. With `tests` (study_tests or
    paired_tests of the same results), reading (b)'s difference to alpha = 0 gets its 95% t interval and Holm's p
    (`diff_unseen_pairs_low`/`_high`, `p_holm`), and the log-loss's, where tested, its own (`diff_heldout_nll_low`/
    `_high`/`_p_holm`). Fits without `n_unseen_pairs_reached` (written before it was) give it as null."""
    if "n_unseen_pairs_reached" not in results.columns:
        results = results.with_columns(n_unseen_pairs_reached=pl.lit(None, pl.Int32))
    first_rule = results.filter(pl.col("intensity") == 0)["arm"].min()
    baseline = results.filter((pl.col("intensity") == 0) & (pl.col("arm") == first_rule)).select(
        ["vocab_size", "replication"] + [pl.col(c).alias(f"base_{c}") for c in SCORES]
    )
    paired = results.join(baseline, on=["vocab_size", "replication"], how="left")
    aggregations = [
        pl.len().alias("replications"),
        (pl.col("n_unseen_rows") > 0).sum().alias("n_unseen_rows_reps"),
        pl.col("n_unseen_rows").mean().alias("n_unseen_rows_mean"),
        pl.col("n_unseen_pairs").mean().alias("n_unseen_pairs_mean"),
        (pl.col("n_replaced").sum() / pl.col("n_eligible").sum()).alias("replaced_share"),
        pl.col("n_unseen_rows_perturbed").mean().alias("n_unseen_rows_perturbed_mean"),
        pl.col("n_unseen_pairs_reached").mean().alias("n_unseen_pairs_reached_mean"),
        pl.col("n_unseen_pairs_reached").max().alias("n_unseen_pairs_reached_max"),
        pl.col("shrinkage").mean().alias("shrinkage_mean"),
    ]
    for r in READINGS:
        aggregations += _mean_2se(f"mae_{r}", f"mae_{r}") + _mean_2se(f"uniform_{r}", f"uniform_{r}")
        aggregations += _mean_2se(f"diff_mae_{r}", f"diff_{r}")
    aggregations += _mean_2se(NLL, NLL) + _mean_2se(f"diff_{NLL}", f"diff_{NLL}")
    paired = paired.with_columns([(pl.col(c) - pl.col(f"base_{c}")).alias(f"diff_{c}") for c in SCORES])
    summary = paired.group_by(KEYS).agg(aggregations).sort(KEYS, nulls_last=True)
    if tests is None:
        return summary
    if "metric" not in tests.columns:
        tests = tests.with_columns(metric=pl.lit(MAE))
    columns = ["vocab_size", "arm", "intensity", "low", "high", "p_holm"]
    mae = tests.filter(pl.col("metric") == MAE)
    panels = mae.filter(pl.col("kind") == PANEL).with_columns(arm=pl.col("a").str.split(",").list.first())
    control = mae.filter((pl.col("kind") == VS_UNPERTURBED) & (pl.col("a") == CONTROL)).with_columns(arm=pl.col("a"))
    intervals = pl.concat([panels.select(columns), control.select(columns)]).rename(
        {"low": f"diff_{READING}_low", "high": f"diff_{READING}_high"}
    )
    log_loss = (
        tests.filter((pl.col("metric") == NLL) & (pl.col("kind") == PANEL))
        .with_columns(arm=pl.col("a").str.split(",").list.first())
        .select(columns)
        .rename({c: f"diff_{NLL}_{c}" for c in ("low", "high", "p_holm")})
    )
    summary = summary.join(intervals, on=KEYS, how="left", nulls_equal=True, maintain_order="left")
    return summary.join(log_loss, on=KEYS, how="left", nulls_equal=True, maintain_order="left")


def _cell(mean, se, digits=5) -> str:
    if mean is None:
        return "n/a"
    return f"{mean:.{digits}f}" + ("" if se is None else f" ± {se:.{digits}f}")


def _interval(row: dict) -> str:
    """Reading (b)'s paired difference to alpha = 0, mean ± the 95% t interval's half-width, and Holm's p ('—' at
    alpha = 0)."""
    low = row.get(f"diff_{READING}_low")
    if row["intensity"] == 0:
        return "— | —"
    mean = row[f"diff_{READING}_mean"]
    if low is None:
        return f"{_cell(mean, None)} | untested"
    half = number((row[f"diff_{READING}_high"] - low) / 2, sign=False)
    return f"{number(mean, digits=3)} ± {half} | {p_value(row['p_holm'])}"


def _arm_cell(row: dict) -> str:
    if row["intensity"] is None:
        return f"λ tuned (mean {row['shrinkage_mean']:.3f})"
    return f"{row['intensity']:g}"


def tests_table(tests: pl.DataFrame, unreached: set[int] | None = None) -> list[str]:
    """The MAE tests that answer the referee (all but the fixed-alpha panels, which the table above carries); at a
    |V| in `unreached` (unreached_vocabularies) the empirical arm's null result against alpha = 0 is labelled as
    expected."""
    lines = [
        "| V | test | a | b | a − b, 95% CI, p (Holm) | verdict |",
        "|---|---|---|---|---|---|",
    ]
    if "metric" in tests.columns:
        tests = tests.filter(pl.col("metric") == MAE)
    for r in tests.filter(pl.col("kind") != PANEL).iter_rows(named=True):
        verdict = {"a lower": "a better", "a higher": "a worse"}.get(r["verdict"], r["verdict"])
        expected = r["kind"] == VS_UNPERTURBED and r["a"].startswith("empirical") and r["verdict"] == "not detected"
        if expected and r["vocab_size"] in (unreached or set()):
            verdict += " (expected: the empirical copy reaches no unseen pair)"
        lines.append(f"| {r['vocab_size']} | {r['kind']} | {r['a']} | {r['b']} | {evidence(r)} | {verdict} |")
    return lines


def unreached_vocabularies(summary: pl.DataFrame) -> set[int]:
    """The |V| at which the empirical arm's copy held no unseen pair of D in any replication at any alpha > 0."""
    if "n_unseen_pairs_reached_max" not in summary.columns:
        return set()
    rows = summary.filter((pl.col("arm") == "empirical") & (pl.col("intensity") > 0))
    per_vocab = rows.group_by("vocab_size").agg(pl.col("n_unseen_pairs_reached_max").max().alias("most"))
    return set(per_vocab.filter(pl.col("most") == 0)["vocab_size"].to_list())


def log_loss_table(summary: pl.DataFrame) -> list[str]:
    """Held-out log-loss per arm and intensity, mean ± 2 SE, the paired difference to alpha = 0 with its interval
    and Holm's p (the log-loss family), and the uniform predictor's log |V|."""
    lines = [
        (
            "Held-out log-loss: negative log-likelihood per pair of the held-out sequences drawn from the truth (nats; "
            "every held-out pair, seen in D or not: a proper score), mean ± 2 SE over replications; Δ = paired "
            "difference to α = 0, mean ± its 95% t interval's half-width, and Holm's p over the log-loss family (each "
            "rule at each α > 0 against α = 0). The shrinkage row's λ is chosen on these same pairs: its log-loss is "
            "no held-out score and is not tested."
        ),
        "",
        "| V | arm | α | log-loss | Δ ± 95% CI | p (Holm) | uniform (log V) |",
        "|---|---|---|---|---|---|---|",
    ]
    low, high, p = (f"diff_{NLL}_{c}" for c in ("low", "high", "p_holm"))
    for r in summary.iter_rows(named=True):
        if r["intensity"] == 0:
            delta = "— | —"
        elif r.get(low) is None:
            delta = f"{number(r[f'diff_{NLL}_mean'], digits=3)} (λ chosen on these pairs) | untested"
        else:
            half = number((r[high] - r[low]) / 2, sign=False)
            delta = f"{number(r[f'diff_{NLL}_mean'], digits=3)} ± {half} | {p_value(r[p])}"
        lines.append(
            f"| {r['vocab_size']} | {r['arm']} | {_arm_cell(r)} | {_cell(r[f'{NLL}_mean'], r[f'{NLL}_2se'], 4)} "
            f"| {delta} | {math.log(r['vocab_size']):.4f} |"
        )
    return lines


def reach_table(summary: pl.DataFrame) -> list[str]:
    """What each rule's perturbed copy reaches at each alpha > 0: D's unseen pairs it holds as training pairs (mean,
    largest, share), and the tokens never seen as a first element it gives a pair."""
    lines = [
        (
            "What the perturbed copy reaches: the cells never observed as a pair of D that the copy holds as training "
            "pairs (mean and largest over replications, and the mean's share of D's unseen pairs), and the tokens "
            "never seen as a first element that it gives a pair (mean). The empirical rule's synonyms v of X_t need "
            "(v, X_{t+1}) in D and the copy keeps D's targets, so its counts are 0 by construction."
        ),
        "",
        "| V | arm | α | unseen pairs of D | reached (mean) | reached (largest) | share | unseen rows given a pair |",
        "|---|---|---|---|---|---|---|---|",
    ]
    rows = summary.filter(pl.col("intensity") > 0)
    for r in rows.iter_rows(named=True):
        reached = r["n_unseen_pairs_reached_mean"]
        if reached is None:
            continue
        share = f"{100 * reached / r['n_unseen_pairs_mean']:.2f}%" if r["n_unseen_pairs_mean"] else "n/a"
        lines.append(
            f"| {r['vocab_size']} | {r['arm']} | {r['intensity']:g} | {r['n_unseen_pairs_mean']:.0f} | {reached:.1f} "
            f"| {r['n_unseen_pairs_reached_max']} | {share} | {r['n_unseen_rows_perturbed_mean']:.1f} |"
        )
    return lines


def markdown(summary: pl.DataFrame, tests: pl.DataFrame | None = None, sentences: list[str] | None = None) -> str:
    """The conclusions, the tests behind them, and the table of every arm and intensity. Its sections are level 3:
    results/summary.md includes this file under a level-2 heading of its own (workflow_lib.report.summary)."""
    lines = ["# Simulation study (paper Section 4)", ""]
    unreached = unreached_vocabularies(summary)
    if tests is not None:
        mae_tests = tests.filter(pl.col("metric") == MAE) if "metric" in tests.columns else tests
        m = mae_tests["p_holm"].drop_nulls().len()
        reps = max(tests["n"].to_list(), default=0)
        lines += [
            (
                f"Paired over {reps} replications (same truth, data and initial weights in every arm), on the MAE of "
                f"the estimated transition matrix on unseen pairs (the paper's Figure 2 metric); a − b < 0: a is "
                f"closer to the truth, and the percentage is of b's mean MAE. Intervals: 95% t (df = replications − "
                f"1), written mean ± half-width; p: paired t test, Holm-corrected over the family of all {m} tests of "
                f"this summary (every |V|: each synonym rule at each α > 0 against α = 0; the tuned arms and the "
                f"shrinkage control against α = 0; the unperturbed model, each rule at the largest α and the control "
                f"against the uniform predictor; and the direct contrasts empirical vs shrinkage, oracle vs "
                f"shrinkage and oracle vs empirical, each at the largest and at the tuned α), marked at {LEVEL:g}. A "
                f"difference not marked gives the smallest one detectable at {POWER:.0%} power at Holm's first step "
                f"({LEVEL:g}/{m}). 'α tuned': per replication, the intensity (0 included) with the lowest held-out "
                "negative log-likelihood; the control's λ is tuned on the same held-out sequences."
            ),
            "",
            "### Conclusions",
            "",
            *[f"- {s}" for s in sentences or []],
            "",
            "### Paired tests on unseen pairs",
            "",
            *tests_table(tests, unreached),
            "",
            "### MAE per arm and intensity",
            "",
        ]
    lines += [
        (
            "MAE of the estimated transition matrix, mean ± 2 SE over replications; Δ = paired difference to "
            "intensity 0 (for (b): mean ± its 95% t interval's half-width, and Holm's p). (a) rows never seen as a first element of a "
            "training pair, (b) pairs never seen. 'n/a' under (a): no replication left an unseen row. The shrinkage "
            "row is the α = 0 model shrunk toward uniform (λ tuned on held-out sequences)."
        ),
        "",
        (
            "| V | arm | α | reps | reps with (a) | rows (a) | MAE (a) | Δ (a) | uniform (a) | pairs (b) "
            "| MAE (b) | Δ (b) ± 95% CI | p (Holm) | uniform (b) |"
        ),
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in summary.iter_rows(named=True):
        lines.append(
            f"| {r['vocab_size']} | {r['arm']} | {_arm_cell(r)} | {r['replications']} "
            f"| {r['n_unseen_rows_reps']} "
            f"| {r['n_unseen_rows_mean']:.1f} | {_cell(r['mae_unseen_rows_mean'], r['mae_unseen_rows_2se'])} "
            f"| {_cell(r['diff_unseen_rows_mean'], r['diff_unseen_rows_2se'])} "
            f"| {_cell(r['uniform_unseen_rows_mean'], None)} | {r['n_unseen_pairs_mean']:.0f} "
            f"| {_cell(r['mae_unseen_pairs_mean'], r['mae_unseen_pairs_2se'])} "
            f"| {_interval(r) if 'p_holm' in r else _cell(r['diff_unseen_pairs_mean'], r['diff_unseen_pairs_2se']) + ' | '} "
            f"| {_cell(r['uniform_unseen_pairs_mean'], None)} |"
        )
    if summary[f"{NLL}_mean"].drop_nulls().len():
        lines += ["", "### Held-out log-loss per arm and intensity", "", *log_loss_table(summary)]
    if summary["n_unseen_pairs_reached_mean"].drop_nulls().len():
        lines += ["", "### What the perturbed copies reach", "", *reach_table(summary)]
    return "\n".join(lines) + "\n"


def conclusions_markdown(sentences: list[str]) -> str:
    """The sentences alone, one bullet each: what a report quotes."""
    return "\n".join(f"- {s}" for s in sentences) + "\n"


def write_summary(
    inputs: list[str],
    csv_path: str,
    markdown_path: str,
    figure_stem: str,
    tests_path: str | None = None,
    conclusions_path: str | None = None,
) -> pl.DataFrame:
    from workflow_lib.simulation.figure import simulation_figure

    results = pl.concat([pl.read_parquet(p) for p in inputs], how="diagonal_relaxed")  # fits of older code lack columns
    tests = study_tests(results)
    sentences = conclusions(tests, tuning_summary(results), reach_summary(results))
    summary = summarize(results, tests)
    with atomic_path(csv_path) as tmp:
        summary.write_csv(tmp, float_precision=8)
    if tests_path:
        with atomic_path(tests_path) as tmp:  # scientific: a p of 1e-150 must not print as 0.00000000
            tests.write_csv(tmp, float_precision=8, float_scientific=True)
    with atomic_path(markdown_path) as tmp:
        tmp.write_text(markdown(summary, tests, sentences))
    if conclusions_path:
        with atomic_path(conclusions_path) as tmp:
            tmp.write_text(conclusions_markdown(sentences))
    simulation_figure(summary, figure_stem)
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description="Simulation study: summary, paired tests and figure over every |V|")
    parser.add_argument("--inputs", nargs="+", required=True, help="the fits' Parquet files, one per |V|")
    parser.add_argument("--csv", required=True)
    parser.add_argument("--markdown", required=True)
    parser.add_argument("--figure", required=True, help="path stem: writes STEM.png and STEM.pdf")
    parser.add_argument("--tests", help="every paired test (MAE on unseen pairs, held-out log-loss), Holm's p (CSV)")
    parser.add_argument("--conclusions", help="the conclusions as plain sentences (Markdown list)")
    args = parser.parse_args()
    write_summary(args.inputs, args.csv, args.markdown, args.figure, args.tests, args.conclusions)


if __name__ == "__main__":
    run(main)
