"""perturbed-LM as a Snakemake module of another workflow (docs/usage.md, "Using perturbed-LM inside your own
workflow"): tests/module/workflow/ imports it with `module` and `use rule * from perturbed_lm as plm_*`, gives it
its config under its own key, and has a rule of its own that reads the module's simulation summary."""

from __future__ import annotations

import csv
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from support.plans import job_stats
from support.workflow_runs import REPO, run_snakemake, snakemake_environment

IMPORTER = REPO / "tests/module/workflow"

pytestmark = pytest.mark.workflow


def run_importer(workdir: Path, snakefile: Path, *args: str) -> subprocess.CompletedProcess:
    return run_snakemake(
        workdir,
        *args,
        snakefile=snakefile,
        configfiles=[IMPORTER / "config.yaml"],
        cores=2,
        env=snakemake_environment(),
        timeout=600,
    )


def test_the_importer_runs_the_module_and_reads_its_table(tmp_path):
    done = run_importer(tmp_path, IMPORTER / "Snakefile")
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]

    # The module's jobs wrote its own layout under the importer's working directory; the importer's rule read it.
    with open(tmp_path / "results/simulation/summary.csv", newline="") as handle:
        summary = list(csv.DictReader(handle))
    expected = Counter(row["vocab_size"] for row in summary)
    assert set(expected) == {"6"}  # the importer's config: vocab_sizes [6]
    lines = (tmp_path / "importer/simulation-verdicts.tsv").read_text().splitlines()
    assert lines[0] == "vocab_size\trows"
    assert dict(line.split("\t") for line in lines[1:]) == {size: str(n) for size, n in expected.items()}
    # Only what the importer's target needs ran: no training, no report of the whole study.
    assert not (tmp_path / "results/models").exists() and not (tmp_path / "results/report").exists()


def test_the_modules_target_rule_is_not_the_importers_default(tmp_path):
    """An importer whose first rule is its own `all`, without `default_target`: that rule stays the default. With
    `default_target: True` in the module, snakemake would make the module's plm_all (the whole study) the default."""
    text = (IMPORTER / "Snakefile").read_text()
    module = text.index("module perturbed_lm:")
    own_all = text[text.index("rule all:") : text.index("# A rule of its own")]
    rest = text[module:].replace(own_all, "")
    own_all = own_all.replace("    default_target: True\n", "")
    snakefile = IMPORTER / f".first-rule-{tmp_path.name}.smk"  # beside the importer: its script and its paths
    snakefile.write_text(text[:module] + own_all + "\n" + rest)
    try:
        planned = run_importer(tmp_path, snakefile, "-n")
    finally:
        snakefile.unlink()
    assert planned.returncode == 0, planned.stderr[-3000:]
    stats = job_stats(planned.stdout)
    assert "plm_all" not in stats
    assert stats["all"] == 1 and stats["simulation_verdicts"] == 1
