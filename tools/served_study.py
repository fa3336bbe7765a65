"""The runner `make rehearsal` and `make real` share: a study whose downloads a loopback server answers, its HTML
report, then its post-run checks.

Snakemake's own output goes to the terminal; the study's results are under <workdir>/results/, apart from the
default study's results/, so such a run never overwrites them.
"""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
import sys
import time
from pathlib import Path

from tools.httpserver import serve
from tools.workflow_runs import REPO, job_environment, warm_server

OFFLINE = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


def snakemake_command(workdir: Path, configs: list[Path], *args: str) -> list[str]:
    return [
        str(Path(sys.executable).parent / "snakemake"),
        "-s",
        str(REPO / "Snakefile"),
        "--directory",
        str(workdir),
        "--configfile",
        *map(str, configs),
        *args,
    ]


# The config files a finished study ran with, for its post-run checks (they merge them as snakemake did).
CONFIGS_ENV = "PERTURBED_LM_CONFIGS"


def run_served_study(
    name: str,
    workdir: Path,
    configs: list[Path],
    files: dict[str, bytes],
    port: int,
    snakemake_args: list[str],
    checks: str,
    results_env: str,
    start: float,
    warm: bool = False,
) -> int:
    """Serve `files` on 127.0.0.1:`port` while snakemake runs the study in `workdir`, write its report, then run the
    post-run checks (`checks`, a test module run with marker `name` and `results_env` naming the workdir). With
    `warm`, the study's single-thread `python -m workflow_lib...` jobs run in a `tools.warm` server (its log:
    <workdir>/results/logs/warm.log). The exit status of the first step that fails, else the checks'."""
    env = job_environment({**os.environ, **OFFLINE})
    with contextlib.ExitStack() as stack:
        study_env = stack.enter_context(warm_server(env, workdir / "results/logs/warm.log")) if warm else env
        try:
            server = stack.enter_context(serve(files, port=port))
        except OSError as error:
            if error.errno == errno.EADDRINUSE:
                sys.exit(
                    f"{name}: port {port}, which its local overlay config's download URLs name, is in use; "
                    f"stop what holds it, or change the port in both that config and {Path(sys.argv[0]).name}"
                )
            raise
        study = subprocess.run(snakemake_command(workdir, configs, *snakemake_args), cwd=workdir, env=study_env)
    print(f"{name}: {len(server.requests)} download requests served", flush=True)
    if study.returncode:
        return study.returncode
    report = subprocess.run(
        snakemake_command(workdir, configs, "--report", str(workdir / "report.html")), cwd=workdir, env=env
    )
    if report.returncode:
        return report.returncode
    print(f"{name}: study and report in {time.monotonic() - start:.0f} s; checking the results", flush=True)
    outcome = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(REPO / checks), "-m", name],
        cwd=REPO,
        env={**env, results_env: str(workdir), CONFIGS_ENV: os.pathsep.join(map(str, configs))},
    )
    print(
        f"{name}: {'passed' if outcome.returncode == 0 else 'FAILED'} in {time.monotonic() - start:.0f} s "
        f"(summary {workdir}/results/summary.md, report {workdir}/report.html)",
        flush=True,
    )
    return outcome.returncode
