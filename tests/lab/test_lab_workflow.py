"""The theory lab through the workflow: planned with the study, run on a tiny config, rerun only where its
settings change, and refused with a message where its group cannot be formed."""

from __future__ import annotations

import os

import numpy as np
import polars as pl
import pyarrow.parquet as pq
import pytest
from support.study import planned_rules, snakemake, tiny_config, write_config

pytestmark = pytest.mark.workflow

LAB = "results/lab/group"


def lab_config() -> dict:
    config = tiny_config()
    config["experiments"] = {"group": {"models": ["tiny"], "train_dataset": "synthetic", "eval_sets": ["syn-test"],
                                       "objectives": ["mle", "brier"]}}
    config["lab"] = {"experiments": ["group"], "prefixes": 12, "length": 24, "deltas": [0, 1, 2], "last": 8,
                     "draws": 2, "tries": 16,
                     "perturbations": {"uniform": {"q0": "uniform", "beta": 0.9}, "synonym": {"q0": "synonym", "beta": 1.0}}}
    return config


def test_the_lab_runs_reruns_only_what_its_settings_change_and_reaches_the_summary(workdir):
    write_config(workdir, lab_config())
    plan = snakemake(workdir, "-n")
    assert plan.returncode == 0, plan.stdout[-3000:] + plan.stderr[-3000:]
    assert {"lab_sets", "lab_laws", "lab", "tables"} <= planned_rules(plan.stdout + plan.stderr)

    targets = [f"{LAB}/uncertainty.csv", f"{LAB}/premise.csv", f"{LAB}/uncertainty.md", f"{LAB}/figure.png"]
    result = snakemake(workdir, *targets, timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]

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
    config = lab_config()
    config["lab"]["draws"] = 3
    write_config(workdir, config)
    rerun = snakemake(workdir, *targets, "-n")
    assert planned_rules(rerun.stdout + rerun.stderr) == {"lab_laws", "lab"}, rerun.stdout[-2000:]

    # The whole study: the summary and the HTML report carry the lab's table and figure.
    write_config(workdir, lab_config())
    result = snakemake(workdir, timeout=1500)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    summary = (workdir / "results/summary.md").read_text()
    assert "## Theory lab" in summary and "results/lab/group/figure.png" in summary
    assert (workdir / f"{LAB}/uncertainty.md").read_text().strip() in summary
    report = snakemake(workdir, "--report", str(workdir / "report.html"))
    assert report.returncode == 0, report.stderr[-3000:]
    assert "Theory lab" in (workdir / "report.html").read_text(errors="replace")
    from support.browser import check_report, chromium

    if chromium() is not None or os.environ.get("PERTURBED_LM_REQUIRE_BROWSER") == "1":  # in a real browser too
        assert check_report(workdir / "report.html", ("Summary", "Tables", "Theory lab")) == []


@pytest.mark.parametrize("change, message", [
    (lambda c: c["experiments"]["group"].update(objectives=["mle"]), "needs at least 2"),
    (lambda c: c["lab"].update(deltas=[0, 9]), "lab.deltas"),
    (lambda c: c["lab"].update(experiments=["nope"]), "lab.experiments[0]"),
    (lambda c: c["experiments"]["group"].update(train_perturbation={"intensities": [0, 0.1]}), "training conditions"),
])
def test_a_lab_without_a_group_is_refused_naming_the_key(workdir, change, message):
    config = lab_config()
    change(config)
    write_config(workdir, config)
    plan = snakemake(workdir, "-n")
    assert plan.returncode != 0 and message in plan.stdout + plan.stderr, (plan.stdout + plan.stderr)[-2000:]
