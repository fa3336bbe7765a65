"""The summary's "Perturbation realised": for every perturbed condition, the nominal intensity beside the share of
positions its perturbation did select (perturb/realised.py), so that a reader sees the perturbation happened.

Training conditions from each trained model folder's train_summary.json (`ran.realised`, which the trainer copies
from its perturbed data); sampling conditions from the metrics table (`test_realised_share`, which the evaluation
copies from its samples file). A condition run before the count was kept shows "not recorded".
"""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl

from workflow_lib.perturb.realised import MIN_EXPECTED, STOP_FRACTION
from workflow_lib.report import escape
from workflow_lib.report.conditions import parse_model_dir

CAPTION = (
    "The share of the positions a perturbation could touch (not special tokens) that it did perturb, beside its "
    "nominal intensity: about the intensity times the share of tokens with a synonym (docs/method.md §1, "
    f'"Realised against nominal"). A job stops where nothing is eligible, or where it expects at least {MIN_EXPECTED} '
    f"perturbed positions and realises under {STOP_FRACTION:g} of the nominal.\n\n"
)
HEADER = "| perturbation | condition | nominal intensity | realised share |\n| --- | --- | --- | --- |\n"


def training_rows(model_dirs: list[str]) -> list[tuple[str, str, float, float | None]]:
    """('training', condition, nominal, realised) of every perturbed model folder."""
    rows = []
    for folder in sorted(model_dirs):
        condition = parse_model_dir(folder)
        if condition is None or not float(condition["train_intensity"]) > 0:
            continue
        path = Path(folder) / "train_summary.json"
        ran = json.loads(path.read_text()).get("ran", {}) if path.exists() else {}
        share = (ran.get("realised") or {}).get("realised_share")
        name = "/".join(
            str(condition[k])
            for k in (
                "model",
                "dataset",
                "objective",
                "train_synonyms",
                "train_mode",
                "train_strategy",
                "train_intensity",
                "seed",
            )
        )
        rows.append(("training", name, float(condition["train_intensity"]), share))
    return rows


def sampling_rows(frame: pl.DataFrame) -> list[tuple[str, str, float, float | None]]:
    """('sampling', evaluation, nominal, realised) of every perturbed sampling condition in the metrics table."""
    if "test_realised_share" not in frame.columns:
        return []
    perturbed = frame.filter(pl.col("test_intensity") > 0).sort("model", "eval_set", "test_strategy")
    keys = ("model", "train_strategy", "train_intensity", "seed", "eval_set", "test_synonyms", "test_strategy")
    return [
        ("sampling", "/".join(str(row[k]) for k in keys), float(row["test_intensity"]), row["test_realised_share"])
        for row in perturbed.iter_rows(named=True)
    ]


def realised_table(frame: pl.DataFrame, model_dirs: list[str]) -> str | None:
    """The Markdown table of every perturbed condition's nominal intensity and realised share; None without one."""
    rows = training_rows(model_dirs) + sampling_rows(frame)
    if not rows:
        return None
    lines = [
        f"| {kind} | {escape.markdown(name)} | {nominal:g} | "
        f"{'not recorded' if share is None else format(share, '.4f')} |\n"
        for kind, name, nominal, share in rows
    ]
    return HEADER + "".join(lines)
