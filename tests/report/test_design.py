"""The design calculator (workflow_lib.report.design): a design it says has 80% power detects a planted effect in 80% of
studies simulated from known components, the paper's one-seed design's false positives are what it predicts, and
`make design`'s command prices a pilot by the cost model."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest
from scipy import stats

from workflow_lib.cost.devices import device
from workflow_lib.cost.estimate import load_config
from workflow_lib.layout import REPORT_TABLE
from workflow_lib.report import design
from workflow_lib.report.variance import COLUMNS, INTERACTION, KMEANS, PROMPTS, RUNS, SEEDS

REPO = Path(__file__).resolve().parents[2]
STUDIES = 2000


def seed_test_rejects(seed_means: np.ndarray) -> np.ndarray:
    """The test across seeds (report.seeds: the one-sample t of the seeds' differences) on [studies, S]."""
    return stats.ttest_1samp(seed_means, 0.0, axis=1).pvalue < 0.05


def within(rate: float, expected: float) -> bool:
    return abs(rate - expected) < 3 * np.sqrt(expected * (1 - expected) / STUDIES)


def test_a_rouge_design_with_80_percent_power_detects_the_planted_effect_80_percent_of_the_time():
    truth = {SEEDS: 4e-5, PROMPTS: 2e-3, INTERACTION: 1e-3, RUNS: 1e-2}
    effect, prompts, runs = 0.01, 40, 2
    v = design.seed_mean_variance(truth, "rouge1", prompts, runs, prompts, 1)
    seeds = design.fewest_seeds(effect, v)
    predicted = design.power(effect, v, seeds)
    assert predicted >= design.POWER and design.power(effect, v, seeds - 1) < design.POWER
    # The effect is planted on the study's prompts (their own effects centred), as the seeds' test speaks of them.
    rng = np.random.default_rng(11)
    prompt_effects = rng.normal(0, np.sqrt(truth[PROMPTS]), (STUDIES, 1, prompts, 1))
    d = (
        effect
        + rng.normal(0, np.sqrt(truth[SEEDS]), (STUDIES, seeds, 1, 1))
        + prompt_effects
        - prompt_effects.mean(2, keepdims=True)
        + rng.normal(0, np.sqrt(truth[INTERACTION]), (STUDIES, seeds, prompts, 1))
        + rng.normal(0, np.sqrt(truth[RUNS]), (STUDIES, seeds, prompts, runs))
    )
    rate = seed_test_rejects(d.mean((2, 3))).mean()
    assert within(rate, predicted), (seeds, rate, predicted)
    # Against the effect over the eval set (prompts drawn afresh, not centred) the same seeds have less power.
    shared = design.shared_variance(truth, "rouge1", prompts)
    fresh = d + prompt_effects.mean(2, keepdims=True)  # the prompt set's own mean effect kept
    assert design.power(effect, v, seeds, shared=shared) < predicted - 0.02
    assert within(seed_test_rejects(fresh.mean((2, 3))).mean(), design.power(effect, v, seeds, shared=shared))


def test_a_mauve_design_with_80_percent_power_detects_the_planted_effect_80_percent_of_the_time():
    truth = {SEEDS: 2e-4, RUNS: 1e-3, KMEANS: 4e-4}
    effect, runs, kmeans = 0.03, 3, 5
    v = design.seed_mean_variance(truth, "mauve", 100, runs, 100, kmeans)
    seeds = design.fewest_seeds(effect, v)
    predicted = design.power(effect, v, seeds)
    rng = np.random.default_rng(12)
    d = (
        effect
        + rng.normal(0, np.sqrt(truth[SEEDS]), (STUDIES, seeds, 1, 1))
        + rng.normal(0, np.sqrt(truth[RUNS]), (STUDIES, seeds, runs, 1))
        + rng.normal(0, np.sqrt(truth[KMEANS]), (STUDIES, seeds, runs, kmeans))
    )
    rate = seed_test_rejects(d.mean((2, 3))).mean()
    assert predicted >= design.POWER and within(rate, predicted), (seeds, rate, predicted)


def test_the_papers_one_seed_design_has_the_false_positive_rate_it_predicts():
    """A method with no effect, one training per arm: the seed component moves the checkpoint's difference, which the
    per-checkpoint test over prompts does not see."""
    truth = {SEEDS: 1e-4, PROMPTS: 2e-3, INTERACTION: 1e-3, RUNS: 1e-2}
    rng = np.random.default_rng(13)
    n, P, R = 4000, design.PAPER_PROMPTS, design.PAPER_RUNS
    # Each prompt's mean over R runs, drawn directly (its variance: prompts + seeds x prompts + runs / R).
    prompt_means = rng.normal(0, np.sqrt(truth[SEEDS]), (n, 1)) + rng.normal(
        0, np.sqrt(truth[PROMPTS] + truth[INTERACTION] + truth[RUNS] / R), (n, P)
    )
    z = prompt_means.mean(1) / (prompt_means.std(1, ddof=1) / np.sqrt(P))
    rate = (np.abs(z) > stats.norm.ppf(0.975)).mean()
    predicted = design.paper_design(truth, "rouge1", 0.0, P, 1)["false_positive"]
    assert predicted > 0.5  # the between-seed variance dwarfs the SE of 4,000 prompts
    assert abs(rate - predicted) < 3 * np.sqrt(predicted * (1 - predicted) / n)


def test_a_pilot_of_one_seed_cannot_size_a_method_test():
    frame = pl.DataFrame(
        [
            {
                "family": "perturbation",
                "metric": "rouge1",
                "model": "tiny",
                "dataset": "syn",
                "objective": "mle",
                "eval_set": "test",
                "decoder": "unbiased",
                "a": "insertion 0.025",
                "b": "no perturbation",
                "seeds": 1,
                "prompts": 50,
                "runs": 3,
                "kmeans": None,
                "component": c,
                "estimate": e,
                "low": e,
                "high": e,
                "df": 0,
                "note": None,
            }
            for c, e in ((SEEDS, None), (PROMPTS, 1e-3), (INTERACTION, None), (RUNS, 1e-2))
        ],
        schema=COLUMNS,
    )
    rows = design.designs(frame, {"rouge1": 0.01}, {}, {}, "perturbation", 1)
    assert [r["design"] for r in rows] == ["none"] and "one training seed" in rows[0]["note"]


def test_the_command_prices_a_pilot_by_the_cost_model_cheapest_first(tmp_path, capsys):
    """The default study's config as the pilot, its variance table written as a finished study's would be."""
    rows = []
    for c, e, low, high in (
        (SEEDS, 1e-4, 2e-5, 4e-3),
        (PROMPTS, 2e-3, 1e-3, 3e-3),
        (INTERACTION, 1e-3, 5e-4, 2e-3),
        (RUNS, 1e-2, 8e-3, 1.2e-2),
    ):
        rows.append(
            {
                "family": "perturbation",
                "metric": "rouge1",
                "model": "tiny",
                "dataset": "synthetic",
                "objective": "mle",
                "eval_set": "synthetic-test",
                "decoder": "unbiased",
                "a": "insertion 0.025",
                "b": "no perturbation",
                "seeds": 3,
                "prompts": 50,
                "runs": 3,
                "kmeans": None,
                "component": c,
                "estimate": e,
                "low": low,
                "high": high,
                "df": 2,
                "note": None,
            }
        )
    table = tmp_path / REPORT_TABLE.format(table="variance", ext="csv")
    table.parent.mkdir(parents=True)
    pl.DataFrame(rows, schema=COLUMNS).write_csv(table)
    record = tmp_path / "results/prompts/synthetic-test.json"  # the pilot's prompt filters let 120 texts through
    record.parent.mkdir(parents=True)
    record.write_text('{"filters": {"rows_eligible": 120}}')
    design.main(
        [
            "--configfile",
            str(REPO / "config.yaml"),
            "--results",
            str(tmp_path / "results"),
            "--device",
            "h100",
            "--cpu",
            "cpu",
        ]
    )
    out = capsys.readouterr().out
    written = pl.read_csv(tmp_path / "results/design/h100.csv")
    powered = written.filter(pl.col("design") == "powered")
    assert powered.height == 5 and (powered["power"] >= design.POWER).all() and (powered["seeds"] >= 3).all()
    assert powered["prompts"].max() <= 120
    assert powered["device_hours"].to_list() == sorted(powered["device_hours"].to_list())
    assert (powered["cpu_hours"] > powered["device_hours"]).all()  # the same jobs on one CPU core
    assert written.filter(pl.col("design") == "paper")["false_positive"][0] > 0
    assert "| rouge1 | synthetic-test |" in out
    # the pilot has ROUGE components only: MAUVE's default target gets a line saying why it has no design
    assert "mauve: no design; the pilot has no variance components of its contrasts" in out
    assert "rouge1: no design" not in out


def test_a_design_costs_more_with_more_seeds_prompts_and_runs():
    config = load_config([str(REPO / "config.yaml")], REPO)
    prices = design.pricing(config, device("h100"), device("cpu"), REPO / "nonexistent")
    price = prices[("tiny", "synthetic-test")]["device"]
    base = design.design_hours(price, config, 3, 50, 3)
    assert 0 < base < design.design_hours(price, config, 4, 50, 3)
    assert base < design.design_hours(price, config, 3, 100, 3) and base < design.design_hours(price, config, 3, 50, 5)
    assert design.design_hours(price, config, 6, 50, 3) == pytest.approx(2 * base)


def test_the_false_positives_of_a_design_for_a_method_with_no_effect_over_the_eval_set():
    """The seeds' test holds the prompts fixed: a prompt set's shared effect reads as the method's, at the rate the
    calculator's `false_positive` column gives (above the nominal 5% when prompts vary a lot and are few)."""
    truth = {SEEDS: 4e-5, PROMPTS: 4e-3, INTERACTION: 1e-3, RUNS: 1e-2}
    prompts, runs, seeds = 20, 2, 8
    v = design.seed_mean_variance(truth, "rouge1", prompts, runs, prompts, 1)
    predicted = design.power(0.0, v, seeds, shared=design.shared_variance(truth, "rouge1", prompts))
    rng = np.random.default_rng(14)
    d = (
        rng.normal(0, np.sqrt(truth[SEEDS]), (STUDIES, seeds, 1, 1))
        + rng.normal(0, np.sqrt(truth[PROMPTS]), (STUDIES, 1, prompts, 1))
        + rng.normal(0, np.sqrt(truth[INTERACTION]), (STUDIES, seeds, prompts, 1))
        + rng.normal(0, np.sqrt(truth[RUNS]), (STUDIES, seeds, prompts, runs))
    )
    rate = seed_test_rejects(d.mean((2, 3))).mean()
    assert predicted > 0.1 and within(rate, predicted), (rate, predicted)


def test_a_mauve_design_never_asks_for_fewer_texts_than_the_mauve_floor():
    """MAUVE's runs below evaluation.mauve.min_texts are refused, not scored: a design of 25 texts from a pilot of 50
    would report no MAUVE. ROUGE, scored per text, may shrink its prompts."""
    config = load_config([str(REPO / "config.yaml")], REPO)
    floor = config["evaluation"]["mauve"]["min_texts"]
    components = []
    for metric, parts in (
        ("mauve", {SEEDS: 1e-5, RUNS: 2e-3, KMEANS: 4e-3}),
        ("rouge1", {SEEDS: 1e-6, PROMPTS: 1e-4, INTERACTION: 1e-5, RUNS: 2e-4}),
    ):
        for c, e in parts.items():
            components.append(
                {
                    "family": "perturbation",
                    "metric": metric,
                    "model": "tiny",
                    "dataset": "synthetic",
                    "objective": "mle",
                }
                | {"eval_set": "synthetic-test", "decoder": "unbiased", "a": "insertion 0.025", "b": "no perturbation"}
                | {"seeds": 3, "prompts": floor, "runs": 2, "kmeans": 5 if metric == "mauve" else None}
                | {"component": c, "estimate": e, "low": 0.0, "high": 2 * e, "df": 2, "note": None}
            )
    rows = design.designs(
        pl.DataFrame(components, schema=COLUMNS), {"mauve": 0.03, "rouge1": 0.01}, config, {}, "perturbation", 1
    )
    powered = [r for r in rows if r["design"] == "powered"]
    mauve = [r["prompts"] for r in powered if r["metric"] == "mauve"]
    rouge = [r["prompts"] for r in powered if r["metric"] == "rouge1"]
    assert mauve and min(mauve) >= floor
    assert rouge and min(rouge) < floor  # the floor is MAUVE's alone
    assert design.mauve_floor({"evaluation": {"mauve": {"min_texts": 16}}}) == 16
