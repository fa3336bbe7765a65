"""The theory lab through the workflow: planned with the study, run on a tiny config, rerun only where its
settings change, and refused with a message where its group cannot be formed."""

from __future__ import annotations

import numpy as np
import polars as pl
import pyarrow.parquet as pq
import pytest

from support.workflow_runs import (
    LAB,
    dry_run_of_tiny_study_with,
    lab_settings,
    planned_rules,
    snakemake,
    tiny_config,
    tiny_study_config,
    write_config,
)

pytestmark = pytest.mark.workflow


def lab_config() -> dict:
    """A study that is only the lab's group (its settings are also the shared tiny study's lab)."""
    config = tiny_config()
    config["experiments"] = {
        "group": {
            "models": ["tiny"],
            "train_dataset": "synthetic",
            "eval_sets": ["syn-test"],
            "objectives": ["mle", "brier"],
        }
    }
    config["lab"] = lab_settings()
    return config


def test_the_lab_is_planned_with_the_study(workdir):
    write_config(workdir, lab_config())
    plan = snakemake(workdir, "-n")
    assert plan.returncode == 0, plan.stdout[-3000:] + plan.stderr[-3000:]
    assert {"lab_sets", "lab_laws", "lab", "tables"} <= planned_rules(plan.stdout + plan.stderr)


def test_the_lab_runs_reruns_only_what_its_settings_change_and_reaches_the_summary(tiny_study):
    """On the shared tiny study, whose lab group (`group`: MLE and Brier) has the lab settings of `lab_config`."""
    workdir = tiny_study
    sets = pq.read_table(workdir / "results/lab/sets/synthetic.parquet").to_pandas()
    assert (sets["distance"] == sets["delta"]).all()
    assert set(sets["family"]) == {"composition", "synonym"} and set(sets["delta"]) == {0, 1, 2}
    laws = sorted((workdir / "results/lab/laws").rglob("*.npz"))
    assert [p.parts[-5] for p in laws] == ["brier", "mle"]  # .../<objective>/none/augment-m1/none-0/seed1.npz
    with np.load(laws[0]) as law:
        assert list(law["perturbations"]) == ["none", "synonym", "uniform"]
        assert law["laws"].shape[:2] == (3, len(sets)) and law["laws_half"].shape == law["laws"].shape
        np.testing.assert_allclose(law["laws"].sum(-1), 1.0, atol=1e-9)

    table = pl.read_csv(workdir / f"{LAB}/uncertainty.csv")
    assert set(table["perturbation"].to_list()) == {"none", "uniform", "synonym"}
    assert (table["n_models"] == 2).all()
    # SP_perturb holds for class-synonym replacement at beta 1 on the synonym family: T(.|X') = T(.|X0) draw for
    # draw, so the measured uncertainty at every delta is the one on the support prefixes themselves.
    sp = table.filter((pl.col("family") == "synonym") & (pl.col("perturbation") == "synonym")).sort("delta")
    assert sp["U_max"].to_list() == pytest.approx([sp["U_max"][0]] * sp.height, abs=1e-12)
    # The job asserts the coupling inequality (row TV <= 2 x share of changed draws + support TV) and would
    # have failed otherwise; the draws' share and the half-draws U reached the table.
    perturbed = table.filter(pl.col("perturbation") != "none")
    assert perturbed["C_draws"].null_count() == 0 and perturbed["U_max_half_draws"].null_count() == 0
    assert not {c for c in table.columns if c.startswith(("respects", "bound", "violations"))}
    premise = pl.read_csv(workdir / f"{LAB}/premise.csv")
    assert {"unseen", "off-support"} == set(premise["class"]) and premise.height > 0
    markdown = (workdir / f"{LAB}/uncertainty.md").read_text()
    assert "Model classes that meet the premise" in markdown and "not U of any class" in markdown

    # Only the laws and the table depend on the number of draws; the sets and the models stay.
    targets = [f"{LAB}/uncertainty.csv", f"{LAB}/premise.csv", f"{LAB}/uncertainty.md", f"{LAB}/figure.png"]
    config = tiny_study_config()
    config["lab"]["draws"] = 3
    rerun = dry_run_of_tiny_study_with(workdir, config, *targets)
    assert planned_rules(rerun.stdout + rerun.stderr) == {"lab_laws", "lab"}, rerun.stdout[-2000:]

    # The whole study: the summary carries the lab's table and figure (the HTML report's "Theory lab" category, in
    # a real browser: tests/workflow/test_workflow.py::test_report_builds_on_a_tiny_config).
    summary = (workdir / "results/summary.md").read_text()
    assert "## Theory lab" in summary and "results/lab/group/figure.png" in summary
    assert (workdir / f"{LAB}/uncertainty.md").read_text().strip() in summary


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda c: c["experiments"]["group"].update(objectives=["mle"]), "needs at least 2"),
        (lambda c: c["lab"].update(deltas=[0, 9]), "lab.deltas"),
        (lambda c: c["lab"].update(experiments=["nope"]), "lab.experiments[0]"),
        (
            lambda c: c["experiments"]["group"].update(train_perturbation={"intensities": [0, 0.1]}),
            "training conditions",
        ),
    ],
)
def test_a_lab_without_a_group_is_refused_naming_the_key(workdir, change, message):
    config = lab_config()
    change(config)
    write_config(workdir, config)
    plan = snakemake(workdir, "-n")
    assert plan.returncode != 0 and message in plan.stdout + plan.stderr, (plan.stdout + plan.stderr)[-2000:]
