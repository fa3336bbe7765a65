"""The summary's generated "What this study found": each part, and each part's opposite verdict."""

from __future__ import annotations

import polars as pl
from test_report import COLUMNS, contrast_rows

from workflow_lib.report.findings import contrast_findings, findings_section, mauve_tv_findings, size_findings


def contrasts_of(*groups) -> pl.DataFrame:
    return pl.DataFrame([r for g in groups for r in g], schema=COLUMNS, orient="row")


def test_perturbation_verdicts_follow_the_holm_corrected_contrasts():
    helped = contrasts_of([{**r, "eval_set": "webtext"} for r in contrast_rows("perturbation", "mauve", [(0.05, 0.01), (0.04, 0.02)])])
    assert contrast_findings(helped) == ["**webtext**, perturbation against none (per objective and decoder, "
                                         "Holm-corrected): MAUVE: helped in 2, hurt in 0, no detectable difference in 0 (of 2)."]
    hurt = contrasts_of([{**r, "eval_set": "webtext"} for r in contrast_rows("perturbation", "mauve", [(-0.05, 0.01), (0.04, 0.4)])])
    assert "helped in 0, hurt in 1, no detectable difference in 1 (of 2)" in contrast_findings(hurt)[0]
    unclear = contrasts_of([{**r, "eval_set": "webtext"} for r in contrast_rows("perturbation", "mauve", [(0.05, 0.2)])])
    assert "MAUVE: no detectable difference in any of 1" in contrast_findings(unclear)[0]
    objective = [{**r, "family": "objective", "objective": "brier", "a": "brier, no perturbation", "b": "mle, no perturbation",
                  "favours": "brier" if r["difference"] > 0 else "mle"}
                 for r in contrast_rows("objective", "mauve", [(0.05, 0.01), (-0.03, 0.01), (0.01, 0.5)])]
    assert contrast_findings(contrasts_of(objective)) == [
        "**brier against MLE** (every eval set and condition): MAUVE helped in 1, hurt in 1, no detectable difference "
        "in 1 (of 3)."]
    assert contrast_findings(None)[0].startswith("No paired comparison was possible")


def metrics(mauve, tv, runs=3, prompts=30, share=0.5) -> pl.DataFrame:
    n = len(mauve)
    return pl.DataFrame({"eval_set": ["ood"] * n, "objective": ["mle"] * n, "train_strategy": ["insertion"] * n,
                         "train_intensity": [0.1 * i for i in range(n)], "test_strategy": ["insertion"] * n,
                         "test_intensity": [0.1 * i for i in range(n)], "mauve_mean": mauve, "tv_mean": tv,
                         "runs": [runs] * n, "prompts": [prompts] * n, "mauve_clustering_share": [share] * n})


def test_mauve_and_the_exact_tv_agree_or_are_flagged_when_they_do_not():
    agree = mauve_tv_findings(metrics([0.9, 0.8, 0.7, 0.6], [0.1, 0.2, 0.3, 0.4]))
    assert agree[0].startswith("**ood**: MAUVE and the exact TV to the true law agree") and "ρ = 1.00" in agree[0]
    assert "ranks 1 of 4 by TV" in agree[0] and "Do not trust" not in agree[0]
    # the default study's pattern: the best MAUVE has the worst TV
    disagree = mauve_tv_findings(metrics([0.7, 0.8, 0.9, 0.965], [0.2, 0.3, 0.4, 0.546]))
    assert "do not agree" in disagree[0] and "ρ = -1.00" in disagree[0] and "0.965" in disagree[0]
    assert "ranks 4 of 4 by TV (0.546). Do not trust MAUVE alone here." in disagree[0]
    assert mauve_tv_findings(metrics([0.9, 0.8], [None, None])) == []  # no truth, no sentence


def test_size_and_limits_say_whether_validation_was_still_falling():
    falling = {"a": pl.DataFrame({"step": [50, 100], "validation_loss": [3.0, 2.5]})}
    flat = {"a": pl.DataFrame({"step": [50, 100], "validation_loss": [2.5, 2.6]})}
    frame = metrics([0.9, 0.8, 0.7], [0.1, 0.2, 0.3], share=0.83)
    text = size_findings(frame, falling)
    assert text[0] == "Size: 3 sampling runs of 30 prompts per eval set."
    assert text[1] == ("Training: 100 optimizer steps per model (1 models). The validation loss was still falling at "
                       "the last evaluation in 1 of 1 models: longer training could change the comparison.")
    assert "accounts for a median 83%" in text[2]
    assert "had stopped falling in all 1 models" in size_findings(frame, flat)[1]
    section = findings_section(frame, None, falling)
    assert section.startswith("Generated from the numbers below") and section.count("\n- ") == 5
