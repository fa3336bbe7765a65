"""The findings' multiplicity: how many tests they were read among, and Holm across the metrics of a family."""

from __future__ import annotations

import polars as pl

from workflow_lib.report.contrasts import COLUMNS
from workflow_lib.report.multiplicity import across_metrics, multiplicity_sentence
from workflow_lib.report.statistics import holm


def row(family: str, metric: str, p: float | None, p_holm: float | None, arm: str = "TrainPerturb") -> dict:
    return {k: None for k in COLUMNS} | {
        "family": family,
        "metric": metric,
        "unit": "checkpoint",
        "eval_set": "synthetic-ood",
        "objective": "mle",
        "a": arm,
        "b": "NoPerturb",
        "p": p,
        "p_holm": p_holm,
    }


def test_holm_runs_across_the_metrics_of_a_family_and_names_what_it_loses():
    rows = [
        row("ablation", "tv", 0.001, 0.002),
        row("ablation", "rouge1", 0.03, 0.03, arm="TestPerturb"),  # significant in its table, not across metrics
        row("ablation", "perplexity", 0.3, 0.3),
        row("ablation", "mauve", None, None),  # untested: not counted
        row("perturbation", "tv", 0.04, 0.04),  # its own family: alone, it stays
    ]
    frame = pl.DataFrame(rows, schema=COLUMNS, orient="row")
    out = across_metrics(frame)
    assert out.height == 4
    ablation = out.filter(pl.col("family") == "ablation")
    assert ablation["p_across"].to_list() == holm([0.001, 0.03, 0.3])
    assert out.filter(pl.col("family") == "perturbation")["p_across"].to_list() == [0.04]
    sentence = multiplicity_sentence(frame)
    assert "among 4 tested contrasts in 4 tables" in sentence
    assert "2 of the 3 rows significant within their table stay significant" in sentence
    assert (
        "these do not: ablation rouge1 synthetic-ood mle TestPerturb (p_holm 0.030, across metrics 0.060)." in sentence
    )


def test_nothing_tested_nothing_said():
    assert multiplicity_sentence(None) is None
    frame = pl.DataFrame([row("ablation", "tv", None, None)], schema=COLUMNS, orient="row")
    assert multiplicity_sentence(frame) is None
