"""Where a contrast's variance comes from: training seeds, prompts, sampling runs and MAUVE's k-means, each with its
95% interval (the summary's "Where the variance comes from", `tables/variance.csv`).

A comparison of two training methods (report.seeds) tests the mean of S seeds' differences d, each over P prompts
and R runs; how many of each a study needs depends on how the variance of d splits among them, which a finished
study measures. Per-text metrics (ROUGE, the exact TV) are split by the two-way random ANOVA with replication
(`crossed`), MAUVE's scores by a nested one (`nested`); intervals are exact chi-square (`chi2_interval`) or modified
large-sample (`mls_interval`). The components, one seed's mean variance V and what the intervals cover:
docs/method.md §4, "Variance components and the design calculator"; report.design reads them.
"""

from __future__ import annotations

import argparse
import logging
from collections import defaultdict

import numpy as np
import polars as pl

from workflow_lib.cli import run
from workflow_lib.comparisons import pairs
from workflow_lib.files import atomic_path
from workflow_lib.metric_registry import IN_FINDINGS, PAIRED, REGISTRY
from workflow_lib.report.contrasts import conditions
from workflow_lib.report.resolution import MAUVE
from workflow_lib.report.study_files import StudyFiles

log = logging.getLogger("workflow_lib.report.variance")

LEVEL = 0.95
SEEDS, PROMPTS, INTERACTION, RUNS, KMEANS, SEED_MEAN = (
    "seeds",
    "prompts",
    "seeds x prompts",
    "runs",
    "k-means",
    "seed mean",
)
IDENTITY = ["family", "metric", "model", "dataset", "objective", "eval_set", "decoder", "a", "b"]
COLUMNS = {
    **{k: pl.Utf8 for k in IDENTITY},
    "seeds": pl.Int64,
    "prompts": pl.Int64,
    "runs": pl.Int64,
    "kmeans": pl.Int64,
    "component": pl.Utf8,
    "estimate": pl.Float64,
    "low": pl.Float64,
    "high": pl.Float64,
    "df": pl.Int64,
    "note": pl.Utf8,
}


# ---- intervals ------------------------------------------------------------------------------------------------


def chi2_interval(ms: float, df: int, level: float = LEVEL) -> tuple[float, float]:
    """The exact interval of E[MS] from one mean square with df degrees of freedom (df MS / E[MS] ~ chi2(df))."""
    from scipy import stats

    tail = (1 - level) / 2
    return df * ms / float(stats.chi2.ppf(1 - tail, df)), df * ms / float(stats.chi2.ppf(tail, df))


def mls_interval(c: float, ms1: float, df1: int, ms2: float, df2: int, level: float = LEVEL) -> tuple[float, float]:
    """The MLS interval of c (E[MS1] - E[MS2]) (Burdick and Graybill 1992, section 3.3; df2 may be infinite)."""
    from scipy import stats

    a = (1 - level) / 2

    def f_upper(tail: float, n1: float, n2: float) -> float:  # F with `tail` to its right
        if np.isinf(n2):
            return float(stats.chi2.ppf(1 - tail, n1)) / n1
        return float(stats.f.ppf(1 - tail, n1, n2))

    g1, h1 = 1 - 1 / f_upper(a, df1, np.inf), 1 / f_upper(1 - a, df1, np.inf) - 1
    g2, h2 = 1 - 1 / f_upper(a, df2, np.inf), 1 / f_upper(1 - a, df2, np.inf) - 1
    f_a, f_1a = f_upper(a, df1, df2), f_upper(1 - a, df1, df2)
    g12 = ((f_a - 1) ** 2 - g1**2 * f_a**2 - h2**2) / f_a
    h12 = ((1 - f_1a) ** 2 - h1**2 * f_1a**2 - g2**2) / f_1a
    estimate = c * (ms1 - ms2)
    low = estimate - c * np.sqrt(max(0.0, g1**2 * ms1**2 + h2**2 * ms2**2 + g12 * ms1 * ms2))
    high = estimate + c * np.sqrt(max(0.0, h1**2 * ms1**2 + g2**2 * ms2**2 + h12 * ms1 * ms2))
    return float(low), float(high)


# ---- the two designs --------------------------------------------------------------------------------------------


def _row(component: str, estimate, interval, df, note: str | None = None) -> dict:
    """A component's row; its interval's ends floored at 0, as a variance cannot be negative (the estimate is not)."""
    low, high = (max(0.0, interval[0]), max(0.0, interval[1])) if interval is not None else (None, None)
    return {"component": component, "estimate": estimate, "low": low, "high": high, "df": df, "note": note}


def _seed_mean(ms_s: float, df_s: int, cells: int, level: float) -> dict:
    """V, one seed's mean difference's variance: the seeds' mean square over the `cells` values a seed averages, with
    its exact chi-square interval."""
    low, high = chi2_interval(ms_s, df_s, level)
    return _row(SEED_MEAN, ms_s / cells, (low / cells, high / cells), df_s)


def _ms(sum_of_squares: float, df: int) -> float:
    """A mean square; NaN where it has no degrees of freedom (callers branch on the df, never on the value)."""
    return sum_of_squares / df if df else float("nan")


def crossed(d: np.ndarray, level: float = LEVEL) -> list[dict]:
    """Components of d[S seeds, P prompts, R runs] (seeds crossed with prompts, runs within): one row each, then V."""
    d = np.asarray(d, dtype=np.float64)
    S, P, R = d.shape
    grand, seed, prompt, cell = d.mean(), d.mean((1, 2)), d.mean((0, 2)), d.mean(2)
    df_s, df_p, df_sp, df_e = S - 1, P - 1, (S - 1) * (P - 1), S * P * (R - 1)
    ms_s = _ms(P * R * float(((seed - grand) ** 2).sum()), df_s)
    ms_p = _ms(S * R * float(((prompt - grand) ** 2).sum()), df_p)
    residual = cell - seed[:, None] - prompt[None, :] + grand
    ms_sp = _ms(R * float((residual**2).sum()), df_sp)
    ms_e = _ms(float(((d - cell[..., None]) ** 2).sum()), df_e)
    rows = []
    if S < 2:
        # One seed: the prompt main effect and its seed interaction are one thing, and nothing is between seeds.
        rows.append(_row(SEEDS, None, None, 0, "not estimable: 1 training seed"))
        if df_p and df_e:
            rows.append(
                _row(
                    PROMPTS,
                    (ms_p - ms_e) / R,
                    mls_interval(1 / R, ms_p, df_p, ms_e, df_e, level),
                    df_p,
                    "with seeds x prompts (1 seed)",
                )
            )
        else:
            rows.append(
                _row(
                    PROMPTS,
                    ms_p,
                    chi2_interval(ms_p, df_p, level) if df_p else None,
                    df_p,
                    "with seeds x prompts and runs (1 seed, 1 run)",
                )
            )
        rows.append(_row(INTERACTION, None, None, 0, "not estimable: 1 training seed"))
    else:
        rows.append(
            _row(SEEDS, (ms_s - ms_sp) / (P * R), mls_interval(1 / (P * R), ms_s, df_s, ms_sp, df_sp, level), df_s)
        )
        rows.append(
            _row(PROMPTS, (ms_p - ms_sp) / (S * R), mls_interval(1 / (S * R), ms_p, df_p, ms_sp, df_sp, level), df_p)
        )
        if R > 1:
            rows.append(
                _row(INTERACTION, (ms_sp - ms_e) / R, mls_interval(1 / R, ms_sp, df_sp, ms_e, df_e, level), df_sp)
            )
        else:
            rows.append(_row(INTERACTION, ms_sp, chi2_interval(ms_sp, df_sp, level), df_sp, "with runs (1 run)"))
    if R > 1:
        rows.append(_row(RUNS, ms_e, chi2_interval(ms_e, df_e, level), df_e))
    else:
        rows.append(_row(RUNS, None, None, 0, "not estimable: 1 run"))
    if S >= 2:
        rows.append(_seed_mean(ms_s, df_s, P * R, level))
    return rows


def nested(d: np.ndarray, level: float = LEVEL) -> list[dict]:
    """Components of d[S seeds, R runs, K k-means seeds] (runs within seeds, k-means within runs), then V."""
    d = np.asarray(d, dtype=np.float64)
    S, R, K = d.shape
    grand, seed, run_means = d.mean(), d.mean((1, 2)), d.mean(2)
    df_s, df_r, df_k = S - 1, S * (R - 1), S * R * (K - 1)
    ms_s = _ms(R * K * float(((seed - grand) ** 2).sum()), df_s)
    ms_r = _ms(K * float(((run_means - seed[:, None]) ** 2).sum()), df_r)
    ms_k = _ms(float(((d - run_means[..., None]) ** 2).sum()), df_k)
    rows = []
    below = ms_r if R > 1 else ms_k  # what the seeds' mean square is compared with
    df_below = df_r if R > 1 else df_k
    if S < 2:
        rows.append(_row(SEEDS, None, None, 0, "not estimable: 1 training seed"))
    elif df_below:
        note = None if R > 1 else "with runs (1 run)"
        rows.append(
            _row(
                SEEDS,
                (ms_s - below) / (R * K),
                mls_interval(1 / (R * K), ms_s, df_s, below, df_below, level),
                df_s,
                note,
            )
        )
    else:
        rows.append(_row(SEEDS, None, None, df_s, "not separable: 1 run and 1 k-means seed"))
    if R > 1 and df_k:
        rows.append(_row(RUNS, (ms_r - ms_k) / K, mls_interval(1 / K, ms_r, df_r, ms_k, df_k, level), df_r))
    elif R > 1:
        rows.append(_row(RUNS, ms_r, chi2_interval(ms_r, df_r, level), df_r, "with k-means (1 k-means seed)"))
    else:
        rows.append(_row(RUNS, None, None, 0, "not estimable: 1 run"))
    if df_k:
        rows.append(_row(KMEANS, ms_k, chi2_interval(ms_k, df_k, level), df_k))
    else:
        rows.append(_row(KMEANS, None, None, 0, "not estimable: 1 k-means seed"))
    if S >= 2:
        rows.append(_seed_mean(ms_s, df_s, R * K, level))
    return rows


# ---- a study's contrasts as arrays ------------------------------------------------------------------------------


def _by_seed(designed: list[dict]) -> dict[tuple, dict[int, dict]]:
    """The designed pairs grouped by everything but the seed: a contrast and its seeds' pairs."""
    groups: defaultdict[tuple, dict[int, dict]] = defaultdict(dict)
    for pair in designed:
        if pair["kind"] in ("metrics", "extrapolation"):
            key = (pair["kind"], *(pair[k] for k in IDENTITY if k != "metric"))
            groups[key][int(pair["seed"])] = pair
    return groups


def prompt_differences(seeds: dict[int, dict], files: StudyFiles, metric: str) -> np.ndarray | None:
    """d[S, P, R] of a per-text metric over the prompts and runs every seed's two arms share; None if none."""
    tables = []
    for seed in sorted(seeds):
        pair = seeds[seed]
        a, b = files.per_prompt(pair["path_a"]), files.per_prompt(pair["path_b"])
        if a is None or b is None or metric not in a.columns:
            return None
        keys = ["prompt_id", "run"] if "run" in a.columns else ["prompt_id"]
        tables.append(a.select(*keys, metric).join(b.select(*keys, metric), on=keys, suffix="_b"))
    keys = ["prompt_id", "run"] if "run" in tables[0].columns else ["prompt_id"]
    common = tables[0].select(keys)
    for t in tables[1:]:
        common = common.join(t.select(keys), on=keys)
    if common.height == 0:
        return None
    common = common.sort(keys)
    prompts = common["prompt_id"].unique().sort()
    runs = common["run"].unique().sort() if "run" in keys else pl.Series([0])
    if common.height != prompts.len() * runs.len():  # not balanced: keep the prompts that have every shared run
        whole = common.group_by("prompt_id").len().filter(pl.col("len") == runs.len())["prompt_id"]
        common = common.filter(pl.col("prompt_id").is_in(whole.implode()))
        prompts = whole.sort()
    out = []
    for t in tables:
        joined = common.join(t, on=keys, how="left").sort(keys)
        out.append((joined[metric] - joined[f"{metric}_b"]).to_numpy().reshape(prompts.len(), runs.len()))
    return np.stack(out)


def mauve_differences(seeds: dict[int, dict], files: StudyFiles) -> np.ndarray | None:
    """d[S, R, K] of MAUVE over the runs every seed's two arms share; None where a side has no MAUVE."""
    grids = []
    for seed in sorted(seeds):
        pair = seeds[seed]
        a, b = files.metrics(pair["path_a"]), files.metrics(pair["path_b"])
        if a.get("mauve_status") or b.get("mauve_status") or not a.get("mauve_by_seed") or not b.get("mauve_by_seed"):
            return None
        grids.append(
            (
                {r: row for r, row in zip(a["run_ids"], a["mauve_by_seed"])},
                {r: row for r, row in zip(b["run_ids"], b["mauve_by_seed"])},
            )
        )
    runs = sorted(set.intersection(*(set(ga) & set(gb) for ga, gb in grids)))
    if not runs:
        return None
    return np.stack([[np.subtract(ga[r], gb[r]) for r in runs] for ga, gb in grids])


def components(paths: list[str], intensity: float, level: float = LEVEL) -> pl.DataFrame:
    """Every designed contrast's components (COLUMNS), per metric."""
    files = StudyFiles()
    rows = []
    for key, seeds in sorted(_by_seed(pairs(conditions(paths), intensity)).items(), key=lambda kv: str(kv[0])):
        kind, identity = key[0], dict(zip([k for k in IDENTITY if k != "metric"], key[1:]))
        # The kind's metrics its per-prompt sidecar pairs (over prompts, or a builtin set's references), then MAUVE,
        # paired over runs, whose per-run scores mauve_differences reads.
        metrics = [m.name for m in REGISTRY if m.kind == kind and m.paired in ("prompts", "references")]
        metrics += [MAUVE] if kind == "metrics" else []
        for metric in metrics:
            if metric == MAUVE:
                d = mauve_differences(seeds, files)
                found = nested(d, level) if d is not None else []
                shape = {"seeds": None, "prompts": None, "runs": None, "kmeans": None}
                if d is not None:
                    prompts = files.metrics(next(iter(seeds.values()))["path_a"]).get("mauve_texts")
                    shape = {"seeds": d.shape[0], "prompts": prompts, "runs": d.shape[1], "kmeans": d.shape[2]}
            else:
                d = prompt_differences(seeds, files, metric)
                found = crossed(d, level) if d is not None else []
                shape = {"seeds": None, "prompts": None, "runs": None, "kmeans": None}
                if d is not None:
                    shape = {"seeds": d.shape[0], "prompts": d.shape[1], "runs": d.shape[2], "kmeans": None}
            for r in found:
                rows.append(identity | {"metric": metric} | shape | r)
    return pl.DataFrame([{k: r.get(k) for k in COLUMNS} for r in rows], schema=COLUMNS, orient="row")


def _cell(row: dict | None) -> str:
    if row is None:  # not a component of this metric's design (k-means of ROUGE, prompts of MAUVE)
        return ""
    if row["estimate"] is None:
        return "n/e"
    return f"{row['estimate']:.2g} [{row['low']:.2g}, {row['high']:.2g}]"


def markdown(frame: pl.DataFrame, family: str = "perturbation") -> str:
    """The summary's table: one row per contrast of `family` and metric of the findings, each component
    `estimate [95% interval]`, n/e where the design cannot separate it (the row's note says why)."""
    chosen = frame.filter((pl.col("family") == family) & pl.col("metric").is_in(list(IN_FINDINGS)))
    if chosen.height == 0:
        return f"No contrast of the {family} family has per-prompt or MAUVE data to split.\n"
    order = [SEEDS, PROMPTS, INTERACTION, RUNS, KMEANS, SEED_MEAN]
    lines = [
        "| metric | eval set | model, objective | contrast | seeds x prompts x runs | "
        + " | ".join(order)
        + " | note |",
        "|" + "---|" * (6 + len(order)),
    ]
    for key, group in chosen.sort("metric", "eval_set").group_by(IDENTITY, maintain_order=True):
        row = dict(zip(IDENTITY, key))
        by = {r["component"]: r for r in group.iter_rows(named=True)}
        first = group.row(0, named=True)
        shape = f"{first['seeds']} x {first['prompts']} x {first['runs']}"
        notes = "; ".join(dict.fromkeys(r["note"] for r in group.iter_rows(named=True) if r["note"]))
        lines.append(
            f"| {PAIRED.get(row['metric'], row['metric'])} | {row['eval_set']} | {row['model']}, {row['objective']} | "
            f"{row['a']} vs {row['b']} | {shape} | " + " | ".join(_cell(by.get(c)) for c in order) + f" | {notes} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m workflow_lib.report.variance", fromfile_prefix_chars="@")
    parser.add_argument("--intensity", type=float, required=True, help="the headline intensity (insertion)")
    parser.add_argument("--stem", required=True, help="writes STEM.csv (every contrast) and STEM.md (the summary's)")
    parser.add_argument("paths", nargs="*", help="metrics and extrapolation JSON (their .prompts.parquet beside them)")
    args = parser.parse_args()
    frame = components(args.paths, args.intensity)
    with atomic_path(f"{args.stem}.csv") as tmp:
        frame.write_csv(tmp)
    with atomic_path(f"{args.stem}.md") as tmp:
        tmp.write_text(markdown(frame))
    log.info("%d component rows from %d files", frame.height, len(args.paths))


if __name__ == "__main__":
    run(main)
