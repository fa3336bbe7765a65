"""`make rehearsal`: the paper's whole study (configs/paper.yaml) run on CPU on stand-ins, then checked.

    python tests/support/rehearsal.py [--cores 2] [--workdir results/rehearsal] [--keep-going]

1. builds the stand-ins (`support.standins`) under <workdir>/standins/ (once; reused after);
2. serves MixCE's WebText and WritingPrompts stand-ins from a loopback HTTP server on 127.0.0.1:38517, at the
   URL paths of the originals, for as long as the study runs;
3. runs snakemake with `--configfile configs/paper.yaml configs/paper-rehearsal.yaml` in <workdir>, then writes
   its HTML report;
4. runs the post-run checks (tests/workflow/test_rehearsal.py, on <workdir>).

Snakemake's own output goes to the terminal; the study's results are under <workdir>/results/, apart from the
default study's results/, so a rehearsal never overwrites them.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests"))

from support.httpserver import serve  # noqa: E402
from support.standins import build  # noqa: E402

PORT = 38517  # the port configs/paper-rehearsal.yaml names
CONFIGS = [REPO / "configs/paper.yaml", REPO / "configs/paper-rehearsal.yaml"]
OFFLINE = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


def snakemake_command(workdir: Path, *args: str) -> list[str]:
    return [str(Path(sys.executable).parent / "snakemake"), "-s", str(REPO / "Snakefile"), "--directory", str(workdir),
            "--configfile", *map(str, CONFIGS), *args]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cores", default="all")
    parser.add_argument("--workdir", type=Path, default=REPO / "results/rehearsal")
    parser.add_argument("--keep-going", action="store_true", help="snakemake --keep-going")
    args, snakemake_args = parser.parse_known_args()  # the rest goes to snakemake (e.g. --forceall, -n)
    workdir = args.workdir.resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, **OFFLINE}

    start = time.monotonic()
    served = build(workdir / "standins")
    print(f"rehearsal: stand-ins in {workdir / 'standins'} ({time.monotonic() - start:.1f} s)", flush=True)
    with contextlib.ExitStack() as stack:
        try:
            server = stack.enter_context(serve(served, port=PORT))
        except OSError as error:
            if error.errno == errno.EADDRINUSE:
                sys.exit(f"rehearsal: port {PORT} (configs/paper-rehearsal.yaml's download URLs) is in use; stop what "
                         "holds it, or change the port in both configs/paper-rehearsal.yaml and tests/support/rehearsal.py")
            raise
        extra = ["--keep-going"] if args.keep_going else []
        study = subprocess.run(snakemake_command(workdir, "--cores", args.cores, *extra, *snakemake_args),
                               cwd=workdir, env=env)
    print(f"rehearsal: {len(server.requests)} download requests served", flush=True)
    if study.returncode:
        return study.returncode
    report = subprocess.run(snakemake_command(workdir, "--report", str(workdir / "report.html")), cwd=workdir, env=env)
    if report.returncode:
        return report.returncode
    print(f"rehearsal: study and report in {time.monotonic() - start:.0f} s; checking the results", flush=True)
    checks = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                             str(REPO / "tests/workflow/test_rehearsal.py"), "-m", "rehearsal"],
                            cwd=REPO, env={**env, "PERTURBED_LM_REHEARSAL": str(workdir)})
    print(f"rehearsal: {'passed' if checks.returncode == 0 else 'FAILED'} in {time.monotonic() - start:.0f} s "
          f"(results in {workdir}/results, summary {workdir}/results/summary.md)", flush=True)
    return checks.returncode


if __name__ == "__main__":
    sys.exit(main())
