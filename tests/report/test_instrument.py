"""MAUVE only where its instrument passes (issue 51): an eval set whose controls fail has every MAUVE cell read
"MAUVE cannot see ..." and take no part in tables' ranking, contrasts, marks or findings; "What MAUVE can see here"
shows each control's score, its k-means range and the verdict."""

from __future__ import annotations

import json

import polars as pl
from test_findings import contrasts_of
from test_report import contrast_rows
from test_resolution import ENOUGH, study

from workflow_lib.evaluate.control_scores import verdict
from workflow_lib.evaluate.controls import CEILING
from workflow_lib.report.findings import mauve_tv_findings, verdict_tables
from workflow_lib.report.instrument import controls_section, controls_table, read_controls
from workflow_lib.report.resolution import refusal_label, refusal_sentence, refused, resolved
from workflow_lib.report.summary import StudyResults, summary
from workflow_lib.report.tables import tables

STATUS = "MAUVE cannot see shuffled words, word salad at n = 60 with minilm"
BLIND = {"mauve_status": STATUS, "mauve_texts": 60, "mauve_min_texts": 50, "num_buckets": None}
SCORES = {
    CEILING: [0.98, 0.99, 1.0],
    "shuffled": [0.99, 1.0, 1.0],
    "loop": [0.01, 0.02, 0.03],
    "salad": [0.9, 0.95, 0.99],
    "swapped": [0.97, 0.98, 0.99],
}


def write_controls(folder, eval_set: str, scores: dict, must: list[str], texts: int = 60) -> str:
    record = verdict(scores, must, texts, "minilm") | {"floor": None, "feature_text": "continuation"}
    path = folder / "results" / "controls" / "minilm" / f"{eval_set}.json"  # as layout.CONTROLS writes it
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record))
    return str(path)


def test_a_blind_eval_set_s_cells_are_refused_everywhere(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    frame = study(tmp_path / "blind", BLIND)
    assert refused(frame).height == 2 and resolved(frame).height == 0
    tables(frame, str(tmp_path / "blind/tables"), 0.025, ["test"])
    t1 = pl.read_csv(tmp_path / "blind/tables/table1.csv")
    assert t1["test MAUVE"].to_list() == [STATUS] * 2
    md = (tmp_path / "blind/tables/table1.md").read_text()
    assert "**MAUVE cannot" not in md and '"MAUVE cannot see ...": not reported' in md
    sentence = refusal_sentence(frame)
    assert sentence.startswith(f"MAUVE's controls fail in every evaluated cell: on test, {STATUS}")
    assert "too few texts" not in sentence
    assert refusal_label(frame).startswith("MAUVE not shown here: its controls fail")
    rows = contrasts_of(contrast_rows("perturbation", "rouge1", [(0.01, 0.5)]))
    [mauve, _] = next(iter(verdict_tables(rows.with_columns(pl.lit("test").alias("eval_set")), frame).values()))
    assert mauve["row"] == "test" and mauve["metric"].startswith("MAUVE")
    assert mauve["notes"].startswith("not compared (its controls fail")
    truth = frame.with_columns(pl.lit(0.3).alias("tv_mean"), pl.lit(0.01).alias("tv_2se"))
    assert mauve_tv_findings(truth) == [
        (
            "**test**: MAUVE is not set against the exact TV to the true law: its controls fail (MAUVE cannot see "
            "degraded human text here)."
        )
    ]
    assert refusal_sentence(truth).endswith("measures extrapolation without a featuriser.")
    # the same cells with a passing instrument keep their numbers
    kept = study(tmp_path / "kept", ENOUGH)
    assert refusal_sentence(kept) is None and resolved(kept).height == 2


def test_what_mauve_can_see_here_shows_each_control_and_the_verdict(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    paths = [
        write_controls(tmp_path / "controls", "blind-set", SCORES, ["shuffled", "loop", "salad"]),
        write_controls(tmp_path / "controls", "open-set", SCORES, ["loop"]),
    ]
    records = read_controls(paths)
    assert [r["eval_set"] for r in records] == ["blind-set", "open-set"]
    table = controls_table(records, str(tmp_path / "tables/controls"))
    csv = pl.read_csv(tmp_path / "tables/controls.csv")
    assert csv["a 5-word loop"][0] == "0.020 [0.01, 0.03] seen" and csv["human text"][0] == "0.990 [0.98, 1.00]"
    assert csv["shuffled words"][0] == "0.997 [0.99, 1.00] not seen"
    assert csv["MAUVE cells"].to_list() == [
        "MAUVE cannot see shuffled words, word salad at n = 60 with minilm",
        "reported: every must-detect control seen",
    ]
    assert "must-detect control (shuffled words, a 5-word loop, word salad)" in table and "**" not in table
    section = controls_section(records, table)
    assert (
        f"- **blind-set**: {records[0]['status']} (the continuation alone): its MAUVE cells are not reported" in section
    )
    assert (
        "- **open-set**: MAUVE with minilm (the continuation alone) sees every must-detect control at n = 60; it does "
        "not see shuffled words, word salad, another prompt's continuation, which no cell's MAUVE can tell apart here."
    ) in section
    under = read_controls([write_controls(tmp_path / "few", "x", SCORES, ["loop"], texts=10)])
    under[0] |= {"floor": "too few texts (10)", "controls": {}, "status": None}
    assert "not checked: too few texts (10)" in controls_section(under, "")
    frame = study(tmp_path / "blind", BLIND)
    written = tables(frame, str(tmp_path / "blind/tables"), 0.025, ["test"]) | {"controls": table}
    config = {"models": {"mle": {"source": "scratch"}}, "eval_sets": {}, "datasets": {}}
    text = summary(StudyResults(frame, written, controls=records), config, 0.025)
    assert (
        text.index("## What this study found") < text.index("## What MAUVE can see here") < text.index("## Provenance")
    )
    assert 'A MAUVE cell that reads "MAUVE cannot see ..."' in text and 'reads "too few texts (n)"' not in text


def test_a_mauve_null_is_read_against_what_the_planted_control_says_mauve_can_see():
    """The perturbation rows' MAUVE verdict quotes the eval set's planted control (report/planted.py): the
    smallest gap its test can see, and whether the paper's gain lies within it."""
    from test_resolution import verdict_rows

    def mauve(reach=None) -> dict:
        [row] = next(iter(verdict_tables(rows, None, reach).values()))
        return row

    rows = verdict_rows([(0.05, 0.4), (-0.04, 0.6)])
    plain = mauve()
    planted = {"can_see": 0.12, "target": 0.03, "sees_target": False}
    blind = mauve({"webtext": planted})
    assert blind | {"notes": ""} == plain and plain["notes"] == ""
    assert blind["notes"] == (
        "MAUVE's planted control: its test can see MAUVE gaps of 0.120 or more at this n (80% power), so the paper's "
        "gain of 0.03 is below what MAUVE can see here and a MAUVE null is not evidence against it"
    )
    seeing = mauve({"webtext": planted | {"can_see": 0.02, "sees_target": True}})["notes"]
    assert "can see MAUVE gaps of 0.020 or more at this n (80% power), the paper's gain of 0.03 included" in seeing
    assert mauve({"other": planted}) == plain  # another eval set's control says nothing


def test_each_eval_set_s_record_carries_its_planted_control(tmp_path):
    from workflow_lib.layout import PLANTED

    seen = write_controls(tmp_path, "a", SCORES, ["loop"])
    alone = write_controls(tmp_path, "b", SCORES, ["loop"])
    gap = {"gap": 0.04, "low": 0.01, "high": 0.07, "p": 0.01, "can_see": 0.05, "target": 0.03, "sees_target": False}
    planted = tmp_path / PLANTED.format(featuriser="minilm", eval_set="a")
    planted.parent.mkdir(parents=True)
    planted.write_text(json.dumps({"planted": gap}))
    records = {r["eval_set"]: r for r in read_controls([alone, seen], [str(planted)])}
    assert records["a"]["planted"] == gap and records["b"]["planted"] is None
    assert records["a"]["featuriser_id"] == "minilm"


def test_a_refused_eval_set_s_finding_says_what_its_planted_control_could_see(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    frame = study(tmp_path / "blind", BLIND)
    rows = contrasts_of(contrast_rows("perturbation", "rouge1", [(0.01, 0.5)]))
    rows = rows.with_columns(pl.lit("test").alias("eval_set"))
    planted = {"can_see": 0.081, "target": 0.03, "sees_target": False}
    [mauve, _] = next(iter(verdict_tables(rows, frame, {"test": planted}).values()))
    assert mauve["notes"].startswith(
        "not compared (its controls fail: MAUVE cannot see degraded human text here); MAUVE's planted "
        "control: its test can see MAUVE gaps of 0.081 or more at this n (80% power)"
    )
