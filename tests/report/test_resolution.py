"""MAUVE only where it can resolve (issue 31, item 3): a cell with too few texts per run is shown as such and takes
no part in tables' ranking, contrasts, marks or findings; a resolvable one is kept. A paired t over runs needs 3
runs for a p, and a row with no p is "not testable", never "no detectable difference"."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import polars as pl
import yaml
from test_report import COLUMNS, contrast_rows, write

from support.metric_files import write_metrics, write_perplexity
from workflow_lib.config import validate_config
from workflow_lib.report.collect import collect
from workflow_lib.report.contrasts import contrasts
from workflow_lib.report.findings import contrast_findings, findings_section, mauve_tv_findings, verdict_tables
from workflow_lib.report.resolution import refusal_sentence, refused, resolved
from workflow_lib.report.statistics import MIN_RUNS, paired_t
from workflow_lib.report.summary import StudyResults, summary
from workflow_lib.report.tables import tables

TOO_FEW = {"mauve_status": "too few texts (20)", "mauve_texts": 20, "mauve_min_texts": 50, "num_buckets": None}
ENOUGH = {"mauve_status": None, "mauve_texts": 60, "mauve_min_texts": 50, "num_buckets": 6}


def study(root, flags: dict) -> pl.DataFrame:
    """mle with and without perturbation on one eval set under `root`; the perturbed cell has the higher MAUVE. A
    flagged cell has no MAUVE, as the evaluate step writes it (it does not score what cannot resolve)."""
    root.mkdir(parents=True, exist_ok=True)
    os.chdir(root)  # collect reads results/... relative to the working directory (tests chdir with monkeypatch first)
    low, high = ((None, None), (None, None)) if flags.get("mauve_status") else ((0.80, 0.02), (0.90, 0.03))
    paths = [
        write(root, "mle", "0", "0", "test", low, (0.50, 0.01), **flags),
        write(root, "mle", "0.025", "0.025", "test", high, (0.52, 0.01), **flags),
    ]
    return collect([p.split(str(root) + "/")[1] for p in paths])


def verdict_rows(outcomes: list[tuple[float, float | None]]) -> pl.DataFrame:
    """Perturbation contrasts of MAUVE on one eval set: outcomes = [(difference, p_holm or None: not tested)]."""
    rows = contrast_rows("perturbation", "mauve", [(d, 0.5) for d, _ in outcomes])
    for r, (_, p) in zip(rows, outcomes):
        r |= {"eval_set": "webtext", "p": p, "p_holm": p, "significant": p is not None and p < 0.05}
    return pl.DataFrame(rows, schema=COLUMNS, orient="row")


def test_a_two_bucket_mauve_cell_reads_too_few_texts_and_a_resolvable_one_keeps_its_number(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    refused_frame = study(tmp_path / "few", TOO_FEW)
    assert refused_frame["mauve_status"].to_list() == ["too few texts (20)"] * 2
    assert refused(refused_frame).height == 2 and resolved(refused_frame).height == 0
    tables(refused_frame, str(tmp_path / "few/tables"), 0.025, ["test"])
    t1 = pl.read_csv(tmp_path / "few/tables/table1.csv")
    assert t1["test MAUVE"].to_list() == ["too few texts (20)"] * 2 and t1["test ROUGE-1"][1] == "0.520 ± 0.022"
    md = (tmp_path / "few/tables/table1.md").read_text()
    assert "**too few texts" not in md and "**0.520 ± 0.022**" in md  # never the bold best; ROUGE still ranked
    assert '"too few texts (n)": MAUVE not reported' in md

    kept = study(tmp_path / "enough", ENOUGH)
    assert refused(kept).height == 0 and resolved(kept).height == 2
    tables(kept, str(tmp_path / "enough/tables"), 0.025, ["test"])
    t1 = pl.read_csv(tmp_path / "enough/tables/table1.csv")
    assert t1["test MAUVE"].to_list() == ["0.800 ± 0.043", "0.900 ± 0.065"]
    md = (tmp_path / "enough/tables/table1.md").read_text()
    assert "**0.900 ± 0.065**" in md and "too few texts" not in md


def test_the_summary_says_plainly_when_mauve_is_not_resolvable(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = {"models": {"mle": {"source": "scratch"}}, "eval_sets": {}, "datasets": {}}
    few = study(tmp_path / "few", TOO_FEW)
    text = summary(StudyResults(few, tables(few, str(tmp_path / "few/tables"), 0.025, ["test"])), config, 0.025)
    found = text.split("## What this study found\n", 1)[1].split("\n## ", 1)[0]
    assert (
        "- MAUVE is not resolvable in this study: its runs have 20 texts per side, under the floor "
        "evaluation.mauve.min_texts = 50"
    ) in found
    assert "MAUVE's k-means clustering accounts" not in found  # a quantised score's variance is no finding
    assert 'A MAUVE cell that reads "too few texts (n)"' in text
    assert "MAUVE's variance split (clustering vs sampling) is not reported: no MAUVE cell" in text
    enough = study(tmp_path / "enough", ENOUGH)
    text = summary(
        StudyResults(enough, tables(enough, str(tmp_path / "enough/tables"), 0.025, ["test"])), config, 0.025
    )
    assert "not resolvable" not in text and "too few texts" not in text and "is not reported" not in text
    assert refusal_sentence(enough) is None
    # some cells refused, some kept: counted
    mixed = pl.concat([few.head(1), enough.tail(1)], how="diagonal_relaxed")
    assert refusal_sentence(mixed).startswith(
        "MAUVE is not resolvable in 1 of 2 evaluated cells: its runs have 20 texts"
    )


def test_a_side_with_too_few_texts_gives_no_mauve_contrast_and_a_resolvable_pair_gives_one(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rng = np.random.default_rng(5)
    shared, rouge = rng.uniform(0.6, 0.8, 5), rng.uniform(0.2, 0.5, (60, 5))
    paths = [
        write_metrics(tmp_path, "mle", "0", "0", shared + rng.normal(0, 0.005, 5), rouge),
        write_metrics(tmp_path, "mle", "0.025", "0.025", shared + 0.08 + rng.normal(0, 0.005, 5), rouge + 0.02),
        write_perplexity(tmp_path, "mle", "0", 3.2 * np.full(60, 40.0), np.full(60, 40.0)),
        write_perplexity(tmp_path, "mle", "0.025", 3.0 * np.full(60, 40.0), np.full(60, 40.0)),
    ]
    kept = contrasts(paths, 0.025).filter(pl.col("family") == "perturbation")
    mauve = kept.filter(pl.col("metric") == "mauve")
    assert mauve.height == 1 and mauve["significant"][0] and mauve["favours"][0] == "perturbation"
    # The same files, the perturbed side flagged as the evaluate step flags a run of 20 texts.
    flagged = tmp_path / paths[1]
    flagged.write_text(json.dumps(json.loads(flagged.read_text()) | TOO_FEW))
    refused_rows = contrasts(paths, 0.025).filter(pl.col("family") == "perturbation")
    assert refused_rows.filter(pl.col("metric") == "mauve").height == 0  # no row: no estimate, no p, no mark
    assert set(refused_rows["metric"]) == {"rouge1", "rouge2", "rougeL", "perplexity"}  # the rest is compared


def test_a_paired_t_needs_three_runs_for_a_p():
    assert MIN_RUNS == 3
    two = paired_t([0.90, 0.91], [1.0, 1.0])  # the case: a quantised score and two runs
    assert two.p is None and two.low is None and two.high is None and two.difference < 0 and two.n == 2
    assert paired_t([0.5, 0.5], [0.5, 0.5]).p is None  # even no difference is untested with two runs
    three = paired_t([0.90, 0.91, 0.89], [1.0, 1.0, 1.0])
    assert three.p is not None and three.p < 0.05 and three.high < 0 and three.n == 3


def test_a_row_with_no_p_is_not_testable_never_no_difference():
    def mauve(rows):
        [row] = next(iter(verdict_tables(verdict_rows(rows)).values()))
        return row

    row = mauve([(0.05, None), (-0.04, None)])
    assert row["notes"] == "not testable in any of 2 (no p)"  # rows that record no reason (written before it was)
    assert row["same"] == ""  # never "no detectable difference"
    # one tested and not significant, one untested: the tested one alone is "no detectable difference"
    row = mauve([(0.05, 0.4), (-0.04, None)])
    assert (row["same"], row["notes"]) == ("1 of 1", "not testable in 1 (no p)")
    row = mauve([(0.05, 0.4), (-0.04, 0.6)])  # all tested
    assert (row["same"], row["notes"]) == ("2 of 2", "")
    row = mauve([(0.05, 0.01), (-0.04, None)])
    assert row["helped"] == "1: mle +0.050 [+0.040, +0.060], p_holm 0.010, near the 0.05 line: fragile"
    assert (row["hurt"], row["same"], row["notes"]) == ("0", "0 of 1", "not testable in 1 (no p)")


def test_findings_name_mauve_with_too_few_texts_instead_of_comparing_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rouge_only = contrast_rows("perturbation", "rouge1", [(0.01, 0.01)])
    for r in rouge_only:
        r |= {"eval_set": "test"}
    frame = pl.DataFrame(rouge_only, schema=COLUMNS, orient="row")
    few = study(tmp_path / "few", TOO_FEW)
    [mauve, rouge] = next(iter(verdict_tables(frame, few).values()))
    assert mauve["row"] == "test" and mauve["metric"].startswith("MAUVE")
    assert mauve["notes"] == "too few texts per run to compare" and rouge["metric"].startswith("ROUGE-1")
    enough = study(tmp_path / "enough", ENOUGH)
    assert "MAUVE" not in contrast_findings(frame, enough)[0]  # no MAUVE row and nothing refused: nothing to say
    section = findings_section(few, frame, {})
    assert "MAUVE is not resolvable in this study" in section


def test_mauve_with_too_few_texts_is_not_set_against_the_exact_tv():
    def frame(status, mauve=(0.9, 0.8, 0.7, 0.6, 0.5)):
        n = 5
        return pl.DataFrame(
            {
                "eval_set": ["ood"] * n,
                "objective": ["mle"] * n,
                "train_strategy": ["insertion"] * n,
                "train_intensity": [0.1 * i for i in range(n)],
                "test_strategy": ["insertion"] * n,
                "test_intensity": [0.1 * i for i in range(n)],
                "mauve_mean": list(mauve),
                "tv_mean": [0.1, 0.2, 0.3, 0.4, 0.5],
                "mauve_status": [status] * n,
            },
            schema_overrides={"mauve_status": pl.Utf8, "mauve_mean": pl.Float64},
        )

    refusal = [
        "**ood**: MAUVE is not set against the exact TV to the true law: its runs had too few texts to resolve it."
    ]
    assert mauve_tv_findings(frame("too few texts (20)")) == refusal
    assert mauve_tv_findings(frame("too few texts (20)", [None] * 5)) == refusal  # as evaluate writes it: not scored
    assert mauve_tv_findings(frame(None))[0].startswith("**ood**: MAUVE and the exact TV to the true law agree")


def test_the_default_study_has_enough_prompts_for_mauve_to_resolve():
    """config.yaml's 3 runs of max_prompts prompts per eval set: each run's MAUVE needs min_texts texts per side,
    and each eval set's split has the documents to give them (one prompt per document at most)."""
    repo = Path(__file__).resolve().parents[2]
    config = validate_config(yaml.safe_load((repo / "config.yaml").read_text()), workdir=repo)
    floor = config["evaluation"]["mauve"]["min_texts"]
    assert floor == 50 and config["sampling"]["runs"] >= MIN_RUNS
    for name, spec in config["eval_sets"].items():
        prompts = spec.get("max_prompts") or config["prompts"]["max_prompts"]
        docs = config["datasets"][spec["dataset"]]["builtin"]["docs"][spec["split"]]
        assert min(prompts, docs) >= floor, name
