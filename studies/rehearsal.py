"""`make rehearsal`: the paper's whole study (configs/paper.yaml) run on CPU on stand-ins, then checked.

    python studies/rehearsal.py [--cores 2] [--workdir results/rehearsal] [--keep-going]

1. builds the stand-ins (`studies.standins`) under <workdir>/standins/ (once; reused after);
2. serves MixCE's WebText and WritingPrompts stand-ins from a loopback HTTP server on 127.0.0.1:38517, at the
   URL paths of the originals, for as long as the study runs;
3. runs snakemake with `--configfile configs/paper.yaml configs/paper-rehearsal.yaml` in <workdir>, then writes
   its HTML report;
4. runs the post-run checks (studies/rehearsal_checks.py) on <workdir>: exit status 1 if any fails.

Steps 2-4 are studies.served's, which `make real` shares.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from studies.rehearsal_checks import finished_problems
from studies.served import run_served_study
from studies.standins import build

PORT = 38517  # the port configs/paper-rehearsal.yaml names
CONFIGS = [REPO / "configs/paper.yaml", REPO / "configs/paper-rehearsal.yaml"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cores", default="all")
    parser.add_argument("--workdir", type=Path, default=REPO / "results/rehearsal")
    parser.add_argument("--keep-going", action="store_true", help="snakemake --keep-going")
    parser.add_argument("--cold", action="store_true", help="every job in its own process (no studies.warm server)")
    args, snakemake_args = parser.parse_known_args()  # the rest goes to snakemake (e.g. --forceall, -n)
    workdir = args.workdir.resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    served = build(workdir / "standins")
    print(f"rehearsal: stand-ins in {workdir / 'standins'} ({time.monotonic() - start:.1f} s)", flush=True)
    extra = ["--keep-going"] if args.keep_going else []
    return run_served_study(
        "rehearsal",
        workdir,
        CONFIGS,
        served,
        PORT,
        ["--cores", args.cores, *extra, *snakemake_args],
        finished_problems,
        start,
        warm=not args.cold,
    )


if __name__ == "__main__":
    sys.exit(main())
