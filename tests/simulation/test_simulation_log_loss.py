"""The simulation summary's held-out log-loss (a proper score beside the MAE) and what it says about the perturbed
copies' reach: the log-loss family of paired tests, its table and sentences, the empirical arm's null result
labelled by the measured reach."""

from __future__ import annotations

import re

import numpy as np
import polars as pl
import pytest

from workflow_lib.simulation.conclusions import conclusions
from workflow_lib.simulation.statistics import (
    MAE,
    NLL,
    paired_tests,
    reach_summary,
    study_tests,
    tuning_summary,
)
from workflow_lib.simulation.summary import markdown, summarize

ALPHAS = (0.5, 1.0)
RULES = ("oracle", "empirical")


def study(
    reps: int,
    vocabs=(50, 400),
    mae_shift: dict | None = None,
    nll_shift: dict | None = None,
    reached: dict | None = None,
    seed: int = 0,
) -> pl.DataFrame:
    """Fit rows with every column the summary reads: each arm's MAE and held-out NLL are the replication's level plus
    independent noise (no arm differs) unless `mae_shift` / `nll_shift` [(vocab, rule, alpha)] add a difference;
    `reached[(vocab, rule)]` is the count of unseen pairs every copy of that rule holds (0 if absent)."""
    rng = np.random.default_rng(seed)
    mae_shift, nll_shift, reached = mae_shift or {}, nll_shift or {}, reached or {}
    rows = []
    for vocab in vocabs:
        level, nll_level = rng.normal(0.005, 0.0005, reps), rng.normal(np.log(vocab) - 0.1, 0.01, reps)
        for rep in range(reps):
            common = {"vocab_size": vocab, "replication": rep, "n_unseen_rows": 0, "n_unseen_pairs": 1000}
            common |= {
                "mae_unseen_rows": None,
                "uniform_unseen_rows": None,
                "uniform_unseen_pairs": level[rep] + rng.normal(0, 1e-5),
            }
            common |= {"mae_all": 0.004, "uniform_all": 0.006, "n_eligible": 10, "n_replaced": 5}
            base = {
                "mae_unseen_pairs": level[rep] + rng.normal(0, 1e-5),
                "heldout_nll": nll_level[rep] + rng.normal(0, 0.01),
            }
            for rule in RULES:
                for alpha in (0.0, *ALPHAS):
                    row = {**common, "arm": rule, "intensity": alpha, "shrinkage": None, **base}
                    row["n_unseen_pairs_reached"] = 0 if alpha == 0 else reached.get((vocab, rule), 0)
                    row["n_unseen_rows_perturbed"] = 0
                    if alpha > 0:
                        row["mae_unseen_pairs"] = (
                            level[rep] + rng.normal(0, 1e-5) + mae_shift.get((vocab, rule, alpha), 0)
                        )
                        row["heldout_nll"] = (
                            nll_level[rep] + rng.normal(0, 0.01) + nll_shift.get((vocab, rule, alpha), 0)
                        )
                    rows.append(row)
            control = {**common, "arm": "shrinkage", "intensity": None, "shrinkage": 0.3, "n_unseen_rows_perturbed": 0}
            control |= {"mae_unseen_pairs": level[rep] + rng.normal(0, 1e-5), "heldout_nll": nll_level[rep] - 0.5}
            rows.append(control)
    return pl.DataFrame(rows, infer_schema_length=None)


def test_the_log_loss_family_holds_the_panels_only_and_finds_a_planted_difference():
    """Oracle synonyms at alpha = 1 lower the held-out log-loss at |V| = 400 by 5 noise SDs (their MAE is untouched):
    the log-loss family marks that panel and nothing else; it has the panels only (the control and the tuned arms
    are chosen on these held-out pairs), with a Holm family of its own, so the MAE family's p are those of
    paired_tests alone."""
    results = study(50, nll_shift={(400, "oracle", 1.0): -0.05})
    tests = study_tests(results)
    log_loss = tests.filter(pl.col("metric") == NLL)
    assert set(log_loss["kind"]) == {"panel"} and log_loss.height == 2 * len(RULES) * len(ALPHAS)
    marked = log_loss.filter(pl.col("verdict").is_in(["a lower", "a higher"]))
    assert marked.select("vocab_size", "a", "verdict").rows() == [(400, "oracle, α = 1", "a lower")]
    row = marked.row(0, named=True)
    assert row["low"] < -0.05 < row["high"] < 0
    mae = tests.filter(pl.col("metric") == MAE)
    same_panel = mae.filter((pl.col("vocab_size") == 400) & (pl.col("kind") == "panel") & (pl.col("a") == row["a"]))
    assert same_panel["verdict"].to_list() == ["not detected"]  # its MAE is not shifted: nothing leaks across
    alone = paired_tests(results)
    assert mae["p_holm"].to_list() == alone["p_holm"].to_list()
    # Holm within the log-loss family: its p_holm from its own p, m = its own tested count.
    p = np.array(log_loss["p"].to_list())
    m = len(p)
    smallest = int(np.argmin(p))
    assert log_loss["p_holm"][smallest] == pytest.approx(min(1.0, m * p[smallest]))


def test_the_summary_reports_the_log_loss_beside_the_mae():
    results = study(5, nll_shift={(400, "oracle", 1.0): -0.05})
    tests = study_tests(results)
    summary = summarize(results, tests)
    cell = summary.filter((pl.col("vocab_size") == 400) & (pl.col("arm") == "oracle") & (pl.col("intensity") == 1.0))
    fits = results.filter((pl.col("vocab_size") == 400) & (pl.col("arm") == "oracle")).sort("replication")
    nll = fits.filter(pl.col("intensity") == 1.0)["heldout_nll"].to_numpy()
    base = fits.filter(pl.col("intensity") == 0.0)["heldout_nll"].to_numpy()
    assert cell["heldout_nll_mean"][0] == pytest.approx(nll.mean())
    assert cell["heldout_nll_2se"][0] == pytest.approx(2 * nll.std(ddof=1) / np.sqrt(5))
    assert cell["diff_heldout_nll_mean"][0] == pytest.approx((nll - base).mean())
    test = tests.filter((pl.col("metric") == NLL) & (pl.col("vocab_size") == 400) & (pl.col("a") == "oracle, α = 1"))
    assert (cell["diff_heldout_nll_low"][0], cell["diff_heldout_nll_high"][0]) == (test["low"][0], test["high"][0])
    assert cell["diff_heldout_nll_p_holm"][0] == test["p_holm"][0]
    assert (
        cell["p_holm"][0]
        == tests.filter((pl.col("metric") == MAE) & (pl.col("vocab_size") == 400) & (pl.col("a") == "oracle, α = 1"))[
            "p_holm"
        ][0]
    )  # the MAE's columns keep the MAE family's p
    control = summary.filter(pl.col("arm") == "shrinkage")
    assert control["diff_heldout_nll_p_holm"].is_null().all()  # tuned on the held-out pairs: not tested
    text = markdown(summary, tests, conclusions(tests, tuning_summary(results), reach_summary(results)))
    table = text[text.index("### Held-out log-loss per arm and intensity") :]
    assert "| 400 | oracle | 1 | " in table and f"| {np.log(400):.4f} |" in table
    assert "(λ chosen on these pairs) | untested" in table


def test_log_loss_sentences_follow_the_tests():
    results = study(50, nll_shift={(400, "oracle", 1.0): -0.05})
    tests = study_tests(results)
    sentences = conclusions(tests, tuning_summary(results))
    log_loss = [s for s in sentences if ", held-out log-loss (" in s]
    assert [s.split(",")[0] for s in log_loss] == ["|V| = 50", "|V| = 400"]
    at_400 = log_loss[1]
    said = re.search(r"oracle synonyms at α = 1 lower it \(difference (-[0-9.]+) ± ", at_400)
    assert said and float(said.group(1)) == pytest.approx(-0.05, abs=0.005)  # the planted shift, in its words
    assert "empirical synonyms at α = 1 do not detectably change it" in at_400
    assert f"log |V| = {np.log(400):.4f}" in at_400 and "% of the unperturbed log-loss" in at_400
    assert "lower it" not in log_loss[0] and "raise it" not in log_loss[0]
    panels = [s for s in sentences if "against the unperturbed model on held-out log-loss" in s]
    assert any(s.startswith("|V| = 400, oracle") and "lower log-loss at α = 1" in s for s in panels)


def test_the_empirical_null_is_labelled_by_the_measured_reach():
    """Where the empirical copy reached no unseen pair in any replication, the sentence on its (undetected) gain
    says the construction predicts the null; where it did reach some (planted at |V| = 400), no such label, and the
    reach sentence gives the count and share."""
    results = study(5, reached={(50, "oracle"): 4, (400, "oracle"): 900, (400, "empirical"): 20})
    tests = study_tests(results)
    reach = reach_summary(results)
    assert (
        reach.filter((pl.col("vocab_size") == 400) & (pl.col("arm") == "empirical"))["reached_share"].to_list()
        == [pytest.approx(0.02)] * 2
    )
    sentences = conclusions(tests, tuning_summary(results), reach)
    gain = {s.split(": ")[0][-3:].strip("= "): s for s in sentences if s.startswith("Perturbation's gain")}
    assert set(gain) == {"50", "400"}
    assert "A null result the construction predicts" in gain["50"] and "0 in every replication" in gain["50"]
    assert "construction" not in gain["400"]
    reach_said = [s for s in sentences if "perturbed copy" in s and s.startswith("|V| = ")]
    assert any(
        s.startswith("|V| = 50: the empirical synonyms' perturbed copy held none of D's 1,000") for s in reach_said
    )
    assert any(
        s.startswith("|V| = 400: the empirical synonyms' perturbed copy at α = 1 held 20 of") for s in reach_said
    )
    assert any("(2%; at most 20 in one)" in s for s in reach_said)
    text = markdown(summarize(results, tests), tests, sentences)
    labelled = [line for line in text.splitlines() if "(expected: the empirical copy reaches no unseen pair)" in line]
    assert labelled and all(line.startswith("| 50 | vs unperturbed | empirical, α tuned") for line in labelled)
    assert (
        "### What the perturbed copies reach" in text and "| 400 | empirical | 1 | 1000 | 20.0 | 20 | 2.00% |" in text
    )


def test_a_detected_empirical_change_without_reach_is_said_to_come_from_seen_pairs():
    results = study(50, mae_shift={(50, "empirical", 1.0): -1e-4})
    sentences = conclusions(study_tests(results), tuning_summary(results), reach_summary(results))
    gain = [s for s in sentences if s.startswith("Perturbation's gain on unseen pairs survives without the oracle")]
    assert len(gain) == 1 and "|V| = 50" in gain[0]
    assert "only through the seen pairs the copy reweights" in gain[0] and "predicts" not in gain[0]


def test_fits_without_the_reach_count_still_summarise():
    """Fits written before `n_unseen_pairs_reached` existed: no reach table, no reach sentence, no label."""
    results = study(3).drop("n_unseen_pairs_reached")
    tests = study_tests(results)
    assert reach_summary(results).height == 0
    sentences = conclusions(tests, tuning_summary(results), reach_summary(results))
    assert not any("perturbed copy" in s or "construction" in s for s in sentences)
    text = markdown(summarize(results, tests), tests, sentences)
    assert "### What the perturbed copies reach" not in text and "### Held-out log-loss" in text


def test_the_figure_adds_a_log_loss_row_with_log_v_and_without_the_control(monkeypatch):
    from matplotlib.colors import to_hex

    from workflow_lib.simulation import figure

    saved = []
    monkeypatch.setattr(figure, "_save", lambda fig, stem: saved.append(fig))
    summary = summarize(study(3).with_columns(mae_unseen_rows=pl.lit(0.004)))
    figure.simulation_figure(summary, "unused")
    axes = saved[0].axes
    assert len(axes) == 3 * 2  # (a), (b), log-loss x two |V|
    bottom = axes[-1]  # |V| = 400, the log-loss row
    assert bottom.get_ylabel() == "" and axes[4].get_ylabel() == figure.LOG_LOSS_TITLE
    levels = [line.get_ydata()[0] for line in bottom.get_lines() if line.get_label() == figure.UNIFORM_LABEL]
    notes = [t.get_text() for t in bottom.texts]
    assert levels == [pytest.approx(np.log(400))] or any(f"{np.log(400):.4f}" in n for n in notes)
    labels = bottom.get_legend_handles_labels()[1]
    assert figure.CONTROL_LABEL not in labels and {"oracle", "empirical"} <= set(labels)
    oracle = next(c for c in bottom.containers if c.get_label() == "oracle")
    means = summary.filter((pl.col("vocab_size") == 400) & (pl.col("arm") == "oracle")).sort("intensity")
    assert list(oracle.lines[0].get_ydata()) == pytest.approx(means["heldout_nll_mean"].to_list())
    assert to_hex(oracle.lines[0].get_color()) != to_hex(figure.UNIFORM_STYLE["color"])
