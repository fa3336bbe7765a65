"""Time the default study's jobs under two versions of the code, and check that they write the same bytes.

A study's jobs are short (tens of seconds) on a shared machine whose load changes by the minute, so two
timings taken minutes apart say little. This runs each job's own shell command (as `snakemake -n -p` prints
it) once per code version, interleaved (A B, then B A on the next repeat), and reports the ratio of the two
in the same run. Every version writes under its own folder (`--output`, `--per-prompt`, `--curves` and
`--resume-dir` are redirected); the outputs are then compared: Parquet, NumPy and model files byte for byte,
JSON as parsed, without the provenance's git fields (a copy of the code is not a git checkout), and
train_log.csv without its tokens/s column (a timing).

    snakemake -n -p --forcerun sample evaluate extrapolation perplexity -- TARGETS... | grep '^Shell command:' \\
        | sed 's/^Shell command: //' > commands.txt
    python bench/study_jobs.py --workdir STUDY --commands commands.txt --code before=/path/to/old/checkout \\
        --code after=. [--repeat 2] [--only sampling,metrics]

The inputs (models, prompts, features) must already be in STUDY, built by the workflow. Last line:
`study_jobs: {json}`.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import resource
import shlex
import subprocess
import sys
import time
from pathlib import Path

REDIRECTED = ("--output", "--per-prompt", "--curves", "--resume-dir")


def parse_command(line: str) -> tuple[dict, list[str]]:
    """(environment assignments, argv) of a rule's shell command, without its `2> log` redirection."""
    words = shlex.split(line)
    env = {}
    while words and "=" in words[0] and not words[0].startswith("-"):
        key, value = words.pop(0).split("=", 1)
        env[key] = value
    if "2>" in words:
        words = words[: words.index("2>")]
    return env, words


def job_name(argv: list[str]) -> str:
    module = argv[argv.index("-m") + 1].rsplit(".", 1)[-1]
    return f"{module} {argv[argv.index('-m') + 2]}" if module == "metrics" else module


def redirected(argv: list[str], folder: Path) -> tuple[list[str], list[Path]]:
    """argv with every output path moved under `folder`, and the outputs to compare."""
    argv, outputs = list(argv), []
    for i, word in enumerate(argv[:-1]):
        if word in REDIRECTED:
            argv[i + 1] = str(folder / argv[i + 1])
            if word != "--resume-dir":
                outputs.append(Path(argv[i + 1]))
    bin_dir = Path(sys.executable).parent
    if argv[0] in ("python", "accelerate"):
        argv[0] = sys.executable if argv[0] == "python" else str(bin_dir / "accelerate")
    return argv, outputs


def run_once(env: dict, argv: list[str], code: Path, workdir: Path, log: Path) -> tuple[float, float]:
    """(wall, CPU) seconds of one job run with `code` first on PYTHONPATH."""
    environment = {
        **os.environ,
        **env,
        "PYTHONPATH": str(code),
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
    }
    log.parent.mkdir(parents=True, exist_ok=True)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    with open(log, "w") as handle:
        done = subprocess.run(argv, cwd=workdir, env=environment, stderr=handle, stdout=handle)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({done.returncode}); see {log}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def comparable(path: Path):
    """What must be equal between two versions' outputs (see the module docstring)."""
    if path.is_dir():
        return {str(p.relative_to(path)): comparable(p) for p in sorted(path.rglob("*")) if p.is_file()}
    if path.suffix == ".json":
        data = json.loads(path.read_text())
        for key in ("git_commit", "git_dirty"):
            (data.get("provenance") or {}).pop(key, None)
        return data
    if path.name == "train_log.csv":
        rows = list(csv.DictReader(io.StringIO(path.read_text())))
        return [{k: v for k, v in row.items() if k != "tokens_per_s"} for row in rows]
    return path.read_bytes()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--workdir", required=True, type=Path, help="the study folder whose results/ holds the inputs")
    parser.add_argument("--commands", required=True, type=Path, help="one rule shell command per line")
    parser.add_argument("--code", action="append", required=True, help="LABEL=FOLDER holding workflow_lib (two)")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--only", default="", help="comma-separated job names (sampling, metrics evaluate, ...)")
    parser.add_argument("--scratch", type=Path, default=None, help="where outputs go (default WORKDIR/study_jobs)")
    opts = parser.parse_args()
    codes = dict(item.split("=", 1) for item in opts.code)
    labels = list(codes)
    scratch = opts.scratch or opts.workdir / "study_jobs"
    only = {name.strip() for name in opts.only.split(",") if name.strip()}

    report = []
    for index, line in enumerate(l for l in opts.commands.read_text().splitlines() if l.strip()):
        env, argv = parse_command(line)
        name = job_name(argv)
        if only and name not in only:
            continue
        times = {label: [] for label in labels}
        outputs = {}
        for r in range(opts.repeat):
            for label in labels if r % 2 == 0 else labels[::-1]:
                folder = scratch / label / f"job{index}"
                job_argv, outputs[label] = redirected(argv, folder)
                times[label].append(
                    run_once(env, job_argv, Path(codes[label]).resolve(), opts.workdir, folder / "stderr.log")
                )
        same = all(comparable(a) == comparable(b) for a, b in zip(outputs[labels[0]], outputs[labels[1]], strict=True))
        best = {label: (min(w for w, _ in t), min(c for _, c in t)) for label, t in times.items()}
        row = {
            "job": index,
            "name": name,
            "identical": same,
            **{f"{label}_wall_s": round(best[label][0], 2) for label in labels},
            **{f"{label}_cpu_s": round(best[label][1], 2) for label in labels},
            "wall_ratio": round(best[labels[1]][0] / best[labels[0]][0], 3),
            "cpu_ratio": round(best[labels[1]][1] / best[labels[0]][1], 3),
        }
        report.append(row)
        print(
            f"job {index:2d} {name:20s} "
            + " ".join(f"{label} {best[label][0]:6.1f} s wall {best[label][1]:6.1f} s CPU" for label in labels)
            + f"  {labels[1]}/{labels[0]} wall {row['wall_ratio']:.3f}  identical outputs: {same}",
            flush=True,
        )
    print("study_jobs: " + json.dumps(report))


if __name__ == "__main__":
    main()
