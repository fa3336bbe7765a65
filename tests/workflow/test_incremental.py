"""Incremental reruns: after a change, snakemake plans exactly the jobs the change affects, and after what users
do that changes nothing (a clone, a move, a checkout, a touch, a comment in the config) it plans no job at all.

One small study (two objectives, a sweep over the training intensity, one eval set) runs once (its jobs warm), from a
copy of the workflow's code, so a test may edit a workflow_lib module without touching the checkout. Each test then
changes one thing and reads the dry run. Where a change concerns some jobs, jobs that aggregate the whole grid
(the report, `all`) may rerun too; every other planned job must be one the change concerns.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from studies.served import job_environment, warm_server
from support.plans import planned_jobs
from support.workflow_runs import REPO, SESSION_ENV, copy_workflow, run_snakemake, tiny_config, write_config
from workflow_lib.module_deps import module_closure, module_path

pytestmark = pytest.mark.workflow

UPSTREAM_RULES = {"download", "tokenizer", "tokenize", "prompts", "synonyms", "perturb"}


def study_config() -> dict:
    config = tiny_config()
    config["eval_sets"] = {"syn-test": config["eval_sets"]["syn-test"]}
    common = {"models": ["tiny"], "train_dataset": "synthetic", "eval_sets": ["syn-test"]}
    config["experiments"] = {
        "objectives": {**common, "objectives": ["mle", "mixce"]},
        "sweep": {
            **common,
            "objectives": ["mle"],
            "train_perturbation": {"intensities": [0, 0.1], "synonyms": ["oracle"]},
        },
    }
    # Sampling in shards (20 rows in batches of 8: 3 batches, shards of at most 2) under a time limit, as on a cluster
    config["sampling"] = {**config["sampling"], "batch_size": 8, "shard_batches": 2}
    config["cost"] = {"max_minutes": 600}
    return config


def snakemake_in(workflow: Path, workdir: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return run_snakemake(
        workdir,
        *args,
        snakefile=workflow / "Snakefile",
        configfiles=[workdir / "config.yaml"],
        cores=2,
        limit=600,
        env=env,
        timeout=630,
    )


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    """(copy of the workflow code, working directory of the finished study)."""
    root = tmp_path_factory.mktemp("incremental")
    workflow, workdir = root / "workflow", root / "work"
    copy_workflow(workflow)
    workdir.mkdir()
    write_config(workdir, study_config())
    # Its jobs of one thread run in a warm server of the copy's own environment (the copy's workflow_lib first on
    # PYTHONPATH), as tests/workflow/test_new_strategy.py's do: the same outputs, without importing torch in each.
    # The tests' dry runs below are snakemake's alone and run no job.
    copy_first = os.pathsep.join(filter(None, [str(workflow), SESSION_ENV.get("PYTHONPATH")]))
    env = job_environment({**SESSION_ENV, "PYTHONPATH": copy_first})
    with warm_server(env, root / "warm.log") as study_env:
        result = snakemake_in(workflow, workdir, env=study_env)
    assert "ran workflow_lib.train.trainer" in (root / "warm.log").read_text()  # warm, not cold
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    return workflow, workdir


def full_plan(workflow: Path, workdir: Path, *args: str) -> list:
    """Every job of the dry run, the report's included."""
    result = snakemake_in(workflow, workdir, "-n", *args)
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    return planned_jobs(result.stdout + result.stderr)


def plan_after(study, config: dict) -> list:
    workflow, workdir = study
    write_config(workdir, config)
    return [job for job in full_plan(workflow, workdir) if not job.aggregates]


def plan_with_edited(study, module: Path) -> list:
    """The plan after appending an executed line to `module` (a comment reruns nothing: the next test); the file,
    and its modification time, restored after."""
    original, stat = module.read_text(), module.stat()
    try:
        module.write_text(original + "\n_EDITED = True\n")
        return plan_after(study, study_config())
    finally:
        module.write_text(original)
        os.utime(module, ns=(stat.st_atime_ns, stat.st_mtime_ns))


def test_adding_an_intensity_plans_only_that_intensity(study):
    config = study_config()
    config["experiments"]["sweep"]["train_perturbation"]["intensities"] = [0, 0.1, 0.2]
    jobs = plan_after(study, config)
    assert sorted(job.rule for job in jobs) == [
        "evaluate",
        "extrapolation",
        "gather_samples",
        "perplexity",
        "perturb",
        "sample",
        "sample",  # its 2 shards
        "sample_features",
        "train",
    ]
    assert all("/insertion-0.2/" in job.outputs[0] for job in jobs), [job.outputs for job in jobs]


def test_changing_a_training_key_retrains_every_model_and_touches_nothing_upstream(study):
    """training.learning_rate is read by every training job: all of them rerun, then what reads their models;
    no data, tokenisation or perturbation job does."""
    config = study_config()
    config["training"] = {**config["training"], "learning_rate": 1e-3}
    jobs = plan_after(study, config)
    trained = {str(p.relative_to(study[1])) for p in (study[1] / "results/models").glob("tiny/synthetic/*/*/*/*/*")}
    assert {job.outputs[0] for job in jobs if job.rule == "train"} == trained
    assert {job.rule for job in jobs} == {
        "train",
        "sample",
        "gather_samples",
        "sample_features",
        "evaluate",
        "perplexity",
        "extrapolation",
    }, [(job.rule, job.reason) for job in jobs]


def test_changing_an_objectives_hyperparameter_reruns_only_its_trainings_and_what_follows(study):
    config = study_config()
    config["objectives"] = {"mixce": {"loss": "mixce", "eta": 0.7}}  # predefined: 0.5
    jobs = plan_after(study, config)
    assert sorted(job.rule for job in jobs) == [
        "evaluate",
        "extrapolation",
        "gather_samples",
        "perplexity",
        "sample",
        "sample",  # its 2 shards
        "sample_features",
        "train",
    ]
    assert all("/mixce/" in job.outputs[0] for job in jobs)
    trained = {str(p.relative_to(study[1])) for p in (study[1] / "results/models").glob("tiny/synthetic/mixce/*/*/*/*")}
    assert {job.outputs[0] for job in jobs if job.rule == "train"} == trained
    assert "params" in next(job.reason for job in jobs if job.rule == "train").lower()


def test_changing_an_evaluation_setting_reruns_no_training(study):
    config = study_config()
    config["sampling"]["runs"] = 3  # read by the sampling jobs only; the evaluations read their samples
    jobs = plan_after(study, config)
    assert sorted(job.rule for job in jobs).count("sample") == 2 * len(
        list((study[1] / "results/samples").rglob("*.parquet"))
    )  # 2 shards an evaluation
    assert {job.rule for job in jobs} == {"sample", "gather_samples", "sample_features", "evaluate"}, [
        (job.rule, job.reason) for job in jobs
    ]


def test_editing_a_workflow_lib_module_reruns_the_jobs_whose_rules_run_it(study):
    workflow, _ = study
    module = (
        workflow / "workflow_lib/sample/sampler.py"
    )  # run by the sample rule, imported by extrapolation and perplexity
    jobs = plan_with_edited(study, module)
    by_rule = {rule: [job for job in jobs if job.rule == rule] for rule in {job.rule for job in jobs}}
    assert sorted(by_rule) == [
        "evaluate",
        "extrapolation",
        "gather_samples",
        "perplexity",
        "sample",
        "sample_features",
    ]  # gather_samples: it reads the new shards; sample_features and evaluate: the new samples
    for job in by_rule["extrapolation"] + by_rule["perplexity"]:
        assert job.reason.startswith(CODE_CHANGED), job.reason
    for job in by_rule["sample"]:  # a shard is a temporary file, gone once gathered: missing, and its code changed
        assert job.reason.startswith("Missing output files") and CODE_CHANGED in job.reason, job.reason
    assert all("results/samples/" in job.reason for job in by_rule["evaluate"] + by_rule["sample_features"])
    assert len(by_rule["sample"]) == 2 * len(list((study[1] / "results/samples").rglob("*.parquet")))  # 2 shards
    assert not plan_after(study, study_config())  # restored: nothing to do


def test_comments_docstrings_and_formatting_rerun_nothing(study):
    """Issue 53: a job's code digest is of what Python runs. A comment appended to every module, a docstring edited
    in every module that has one (added where it has none) and `ruff format` of the whole package at another line
    length plan no job at all, the report's included; the files are restored after."""
    import ast

    workflow, workdir = study
    modules = sorted((workflow / "workflow_lib").rglob("*.py"))
    saved = {path: (path.read_text(), path.stat()) for path in modules}
    try:
        for path, (text, _) in saved.items():
            doc = ast.get_docstring(ast.parse(text), clean=False)
            edited = text.replace(doc, doc + " Edited.", 1) if doc else '"""Added."""\n' + text
            path.write_text(edited + "\n# a comment appended\n")
        ruff = Path(sys.executable).parent / "ruff"  # the venv's, as `make lint` runs it
        formatted = subprocess.run(
            [str(ruff), "format", "--line-length", "88", "--no-cache", str(workflow / "workflow_lib")],
            capture_output=True,
            text=True,
        )
        assert formatted.returncode == 0 and "reformatted" in formatted.stdout, formatted.stdout + formatted.stderr
        assert sum(path.read_text() != text for path, (text, _) in saved.items()) == len(modules)
        assert full_plan(workflow, workdir) == []
    finally:
        for path, (text, stat) in saved.items():
            path.write_text(text)
            os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))


# Snakemake's reason for a job whose params changed, here its `code` param (rules/common.smk, code_digest).
CODE_CHANGED = "Params have changed since last execution"


@pytest.mark.parametrize(
    ("module", "runs_it", "planned"),
    [
        # The CPU half of an evaluation: evaluate and MAUVE's controls (their k-means) rerun; no featurisation (GPU)
        # job does, nor the control texts. Snakemake gives evaluate's first reason: the controls' verdict it reads.
        ("workflow_lib/evaluate/metrics.py", {"mauve_controls"}, {"evaluate", "mauve_controls"}),
        # The featuriser, run by its two rules: features and sample_features rerun for the edit; evaluate and the
        # controls too, which snakemake reports by their first reason, the features they read.
        (
            "workflow_lib/evaluate/features.py",
            {"features", "sample_features"},
            {"features", "sample_features", "evaluate", "mauve_controls"},
        ),
        # A subpackage's __init__ runs before any of its modules: train reruns for it, and what reads new models.
        (
            "workflow_lib/train/__init__.py",
            {"train"},
            {"train", "sample", "gather_samples", "sample_features", "evaluate", "extrapolation", "perplexity"},
        ),
    ],
)
def test_editing_a_stage_module_reruns_only_the_jobs_that_import_it(study, module, runs_it, planned):
    """Only the edited file's rules and what reads their outputs rerun; the jobs whose reason is their code param
    are those of rules that run it."""
    path = study[0] / module
    jobs = plan_with_edited(study, path)
    assert {job.rule for job in jobs} == planned, [(job.rule, job.reason) for job in jobs]
    named = {job.rule for job in jobs if job.reason.startswith(CODE_CHANGED)}
    assert named == runs_it, [(job.rule, job.reason) for job in jobs]
    assert all("results/" in job.reason for job in jobs if job.rule not in runs_it), [(j.rule, j.reason) for j in jobs]
    assert not plan_after(study, study_config())  # restored: nothing to do


# A fetched file is its URL's bytes, checked against its sha256: no code change can change them, so an edit of
# workflow_lib must not download hundreds of MB again, nor miss the output cache (whose key includes the code). A
# pinned hub model's folder is its files' pinned bytes (fetch_model).
CODE_EXEMPT = {"fetch", "fetch_gguf", "fetch_model"}


def test_every_rule_declares_the_workflow_lib_code_it_runs():
    """A rule that runs `python -m workflow_lib.X` (or `accelerate launch -m`) has `code=code_digest("workflow_lib.X")`
    among its params, and no rule lists code as an input (compared by path and mtime, a clone would rerun it)."""
    for smk in sorted((REPO / "rules").glob("*.smk")):
        for block in re.split(r"^(?=rule \w+:)", smk.read_text(), flags=re.MULTILINE)[1:]:
            name = re.match(r"rule (\w+):", block)[1]
            if name in CODE_EXEMPT:
                assert "code=" not in block, f"rule {name} is exempt: remove its code input or the exemption"
                continue
            runs = set(re.findall(r"-m (workflow_lib[\w.]+)", block))
            params = block.split("\n    params:\n", 1)[1] if "\n    params:\n" in block else ""
            declared = set(
                re.findall(r'^        code=code_digest\("(workflow_lib[\w.]+)"\),$', params, flags=re.MULTILINE)
            )
            assert runs == declared, (
                f"{smk.name}: rule {name} runs {runs or 'nothing'} but declares {declared or 'nothing'}"
            )
            assert "workflow_code" not in block and "module_files" not in block


def test_module_scan_follows_imports_inside_functions():
    closure = module_closure("workflow_lib.train.trainer")
    assert {"workflow_lib.train.objectives", "workflow_lib.models", "workflow_lib.hub", "workflow_lib"} <= set(closure)
    assert "workflow_lib.evaluate.metrics" not in closure and "workflow_lib.config" not in closure
    assert all(Path(f).is_file() and Path(f).is_relative_to(REPO / "workflow_lib") for f in map(module_path, closure))


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


# ---- what users do that changes nothing: each plans no job at all, the report's included ----------------------


def assert_nothing_planned(jobs: list) -> None:
    from collections import Counter

    assert not jobs, (
        f"{len(jobs)} jobs planned ({dict(Counter(job.rule for job in jobs))}); first reason: {jobs[0].reason[:300]}"
    )


def adopted_copy(study, root: Path, clone: bool) -> tuple[Path, Path]:
    """The finished study's working directory (results/ and .snakemake/) copied as `cp -a` would, mtimes kept,
    under `root`; with `clone`, the workflow's code too, as `git clone` leaves it: another path, every mtime new."""
    workflow, workdir = study
    shutil.copytree(workdir, root / "work", symlinks=True)  # copy2: mtimes kept
    write_config(root / "work", study_config())  # the study as it ran (another test may have left an edit)
    if clone:
        shutil.copytree(
            workflow, root / "workflow", copy_function=shutil.copy, ignore=shutil.ignore_patterns("__pycache__")
        )
        workflow = root / "workflow"
    return workflow, root / "work"


def test_results_copied_into_a_fresh_clone_plan_nothing(study, tmp_path):
    """A colleague clones the repository and copies a finished study's results and .snakemake/ into it (`cp -a`):
    every code file has a new path and a new mtime, not a new byte. (With code as mtime-compared inputs: every job.)"""
    assert_nothing_planned(full_plan(*adopted_copy(study, tmp_path, clone=True)))


def test_a_moved_study_plans_nothing(study, tmp_path):
    """Results moved from scratch to project storage: the same study, run with --directory at its new place."""
    workflow, workdir = adopted_copy(study, tmp_path, clone=False)
    moved = tmp_path / "project" / "storage"
    moved.parent.mkdir()
    workdir.rename(moved)
    assert_nothing_planned(full_plan(workflow, moved))


def test_touching_every_file_plans_nothing(study, tmp_path):
    """Every file of the code touched, one after the other, after the results; then every file of the code and the
    study set to one time (`find . -exec touch -d <time> {} +`): no content changed, nothing reruns. (Touched one by
    one at different times, an input newer than its outputs is compared by its recorded checksum, which Snakemake
    keeps only for files up to --max-checksum-file-size and never for a directory such as a model folder: those
    rerun by time. docs/usage.md, "Incremental reruns".)"""
    workflow, workdir = adopted_copy(study, tmp_path, clone=True)
    for path in sorted(workflow.rglob("*")):
        if path.is_file():
            path.touch()
    assert_nothing_planned(full_plan(workflow, workdir))
    moment = 2_000_000_000  # 2033: later than every output
    for root in (workflow, workdir):
        for path in root.rglob("*"):
            if path.is_file() and ".snakemake" not in path.relative_to(root).parts[:1]:
                os.utime(path, (moment, moment))
    assert_nothing_planned(full_plan(workflow, workdir))


def test_a_git_checkout_that_changes_no_code_and_back_plans_nothing(study, tmp_path):
    """The workflow's code as a git repository; a commit that changes only documentation; checking out the commit
    before it and back rewrites that file, no module."""
    workflow, workdir = adopted_copy(study, tmp_path, clone=True)

    def git(*args: str) -> None:
        subprocess.run(
            ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=workflow, check=True, capture_output=True
        )

    git("init", "-q")
    git("add", ".")
    git("commit", "-q", "-m", "the study's code")
    (workflow / "NOTES.md").write_text("A note that changes no code.\n")
    (workflow / "rules/common.smk").write_text((workflow / "rules/common.smk").read_text() + "\n# a comment\n")
    git("add", ".")
    git("commit", "-q", "-m", "documentation and a comment")
    git("checkout", "-q", "HEAD~1")
    assert_nothing_planned(full_plan(workflow, workdir))
    git("checkout", "-q", "-")
    assert_nothing_planned(full_plan(workflow, workdir))


def test_an_unrelated_config_edit_plans_nothing(study):
    """A comment, another key order and a tracker's folder (training.tracking_dir reaches jobs through the
    environment, never as a param) change no job's settings: not even the report reruns."""
    workflow, workdir = study
    config = study_config()
    config["training"] = {**config.get("training", {}), "tracking_dir": "elsewhere/tracking"}
    reordered = dict(reversed(list(config.items())))
    (workdir / "config.yaml").write_text("# a comment a user adds\n" + yaml.safe_dump(reordered, sort_keys=False))
    try:
        assert_nothing_planned(full_plan(workflow, workdir))
    finally:
        write_config(workdir, study_config())


@pytest.mark.parametrize(
    "cost",
    [
        {"safety": 3},  # what a user raises after a timeout
        {"max_minutes": 1200},  # ... or a partition with a longer limit
        {"device": "h100", "cpu": "a100-80gb"},  # another cluster
        {"devices": {"cpu": {"peak_fp32": 1e9, "load_bytes_per_s": 1e7}}},  # a datasheet of its own
    ],
)
def test_cost_settings_rerun_nothing_not_even_a_sampling_shard(study, cost):
    """Issue 53: the study samples each evaluation in 2 shards under a 600-minute limit; a cost setting changes what
    the jobs ask a cluster for and no result path, so the plan is empty (the shards are temporary and gone: a moved
    shard would have replanned the gather and its sampling)."""
    from workflow_lib.config import validate_config
    from workflow_lib.cost.slurm import planned

    config = study_config()
    assert {job.shards for job in planned(validate_config(study_config())).values() if job.rule == "sample"} == {2}
    config["cost"] = {**config["cost"], **cost}
    assert_nothing_planned(plan_after(study, config))
    write_config(study[1], study_config())


def test_a_report_key_reruns_only_the_report(study):
    """report.intensity (the headline perturbation the tables, figures and contrasts pick) reruns those jobs and no
    training, sampling or evaluation."""
    config = study_config()
    config["report"] = {**config.get("report", {}), "intensity": 0.1}
    workflow, workdir = study
    write_config(workdir, config)
    try:
        jobs = full_plan(workflow, workdir)
    finally:
        write_config(workdir, study_config())
    assert {"contrasts", "tables"} <= {job.rule for job in jobs}
    assert all(job.aggregates for job in jobs), [(j.rule, j.outputs) for j in jobs]


def test_make_estimate_finds_every_planned_jobs_benchmark(study):
    """`make estimate` compares each job's prediction with its `benchmark:` file, found by the job's output path
    (estimate.benchmark_key): after the study ran, every job the cost model plans has its file, the shards'
    and the split evaluation's (sample_features, evaluate) included."""
    from workflow_lib.config import validate_config
    from workflow_lib.cost.devices import DEVICES
    from workflow_lib.cost.estimate import benchmark_key, measured_seconds
    from workflow_lib.cost.jobs import plan_jobs

    _, workdir = study
    jobs = plan_jobs(validate_config(study_config(), workdir), DEVICES["cpu"], DEVICES["cpu"], None)
    measured = measured_seconds(workdir / "results")
    assert {"sample_features", "evaluate", "sample", "train"} <= {job.rule for job in jobs}
    assert not [benchmark_key(job) for job in jobs if benchmark_key(job) not in measured], sorted(measured)


def test_a_code_change_judged_harmless_is_adopted_with_cleanup_metadata(study, tmp_path):
    """docs/usage.md, "Across a change of the digest itself": after an executed-code change that the user judges
    harmless for their results (here a new unused constant in evaluate/metrics.py), `--cleanup-metadata` on the
    outputs the plan names makes snakemake forget their recorded params, and the next plan is empty; the plan
    before it was not (the change is real to snakemake)."""
    workflow, workdir = adopted_copy(study, tmp_path, clone=True)
    module = workflow / "workflow_lib/evaluate/metrics.py"
    module.write_text(module.read_text() + "\n_UNUSED = 1\n")
    jobs = [job for job in full_plan(workflow, workdir) if not job.aggregates]
    assert {job.rule for job in jobs} == {"evaluate", "mauve_controls"}, [(job.rule, job.reason) for job in jobs]
    outputs = sorted({output for job in jobs for output in job.outputs})
    forgotten = snakemake_in(workflow, workdir, "--cleanup-metadata", *outputs)
    assert forgotten.returncode == 0, (forgotten.stdout + forgotten.stderr)[-3000:]
    assert_nothing_planned([job for job in full_plan(workflow, workdir) if not job.aggregates])
