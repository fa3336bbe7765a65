"""Incremental reruns: after a change, snakemake plans exactly the jobs the change affects.

One small study (two objectives, a sweep over the training intensity, one eval set) runs once, from a copy of
the workflow's code, so a test may edit a workflow_lib module without touching the checkout. Each test then
changes one thing and reads the dry run. Jobs that aggregate the whole grid (the report, `all`) may always
rerun; every other planned job must be one the change concerns.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from support.plans import planned_jobs
from support.study import REPO, SNAKEMAKE, copy_workflow, tiny_config, write_config

from workflow_lib.module_deps import module_closure, module_files

pytestmark = pytest.mark.workflow

UPSTREAM_RULES = {"download", "tokenizer", "tokenize", "prompts", "synonyms", "perturb"}


def study_config() -> dict:
    config = tiny_config()
    config["eval_sets"] = {"syn-test": config["eval_sets"]["syn-test"]}
    common = {"models": ["tiny"], "train_dataset": "synthetic", "eval_sets": ["syn-test"]}
    config["experiments"] = {
        "objectives": {**common, "objectives": ["mle", "mixce"]},
        "sweep": {**common, "objectives": ["mle"], "train_perturbation": {"intensities": [0, 0.1], "synonyms": ["oracle"]}},
    }
    return config


def snakemake_in(workflow: Path, workdir: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    cmd = ["timeout", "-k", "10", "600", str(SNAKEMAKE), "-s", str(workflow / "Snakefile"), "--directory", str(workdir),
           "--configfile", str(workdir / "config.yaml"), "--cores", "2", *args]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=workdir, timeout=630, env=env)


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    """(copy of the workflow code, working directory of the finished study)."""
    root = tmp_path_factory.mktemp("incremental")
    workflow, workdir = root / "workflow", root / "work"
    copy_workflow(workflow)
    workdir.mkdir()
    write_config(workdir, study_config())
    result = snakemake_in(workflow, workdir)
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    return workflow, workdir


def plan_after(study, config: dict) -> list:
    workflow, workdir = study
    write_config(workdir, config)
    result = snakemake_in(workflow, workdir, "-n")
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    return [job for job in planned_jobs(result.stdout + result.stderr) if not job.aggregates]


def plan_with_edited(study, module: Path) -> list:
    """The plan after appending a comment to `module`; the file, and its modification time, restored after."""
    original, stat = module.read_text(), module.stat()
    try:
        module.write_text(original + "\n# edited\n")
        return plan_after(study, study_config())
    finally:
        module.write_text(original)
        os.utime(module, ns=(stat.st_atime_ns, stat.st_mtime_ns))


def test_adding_an_intensity_plans_only_that_intensity(study):
    config = study_config()
    config["experiments"]["sweep"]["train_perturbation"]["intensities"] = [0, 0.1, 0.2]
    jobs = plan_after(study, config)
    assert sorted(job.rule for job in jobs) == ["evaluate", "extrapolation", "perplexity", "perturb", "sample", "train"]
    assert all("/insertion-0.2/" in job.outputs[0] for job in jobs), [job.outputs for job in jobs]


def test_changing_an_objectives_hyperparameter_reruns_only_its_trainings_and_what_follows(study):
    config = study_config()
    config["objectives"] = {"mixce": {"loss": "mixce", "eta": 0.7}}  # predefined: 0.5
    jobs = plan_after(study, config)
    assert sorted(job.rule for job in jobs) == ["evaluate", "extrapolation", "perplexity", "sample", "train"]
    assert all("/mixce/" in job.outputs[0] for job in jobs)
    trained = {str(p.relative_to(study[1])) for p in (study[1] / "results/models").glob("tiny/synthetic/mixce/*/*/*/*")}
    assert {job.outputs[0] for job in jobs if job.rule == "train"} == trained
    assert "params" in next(job.reason for job in jobs if job.rule == "train").lower()


def test_changing_an_evaluation_setting_reruns_no_training(study):
    config = study_config()
    config["sampling"]["runs"] = 3
    rules = {job.rule for job in plan_after(study, config)}
    assert {"sample", "evaluate"} <= rules
    assert not rules & ({"train"} | UPSTREAM_RULES), rules


def test_editing_a_workflow_lib_module_reruns_the_jobs_whose_rules_run_it(study):
    workflow, _ = study
    module = workflow / "workflow_lib/sample/sampler.py"  # run by the sample rule, imported by extrapolation and perplexity
    jobs = plan_with_edited(study, module)
    by_rule = {rule: [job for job in jobs if job.rule == rule] for rule in {job.rule for job in jobs}}
    assert sorted(by_rule) == ["evaluate", "extrapolation", "perplexity", "sample"]  # evaluate: it reads the new samples
    for job in by_rule["sample"] + by_rule["extrapolation"] + by_rule["perplexity"]:
        assert job.reason == f"Updated input files: {module}", job.reason
    assert all("results/samples/" in job.reason for job in by_rule["evaluate"])
    assert len(by_rule["sample"]) == len(list((study[1] / "results/samples").rglob("*.parquet")))
    assert not plan_after(study, study_config())  # restored: nothing to do


@pytest.mark.parametrize(("module", "runs_it", "planned"), [
    # A module of one stage, run by its two rules: features reruns for the edit; evaluate too, which snakemake
    # reports by its first reason, the features it reads.
    ("workflow_lib/evaluate/metrics.py", {"features"}, {"features", "evaluate"}),
    # A subpackage's __init__ runs before any of its modules: train reruns for it, and what reads new models.
    ("workflow_lib/train/__init__.py", {"train"}, {"train", "sample", "evaluate", "extrapolation", "perplexity"}),
])
def test_editing_a_stage_module_reruns_only_the_jobs_that_import_it(study, module, runs_it, planned):
    """Only the edited file's rules and what reads their outputs rerun; the jobs whose reason names the file are
    those of rules that run it."""
    path = study[0] / module
    jobs = plan_with_edited(study, path)
    assert {job.rule for job in jobs} == planned, [(job.rule, job.reason) for job in jobs]
    named = {job.rule for job in jobs if str(path) in job.reason}
    assert named == runs_it, [(job.rule, job.reason) for job in jobs]
    assert all("results/" in job.reason for job in jobs if job.rule not in runs_it), [(j.rule, j.reason) for j in jobs]
    assert not plan_after(study, study_config())  # restored: nothing to do


# A fetched file is its URL's bytes, checked against its sha256: no code change can change them, so an edit of
# workflow_lib must not download hundreds of MB again, nor miss the output cache (whose key includes the code).
CODE_EXEMPT = {"fetch", "fetch_gguf"}


def test_every_rule_declares_the_workflow_lib_code_it_runs():
    """A rule that runs `python -m workflow_lib.X` (or `accelerate launch -m`) has `code=workflow_code("workflow_lib.X")`."""
    for smk in sorted((REPO / "rules").glob("*.smk")):
        for block in re.split(r"^(?=rule \w+:)", smk.read_text(), flags=re.MULTILINE)[1:]:
            name = re.match(r"rule (\w+):", block)[1]
            if name in CODE_EXEMPT:
                assert "code=" not in block, f"rule {name} is exempt: remove its code input or the exemption"
                continue
            runs = set(re.findall(r"-m (workflow_lib[\w.]+)", block))
            declared = set(re.findall(r'code=workflow_code\("(workflow_lib[\w.]+)"\)', block))
            assert runs == declared, f"{smk.name}: rule {name} runs {runs or 'nothing'} but declares {declared or 'nothing'}"


def test_module_scan_follows_imports_inside_functions():
    closure = module_closure("workflow_lib.train.trainer")
    assert {"workflow_lib.train.objectives", "workflow_lib.models", "workflow_lib.hub", "workflow_lib"} <= set(closure)
    assert "workflow_lib.evaluate.metrics" not in closure and "workflow_lib.config" not in closure
    assert all(Path(f).is_file() and Path(f).is_relative_to(REPO / "workflow_lib") for f in module_files("workflow_lib.train.trainer"))


def test_download_and_tokenisation_come_from_the_output_cache(tmp_path):
    """With --cache and $SNAKEMAKE_OUTPUT_CACHE, a second study with the same data fetches both instead of running them."""
    (tmp_path / "cache").mkdir()
    env = {**os.environ, "SNAKEMAKE_OUTPUT_CACHE": str(tmp_path / "cache")}
    target = "results/tokens/bpe/synthetic/train.parquet"
    runs = {}
    for name in ("first", "second"):
        workdir = tmp_path / name
        workdir.mkdir()
        write_config(workdir, tiny_config())
        runs[name] = snakemake_in(REPO, workdir, target, "--cache", env=env)  # all rules marked `cache:`
        assert runs[name].returncode == 0, (runs[name].stdout + runs[name].stderr)[-3000:]
    first, second = (runs[n].stdout + runs[n].stderr for n in ("first", "second"))
    cached = {"results/data/synthetic/train.parquet", "results/data/synthetic/train.json", target}
    assert set(re.findall(r"^Moving output file (\S+) to cache\.$", first, flags=re.MULTILINE)) == cached, first
    assert set(re.findall(r"^Symlinking output file (\S+) from cache\.$", second, flags=re.MULTILINE)) == cached
    assert "to cache" not in second and (tmp_path / "first/results/logs/tokens").exists()
    logs = tmp_path / "second/results/logs"
    for log in ("data/download/synthetic/train.log", "tokens/bpe/synthetic/train.log"):  # fetched, not run
        assert not (logs / log).exists() or (logs / log).stat().st_size == 0
    assert (logs / "tokenizers/bpe.log").stat().st_size > 0  # not marked for the cache: it ran
    assert pq.read_table(tmp_path / "second" / target).equals(pq.read_table(tmp_path / "first" / target))
    assert len(list((tmp_path / "cache").iterdir())) == 3  # the train split's download (2 files) and its tokens
