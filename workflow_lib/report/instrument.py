"""What MAUVE can see here: the controls of every eval set (workflow_lib.evaluate.controls, control_scores) as the report's table
and the summary's section of that name.

A MAUVE cell is a number only where its instrument passed: the eval set's must-detect controls (degradations of its
own human text, in the cells' layout and at their n) each scored below the human ceiling by more than the k-means
spread. This module shows the evidence beside the cells: each control's mean over the clustering seeds, its range,
and whether it was seen; the cells themselves carry the verdict as their `mauve_status` (report.resolution).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from workflow_lib.evaluate.control_names import CEILING, CONTROLS, DESCRIPTIONS
from workflow_lib.report.tables import write_table

PLANTED_COLUMN = "planted mixture"
LAYOUTS = {  # evaluation.feature_text, as a reader is told it
    "continuation": "the continuation alone",
    "prompt_and_continuation": "prompt + continuation",
}


def read_controls(paths: list[str], planted: Sequence[str] = ()) -> list[dict]:
    """The controls JSON of each eval set, with its eval set and featuriser named by its path
    (results/controls/<featuriser>/<eval set>.json, read back by `layout.fields_of`), and under "planted" its planted
    control (report/planted.py; None where the study has none)."""
    from workflow_lib.layout import CONTROLS, PLANTED, fields_of

    gaps = {}
    for path in planted:
        key = fields_of(PLANTED, path)
        gaps[key["featuriser"], key["eval_set"]] = json.loads(Path(path).read_text())["planted"]
    out = []
    for path in sorted(paths):
        key = fields_of(CONTROLS, path)
        record = json.loads(Path(path).read_text())
        out.append(
            record
            | {
                "eval_set": key["eval_set"],
                "featuriser_id": key["featuriser"],
                "planted": gaps.get((key["featuriser"], key["eval_set"])),
            }
        )
    return out


def control_cell(row: dict | None) -> str:
    """'0.618 [0.41, 0.70] seen': a control's mean over k-means seeds, their range, and the rule's verdict."""
    if not row:
        return ""
    scores = row["scores"]
    seen = "" if row["seen"] is None else (" seen" if row["seen"] else " not seen")
    return f"{row['mean']:.3f} [{min(scores):.2f}, {max(scores):.2f}]{seen}"


def planted_cell(record: dict) -> str:
    """'0.041 [0.012, 0.070], p 0.004; sees 0.052+': the planted control's MAUVE gap, its interval and p, and the
    smallest gap the test detects with 80% power (report/planted.py)."""
    gap = record.get("planted")
    if not gap:
        return "not run" if not record.get("floor") else ""
    see = f"{gap['can_see']:.3f}" if gap["can_see"] is not None else "n/a"
    p = "n/a" if gap["p"] is None else f"{gap['p']:.2g}"
    return f"{gap['gap']:.3f} [{gap['low']:.3f}, {gap['high']:.3f}], p {p}; sees {see}+"


def planted_sentence(record: dict) -> str:
    """What the planted control says of the eval set's MAUVE contrasts, or '' where it did not run."""
    gap = record.get("planted")
    if not gap:
        return ""
    share = f"{gap['fraction']:.0%}"
    found = (
        f"Replacing {share} of the human texts with another eval set's words lowers MAUVE by {gap['gap']:.3f} "
        f"(95% interval {gap['low']:.3f} to {gap['high']:.3f}; joint permutation test p = {gap['p']:.2g}, "
        + ("seen" if gap["seen"] else "not seen")
        + f", over {gap['windows']} disjoint human windows)"
    )
    if gap["can_see"] is None:
        return found + "."
    if gap["sees_target"]:
        reach = (
            f"at n = {record['texts']} that test can see MAUVE gaps of {gap['can_see']:.3f} or more (80% power, one "
            f"test at 5%), which includes the paper's gain of {gap['target']:g}"
        )
    else:
        reach = (
            f"at n = {record['texts']} that test can see MAUVE gaps of {gap['can_see']:.3f} or more (80% power, one "
            f"test at 5%), so the paper's gain of {gap['target']:g} is below what this study's MAUVE can see: a "
            "MAUVE null here is not evidence against an effect of that size"
        )
    return f"{found}; {reach}."


def verdict_cell(record: dict) -> str:
    if record.get("floor"):
        return f"not checked: {record['floor']}, under evaluation.mauve.min_texts"
    if not record["must_detect"]:
        return "reported unchecked (must_detect: [])"
    return record["status"] or "reported: every must-detect control seen"


def controls_table(records: list[dict], stem: str) -> str:
    """The controls table (CSV, Markdown, LaTeX at `stem`); returns its Markdown."""
    columns = ["eval set", "featuriser", "n", *(CONTROLS[c] for c in CONTROLS), PLANTED_COLUMN, "MAUVE cells"]
    rows = []
    for r in records:
        rows.append(
            {
                "eval set": r["eval_set"],
                "featuriser": r["featuriser"],
                "n": str(r["texts"]),
                **{CONTROLS[c]: control_cell(r["controls"].get(c)) for c in CONTROLS},
                PLANTED_COLUMN: planted_cell(r),
                "MAUVE cells": verdict_cell(r),
            }
        )
    must = sorted({c for r in records for c in r["must_detect"]}, key=list(CONTROLS).index)
    caption = (
        "What MAUVE can see here: the human references against known texts in the cells' own layout and size "
        f"({'; '.join(f'{CONTROLS[c]}: {DESCRIPTIONS[c]}' for c in CONTROLS)}). Each cell: the mean MAUVE over the "
        "k-means seeds [their range]; a control is seen when its mean is below the ceiling's "
        f"({CONTROLS[CEILING]}) by more than the wider of the two ranges. MAUVE is reported only where every "
        f"must-detect control ({', '.join(CONTROLS[c] for c in must) or 'none'}) is seen. The {PLANTED_COLUMN}: two "
        "disjoint human windows against the same windows with that share of the prompts' texts replaced by another "
        "eval set's words, by the contrasts' joint test: the MAUVE gap [95% interval], its permutation p, and the "
        "smallest gap the test detects with 80% power."
    )
    write_table(rows, [{} for _ in rows], columns, stem, caption=caption, unranked=set(columns))
    return Path(stem).with_suffix(".md").read_text()


def controls_section(records: list[dict], table: str) -> str:
    """The summary's 'What MAUVE can see here': the table and one sentence per eval set."""
    if not records:
        return "No eval set of this study was scored with MAUVE, so no control was run.\n"
    lines = [table.strip(), ""]
    for r in records:
        layout = LAYOUTS.get(r["feature_text"], r["feature_text"])
        if r.get("floor"):
            lines.append(f"- **{r['eval_set']}**: not checked: {r['floor']}, so MAUVE is not scored there at all.")
        elif r["status"]:
            lines.append(
                f"- **{r['eval_set']}**: {r['status']} ({layout}): its MAUVE cells are not reported and take no part "
                "in the comparisons or findings."
            )
        else:
            unseen = [CONTROLS[c] for c, row in r["controls"].items() if row["seen"] is False]
            lines.append(
                f"- **{r['eval_set']}**: MAUVE with {r['featuriser']} ({layout}) sees every must-detect control at "
                f"n = {r['texts']}"
                + (
                    f"; it does not see {', '.join(unseen)}, which no cell's MAUVE can tell apart here"
                    if unseen
                    else ""
                )
                + "."
            )
        if sentence := planted_sentence(r):
            lines.append(f"  {sentence}")
    return "\n".join(lines) + "\n"
