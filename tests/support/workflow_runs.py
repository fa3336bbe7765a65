"""The workflow tests' shared study: a tiny config, and snakemake run on it in a temporary folder; the one snakemake
command line every test builds (`snakemake_command`) and runs (`run_snakemake`)."""

from __future__ import annotations

import atexit
import contextlib
import functools
import os
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import EllipsisType
from typing import Any, NamedTuple

import yaml

from studies.served import REPO, job_environment, warm_server

SNAKEMAKE = Path(sys.executable).parent / "snakemake"
PAPER = REPO / "configs/paper.yaml"
# The environment the test session started with (tests/conftest.py imports this module first), before the libraries
# the tests import set variables of their own (torch, faiss: KMP_*, TORCHINDUCTOR_CACHE_DIR) and before pytest names
# the running test (PYTEST_CURRENT_TEST): what a study's snakemake gets, as a user's would.
SESSION_ENV = {k: v for k, v in os.environ.items() if k != "PYTEST_CURRENT_TEST"}


def tiny_builtin(**docs) -> dict:
    """A builtin corpus small enough for a workflow test to finish in seconds."""
    return {
        "source": "builtin",
        "builtin": {
            "seed": 7,
            "words_per_class": 4,
            "sentences_per_doc": 16,
            "docs": {"train": 60, "validation": 10, "test": 20, "ood": 20, **docs},
        },
    }


def tiny_config() -> dict:
    return {
        "seed": 1,
        "datasets": {"synthetic": tiny_builtin()},
        "tokenizers": {"bpe": {"source": "train", "dataset": "synthetic", "vocab_size": 300}},
        "models": {
            "tiny": {
                "source": "scratch",
                "tokenizer": "bpe",
                "architecture": {"n_layer": 1, "n_head": 1, "n_embd": 16, "n_positions": 128},
            }
        },
        "tokenize": {"block_size": 32},
        "prompts": {"max_prompts": 10},
        "training": {"batch_size": 8},
        "sampling": {"runs": 2, "new_tokens": 8},
        "evaluation": {
            "max_text_length": 64,
            "mauve": {"kmeans_num_redo": 1, "kmeans_max_iter": 50},
            "extrapolation": {"draws": 8},
        },  # the default 32 costs 4x; 8 is enough to test the path
        "eval_sets": {
            "syn-test": {"dataset": "synthetic", "split": "test"},
            "syn-ood": {"dataset": "synthetic", "split": "ood"},
        },
        "experiments": {
            "main": {"models": ["tiny"], "train_dataset": "synthetic", "eval_sets": ["syn-test", "syn-ood"]}
        },
    }


# The theory lab's output folder in the shared tiny study (its group experiment is "group").
LAB = "results/lab/group"


def lab_settings() -> dict:
    """The theory lab of a tiny study whose experiment "group" holds the models (tests/lab/test_lab_workflow.py)."""
    return {
        "experiments": ["group"],
        "prefixes": 12,
        "length": 24,
        "deltas": [0, 1, 2],
        "last": 8,
        "draws": 2,
        "tries": 16,
        "perturbations": {"uniform": {"q0": "uniform", "beta": 0.9}, "synonym": {"q0": "synonym", "beta": 1.0}},
    }


def tiny_study_config() -> dict:
    """The shared tiny study (the `tiny_study` fixture, tests/conftest.py), which the training, sampling, report and
    lab tests read: MLE trained with and without 20% inserted oracle synonyms, sampled exactly at intensities 0 and
    0.2 on both eval sets; the unperturbed MLE model also in `cached` mode; EMO trained the same two ways, sampled
    once on one eval set; Brier and MLE from 3 seeds (Brier against MLE across training seeds), MLE from 3 more (the
    A/A null: its seeds 4-6 against 1-3); Brier beside MLE as the theory lab's group; the simulation study. Separate
    experiments, so that the grid is not their cross product."""
    config = tiny_config()
    oracle = {"intensities": [0, 0.2], "synonyms": ["oracle"]}
    one_set = {"models": ["tiny"], "train_dataset": "synthetic", "eval_sets": ["syn-test"]}
    main = config["experiments"]["main"]
    main["train_perturbation"] = dict(oracle)
    main["test_perturbation"] = dict(oracle)
    config["experiments"]["cached"] = {
        **main,
        "train_perturbation": {"intensities": [0]},
        "test_perturbation": {"intensities": [0.2], "synonyms": ["oracle"], "modes": ["cached"]},
    }
    config["experiments"]["emo"] = {**one_set, "objectives": ["emo"], "train_perturbation": dict(oracle)}
    # Training seeds as the unit (report.seeds): Brier (a training effect) and MLE from 3 seeds each, so that Brier
    # against MLE is tested across them; and MLE from 3 more for the A/A null (report.aa_null): one method against
    # itself, its seeds 4-6 against its seeds 1-3, two arms that differ only by training randomness. (It replaced "MLE
    # under another name", a null whose arms were the same bytes.)
    config["experiments"]["same"] = {**one_set, "objectives": ["mle", "brier"], "seeds": [1, 2, 3]}
    config["experiments"]["null"] = {**one_set, "objectives": ["mle"], "seeds": [1, 2, 3, 4, 5, 6]}
    config["experiments"]["group"] = {**one_set, "objectives": ["mle", "brier"]}
    config["lab"] = lab_settings()
    config["training"] = {"batch_size": 8, "learning_rate": 1e-3, "eval_every": 5, "checkpoint_every": 5}
    config["report"] = {"intensity": 0.2, "aa_null": True}
    config["simulation"] = {
        "enabled": True,
        "vocab_sizes": [6],
        "intensities": [0, 0.5],
        "replications": 2,
        "n_sequences": 20,
        "seq_len": 6,
        "epochs": 2,
        "batch_size": 50,
    }
    return config


WORKFLOW_CODE = ["Snakefile", "config.yaml", "rules", "workflow_lib", "report", "profiles", "envs"]


def copy_workflow(dest: Path) -> Path:
    """A copy of the workflow's code in `dest`, so a test may edit it without touching the checkout."""
    import shutil

    dest.mkdir(parents=True, exist_ok=True)
    for name in WORKFLOW_CODE:
        source = REPO / name
        if source.is_dir():
            shutil.copytree(source, dest / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(source, dest / name)
    return dest


def write_config(workdir: Path, config: dict) -> Path:
    path = workdir / "config.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def _warm_variable() -> dict[str, str]:
    """The session's warm server, as the variable that sends jobs to it: started at the first workflow test, stopped
    when the session ends. PERTURBED_LM_TEST_COLD=1: none."""
    if os.environ.get("PERTURBED_LM_TEST_COLD") == "1":
        return {}
    return _session_server()


@functools.cache
def _session_server() -> dict[str, str]:
    from studies.warm import ARROW_ALLOCATOR, ENV

    stack = contextlib.ExitStack()
    atexit.register(stack.close)
    log = Path(tempfile.mkdtemp(prefix="warm-log-")) / "warm.log"
    started = stack.enter_context(warm_server(job_environment(SESSION_ENV), log))
    return {k: started[k] for k in (ENV, "PYTHONPATH", *ARROW_ALLOCATOR)} if ENV in started else {}


def snakemake_environment(env: dict | None = None) -> dict[str, str]:
    """The environment a test's snakemake runs with: `env` (else the session's starting one) with the jobs' PATH and
    PYTHONPATH (`studies.served.job_environment`), its jobs of one thread sent to the session's warm server, unless
    `env` names a server of its own (`studies.served.warm_server`, started with that environment)."""
    from studies.warm import ENV

    environment = job_environment(dict(env if env is not None else SESSION_ENV))
    return environment if ENV in environment else {**environment, **_warm_variable()}


# What every test's snakemake gets besides its own environment (tests/conftest.py sets them in this process too).
OFFLINE = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}


def snakemake_command(
    workdir: Path | None,
    *args: str,
    snakefile: Path | None = REPO / "Snakefile",
    targets: Sequence[str] = (),
    configfiles: Sequence[Path | str] = (),
    cores: int | None = None,
    limit: int | None = None,
) -> list[str]:
    """The snakemake command line every test runs: `-s snakefile` (None: none, snakemake's own search from its working
    directory), the targets, `--directory workdir` (None: none), `--configfile` with each of `configfiles` (in their
    order: the last wins), `--cores`, then `args`. Targets go before `--configfile`, which takes every value that
    follows it. With `limit`, under `timeout -k 10 <limit>`, so that a stuck run is killed with its jobs."""
    return [
        *(["timeout", "-k", "10", str(limit)] if limit is not None else []),
        str(SNAKEMAKE),
        *(["-s", str(snakefile)] if snakefile is not None else []),
        *targets,
        *(["--directory", str(workdir)] if workdir is not None else []),
        *(["--configfile", *map(str, configfiles)] if configfiles else []),
        *(["--cores", str(cores)] if cores is not None else []),
        *args,
    ]


def offline(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """`env` (else this process's environment) with the hub's offline switches on: no test touches the network."""
    return {**(env if env is not None else os.environ), **OFFLINE}


def run_snakemake(
    workdir: Path | None,
    *args: str,
    env: Mapping[str, str] | None = None,
    cwd: Path | str | None | EllipsisType = ...,
    timeout: float | None = None,
    **command: Any,
) -> subprocess.CompletedProcess:
    """Run `snakemake_command(workdir, *args, **command)` and capture its output as text: in `cwd` (workdir unless
    given; None: this process's), with `env` (else this process's environment) and the offline switches (`offline`),
    within `timeout` seconds (None: no limit)."""
    return subprocess.run(
        snakemake_command(workdir, *args, **command),
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=workdir if cwd is ... else cwd,
        env=offline(env),
        check=False,
    )


def snakemake(workdir: Path, *args: str, timeout: int = 600, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run the real workflow on `workdir/config.yaml` on 2 cores, with workdir as the working directory. Its jobs of
    one thread run in the session's warm server (`studies.warm`: the same outputs, without importing torch and
    transformers each time); a job whose environment differs from the server's (a test's own `env`) runs cold, unless
    `env` is one that `studies.served.warm_server` yielded. Without `env`, snakemake gets the session's starting
    environment."""
    return run_snakemake(
        workdir,
        *args,
        configfiles=[workdir / "config.yaml"],
        cores=2,
        env=snakemake_environment(env),
        timeout=timeout,
    )


def dry_run_of_tiny_study_with(workdir: Path, config: dict, *args: str) -> subprocess.CompletedProcess:
    """`snakemake -n` of the shared tiny study under `config`; its own config.yaml is put back after, for the tests
    that read the study next."""
    write_config(workdir, config)
    try:
        return snakemake(workdir, "-n", *args)
    finally:
        write_config(workdir, tiny_study_config())


def planned_rules(output: str) -> set[str]:
    """Rule names with jobs in snakemake's 'Job stats' table (of a dry run or a run), `all` left out."""
    from support.plans import job_stats

    return set(job_stats(output)) - {"all"}


def paper_dry_run(workdir: Path, *args: str) -> tuple[subprocess.CompletedProcess, float]:
    """`snakemake -n` of the paper's study (configs/paper.yaml) in `workdir`: the dry run's result and the CPU seconds
    it took (user + system of the child): what planning costs, whatever else loads the machine (CI runs the rehearsal
    beside the test suite)."""
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    result = run_snakemake(workdir, "-n", *args, configfiles=[PAPER], limit=120, timeout=150)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return result, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


class PaperPlan(NamedTuple):
    """The paper's study planned from an empty folder (the `paper_plan` fixture, tests/conftest.py)."""

    workdir: Path
    result: subprocess.CompletedProcess
    cpu_seconds: float
