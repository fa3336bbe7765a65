"""The summary's "Where the theory predicts a gain": the prediction from the support shares, then the measured TV
rows, then a verdict that follows them (report.theory_check)."""

from __future__ import annotations

import polars as pl
import pytest

from workflow_lib.report.contrasts import COLUMNS
from workflow_lib.report.theory_check import GAIN, IN_SUPPORT, NO_GAIN, prediction, theory_findings, theory_table

SHARES = {"synthetic-test": (0.0, 0.0), "synthetic-ood": (0.18, 0.0), "synthetic-reach": (0.65, 0.65)}


def frame(reach_by_source=None) -> pl.DataFrame:
    rows = []
    for eval_set, (off, reachable) in SHARES.items():
        for source, value in (reach_by_source or {"none": None}).items():
            rows.append(
                {
                    "eval_set": eval_set,
                    "test_synonyms": source,
                    "off_support_share": off,
                    "reachable_share": reachable,
                    "synonym_reach": value,
                }
            )
    return pl.DataFrame(rows)


def contrast(eval_set: str, arm: str, difference: float, p_holm: float | None, family: str = "ablation") -> dict:
    row = {k: None for k in COLUMNS}
    significant = p_holm is not None and p_holm < 0.05
    return row | {
        "family": family,
        "metric": "tv",
        "model": "tiny",
        "objective": "mle",
        "eval_set": eval_set,
        "seed": 1,
        "a": arm,
        "b": "NoPerturb",
        "difference": difference,
        "low": difference - 0.002,
        "high": difference + 0.002,
        "p_holm": p_holm,
        "significant": significant,
        "favours": ("perturbation" if difference < 0 else "no perturbation") if significant else None,
        "unit": "checkpoint",
        "detectable": 0.004,
    }


def contrasts(rows: list[dict]) -> pl.DataFrame:
    return pl.DataFrame(rows, schema=COLUMNS, orient="row")


def test_prediction_follows_the_shares():
    assert prediction(0.0, 0.0) == IN_SUPPORT
    assert prediction(0.65, 0.65) == GAIN
    assert prediction(0.18, 0.0) == NO_GAIN
    assert prediction(0.5, 0.1) == NO_GAIN


def test_each_eval_set_states_the_prediction_before_the_measurement_and_a_verdict_that_follows():
    rows = [
        contrast("synthetic-reach", "TrainPerturb (train oracle)", -0.010, 0.005),  # predicted gain, seen: agrees
        contrast("synthetic-reach", "TestPerturb (sample oracle)", +0.008, 0.005),  # predicted gain, hurt: disagrees
        contrast("synthetic-reach", "TrainPerturb (train distributional)", -0.001, 0.40),  # not detected
        contrast("synthetic-ood", "TrainPerturb (train oracle)", +0.009, 0.005),  # no gain predicted: agrees
        contrast("synthetic-ood", "TestPerturb (sample oracle)", -0.009, 0.005),  # a gain where none is: disagrees
        contrast("synthetic-ood", "embedding-noise: TrainPerturb", -0.5, 0.005),  # not insertion: not read
        contrast("synthetic-test", "TrainPerturb (train oracle)", +0.003, None),  # untested: counted apart
    ]
    lines = theory_findings(frame({"oracle": 0.74, "distributional": 0.1}), contrasts(rows))
    by_set = {line.split("**")[1]: line for line in lines}
    assert set(by_set) == set(SHARES)
    reach = by_set["synthetic-reach"]
    assert reach.index("Predicted: a gain") < reach.index("Measured")
    assert "65% of its evaluated prefixes are off the training support, 100% of them only through their words" in reach
    assert "distributional 0.10; oracle 0.74" in reach
    assert "agrees with 1 of 3 tested rows, disagrees with 1, and the gain was not detected in 1" in reach
    table = theory_table(frame({"oracle": 0.74, "distributional": 0.1}), contrasts(rows)).splitlines()
    assert table[0] == "| eval set | predicted | arm (objective, condition) | TV difference [95%], p_holm | verdict |"
    assert (
        "| synthetic-reach | a gain | mle TrainPerturb (train oracle) | -0.010 \\[-0.012, -0.008\\], p\\_holm 0.005 "
        "| agrees |"
    ) in table
    assert "| synthetic-ood | no gain | mle TestPerturb (sample oracle) |" in "\n".join(table)
    assert len(table) == 2 + 5 and "embedding-noise" not in "\n".join(table)  # the tested insertion rows
    assert "could have seen 0.004" in reach
    ood = by_set["synthetic-ood"]
    assert "Predicted: no gain" in ood and "100% of them through their class sequence" in ood
    assert "agrees with 1 of 2 tested rows, disagrees with 1" in ood and "embedding-noise" not in ood
    test = by_set["synthetic-test"]
    assert "nothing to extrapolate" in test and "not testable" in test


@pytest.mark.parametrize("table", [None, pl.DataFrame(schema=COLUMNS)])
def test_no_contrasts_no_section(table):
    assert theory_findings(frame(), table) == []


def test_a_study_without_support_shares_has_no_section():
    rows = contrasts([contrast("synthetic-reach", "TrainPerturb", -0.01, 0.005)])
    assert theory_findings(pl.DataFrame({"eval_set": ["synthetic-reach"], "off_support_share": [None]}), rows) == []
