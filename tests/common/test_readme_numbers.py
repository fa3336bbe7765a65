"""The README's numbers that come from the plan stay true (issue 68, item 4): a study that plans more jobs fails
here until the README says so."""

from __future__ import annotations

import re

from support.workflow_runs import REPO, run_snakemake


def test_the_readmes_job_count_is_the_default_studys_plan(tmp_path):
    said = re.search(r"it plans (\d+) now", (REPO / "README.md").read_text())
    assert said, "README.md no longer says how many jobs `make run` plans: update this test with it"
    done = run_snakemake(tmp_path / "work", "-n", configfiles=[REPO / "config.yaml"], cwd=None, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    planned = re.search(r"^total\s+(\d+)$", done.stdout + done.stderr, flags=re.MULTILINE)
    assert planned and int(said.group(1)) == int(planned.group(1)), (said.group(0), planned and planned.group(0))


def test_the_readmes_make_run_time_is_a_measurement_in_the_benchmarks():
    """The `make run` time the README quotes is one docs/benchmarks.md records, at the same commit and job count."""
    readme = " ".join((REPO / "README.md").read_text().split())
    quoted = re.search(r"`make run` took (\d+) minutes (\d+) seconds .*?\(at ([0-9a-f]{7}), (\d+) jobs;", readme)
    assert quoted, "README.md no longer quotes a `make run` time: update this test with it"
    minutes, seconds, commit, jobs = quoted.groups()
    benchmarks = " ".join((REPO / "docs/benchmarks.md").read_text().split())
    recorded = re.search(rf"at {commit}\b[^#]*?\*\*{minutes} min {seconds} s\*\*[^#]*?\b{jobs} jobs", benchmarks)
    assert recorded, f"docs/benchmarks.md records no `make run` of {minutes} min {seconds} s, {jobs} jobs at {commit}"
