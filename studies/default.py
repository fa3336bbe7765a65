"""`make run`: the default study (config.yaml) in this checkout's results/, then its HTML report.

    python -m studies.default [--cores 2] [--cold] [snakemake arguments ...]

Its jobs of one thread run warm, forked from one process that imported torch and transformers once
(studies/warm.py): the same bytes as cold, without the 5-9 s each job spends importing them (docs/benchmarks.md). `--cold` runs
each job in its own process, as a cluster does: use it to calibrate the cost model (docs/cluster.md). The other
arguments go to snakemake (for example `--forceall`, `-n`, `--configfile my.yaml`), and to the report's run.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from studies.served import SNAKEMAKE, job_environment, warm_server
from workflow_lib.layout import REPORT_HTML as REPORT


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cores", default="all")
    parser.add_argument("--cold", action="store_true", help="every job in its own process (no studies.warm server)")
    args, snakemake_args = parser.parse_known_args()
    env = job_environment(dict(os.environ))
    with contextlib.ExitStack() as stack:
        jobs_env = env if args.cold else stack.enter_context(warm_server(env, REPO / "results/logs/warm.log"))
        study = subprocess.run([SNAKEMAKE, "--cores", args.cores, *snakemake_args], cwd=REPO, env=jobs_env)
    if study.returncode:
        return study.returncode
    return subprocess.run([SNAKEMAKE, "--report", REPORT, *snakemake_args], cwd=REPO, env=env).returncode


if __name__ == "__main__":
    sys.exit(main())
