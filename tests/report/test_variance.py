"""Variance components (workflow_lib.report.variance): unbiased, their intervals cover at their level on simulated
studies of known components, and a study's files become the arrays the seed-level test averages."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from workflow_lib.report.variance import (
    INTERACTION,
    KMEANS,
    PROMPTS,
    RUNS,
    SEED_MEAN,
    SEEDS,
    chi2_interval,
    components,
    crossed,
    markdown,
    nested,
)

STUDIES = 400
# Binomial 3-sigma band around 95% coverage at STUDIES replications.
BAND = 3 * np.sqrt(0.95 * 0.05 / STUDIES)


def simulate_crossed(rng, truth: dict, S: int, P: int, R: int) -> np.ndarray:
    return (
        rng.normal(0, np.sqrt(truth[SEEDS]), (S, 1, 1))
        + rng.normal(0, np.sqrt(truth[PROMPTS]), (1, P, 1))
        + rng.normal(0, np.sqrt(truth[INTERACTION]), (S, P, 1))
        + rng.normal(0, np.sqrt(truth[RUNS]), (S, P, R))
    )


def simulate_nested(rng, truth: dict, S: int, R: int, K: int) -> np.ndarray:
    return (
        rng.normal(0, np.sqrt(truth[SEEDS]), (S, 1, 1))
        + rng.normal(0, np.sqrt(truth[RUNS]), (S, R, 1))
        + rng.normal(0, np.sqrt(truth[KMEANS]), (S, R, K))
    )


def assert_unbiased_and_covering(truth: dict, split) -> None:
    """Over STUDIES calls of `split` (one simulated study's component rows): each component's mean estimate within 4
    Monte Carlo SE of its truth, and its 95% interval covering within BAND of 95%."""
    estimates, covered = {k: [] for k in truth}, {k: 0 for k in truth}
    for _ in range(STUDIES):
        for row in split():
            estimates[row["component"]].append(row["estimate"])
            covered[row["component"]] += row["low"] <= truth[row["component"]] <= row["high"]
    for k, value in truth.items():
        assert abs(np.mean(estimates[k]) - value) < 4 * np.std(estimates[k]) / np.sqrt(STUDIES), k
        assert abs(covered[k] / STUDIES - 0.95) < BAND, (k, covered[k] / STUDIES)


@pytest.mark.parametrize("S,P,R", [(3, 20, 2), (5, 40, 3)])
def test_crossed_components_are_unbiased_and_their_intervals_cover(S, P, R):
    truth = {SEEDS: 0.4, PROMPTS: 1.0, INTERACTION: 0.6, RUNS: 2.0}
    truth[SEED_MEAN] = truth[SEEDS] + truth[INTERACTION] / P + truth[RUNS] / (P * R)
    rng = np.random.default_rng(S)
    assert_unbiased_and_covering(truth, lambda: crossed(simulate_crossed(rng, truth, S, P, R)))


def test_nested_components_of_mauve_are_unbiased_and_cover():
    truth = {SEEDS: 2e-3, RUNS: 1e-3, KMEANS: 5e-4}
    S, R, K = 3, 3, 5
    truth[SEED_MEAN] = truth[SEEDS] + truth[RUNS] / R + truth[KMEANS] / (R * K)
    rng = np.random.default_rng(7)
    assert_unbiased_and_covering(truth, lambda: nested(simulate_nested(rng, truth, S, R, K)))


def test_the_seed_mean_is_the_variance_of_the_seeds_mean_differences():
    """What the test across seeds divides by: the sample variance of the seeds' mean differences."""
    d = np.random.default_rng(1).normal(size=(4, 10, 3))
    rows = {r["component"]: r for r in crossed(d)}
    assert rows[SEED_MEAN]["estimate"] == pytest.approx(d.mean((1, 2)).var(ddof=1))
    assert rows[SEED_MEAN]["df"] == 3


def test_what_one_seed_or_one_run_cannot_separate_is_named_not_guessed():
    d = np.random.default_rng(2).normal(size=(1, 12, 1))
    rows = {r["component"]: r for r in crossed(d)}
    assert rows[SEEDS]["estimate"] is None and "1 training seed" in rows[SEEDS]["note"]
    assert rows[RUNS]["estimate"] is None and rows[INTERACTION]["estimate"] is None
    assert "runs" in rows[PROMPTS]["note"] and rows[PROMPTS]["estimate"] == pytest.approx(d.mean((0, 2)).var(ddof=1))
    assert SEED_MEAN not in rows
    two_seeds_one_run = {r["component"]: r for r in crossed(np.random.default_rng(3).normal(size=(2, 12, 1)))}
    assert "with runs" in two_seeds_one_run[INTERACTION]["note"]


def test_three_seeds_know_the_seed_mean_to_within_a_factor_the_summary_states():
    low, high = chi2_interval(1.0, 2)
    assert (round(low, 2), round(high, 1)) == (0.27, 39.5)


# ---- a study's files ------------------------------------------------------------------------------------------

CONDITION = "results/metrics/tiny/syn/mle/{syn}/augment-m1/{st}-{ti}/seed{seed}/test/unbiased/{syn}/{st}-{ti}-exact"


def write_condition(root: Path, ti: str, seed: int, rouge: np.ndarray, mauve: np.ndarray) -> str:
    """rouge [P, R], mauve [R, K]: a metrics JSON with MAUVE per (run, k-means seed) and its ROUGE sidecar."""
    syn, st = ("none", "none") if ti == "0" else ("distributional", "insertion")
    stem = root / CONDITION.format(syn=syn, st=st, ti=ti, seed=seed)
    stem.parent.mkdir(parents=True, exist_ok=True)
    R = rouge.shape[1]
    Path(f"{stem}.json").write_text(
        json.dumps(
            {
                "mauve": mauve.mean(1).tolist(),
                "mauve_by_seed": mauve.tolist(),
                "run_ids": list(range(R)),
                "runs": R,
                "prompts": rouge.shape[0],
                "mauve_texts": rouge.shape[0],
                "mauve_status": None,
            }
        )
    )
    prompts, runs = np.meshgrid(np.arange(rouge.shape[0]), np.arange(R), indexing="ij")
    pl.DataFrame(
        {
            "prompt_id": prompts.ravel(),
            "run": runs.ravel(),
            "rouge1": rouge.ravel(),
            "rouge2": rouge.ravel(),
            "rougeL": rouge.ravel(),
        }
    ).write_parquet(f"{stem}.prompts.parquet")
    return str(Path(f"{stem}.json").relative_to(root))


def test_a_studys_contrast_is_split_from_its_files(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rng = np.random.default_rng(5)
    S, P, R, K = 3, 8, 2, 4
    base = rng.uniform(0.3, 0.5, (P, R))
    d = rng.normal(0.02, 0.01, (S, P, R))
    md = rng.normal(0.05, 0.01, (S, R, K))
    paths = []
    for s in range(S):
        plain_mauve = rng.uniform(0.6, 0.7, (R, K))
        paths.append(write_condition(tmp_path, "0", s + 1, base, plain_mauve))
        paths.append(write_condition(tmp_path, "0.025", s + 1, base + d[s], plain_mauve + md[s]))
    frame = components(paths, 0.025)
    rouge = frame.filter((pl.col("metric") == "rouge1") & (pl.col("family") == "perturbation"))
    expected = {r["component"]: r["estimate"] for r in crossed(d)}
    assert {r["component"]: r["estimate"] for r in rouge.iter_rows(named=True)} == pytest.approx(expected)
    assert (
        rouge["seeds"].unique().to_list(),
        rouge["prompts"].unique().to_list(),
        rouge["runs"].unique().to_list(),
    ) == (
        [S],
        [P],
        [R],
    )
    mauve = frame.filter((pl.col("metric") == "mauve") & (pl.col("family") == "perturbation"))
    assert {r["component"]: r["estimate"] for r in mauve.iter_rows(named=True)} == pytest.approx(
        {r["component"]: r["estimate"] for r in nested(md)}
    )
    assert mauve["kmeans"][0] == K
    text = markdown(frame)
    assert text.count("| ROUGE-1 |") == 1 and text.count("| MAUVE |") == 1
    assert "3 x 8 x 2" in text
