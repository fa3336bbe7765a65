"""The workflow on a real SLURM cluster, through `--profile profiles/slurm` and snakemake-executor-plugin-slurm.

`tests/slurm/cluster.sh start` runs a one-node cluster on this machine (CI does it in .ci/run). Without one
these tests skip, unless PERTURBED_LM_REQUIRE_SLURM=1 (CI sets it), which makes them fail instead.

The test cluster has no accounting, so `sacct` cannot report jobs: the runs poll with
`--slurm-status-command squeue`, from the first second on. A real cluster keeps the plugin's defaults.
One run is made to fail at training (a batch larger than the training data, which only the training job can
see), then fixed and rerun: the first run shows the failure as the plugin reports it, the rerun completes only
what was left, and together they run the tiny study end to end on SLURM. Its sampling runs in 3 shards, each
submitted with its own predicted --time. Then the study's sampling is redone with one shard cancelled by
`scancel` while it runs (a preemption): the next run submits that shard alone, and the gathered samples are the
first run's byte for byte.

The test node has 4 fake GPUs (a generic resource without devices, so GPU jobs run on its CPUs), and the study
asks for all 4 to train (`training.gpus: 4`, as the paper's study does) and for one to sample, featurise and score: each job of those rules must
request its GPUs (`sbatch --gpus=N`) in one task with the profile's CPUs per GPU, and every other job no GPU, as
squeue shows; the training's one task runs `accelerate launch` with four processes.
"""

from __future__ import annotations

import importlib.metadata
import math
import os
import re
import shutil
import subprocess
import time
from typing import NamedTuple

import pytest
import yaml

from support.workflow_runs import REPO, offline, run_snakemake, snakemake_command, tiny_config, write_config
from workflow_lib.config import validate_config
from workflow_lib.cost.slurm import planned, runtime_minutes
from workflow_lib.layout import parse
from workflow_lib.module_deps import third_party_imports

TIME_LIMIT = 600  # seconds per snakemake run; the two runs take about three minutes together
SLURM_ARGS = [
    "--profile",
    str(REPO / "profiles/slurm"),
    "--slurm-status-command",
    "squeue",
    "--slurm-init-seconds-before-status-checks",
    "1",
    "--max-threads",
    "2",  # this machine has 2 CPUs (the test node claims 8); the profile asks up to 8 threads for some rules
    "--retries",
    "0",  # the profile retries a failed job twice (with more time and memory): not wanted here
    "--latency-wait",
    "5",
]
# Which partition the profile sends each rule to, given the two variables below.
PARTITION_ENV = {"PERTURBED_LM_PARTITION": "cpu", "PERTURBED_LM_GPU_PARTITION": "gpu"}
GPU_PARTITION_RULES = {"train", "sample", "features", "sample_features", "perplexity", "extrapolation"}
# The GPUs each rule's jobs ask for in this study: training.gpus 4 (the test node's four fake GPUs: one task of four
# processes, accelerate launch's), sampling.gpus and evaluation.gpus 1; every other rule none.
GPU_REQUESTS = {"train": 4, "sample": 1, "features": 1, "sample_features": 1, "perplexity": 1, "extrapolation": 1}
CPUS_PER_GPU = {"train": 8}  # the profile's cpus_per_gpu (4 for every other GPU rule)


def slurm_available() -> bool:
    if not (shutil.which("sbatch") and shutil.which("sinfo") and shutil.which("squeue")):
        return False
    probe = subprocess.run(["sinfo", "-h", "-o", "%a"], capture_output=True, text=True, timeout=30)
    return probe.returncode == 0 and "up" in probe.stdout


@pytest.fixture(scope="module")
def slurm():
    if not slurm_available():
        message = "no SLURM cluster (start one with tests/slurm/cluster.sh start)"
        if os.environ.get("PERTURBED_LM_REQUIRE_SLURM") == "1":
            pytest.fail(f"{message}, and PERTURBED_LM_REQUIRE_SLURM=1")
        pytest.skip(message)


def run_on_slurm(workdir, cancel: str | None = None) -> subprocess.CompletedProcess:
    """One snakemake run through the profile; with `cancel` (a job comment's pattern), the first job whose comment
    matches it is cancelled with scancel as soon as squeue shows it running, as a preemption would."""
    config, env = [workdir / "config.yaml"], {**os.environ, **PARTITION_ENV}
    if cancel is None:
        return run_snakemake(
            workdir, *SLURM_ARGS, configfiles=config, limit=TIME_LIMIT, env=env, timeout=TIME_LIMIT + 30
        )
    cmd = snakemake_command(workdir, *SLURM_ARGS, configfiles=config, limit=TIME_LIMIT)
    with subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=workdir, env=offline(env)
    ) as run:
        cancelled = None
        while cancelled is None and run.poll() is None:
            queue = subprocess.run(["squeue", "-h", "-t", "R", "-o", "%i|%k"], capture_output=True, text=True)
            running = [line.split("|") for line in queue.stdout.splitlines()]
            cancelled = next((job for job, comment in running if re.search(cancel, comment)), None)
            if cancelled is None:
                time.sleep(0.3)
        if cancelled is not None:
            subprocess.run(["scancel", cancelled], check=True, timeout=30)
        stdout, stderr = run.communicate(timeout=TIME_LIMIT + 30)
    return subprocess.CompletedProcess(cmd, run.returncode, stdout, f"{stderr}\ncancelled SLURM job: {cancelled}")


def jobs_run(output: str) -> list[str]:
    """The rule of every job a snakemake run started, in order ('rule x:' and 'localrule x:' headers)."""
    return re.findall(r"^(?:local)?rule (\w+):$", output, flags=re.MULTILINE)


class Submitted(NamedTuple):
    """What SLURM received of a job's sbatch line, as squeue shows it."""

    partition: str
    minutes: int  # -t
    gpus: int  # --gpus (tres-per-job) or --gres=gpu:N (tres-per-node)
    tasks: int  # --ntasks (default 1)
    cpus_per_gpu: int  # --cpus-per-gpu (cpus-per-tres); 0: none asked


def slurm_jobs(output: str) -> dict[str, Submitted]:
    """Job comment (rule and wildcards) -> what SLURM received of its sbatch line, for every job the run submitted
    (squeue keeps finished jobs for MinJobAge seconds)."""
    ids = re.findall(r"has been submitted with SLURM jobid (\d+)", output)
    if not ids:
        return {}
    # -O: `field:|` is the field unpadded, then |. --gpus=N shows in tres-per-job, --gres=gpu:N in tres-per-node.
    fields = [
        "JobID",
        "Partition",
        "Comment",
        "TimeLimit",
        "tres-per-job",
        "tres-per-node",
        "NumTasks",
        "cpus-per-tres",
    ]
    queue = subprocess.run(
        ["squeue", "-t", "all", "-h", "-j", ",".join(ids), "-O", ",".join(f"{field}:|" for field in fields)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert queue.returncode == 0, queue.stderr
    jobs = {}
    for line in queue.stdout.splitlines():
        _, partition, comment, limit, per_job, per_node, tasks, cpus_per_tres = line.split("|")[:8]
        jobs[comment] = Submitted(
            partition, minutes(limit), gpus(per_job) + gpus(per_node), int(tasks), gpus(cpus_per_tres)
        )
    return jobs


def gpus(tres: str) -> int:
    """The GPUs in squeue's tres-per-job or tres-per-node ("gres:gpu:1", "gres/gpu:a100:2", "gres/gpu=1"; N/A: 0)."""
    return sum(
        int(m[1])
        for entry in tres.split(",")
        if (m := re.fullmatch(r"(?:gres[:/])?gpu(?::[\w.-]+)?[:=](\d+)", entry.strip()))
    )


def minutes(limit: str) -> int:
    """squeue's %l ([days-]hours:minutes:seconds, or minutes:seconds) in whole minutes."""
    days, _, clock = limit.rpartition("-")
    parts = [int(p) for p in clock.split(":")]
    h, m, sec = [0] * (3 - len(parts)) + parts
    return int(days or 0) * 1440 + h * 60 + m + math.ceil(sec / 60)


# A large safety factor and a floor of one minute, so each GPU rule's request differs from the others' and from
# any constant: the test can then see that --time follows each job's prediction.
COST = {"safety": 60, "min_minutes": 1}
# Sampling in 3 shards of one batch: 10 prompts x 2 runs in batches of 8 is shards of 8, 8 and 4 rows.
SAMPLING = {"shard_batches": 1, "batch_size": 8}
CANCELLED_SHARD = r"^rule_sample_wildcards_.*_1_3$"  # shard 1 of 3 (its wildcards end with the shard and the count)


def study_config() -> dict:
    config = tiny_config()
    config["experiments"]["main"]["eval_sets"] = ["syn-test"]
    config["eval_sets"] = {"syn-test": config["eval_sets"]["syn-test"]}
    config["cost"] = dict(COST)
    config["sampling"] = {**config["sampling"], **SAMPLING}
    config["evaluation"] = {**config["evaluation"], "gpus": 1}  # the featurisation and scoring jobs' GPUs
    config["sampling"]["gpus"] = 1
    config["training"] = {**config["training"], "gpus": 4}  # one task: accelerate launch's four processes
    return config


@pytest.fixture(scope="module")
def failed_then_fixed(slurm, tmp_path_factory):
    """Run a study whose training fails, then the fixed study: (workdir, first run, its training log, rerun, s, the
    samples files' bytes)."""
    workdir = tmp_path_factory.mktemp("slurm")
    config = study_config()
    # The config check cannot count the training rows: the training job refuses the batch before any step.
    broken = {**config["models"]["tiny"], "training": {"batch_size": 100_000}}
    write_config(workdir, {**config, "models": {"tiny": broken}})
    start = time.monotonic()
    first = run_on_slurm(workdir)
    train_log = workdir / "results/logs/train/tiny/synthetic/mle/none/augment-m1/none-0/seed1.log"
    first_train_log = train_log.read_text() if train_log.exists() else ""
    write_config(workdir, config)
    rerun = run_on_slurm(workdir)
    samples = [p.read_bytes() for p in sorted((workdir / "results/samples").rglob("*.parquet"))]
    return workdir, first, first_train_log, rerun, time.monotonic() - start, samples


@pytest.fixture(scope="module")
def preempted(failed_then_fixed):
    """The finished study's sampling rerun (its samples and metrics removed: snakemake remakes a missing file only
    where something needs it), with shard 1 of 3 cancelled by scancel while it runs, then run again: (workdir, the run
    with the cancelled shard, the run after it)."""
    workdir = failed_then_fixed[0]
    for path in [*(workdir / "results/samples").rglob("*.parquet"), *(workdir / "results/metrics").rglob("*.*")]:
        path.unlink()
    cancelled = run_on_slurm(workdir, cancel=CANCELLED_SHARD)
    return workdir, cancelled, run_on_slurm(workdir)


@pytest.mark.workflow
def test_failing_job_fails_the_run_with_the_plugins_message(failed_then_fixed):
    _, first, train_log, *_ = failed_then_fixed
    output = first.stdout + first.stderr
    assert first.returncode not in (0, 124, 137), output[-3000:]
    assert re.search(r"Error in rule train:\s+message: SLURM-job '\d+' failed, SLURM status is: 'FAILED'", output), (
        output[-3000:]
    )
    assert "larger than the training data" in train_log
    # keep-going (profile): everything that does not need the model still ran
    assert {"tokenize", "perturb", "features", "train"} <= set(jobs_run(output))
    assert "sample" not in jobs_run(output)


@pytest.mark.workflow
def test_rerun_completes_only_what_was_left(failed_then_fixed):
    _, first, _, rerun, *_ = failed_then_fixed
    output = rerun.stdout + rerun.stderr
    assert rerun.returncode == 0, output[-3000:]
    done_before = set(jobs_run(first.stdout + first.stderr)) - {"train"}
    ran = set(jobs_run(output))
    assert {"train", "sample", "evaluate", "extrapolation", "collect_metrics", "all"} <= ran, ran
    assert not ran & (done_before | {"download", "tokenizer", "tokenize", "prompts", "perturb", "features"}), ran


@pytest.mark.workflow
def test_tiny_study_runs_end_to_end_through_the_slurm_profile(failed_then_fixed):
    workdir, first, _, rerun, seconds, _ = failed_then_fixed
    results = workdir / "results"
    assert (results / "summary.md").stat().st_size > 0
    assert len(list((results / "metrics").rglob("*.json"))) == 1
    assert len(list((results / "extrapolation").rglob("*.json"))) == 1
    assert "Nothing to be done" in (again := run_on_slurm(workdir)).stdout + again.stderr
    # Every job but the local rules went through sbatch, to the partition the profile names for its rule.
    submitted = {**slurm_jobs(first.stdout + first.stderr), **slurm_jobs(rerun.stdout + rerun.stderr)}
    rules = {re.match(r"rule_(\w+?)_wildcards", comment).group(1): job for comment, job in submitted.items()}
    # Each job asked for its rule's GPUs (GPU_REQUESTS: the study's training.gpus, sampling.gpus, evaluation.gpus),
    # in one task, with the profile's CPUs per GPU; every other job for no GPU (checked before the set of rules, so
    # that a CPU rule asking for a GPU shows as such).
    wrong = {}
    for comment, job in submitted.items():
        rule = re.match(r"rule_(\w+?)_wildcards", comment).group(1)
        want = GPU_REQUESTS.get(rule, 0)
        geometry = (job.gpus, job.tasks, job.cpus_per_gpu)
        if geometry != (want, 1, CPUS_PER_GPU.get(rule, 4) if want else 0):
            wrong[comment] = geometry
    assert not wrong, f"(GPUs, tasks, CPUs per GPU) that are not GPU_REQUESTS' and the profile's: {wrong}"
    # The training's one task ran accelerate launch with the job's GPUs as its processes.
    train_log = (workdir / "results/logs/train/tiny/synthetic/mle/none/augment-m1/none-0/seed1.log").read_text()
    assert "4 process(es) x batch" in train_log and "--multi_gpu --num_processes 4" in rerun.stdout + rerun.stderr
    assert set(rules) == {
        "tokenize",
        "perturb",
        "control_texts",
        "features",
        "mauve_controls",
        "sample_features",
        "train",
        "sample",
        "evaluate",
        "perplexity",
        "extrapolation",
    }, sorted(rules)
    for rule, job in rules.items():
        assert job.partition == ("gpu" if rule in GPU_PARTITION_RULES else "cpu"), (rule, job.partition)
    # --time is the cost model's prediction of the job x cost.safety: one job per modelled rule in this study (the GPU
    # rules and evaluate, predicted on cost.cpu), but for sampling's three shards, each asking for its own prediction
    config = validate_config(study_config())
    predicted = {job.rule: runtime_minutes(config, key) for key, job in planned(config).items()}
    for rule in (GPU_PARTITION_RULES | {"evaluate"}) - {"sample"}:
        assert rules[rule].minutes == predicted[rule], (rule, rules[rule].minutes, predicted[rule])
    shards = {
        tuple(map(int, re.search(r"_(\d+)_(\d+)$", comment).groups())): job.minutes
        for comment, job in submitted.items()
        if comment.startswith("rule_sample_wildcards_")  # not sample_features
    }
    assert set(shards) == {(0, 3), (1, 3), (2, 3)}, shards
    for key, job in planned(config).items():
        if job.rule == "sample":
            shard = parse(key).shard
            assert shards[(shard.index, shard.count)] == runtime_minutes(config, key), (key, shards)
    assert len({predicted[rule] for rule in GPU_PARTITION_RULES}) > 1, predicted  # not one constant for all
    assert rules["tokenize"].minutes == 60  # the profile's default-resources for a rule the cost model does not size
    print(f"failing run + rerun on SLURM: {seconds:.0f} s")


@pytest.mark.workflow
def test_a_shard_cancelled_while_it_runs_reruns_alone(preempted, failed_then_fixed):
    workdir, cancelled, after = preempted
    output = cancelled.stdout + cancelled.stderr
    assert cancelled.returncode not in (0, 124, 137) and "cancelled SLURM job: None" not in output, output[-3000:]
    assert re.search(r"Error in rule sample:\s+message: SLURM-job '\d+' failed, SLURM status is: 'CANCELLED'", output)
    # keep-going: the other two shards finished; nothing that needs the samples ran
    assert jobs_run(output).count("sample") == 3 and "gather_samples" not in jobs_run(output), jobs_run(output)
    output = after.stdout + after.stderr
    assert after.returncode == 0, output[-3000:]
    submitted = [comment for comment in slurm_jobs(output) if comment.startswith("rule_sample_wildcards_")]
    assert jobs_run(output).count("sample") == 1 and len(submitted) == 1, (jobs_run(output), submitted)
    assert re.search(CANCELLED_SHARD, submitted[0]), submitted
    assert {"gather_samples", "evaluate", "collect_metrics"} <= set(jobs_run(output))
    # The samples gathered from shards of two runs are the first run's, byte for byte, and no shard is left behind.
    samples = sorted((workdir / "results/samples").rglob("*.parquet"))
    assert [p.read_bytes() for p in samples] == failed_then_fixed[5], samples
    assert not list((workdir / "results/samples").rglob("*.shards/*"))


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pins(lines) -> dict[str, str]:
    return {canonical(m[1]): m[2] for line in lines if (m := re.match(r"^\s*([A-Za-z0-9_.-]+)==(\S+)", line))}


def test_conda_envs_pin_what_their_rules_import():
    """`--sdm conda` on a machine without our venv: every package a rule's code imports is pinned in its env,
    at the version requirements.txt (and so the test suite) uses, or requirements/harness.txt for lm-eval's; torch at
    the one requirements.in names (the venv installs it by version)."""
    required = pins((REPO / "requirements/harness.txt").read_text().splitlines())
    required |= pins((REPO / "requirements.txt").read_text().splitlines())
    required |= {k: v for k, v in pins((REPO / "requirements.in").read_text().splitlines()).items() if k == "torch"}
    distributions = importlib.metadata.packages_distributions()
    checked = set()
    for smk in sorted((REPO / "rules").glob("*.smk")):
        for block in re.split(r"^(?=rule \w+:)", smk.read_text(), flags=re.MULTILINE)[1:]:
            rule = re.match(r"rule (\w+):", block)[1]
            modules = set(re.findall(r"-m (workflow_lib[\w.]+)", block))
            if not modules:
                continue
            env = re.search(r'conda:\s+"\.\./(envs/[\w.-]+\.yaml)"', block)
            assert env, f"rule {rule} has no conda environment"
            spec = yaml.safe_load((REPO / env[1]).read_text())
            pip = next(d["pip"] for d in spec["dependencies"] if isinstance(d, dict) and "pip" in d)
            env_pins = pins(pip)
            for module in modules:
                for name in sorted(third_party_imports(module)):
                    dists = {canonical(d) for d in distributions.get(name, [name])}
                    assert dists & set(env_pins), f"rule {rule}: {module} imports {name}, which {env[1]} does not pin"
            for dist, version in env_pins.items():
                assert required.get(dist) == version, (
                    f"{env[1]}: {dist}=={version}, requirements.txt: {required.get(dist)}"
                )
            checked.add(rule)
    assert {"download", "train", "sample", "evaluate", "tables", "simulation_fit"} <= checked
