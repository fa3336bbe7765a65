"""The summary's generated "What this study found": each part, and each part's opposite verdict."""

from __future__ import annotations

import polars as pl
from test_report import COLUMNS, contrast_rows

from workflow_lib.report.findings import (
    contrast_findings,
    findings_section,
    mauve_tv_findings,
    size_findings,
    verdict_tables,
)

CHECKPOINTS = "about these checkpoints (one training seed: the test covers prompts and runs, not training)"
PERTURBATION = f"Perturbation against none, {CHECKPOINTS}, Holm-corrected (a row per eval set and metric)"
OBJECTIVES = f"Each objective against MLE, {CHECKPOINTS}, Holm-corrected (every eval set and condition)"
FRAGILE = ", near the 0.05 line: fragile"


def contrasts_of(*groups) -> pl.DataFrame:
    return pl.DataFrame([r for g in groups for r in g], schema=COLUMNS, orient="row")


def verdict(rows: pl.DataFrame, frame=None, reach=None, metric: str = "", title: str | None = None) -> dict:
    """The one findings-table row of `metric` (its name's start), in the table `title` (the only one by default)."""
    tables = verdict_tables(rows, frame, reach)
    found = tables[title] if title else next(iter(tables.values()))
    [row] = [r for r in found if r["metric"].startswith(metric)] if metric else found
    return row


def test_perturbation_verdicts_follow_the_holm_corrected_contrasts():
    helped = contrasts_of(
        [{**r, "eval_set": "webtext"} for r in contrast_rows("perturbation", "mauve", [(0.05, 0.01), (0.04, 0.02)])]
    )
    assert verdict_tables(helped) == {
        PERTURBATION: [
            {
                "row": "webtext",
                "metric": "MAUVE (higher is better)",
                "helped": f"2: mle +0.050 [+0.040, +0.060], p_holm 0.010{FRAGILE}; mle +0.040 [+0.030, +0.050], p_holm "
                f"0.020{FRAGILE}",
                "hurt": "0",
                "same": "0 of 2",
                "notes": "",
            }
        ]
    }
    [table] = contrast_findings(helped)
    assert table.startswith(f"**{PERTURBATION}**\n\n| eval set | metric | helped | hurt | no detectable difference |")
    assert "| webtext | MAUVE (higher is better) | 2: mle +0.050 \\[+0.040, +0.060\\], p\\_holm 0.010" in table
    hurt = contrasts_of(
        [{**r, "eval_set": "webtext"} for r in contrast_rows("perturbation", "mauve", [(-0.05, 0.01), (0.04, 0.4)])]
    )
    row = verdict(hurt)
    assert (row["helped"], row["hurt"]) == ("0", f"1: mle -0.050 [-0.060, -0.040], p_holm 0.010{FRAGILE}")
    assert row["same"] == "1 of 2"
    unclear = contrasts_of(
        [{**r, "eval_set": "webtext"} for r in contrast_rows("perturbation", "mauve", [(0.05, 0.2)])]
    )
    assert verdict(unclear)["same"] == "1 of 1" and verdict(unclear)["helped"] == "0"
    objective = [
        {
            **r,
            "family": "objective",
            "objective": "brier",
            "a": "brier, no perturbation",
            "b": "mle, no perturbation",
            "favours": "brier" if r["difference"] > 0 else "mle",
        }
        for r in contrast_rows("objective", "mauve", [(0.05, 0.01), (-0.03, 0.01), (0.01, 0.5)])
    ]
    assert verdict_tables(contrasts_of(objective)) == {
        OBJECTIVES: [
            {
                "row": "brier against MLE",
                "metric": "MAUVE (higher is better)",
                "helped": f"1: set0 no perturbation +0.050 [+0.040, +0.060], p_holm 0.010{FRAGILE}",
                "hurt": f"1: set1 no perturbation -0.030 [-0.040, -0.020], p_holm 0.010{FRAGILE}",
                "same": "1 of 3",
                "notes": "",
            }
        ]
    }
    assert contrast_findings(None)[0].startswith("No paired comparison was possible")


def test_rows_of_the_paired_t_fallback_are_named_as_uncalibrated():
    """MAUVE read without the joint results falls back to the paired t over runs, whose level nothing checks: its
    verdicts say so, counting only its rows; the workflow's own tests carry no such caveat."""
    fallback = contrast_rows("perturbation", "mauve", [(0.05, 0.01), (0.02, 0.3)], method="paired t over runs")
    joint = contrast_rows("perturbation", "mauve", [(0.04, 0.02)])
    rouge = contrast_rows("perturbation", "rouge1", [(0.01, 0.02)])
    [mauve, rouge1] = verdict_tables(contrasts_of([{**r, "eval_set": "w"} for r in fallback + joint + rouge]))[
        PERTURBATION
    ]
    assert mauve["helped"] == (
        f"2: mle +0.050 [+0.040, +0.060], p_holm 0.010{FRAGILE}; mle +0.040 [+0.030, +0.050], p_holm 0.020{FRAGILE}"
    )
    assert mauve["same"] == "1 of 3"
    assert mauve["notes"] == "2 by the paired t over runs, whose level is not calibrated: a description"
    assert rouge1["helped"] == f"1: mle +0.010 [+0.000, +0.020], p_holm 0.020{FRAGILE}" and rouge1["notes"] == ""
    quiet = untested(fallback[:1], "2 runs") + [{**fallback[1], "p_holm": 0.5, "significant": False}]
    row = verdict(contrasts_of([{**r, "eval_set": "w"} for r in quiet]))
    assert row["same"] == "1 of 1"
    assert row["notes"] == (
        "1 by the paired t over runs, whose level is not calibrated: a description; not testable in 1 (2 runs)"
    )


def untested(rows: list[dict], why: str | None) -> list[dict]:
    return [
        {**r, "p": None, "p_holm": None, "significant": False, "low": None, "high": None, "not_testable": why}
        for r in rows
    ]


def one_set(rows: list[dict]) -> list[dict]:
    return [{**r, "eval_set": "webtext"} for r in rows]


def test_untested_rows_are_counted_apart_never_as_no_difference():
    """The issue's case: 3 MAUVE rows with no p said "no detectable difference in any of 3"; they are not testable,
    with the reason, and a mixed metric counts its tested rows apart from the rest."""
    rows = one_set(contrast_rows("perturbation", "mauve", [(0.05, 0.5), (0.04, 0.5), (-0.02, 0.5)]))
    none = verdict(contrasts_of(untested(rows, "2 runs")))
    assert none["notes"] == "not testable in any of 3 (2 runs)" and none["same"] == none["helped"] == ""
    mixed = verdict(contrasts_of(rows[:1], untested(rows[1:2], "2 runs"), untested(rows[2:], "no spread")))
    assert mixed["same"] == "1 of 1" and mixed["notes"] == "not testable in 2 (2 runs: 1; no spread: 1)"
    marked = contrasts_of(
        one_set(contrast_rows("perturbation", "rouge1", [(0.05, 0.01), (0.01, 0.5)])),
        untested(one_set(contrast_rows("perturbation", "rouge1", [(0.02, 0.5)])), "5 prompts"),
    )
    row = verdict(marked)
    assert (row["hurt"], row["same"], row["notes"]) == ("0", "1 of 2", "not testable in 1 (5 prompts)")
    old = contrasts_of(untested(rows[:1], None))  # a contrasts file from before the reason was recorded
    assert verdict(old)["notes"] == "not testable in any of 1 (no p)"


def test_mauve_cells_with_too_few_texts_are_counted_apart_and_compared_with_nothing():
    rows = contrasts_of(
        contrast_rows("perturbation", "mauve", [(0.05, 0.01)]), contrast_rows("perturbation", "rouge1", [(0.01, 0.5)])
    )
    frame = pl.DataFrame(
        {
            "eval_set": ["set0", "set0", "set1"],
            "objective": ["mle"] * 3,
            "mauve_mean": [0.9, 0.8, 0.7],
            "mauve_status": ["too few texts (20)", "too few texts (20)", None],
        }
    )
    mauve = verdict(rows, frame, metric="MAUVE")
    assert (mauve["hurt"], mauve["same"]) == ("0", "0 of 1")
    assert mauve["notes"] == "too few texts in 2 cells (not compared)"
    only_rouge = contrasts_of(contrast_rows("perturbation", "rouge1", [(0.01, 0.5)]))
    [mauve, rouge] = verdict_tables(only_rouge, frame)[PERTURBATION]
    assert mauve["metric"].startswith("MAUVE") and mauve["notes"] == "too few texts per run to compare"
    assert mauve["helped"] == mauve["same"] == "" and rouge["same"] == "1 of 1"


def metrics(mauve, tv, runs=3, prompts=30, share=0.5, mauve_2se=None, tv_2se=None) -> pl.DataFrame:
    n = len(mauve)
    return pl.DataFrame(
        {
            "eval_set": ["ood"] * n,
            "objective": ["mle"] * n,
            "train_strategy": ["insertion"] * n,
            "train_intensity": [0.1 * i for i in range(n)],
            "test_strategy": ["insertion"] * n,
            "test_intensity": [0.1 * i for i in range(n)],
            "mauve_mean": mauve,
            "tv_mean": tv,
            "mauve_2se": [mauve_2se] * n,
            "tv_2se": [tv_2se] * n,
            "runs": [runs] * n,
            "prompts": [prompts] * n,
            "mauve_clustering_share": [share] * n,
        },
        schema_overrides={"mauve_2se": pl.Float64, "tv_2se": pl.Float64},
    )


def test_mauve_and_the_exact_tv_agree_disagree_or_cannot_tell():
    """Three verdicts from a permutation p and the range of rho under the means' errors, "cannot tell" the default."""
    order = [0.9, 0.85, 0.8, 0.75, 0.7, 0.65, 0.6, 0.55]
    tv = [0.10, 0.12, 0.14, 0.16, 0.18, 0.20, 0.22, 0.24]
    agree = mauve_tv_findings(metrics(order, tv, mauve_2se=0.01, tv_2se=0.004))
    assert agree[0].startswith("**ood**: MAUVE and the exact TV to the true law agree on the order of the 8 conditions")
    assert "ρ = 1.00" in agree[0] and "permutation p = 0.000" in agree[0] and "ranks 1 of 8 by TV" in agree[0]
    assert "Do not trust" not in agree[0]
    # the best MAUVE has the worst TV, and every condition in between is reversed too
    disagree = mauve_tv_findings(metrics(order, tv[::-1], mauve_2se=0.01, tv_2se=0.004))
    assert "order the 8 conditions in opposite ways" in disagree[0] and "ρ = -1.00" in disagree[0]
    assert "ranks 8 of 8 by TV (0.240). Do not trust MAUVE alone here." in disagree[0]
    # 4 conditions in perfect agreement: a rank correlation over 4 cannot reach 0.05 (2/24), so no verdict
    few = mauve_tv_findings(metrics(order[:4], tv[:4]))
    assert "the data cannot tell whether MAUVE orders the 4 conditions as the exact TV" in few[0]
    assert "cannot go below 2/24 = 0.08" in few[0] and "ρ = 1.00" in few[0] and "Do not trust" not in few[0]
    three = mauve_tv_findings(metrics(order[:3], tv[:3][::-1]))
    assert "cannot tell" in three[0] and "2/6 = 0.33" in three[0] and "Do not trust" not in three[0]
    # the same perfect order, but every TV within its neighbours' errors: the order is not the data's
    noisy = mauve_tv_findings(metrics(order, tv[::-1], mauve_2se=0.01, tv_2se=0.2))
    assert "cannot tell" in noisy[0] and "the order changes when the means are redrawn" in noisy[0]
    assert "Do not trust" not in noisy[0]
    # the default run: 13 conditions, 12 TV means within 0.19-0.24 (2 SE 0.024), rho near 0.4: p about 0.17
    default_tv = [0.19, 0.20, 0.21, 0.215, 0.22, 0.225, 0.23, 0.235, 0.24, 0.2, 0.21, 0.22, 0.546]
    default_mauve = [0.70, 0.74, 0.66, 0.80, 0.72, 0.78, 0.68, 0.76, 0.75, 0.71, 0.79, 0.73, 0.965]
    default = mauve_tv_findings(metrics(default_mauve, default_tv, mauve_2se=0.03, tv_2se=0.024))
    assert "cannot tell" in default[0] and "no rank correlation detectable" in default[0]
    assert mauve_tv_findings(metrics([0.9, 0.8], [None, None])) == []  # no truth, no sentence


def test_size_and_limits_say_whether_validation_was_still_falling():
    falling = {"a": pl.DataFrame({"step": [50, 100], "validation_loss": [3.0, 2.5]})}
    flat = {"a": pl.DataFrame({"step": [50, 100], "validation_loss": [2.5, 2.6]})}
    frame = metrics([0.9, 0.8, 0.7], [0.1, 0.2, 0.3], share=0.83)
    text = size_findings(frame, falling)
    assert text[0] == (
        "Size: 3 sampling runs of 30 prompts per eval set; each contrast compares two trained models of one "
        "training seed, so its test covers prompts and sampling runs, not training randomness: what it finds is about "
        "those checkpoints, not the training methods."
    )
    assert text[1] == (
        "Training: 100 optimizer steps per model (1 models). The validation loss was still falling at "
        "the last evaluation in 1 of 1 models: longer training could change the comparison."
    )
    assert "accounts for an estimated median 83%" in text[2]
    assert "did not fall at the last evaluation in any of the 1 models" in size_findings(frame, flat)[1]
    section = findings_section(frame, None, falling)
    assert section.startswith("Generated from the numbers below") and section.count("\n- ") == 4
    assert "No paired comparison was possible" in section


def test_one_mauve_cell_with_too_few_texts_is_singular():
    rows = contrasts_of(contrast_rows("perturbation", "mauve", [(0.05, 0.01)]))
    frame = pl.DataFrame(
        {
            "eval_set": ["set0", "set0"],
            "objective": ["mle"] * 2,
            "mauve_mean": [0.9, 0.8],
            "mauve_status": ["too few texts (20)", None],
        }
    )
    row = verdict(rows, frame)
    assert row["row"] == "set0" and row["helped"] == f"1: mle +0.050 [+0.040, +0.060], p_holm 0.010{FRAGILE}"
    assert row["notes"] == "too few texts in 1 cell (not compared)"


def test_an_objectives_too_few_cells_are_its_own_and_its_metrics_are_joined():
    """brier's rows count brier's refused MAUVE cells only (mle has one more), a row per metric."""
    objective = [
        {**r, "family": "objective", "objective": "brier", "favours": "brier"}
        for r in contrast_rows("objective", "mauve", [(0.05, 0.01)])
        + contrast_rows("objective", "rouge1", [(0.02, 0.5)])
    ]
    frame = pl.DataFrame(
        {
            "eval_set": ["set0"] * 4,
            "objective": ["brier", "brier", "mle", "brier"],
            "mauve_mean": [0.9, 0.8, 0.7, 0.6],
            "mauve_status": ["too few texts (20)", "too few texts (20)", "too few texts (20)", None],
        }
    )
    [mauve, rouge] = verdict_tables(contrasts_of(objective), frame)[OBJECTIVES]
    assert mauve["row"] == rouge["row"] == "brier against MLE"
    assert mauve["helped"] == f"1: set0 no perturbation +0.050 [+0.040, +0.060], p_holm 0.010{FRAGILE}"
    assert mauve["notes"] == "too few texts in 2 cells (not compared)"
    assert rouge["metric"] == "ROUGE-1 (higher is better)" and rouge["same"] == "1 of 1" and rouge["notes"] == ""


def test_size_gives_ranges_and_says_when_the_counts_are_missing():
    frame = metrics([0.9, 0.8], [0.1, 0.2]).with_columns(runs=pl.Series([2, 3]), prompts=pl.Series([20, 30]))
    logs = {
        "a": pl.DataFrame({"step": [50], "validation_loss": [3.0]}),
        "b": pl.DataFrame(
            {"step": [50, 100], "validation_loss": [None, 2.0]}, schema_overrides={"validation_loss": pl.Float64}
        ),
    }
    assert size_findings(frame, logs)[:2] == [
        (
            "Size: 2-3 sampling runs of 20-30 prompts per eval set; each contrast compares two trained models of one "
            "training seed, so its test covers prompts and sampling runs, not training randomness: what it finds is "
            "about those checkpoints, not the training methods."
        ),
        "Training: 50-100 optimizer steps per model (2 models).",
    ]  # no model has two evaluations: nothing said of them
    no_prompts = frame.with_columns(prompts=pl.lit(None, dtype=pl.Int64))
    assert size_findings(no_prompts, {})[0] == "Size: the metrics record no run or prompt counts."
    assert size_findings(frame.with_columns(mauve_clustering_share=pl.lit(0.25)), {})[1] == (
        "MAUVE's k-means clustering accounts for an estimated median 25% of a single (run, clustering seed) score's "
        "variance; the rest is sampling (see the Provenance section)."
    )


def test_the_validation_loss_is_falling_only_when_its_last_value_is_below_the_one_before():
    frame = metrics([0.9, 0.8], [0.1, 0.2])
    up_then_down = {"a": pl.DataFrame({"step": [1, 2, 3], "validation_loss": [2.0, 3.0, 2.5]})}
    assert "still falling at the last evaluation in 1 of 1 models" in size_findings(frame, up_then_down)[1]
    level = {"a": pl.DataFrame({"step": [1, 2, 3], "validation_loss": [3.0, 2.5, 2.5]})}
    assert size_findings(frame, level)[1] == (
        "Training: 3 optimizer steps per model (1 models). The validation loss "
        "did not fall at the last evaluation in any of the 1 models with two or more evaluations."
    )


def test_half_of_a_two_standard_error_column_is_the_standard_error():
    from workflow_lib.report.findings import _half

    frame = pl.DataFrame({"mauve_2se": [0.02, None]})
    assert _half(frame, "mauve_2se") == [0.01, None]
    assert _half(frame, "tv_2se") == [None, None]


def test_mauves_standard_errors_enter_the_redraws():
    """A perfect order of 8 whose MAUVE means lie well within their errors: the redraws reverse it (TV has none)."""
    order = [0.9, 0.85, 0.8, 0.75, 0.7, 0.65, 0.6, 0.55]
    line = mauve_tv_findings(metrics(order, [0.10, 0.12, 0.14, 0.16, 0.18, 0.20, 0.22, 0.24], mauve_2se=0.5))[0]
    assert "cannot tell" in line and "the order changes when the means are redrawn" in line


def test_two_conditions_are_compared_and_an_eval_set_without_them_stops_nothing():
    two = metrics([0.9, 0.8], [0.1, 0.2])
    assert mauve_tv_findings(two) == [
        (
            "**ood**: the data cannot tell whether MAUVE orders the 2 conditions as the exact TV to the true law does: with 2 "
            "conditions the rank correlation's permutation p cannot go below 2/2 = 1.00 (Spearman ρ = 1.00, TV's direction "
            "flipped so that 1 is full agreement; ρ between 1.00 and 1.00 when each condition's means are redrawn within "
            "their standard errors). MAUVE's best (mle, training insertion 0, sampling insertion 0: 0.900) ranks 1 of 2 by TV "
            "(0.100)."
        )
    ]
    lonely = metrics([0.7], [0.3]).with_columns(eval_set=pl.lit("aaa"))  # sorts first, one condition: no sentence
    lines = mauve_tv_findings(pl.concat([lonely, two]))
    assert len(lines) == 1 and lines[0].startswith(
        "**ood**: the data cannot tell whether MAUVE orders the 2 conditions"
    )


def test_a_constant_mauve_gives_no_numbers():
    assert mauve_tv_findings(metrics([0.5, 0.5, 0.5], [0.1, 0.2, 0.3])) == [
        (
            "**ood**: the data cannot tell whether MAUVE orders the 3 conditions as the exact TV to the true law does: one "
            "of the two is the same in every condition. MAUVE's best (mle, training insertion 0, sampling insertion 0: "
            "0.500) ranks 1 of 3 by TV (0.100)."
        )
    ]


def test_the_findings_section_in_full():
    frame = metrics([0.9, 0.8, 0.7], [0.1, 0.2, 0.3], share=0.5).with_columns(
        mauve_status=pl.Series([None, None, "too few texts (20)"]), eval_set=pl.Series(["set0", "set0", "set0"])
    )
    rows = contrasts_of(contrast_rows("perturbation", "mauve", [(0.05, 0.01)]))
    text = findings_section(frame, rows, {})
    assert text.endswith("(0.100).\n") and not text.endswith("\n\n")
    lines = text.splitlines()
    assert lines[9].startswith("- MAUVE is not resolvable in 1 of 3 evaluated cells")  # resolution's sentence
    assert lines[:9] + lines[10:] == [
        "Generated from the numbers below (not written by hand).",
        "",
        f"**{PERTURBATION}**",
        "",
        "| eval set | metric | helped | hurt | no detectable difference | not testable, notes |",
        "|---|---|---|---|---|---|",
        (
            "| set0 | MAUVE (higher is better) | 1: mle +0.050 \\[+0.040, +0.060\\], p\\_holm 0.010, near the 0.05 line: "
            "fragile | 0 | 0 of 1 | too few texts in 1 cell (not compared) |"
        ),
        "",
        (
            "- Size: 3 sampling runs of 30 prompts per eval set; each contrast compares two trained models of one "
            "training seed, so its test covers prompts and sampling runs, not training randomness: what it finds is "
            "about those checkpoints, not the training methods."
        ),
        (
            "- MAUVE's k-means clustering accounts for an estimated median 50% of a single (run, clustering seed) score's "
            "variance; the rest is sampling (see the Provenance section)."
        ),
        (
            "- **set0**: the data cannot tell whether MAUVE orders the 2 conditions as the exact TV to the true law does: "
            "with 2 conditions the rank correlation's permutation p cannot go below 2/2 = 1.00 (Spearman ρ = 1.00, TV's "
            "direction flipped so that 1 is full agreement; ρ between 1.00 and 1.00 when each condition's means are redrawn "
            "within their standard errors). MAUVE's best (mle, training insertion 0, sampling insertion 0: 0.900) ranks 1 "
            "of 2 by TV (0.100)."
        ),
    ]
    assert findings_section(frame, None, {}).splitlines()[2] == (
        "No paired comparison was possible in this study, so nothing is said about what helped."
    )


def test_perplexity_under_perturbation_is_named_the_base_models_and_under_an_objective_not():
    """A perturbation family's perplexity rows compare base models trained with and without perturbation (no
    sampling perturbation enters perplexity): the row says so. An objective's perplexity needs no such note."""
    perturbation = one_set(contrast_rows("perturbation", "perplexity", [(-1.0, 0.01)]))
    row = verdict(contrasts_of(perturbation))
    assert row["metric"] == "perplexity (lower is better) of the base model: training perturbation only"
    objective = [
        {**r, "objective": "brier", "favours": "mle"} for r in contrast_rows("objective", "perplexity", [(1.0, 0.01)])
    ]
    row = verdict(contrasts_of(objective), title=OBJECTIVES)
    assert row["metric"] == "perplexity (lower is better)" and row["helped"] == "0"
    assert row["hurt"].startswith("1: set0 no perturbation +1.000")


def test_a_perturbation_null_says_where_the_papers_gain_lies_against_what_it_could_see():
    """The paper's gain (metric_registry `paper_gain`: ROUGE-1 0.01) against the detectable figures and their interval."""
    rows = [
        {**r, "eval_set": "webtext", "detectable": seen, "detectable_low": seen * 0.52, "detectable_high": seen * 6.3}
        for r, seen in zip(contrast_rows("perturbation", "rouge1", [(0.002, 0.8), (0.001, 0.9)]), (0.016, 0.037))
    ]
    assert verdict(contrasts_of(rows))["same"] == (
        "2 of 2; it could have seen 0.016 to 0.037 at 80% power (95% interval of that figure: 0.008 to 0.233); the "
        "paper's gain (0.01) is below that range"
    )
    within = [{**r, "detectable": seen} for r, seen in zip(rows, (0.005, 0.02))]
    assert "the paper's gain (0.01) is within that range" in verdict(contrasts_of(within))["same"]
    objective = [{**r, "family": "objective", "objective": "brier", "favours": "brier"} for r in rows]
    assert "the paper's gain" not in verdict(contrasts_of(objective))["same"]  # its gains are perturbation's


def test_two_ablation_arms_that_differ_in_what_else_varies_are_told_apart():
    """An arm's label keeps what else varies ('TestPerturb (sample oracle)'): two TestPerturb arms of one objective,
    one drawing distributional synonyms and one oracle ones, must not read as the same arm twice."""
    arms = ["TestPerturb (sample distributional)", "TestPerturb (sample oracle)"]
    rows = contrasts_of(
        *[
            [
                {**r, "eval_set": "reach", "favours": "no perturbation"}
                for r in contrast_rows("ablation", "tv", [(d, 0.005)], a=arm, b="NoPerturb")
            ]
            for arm, d in zip(arms, (0.011, 0.009))
        ]
    )
    row = verdict(rows)
    assert row["hurt"] == (
        "2: mle TestPerturb (sample distributional) +0.011 [+0.001, +0.021], p_holm 0.005; "
        "mle TestPerturb (sample oracle) +0.009 [-0.001, +0.019], p_holm 0.005"
    )
