"""`make why` (studies/why.py): a dry run as one line per job, a params change split into code and settings."""

from __future__ import annotations

import base64
import json

from studies.why import explain, jobs
from workflow_lib.module_deps import code_digest

DRY_RUN = """Building DAG of jobs...
[Mon Nov 30 14:16:20 2026]
rule train:
    input: results/perturbed/x.parquet
    output: results/models/tiny/a
    log: results/logs/train/a.log
    reason: Params have changed since last execution: Union of exclusive params before and now across all output: before: 'sha256:1' now: 'sha256:2'
    wildcards: model=tiny
Shell command: accelerate launch --num_processes 1 -m workflow_lib.train.trainer --output results/models/tiny/a

[Mon Nov 30 14:16:20 2026]
localrule tables:
    input: results/report/metrics.csv
    output: results/summary.md, results/report/workflow.rst
    reason: Missing output files: results/summary.md; Input files updated by another job: results/report/metrics.csv
Shell command: python -m workflow_lib.report.build tables --metrics results/report/metrics.csv
"""


def record(workdir, output: str, params: list[str]) -> None:
    folder = workdir / ".snakemake" / "metadata"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / base64.urlsafe_b64encode(output.encode()).decode()).write_text(json.dumps({"params": params}))


def test_a_dry_run_is_one_line_per_job_with_its_reasons_in_words(tmp_path):
    found = jobs(DRY_RUN)
    assert [j["rule"] for j in found] == ["train", "tables"]
    assert found[1]["output"].split(", ")[0] == "results/summary.md"
    assert explain(found[1], tmp_path) == "missing output files; input files updated by another job"
    assert explain(found[0], tmp_path) == "its params changed"  # no record of its last run: nothing to compare


def test_a_params_change_says_whether_the_code_or_a_setting_changed(tmp_path):
    train = jobs(DRY_RUN)[0]
    record(tmp_path, "results/models/tiny/a", ["'python'", "'sha256:" + "0" * 64 + "'", "'{}'"])
    assert explain(train, tmp_path) == "the code of workflow_lib.train.trainer changed"
    record(tmp_path, "results/models/tiny/a", ["'python'", repr(code_digest("workflow_lib.train.trainer")), "'{}'"])
    assert explain(train, tmp_path) == "its settings changed"
