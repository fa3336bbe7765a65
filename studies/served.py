"""The runner `make rehearsal` and `make real` share: a study whose downloads a loopback server answers, its HTML
report, then its post-run checks; and the warm job server a study's jobs may run in (`warm_server`), which the
workflow tests' snakemake helper starts too.

Snakemake's own output goes to the terminal; the study's results are under <workdir>/results/, apart from the
default study's results/, so such a run never overwrites them.
"""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from studies.httpserver import serve

REPO = Path(__file__).resolve().parents[1]
OFFLINE = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
SNAKEMAKE = str(Path(sys.executable).parent / "snakemake")  # this interpreter's snakemake, venv activated or not


def job_environment(env: dict) -> dict:
    """`env` for a snakemake process whose jobs run this checkout: this interpreter's folder first on PATH (the jobs'
    `python`, whether or not the venv is activated) and the checkout on PYTHONPATH after any folder `env` names
    there (a test's copy of the workflow goes first). The Snakefile edits no environment (an importing workflow shares
    it), so the caller sets both; a warm server started with this environment has the jobs' environment."""
    paths = [path for path in env.get("PYTHONPATH", "").split(os.pathsep) if path]
    bin_dir = os.path.dirname(sys.executable)
    search = [path for path in env.get("PATH", "").split(os.pathsep) if path and path != bin_dir]
    return {
        **env,
        "PATH": os.pathsep.join([bin_dir, *search]),
        "PYTHONPATH": os.pathsep.join(paths if str(REPO) in paths else [*paths, str(REPO)]),
    }


@contextlib.contextmanager
def warm_server(env: dict, log: Path):
    """A `studies.warm` server for a study's jobs: yields the environment that sends them to it (`env` itself
    if it did not start: every job then runs cold, slower, never different)."""
    from studies.warm import ENV, environment, hooked

    log.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="warm-") as folder, open(log, "w") as handle:
        path = Path(folder) / "jobs.sock"
        server = subprocess.Popen(
            [sys.executable, "-m", "studies.warm", "--socket", str(path)],
            env=environment(env),
            stderr=handle,
            cwd=REPO,
        )
        try:
            deadline = time.monotonic() + 300
            while not path.exists() and server.poll() is None and time.monotonic() < deadline:
                time.sleep(0.2)
            yield {**hooked(env), ENV: str(path)} if path.exists() else env
        finally:
            server.terminate()
            server.wait(timeout=60)


def snakemake_command(workdir: Path, configs: list[Path], *args: str) -> list[str]:
    return [
        SNAKEMAKE,
        "-s",
        str(REPO / "Snakefile"),
        "--directory",
        str(workdir),
        "--configfile",
        *map(str, configs),
        *args,
    ]


def run_served_study(
    name: str,
    workdir: Path,
    configs: list[Path],
    files: dict[str, bytes],
    port: int,
    snakemake_args: list[str],
    checks: Callable[[Path, list[Path]], list[str]],
    start: float,
    warm: bool = False,
) -> int:
    """Serve `files` on 127.0.0.1:`port` while snakemake runs the study in `workdir`, write its report, then run the
    post-run checks (`checks(workdir, configs)`: the problems found, one sentence each). With `warm`, the study's
    single-thread `python -m workflow_lib...` jobs run in a `studies.warm` server (its log:
    <workdir>/results/logs/warm.log). The exit status of the first step that fails, else 1 if a check found a
    problem, else 0."""
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
    problems = checks(workdir, configs)
    for problem in problems:
        print(f"{name}: check failed: {problem}", flush=True)
    print(
        f"{name}: {f'FAILED ({len(problems)} problems)' if problems else 'passed'} in "
        f"{time.monotonic() - start:.0f} s (summary {workdir}/results/summary.md, report {workdir}/report.html)",
        flush=True,
    )
    return 1 if problems else 0
