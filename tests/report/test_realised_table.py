"""The summary's "Perturbation realised" (issue 64, item 3): every perturbed condition's nominal intensity beside
the share its perturbation realised, training conditions from the model folders, sampling ones from the metrics."""

from __future__ import annotations

import json

import polars as pl

from workflow_lib.comparisons import KEYS
from workflow_lib.report.collect import _metric_fields
from workflow_lib.report.realised import realised_table


def metrics_row(test_intensity: float, share: float | None) -> dict:
    row = dict.fromkeys(KEYS, "x")
    row |= {"model": "tiny", "eval_set": "synthetic-test", "test_strategy": "insertion", "seed": 42}
    row |= {"train_intensity": 0.0, "test_intensity": test_intensity, "test_realised_share": share}
    return row


def test_the_table_shows_realised_against_nominal_for_every_perturbed_condition(tmp_path):
    perturbed = tmp_path / "results/models/tiny/synthetic/mle/oracle/augment-m1/insertion-0.025/seed42"
    baseline = tmp_path / "results/models/tiny/synthetic/mle/none/augment-m1/none-0/seed42"
    for folder in (perturbed, baseline):
        folder.mkdir(parents=True)
    realised = {"nominal_intensity": 0.025, "realised_share": 0.02125}
    (perturbed / "train_summary.json").write_text(json.dumps({"ran": {"realised": realised}}))
    frame = pl.DataFrame([metrics_row(0.0, 0.0), metrics_row(0.05, 0.0481)])
    table = realised_table(frame, [str(perturbed), str(baseline)])
    assert table is not None
    lines = table.splitlines()
    assert lines[0] == "| perturbation | condition | nominal intensity | realised share |"
    assert len(lines) == 4  # header, rule, one training and one sampling condition; no baseline
    assert lines[2].startswith("| training |") and lines[2].endswith("| 0.025 | 0.0213 |")
    assert lines[3].startswith("| sampling |") and lines[3].endswith("| 0.05 | 0.0481 |")


def test_a_condition_without_a_count_says_so_and_none_perturbed_gives_no_table(tmp_path):
    folder = tmp_path / "results/models/tiny/synthetic/mle/oracle/augment-m1/insertion-0.025/seed42"
    folder.mkdir(parents=True)
    (folder / "train_summary.json").write_text(json.dumps({"ran": {}}))
    assert realised_table(pl.DataFrame([metrics_row(0.0, 0.0)]), [str(folder)]).endswith("| not recorded |\n")
    assert realised_table(pl.DataFrame([metrics_row(0.0, 0.0)]), []) is None


def test_the_metrics_table_collects_the_samples_realised_share():
    assert _metric_fields({"realised": {"realised_share": 0.0481}})["test_realised_share"] == 0.0481
    assert _metric_fields({})["test_realised_share"] is None
