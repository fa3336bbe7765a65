"""The simulation study's paired tests: which arm beats which, on unseen pairs and on held-out log-loss, with Holm.

Every arm of a replication shares its truth, data and initial weights and is scored on the same cells, so each
comparison is a paired difference over the replications (a - b < 0: a is closer to the truth). The tests, the two
readings of alpha (the grid's largest, and alpha tuned on the held-out sequences the control's lambda is tuned on),
Holm's families and the smallest difference a test could see (`minimum_detectable`): docs/method.md §5, "The
controls" and the paragraphs after it; docs/theory.md, "The simulation study", for why the log-loss is over every
held-out pair.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Any

import numpy as np
import polars as pl

from workflow_lib.report.statistics import holm  # the one Holm rule (the summary job only: no fit imports it)

LEVEL = 0.05
POWER = 0.8
READING = "unseen_pairs"  # the paper's metric (Figure 2's caption): MAE on unobserved token pairs
MAE = f"mae_{READING}"
NLL = "heldout_nll"  # held-out log-loss: negative log-likelihood per pair of held-out sequences from the truth
RULES = ("oracle", "empirical")
CONTROL = "shrinkage"
UNPERTURBED, UNIFORM = "unperturbed", "uniform"
TEST_COLUMNS = {
    "metric": pl.String,  # MAE or NLL: the score compared, and the Holm family the row belongs to
    "vocab_size": pl.Int32,
    "kind": pl.String,
    "a": pl.String,
    "b": pl.String,
    "intensity": pl.Float64,
    "n": pl.Int32,
    "a_mean": pl.Float64,
    "b_mean": pl.Float64,
    "difference": pl.Float64,
    "sd": pl.Float64,
    "low": pl.Float64,
    "high": pl.Float64,
    "p": pl.Float64,
    "p_holm": pl.Float64,
    "mde": pl.Float64,
    "verdict": pl.String,
}
# The kinds of test, in the order the tables list them.
PANEL, VS_UNPERTURBED, VS_UNIFORM, CONTRAST = "panel", "vs unperturbed", "vs uniform", "contrast"


def tuned(rule: str) -> str:
    return f"{rule}, α tuned"


def at(rule: str, alpha: float) -> str:
    return f"{rule}, α = {alpha:g}"


def estimates(results: pl.DataFrame, metric: str = MAE) -> dict[int, dict[str, np.ndarray]]:
    """Per |V|: estimator name -> its `metric` (a column of the fits: MAE on unseen pairs, or NLL) per replication
    (aligned by replication), with the chosen alpha of each tuned rule under 'alpha: <rule>' and the control's lambda
    under 'lambda'. The uniform predictor's value: its MAE on the same cells, or log |V| for the log-loss."""
    out: dict[int, dict[str, np.ndarray]] = {}
    for (vocab,), part in results.group_by(["vocab_size"], maintain_order=True):
        reps = sorted(part["replication"].unique().to_list())
        columns: dict[str, np.ndarray] = {}

        def column(frame: pl.DataFrame, name: str, reps: list[int] = reps) -> np.ndarray:
            values = dict(zip(frame["replication"].to_list(), frame[name].to_list()))
            return np.array([np.nan if values.get(r) is None else values[r] for r in reps], dtype=float)

        perturbed = part.filter(pl.col("arm").is_in(RULES))
        base = perturbed.filter(pl.col("intensity") == 0).unique("replication", keep="first", maintain_order=True)
        if base.height:
            columns[UNPERTURBED] = column(base, metric)
            uniform = metric.replace("mae_", "uniform_", 1)
            columns[UNIFORM] = column(base, uniform) if uniform in part.columns else np.full(len(reps), np.log(vocab))
        for rule in RULES:
            fits = perturbed.filter(pl.col("arm") == rule)
            if not fits.height:
                continue
            for alpha in sorted(set(fits["intensity"].to_list()) - {0.0}):
                columns[at(rule, alpha)] = column(fits.filter(pl.col("intensity") == alpha), metric)
            # The lowest held-out NLL per replication; sorting by (nll, alpha) sends ties to the smaller alpha.
            best = fits.sort(["replication", "heldout_nll", "intensity"]).unique(
                "replication", keep="first", maintain_order=True
            )
            columns[tuned(rule)] = column(best, metric)
            columns[f"alpha: {rule}"] = column(best, "intensity")
        control = part.filter(pl.col("arm") == CONTROL)
        if control.height:
            columns[CONTROL] = column(control, metric)
            columns["lambda"] = column(control, "shrinkage")
        out[int(vocab)] = columns
    return dict(sorted(out.items()))


def comparisons(columns: dict[str, np.ndarray], metric: str = MAE) -> list[tuple[str, str, str, float | None]]:
    """(kind, a, b, intensity) of every test one |V| allows, given the estimators it has; on the log-loss, the
    panels only (the other arms are tuned on the held-out pairs it is computed on)."""
    have = set(columns)
    out: list[tuple[str, str, str, float | None]] = []
    strongest = {}  # rule -> its arm at the largest intensity
    for rule in RULES:
        names = sorted((n for n in have if n.startswith(f"{rule}, α = ")), key=lambda n: float(n.split("= ")[1]))
        out += [(PANEL, name, UNPERTURBED, float(name.split("= ")[1])) for name in names]
        if names:
            strongest[rule] = names[-1]
    out += [(VS_UNPERTURBED, tuned(rule), UNPERTURBED, None) for rule in RULES] + [
        (VS_UNPERTURBED, CONTROL, UNPERTURBED, None)
    ]
    out += [(VS_UNIFORM, arm, UNIFORM, None) for arm in [UNPERTURBED, *strongest.values(), CONTROL]]
    for pick in (strongest, {rule: tuned(rule) for rule in RULES}):
        out += [(CONTRAST, pick[rule], CONTROL, None) for rule in ("empirical", "oracle") if rule in pick]
        if {"oracle", "empirical"} <= set(pick):
            out.append((CONTRAST, pick["oracle"], pick["empirical"], None))
    return [c for c in out if {c[1], c[2]} <= have and (metric != NLL or c[0] == PANEL)]


def paired_t(a: np.ndarray, b: np.ndarray, with_p: bool = True) -> dict:
    """Mean of a - b over the replications where both exist, its 95% t interval and the paired t test's p
    (`t_test_p`: scipy.stats.ttest_rel's two-sided p; with_p=False leaves it for a batch to compute).
    No test (p None) with fewer than 2 pairs, or when every difference is exactly 0: then a and b are the same
    estimate (a tuned arm that chose alpha = 0 everywhere), nothing to test, and it stays out of Holm's family.
    The same nonzero difference in every pair (no spread) gives p = 0."""
    keep = ~(np.isnan(a) | np.isnan(b))
    a, b = a[keep], b[keep]
    d = a - b
    n = len(d)
    out = {"n": n, "a_mean": _mean(a), "b_mean": _mean(b), "difference": _mean(d)}
    out |= {"sd": None, "low": None, "high": None, "p": None}
    if n < 2 or not d.any():
        return out
    sd = float(d.std(ddof=1))
    half = t_quantile(1 - LEVEL / 2, n - 1) * sd / math.sqrt(n)
    mean = float(d.mean())
    p = float(t_test_p(np.array([mean]), np.array([sd]), np.array([n]))[0]) if with_p else None
    return out | {"sd": sd, "low": mean - half, "high": mean + half, "p": p}


def t_test_p(mean: np.ndarray, sd: np.ndarray, n: np.ndarray) -> np.ndarray:
    """Two-sided p of one-sample t tests of mean 0 on differences (their mean, SD, count), vectorised: what
    scipy.stats.ttest_rel gives for each pair of samples, in one scipy call for a whole study. SD 0: p = 0."""
    from scipy import stats

    with np.errstate(divide="ignore", invalid="ignore"):
        t = np.abs(mean) / (sd / np.sqrt(n))
    return np.where(sd == 0, 0.0, 2 * stats.t.sf(t, n - 1))


def _mean(values: np.ndarray) -> float | None:
    return float(values.mean()) if len(values) else None


def minimum_detectable(sd: float, n: int, level: float, power: float = POWER) -> float:
    """The smallest |mean difference| a two-sided paired t test at `level` marks with probability `power`
    (the normal-shift approximation with t quantiles): (t_{1 - level/2, n-1} + t_{power, n-1}) sd / sqrt(n)."""
    return (t_quantile(1 - level / 2, n - 1) + t_quantile(power, n - 1)) * sd / math.sqrt(n)


@lru_cache(maxsize=256)
def t_quantile(q: float, df: int) -> float:
    """Student's t quantile (cached: a study asks for the same few hundreds of times)."""
    from scipy import stats

    return float(stats.t.ppf(q, df))


def paired_tests(results: pl.DataFrame, metric: str = MAE) -> pl.DataFrame:
    """Every comparison of `comparisons` for every |V| on `metric` (MAE on unseen pairs, or NLL), with p_holm over
    all of them (one family per metric), the MDE of each at Holm's first step and a verdict: 'a lower' / 'a higher'
    (p_holm < LEVEL), 'not detected', 'identical' (every difference exactly 0) or 'untested' (fewer than 2
    replications)."""
    rows: list[dict[str, Any]] = []
    for vocab, columns in estimates(results, metric).items():
        for kind, a, b, intensity in comparisons(columns, metric):
            rows.append({"metric": metric, "vocab_size": vocab, "kind": kind, "a": a, "b": b, "intensity": intensity})
            rows[-1] |= paired_t(columns[a], columns[b], with_p=False)
    tested = [r for r in rows if r["sd"] is not None]
    if tested:
        p = t_test_p(*(np.array([r[k] for r in tested], dtype=float) for k in ("difference", "sd", "n")))
        for row, value in zip(tested, p):
            row["p"] = float(value)
    adjusted = holm([r["p"] for r in rows])
    m = sum(p is not None for p in adjusted)
    for row, p_holm in zip(rows, adjusted):
        row["p_holm"] = p_holm
        row["mde"] = None if row["sd"] is None else minimum_detectable(row["sd"], row["n"], LEVEL / m)
        if p_holm is None:
            row["verdict"] = "identical" if row["n"] >= 2 else "untested"  # no test: all differences 0, or n < 2
        elif p_holm < LEVEL and row["difference"] != 0:
            row["verdict"] = "a lower" if row["difference"] < 0 else "a higher"
        else:
            row["verdict"] = "not detected"
    return pl.DataFrame(rows, schema=TEST_COLUMNS)


def study_tests(results: pl.DataFrame) -> pl.DataFrame:
    """Both families: the MAE on unseen pairs (every kind of test) and the held-out log-loss (the panels)."""
    return pl.concat([paired_tests(results, MAE), paired_tests(results, NLL)])


def tuning_summary(results: pl.DataFrame) -> pl.DataFrame:
    """Per |V|: what the held-out sequences chose: the control's mean lambda, each rule's mean tuned alpha and in
    how many replications it was 0 (no perturbation)."""
    rows = []
    for vocab, columns in estimates(results).items():
        row: dict = {"vocab_size": vocab, "replications": len(next(iter(columns.values())))}
        row["lambda_mean"] = float(np.nanmean(columns["lambda"])) if "lambda" in columns else None
        for rule in RULES:
            chosen = columns.get(f"alpha: {rule}")
            row[f"alpha_{rule}_mean"] = None if chosen is None else float(np.nanmean(chosen))
            row[f"alpha_{rule}_zero"] = None if chosen is None else int((chosen == 0).sum())
        rows.append(row)
    return pl.DataFrame(rows)


REACH_COLUMNS = {
    "vocab_size": pl.Int32,
    "arm": pl.String,
    "intensity": pl.Float64,
    "replications": pl.Int32,
    "unseen_pairs_mean": pl.Float64,
    "reached_mean": pl.Float64,
    "reached_max": pl.Int32,
    "reached_share": pl.Float64,
}


def reach_summary(results: pl.DataFrame) -> pl.DataFrame:
    """Per |V|, synonym rule and alpha > 0: how many of D's unseen pairs the perturbed copy holds as training pairs
    (`n_unseen_pairs_reached` of the fits; study.unseen_pairs_reached), its mean and largest count over the
    replications, and its share of the unseen pairs (pooled over replications). Empty for fits without the count."""
    if "n_unseen_pairs_reached" not in results.columns or "n_unseen_pairs" not in results.columns:
        return pl.DataFrame(schema=REACH_COLUMNS)
    perturbed = results.filter(pl.col("arm").is_in(RULES) & (pl.col("intensity") > 0))
    return (
        perturbed.group_by(["vocab_size", "arm", "intensity"])
        .agg(
            pl.len().alias("replications"),
            pl.col("n_unseen_pairs").mean().alias("unseen_pairs_mean"),
            pl.col("n_unseen_pairs_reached").mean().alias("reached_mean"),
            pl.col("n_unseen_pairs_reached").max().alias("reached_max"),
            (pl.col("n_unseen_pairs_reached").sum() / pl.col("n_unseen_pairs").sum()).alias("reached_share"),
        )
        .sort(["vocab_size", "arm", "intensity"])
        .cast(REACH_COLUMNS)  # type: ignore[arg-type]
    )
