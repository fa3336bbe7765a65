"""SLURM requests from the prediction: `runtime` (minutes) and host `mem_mb` of a job, given its output path.

rules/common.smk calls these from the GPU rules' `resources:`, so the SLURM profile (snakemake-executor-plugin-
slurm: `--time`, `--mem`) asks for what the job should take, times `cost.safety`, times the attempt, instead of one
guessed constant for every job. Predictions are made on `cost.device` for jobs that hold GPUs and `cost.cpu` for
the others, with `cost.devices` overrides. A job whose size cannot be known before it runs (an uncached hub model
missing from the known shapes, a corpus of unknown size) asks for `cost.unknown_minutes`.
"""

from __future__ import annotations

import copy
import math

from workflow_lib.cost.devices import device
from workflow_lib.cost.jobs import Job, plan_jobs
from workflow_lib.cost.training import ADAM_BYTES_PER_PARAM

_PLANS: dict[int, tuple[dict, dict[str, Job]]] = {}
HOST_BASE_MB = 4000  # interpreter, torch, transformers and the data a job holds, measured below 3 GB (max_rss)


def devices_of(config: dict):
    cost = config["cost"]
    overrides = cost.get("devices", {})
    return device(cost["device"], overrides.get(cost["device"])), device(cost["cpu"], overrides.get(cost["cpu"]))


def planned(config: dict) -> dict[str, Job]:
    """{output path: Job} for the config, from the config alone (no file of results/ is read, so a request does not
    depend on when snakemake evaluates it); computed once per config. Snakemake asks for every GPU job's runtime
    and memory (thousands of calls in the paper's plan): a config seen before is found by
    identity and compared by value (a copy is kept), far cheaper than serialising it for every call."""
    seen = _PLANS.get(id(config))
    if seen is None or seen[0] != config:
        gpu, cpu = devices_of(config)
        jobs = {job.key: job for job in plan_jobs(config, gpu, cpu, workdir=None)}
        seen = _PLANS[id(config)] = (copy.deepcopy(config), jobs)
    return seen[1]


def planned_job(config: dict, output: str) -> Job:
    """The planned job that writes `output`. A rule's output the plan lacks raises: the rules and the cost model
    build their paths through one layout (workflow_lib/layout.py), so a miss is a bug or a target outside the
    config, not a job to guess a time for."""
    jobs = planned(config)
    if output not in jobs:
        raise KeyError(
            f"{output}: the cost model plans no job that writes it (is it a target of this config?), so its SLURM "
            "runtime and memory are unknown"
        )
    return jobs[output]


def runtime_minutes(config: dict, output: str, attempt: int = 1) -> int:
    """The predicted time x cost.safety x attempt, in whole minutes, at least cost.min_minutes and at most
    cost.max_minutes (a request over a partition's limit would not be queued; a training job that reaches it resumes
    from its checkpoint when retried; `make estimate` names any other job predicted over it)."""
    cost = config["cost"]
    job = planned_job(config, output)
    minutes = (
        cost["unknown_minutes"]
        if job.unknown
        else max(cost["min_minutes"], math.ceil(job.seconds * cost["safety"] / 60))
    )
    return min(minutes * attempt, cost["max_minutes"] or math.inf)


def mem_mb(config: dict, output: str, attempt: int = 1) -> int:
    """Host memory: a base for the interpreter and libraries, plus three float32 copies of the checkpoint (loading
    holds the file and the model, a cast a third), plus the optimizer states when training runs on the CPU."""
    job = planned_job(config, output)
    if job.unknown:
        return 2 * HOST_BASE_MB * attempt
    optimizer = ADAM_BYTES_PER_PARAM * job.params if job.rule == "train" and not job.devices else 0
    return math.ceil(HOST_BASE_MB + (3 * 4 * job.params + optimizer) / 1e6) * attempt
