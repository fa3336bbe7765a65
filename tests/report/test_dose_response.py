"""The dose-response trend (report.dose_response): the per-seed slope on log2(alpha) is the least-squares one, the
across-seeds test holds its level when the dose changes nothing at the real study's sizes (3 doses, 3 and 5 seeds),
sees a slope of the size the study wants to see, and the summary's verdict follows the measured sign."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from scipy import stats

from workflow_lib.report.dose_response import seed_slopes, trend_findings, trend_rows, trend_table, verdict
from workflow_lib.report.statistics import across_seeds

DOSES = [0.025, 0.1, 0.4]


def frame(values: dict[tuple[int, float], float], eval_set: str = "licences", tv: bool = False) -> pl.DataFrame:
    """Metrics rows of an MLE arm with insertion at each (seed, dose), plus the unperturbed baseline of each seed."""
    rows = []
    seeds = sorted({s for s, _ in values})
    for seed in seeds:
        for dose in [0.0, *sorted({d for _, d in values})]:
            strategy = "insertion" if dose else "none"
            value = values.get((seed, dose), 0.5)
            rows.append(
                {
                    "model": "smollm2",
                    "dataset": "wikitext2-train",
                    "objective": "mle",
                    "train_synonyms": "embedding-words" if dose else "none",
                    "train_mode": "augment",
                    "copies": 1,
                    "train_strategy": strategy,
                    "train_intensity": dose,
                    "seed": seed,
                    "eval_set": eval_set,
                    "decoder": "unbiased",
                    "test_synonyms": "embedding-words" if dose else "none",
                    "test_strategy": strategy,
                    "test_intensity": dose,
                    "test_mode": "exact",
                    "mauve_mean": value,
                    "rouge1_mean": 0.3,
                    "perplexity": 40.0 + seed,
                    **({"tv_mean": value} if tv else {}),
                }
            )
    return pl.DataFrame(rows)


def test_the_seed_slope_is_least_squares_on_log2_dose():
    values = np.array([[0.1, 0.3, 0.5], [1.0, 0.0, 2.0]])
    expected = [stats.linregress(np.log2(DOSES), row).slope for row in values]
    assert seed_slopes(np.array(DOSES), values) == pytest.approx(expected)
    assert seed_slopes(np.array(DOSES), np.array([[0.7, 0.7, 0.7]]))[0] == pytest.approx(0.0)
    with pytest.raises(ValueError, match="non-finite"):
        seed_slopes(np.array(DOSES), np.array([[0.1, np.nan, 0.2]]))


def test_a_falling_mauve_is_found_with_its_interval_and_agrees_with_the_paper():
    rng = np.random.default_rng(0)
    # -0.05 per doubling, seed offsets, small noise: 5 seeds
    values = {
        (s, d): 0.6 + 0.02 * s - 0.05 * np.log2(d / 0.025) + rng.normal(0, 0.005) for s in range(5) for d in DOSES
    }
    rows = trend_rows(frame(values))
    mauve = rows.filter(pl.col("metric") == "MAUVE").row(0, named=True)
    assert mauve["doses"] == "0.025, 0.1, 0.4" and mauve["seeds"] == 5
    assert mauve["low"] < -0.05 < mauve["high"] and mauve["slope"] == pytest.approx(-0.05, abs=0.01)
    assert mauve["p_holm"] < 0.05 and verdict(mauve).endswith("agrees")
    # the baseline (alpha = 0) is not in the slope: the sweep is over the perturbed doses
    assert len(mauve["at_dose"]) == 3
    # ROUGE-1 and perplexity constant over doses: their slope is 0 with no spread (p = 1), never a trend
    rouge = rows.filter(pl.col("metric") == "ROUGE-1").row(0, named=True)
    assert rouge["slope"] == pytest.approx(0.0, abs=1e-12) and "no trend detected" in verdict(rouge)
    sentence = trend_findings(rows)[0]
    assert sentence.index("predicts") < sentence.index("Measured") and "agrees" in sentence
    assert "| MAUVE |" in trend_table(rows)
    rising = trend_rows(frame({k: 1.2 - v for k, v in values.items()})).filter(pl.col("metric") == "MAUVE")
    assert verdict(rising.row(0, named=True)).endswith("disagrees")


def test_too_few_doses_or_seeds_is_not_testable_never_no_difference():
    two_doses = {(s, d): 0.5 for s in range(3) for d in DOSES[:2]}
    assert trend_rows(frame(two_doses)).height == 0
    two_seeds = {(s, d): 0.5 + 0.01 * s * d for s in range(2) for d in DOSES}
    row = trend_rows(frame(two_seeds)).filter(pl.col("metric") == "MAUVE").row(0, named=True)
    assert row["p_holm"] is None and verdict(row) == "not testable (2 seeds)"
    # a seed missing one dose's MAUVE (refused or not run) leaves the trend, not the arm
    gappy = frame({(s, d): 0.5 + 0.01 * s + 0.03 * d for s in range(4) for d in DOSES})
    gappy = gappy.with_columns(
        pl.when((pl.col("seed") == 3) & (pl.col("train_intensity") == 0.1))
        .then(None)
        .otherwise(pl.col("mauve_mean"))
        .alias("mauve_mean")
    )
    assert trend_rows(gappy).filter(pl.col("metric") == "MAUVE")["seeds"].to_list() == [3]


@pytest.mark.parametrize("seeds", [3, 5])
def test_the_trend_test_holds_its_level_when_the_dose_changes_nothing(seeds):
    """Null studies at the real study's size: seed effects (shared by a seed's doses) and heavy-tailed per-arm noise,
    no dose effect. The rejection rate at 0.05 stays within its Monte Carlo band of 0.05 (4,000 studies: ±0.011)."""
    rng = np.random.default_rng(seeds)
    studies = 4000
    seed_effect = rng.normal(0, 0.05, (studies, seeds, 1))
    noise = rng.standard_t(4, (studies, seeds, len(DOSES))) * 0.01
    values = 0.6 + seed_effect + noise
    p = np.array([across_seeds(seed_slopes(np.array(DOSES), v)).p for v in values])
    assert abs((p < 0.05).mean() - 0.05) < 0.011


def test_the_trend_test_sees_the_size_the_study_wants_at_five_seeds():
    """A fall of 0.02 MAUVE per doubling (0.08 over 0.025-0.4: the size of the paper's gain at 0.025) against a per-arm
    noise of 0.01: the test rejects in most studies."""
    rng = np.random.default_rng(7)
    x = np.log2(np.array(DOSES) / 0.025)
    values = 0.6 + rng.normal(0, 0.05, (1000, 5, 1)) - 0.02 * x + rng.normal(0, 0.01, (1000, 5, 3))
    p = np.array([across_seeds(seed_slopes(np.array(DOSES), v)).p for v in values])
    assert (p < 0.05).mean() > 0.8


def test_a_study_without_a_sweep_has_no_trend_rows():
    one_dose = frame({(s, 0.025): 0.5 for s in range(3)})
    assert trend_rows(one_dose).height == 0 and trend_findings(trend_rows(one_dose)) == []
    assert trend_table(trend_rows(one_dose)) == ""
