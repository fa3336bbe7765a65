"""`make why`: what a study would run, one line per job, and why.

`snakemake -n` explains each job in a block of its own (its inputs, outputs, wildcards, resources, command and a
reason that lists paths and parameter hashes): 0.2 to 1 MB for the default study after an edit. This runs the same
dry run and prints one line per job: its rule, its first output, and the reason in words. A "params changed"
reason is split by what changed: the job's code (the `code` param: the digest of the module it runs,
workflow_lib.module_deps.code_digest, compared with the one snakemake recorded when the job last ran) or another
of its settings (the config). Then a count per rule and reason.

    python -m studies.why [snakemake arguments, e.g. --configfile my-study.yaml or a target]
"""

from __future__ import annotations

import base64
import collections
import functools
import json
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from studies.served import SNAKEMAKE

MODULE = re.compile(r"-m (workflow_lib[\w.]+)")  # the module a job runs (python -m, or accelerate launch ... -m)


class Job(dict):
    """One job block of a dry run: rule, output, reason, shell."""


def jobs(dry_run: str) -> list[Job]:
    """The job blocks of `snakemake -n --printshellcmds` output."""
    out: list[Job] = []
    for block in re.split(r"\n(?=(?:local)?rule \w+:)", dry_run):
        head = re.match(r"(?:local)?rule (\w+):", block)
        if not head:
            continue
        job = Job(rule=head[1])
        for key in ("output", "reason"):
            found = re.search(rf"^    {key}: (.*)$", block, flags=re.MULTILINE)
            job[key] = found[1] if found else ""
        shell = re.search(r"^Shell command: (.*)$", block, flags=re.MULTILINE)
        job["shell"] = shell[1] if shell else ""
        out.append(job)
    return out


def recorded_params(workdir: Path, output: str) -> list[str] | None:
    """The params snakemake recorded for `output` when its job last ran (.snakemake/metadata), or None."""
    # snakemake's own record path (snakemake/persistence/file.py, _record_path): the output's urlsafe base64, in
    # pieces of 254 characters, each but the last a folder named "@<piece>"
    name = base64.urlsafe_b64encode(output.encode()).decode()
    pieces = [name[i : i + 254] for i in range(0, len(name), 254)]
    path = workdir.joinpath(".snakemake", "metadata", *["@" + p for p in pieces[:-1]], pieces[-1])
    if not path.exists():
        return None
    try:
        params = json.loads(path.read_text())["params"]
        return json.loads(params) if isinstance(params, str) else list(params)
    except (ValueError, KeyError, TypeError):
        return None


@functools.cache
def _digest(module: str) -> str:
    """The code digest of `module` now (once per module: a dry run's jobs share a few dozen)."""
    from workflow_lib.module_deps import code_digest

    return code_digest(module)


def explain(job: Job, workdir: Path) -> str:
    """The job's reason in words: each of snakemake's reasons by its kind, a params change split into code and
    settings."""
    reasons = []
    for part in job["reason"].split("; "):
        kind = part.split(":")[0].strip()
        if kind.startswith("Params have changed"):
            module = MODULE.search(job["shell"])
            old = recorded_params(workdir, job["output"].split(", ")[0])
            if module and old is not None:
                digest = repr(_digest(module[1]))
                kind = "its settings changed" if digest in old else f"the code of {module[1]} changed"
            else:
                kind = "its params changed"
        reasons.append(kind[0].lower() + kind[1:] if kind else kind)
    return "; ".join(dict.fromkeys(r for r in reasons if r)) or "forced or requested"


def main() -> int:
    args = sys.argv[1:]
    workdir = Path(next((args[i + 1] for i, a in enumerate(args[:-1]) if a in ("-d", "--directory")), ".")).resolve()
    run = subprocess.run(
        [SNAKEMAKE, "-n", "--printshellcmds", *args], cwd=REPO, capture_output=True, text=True, check=False
    )
    if run.returncode:
        sys.stderr.write(run.stdout[-3000:] + run.stderr[-3000:])
        return run.returncode
    found = jobs(run.stdout)
    counts: collections.Counter = collections.Counter()
    for job in found:
        why = explain(job, workdir)
        counts[(job["rule"], why)] += 1
        print(f"{job['rule']:<20} {job['output'].split(', ')[0]}  <- {why}")
    print(f"\n{len(found)} jobs:")
    for (rule, why), n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
        print(f"  {n:>5}  {rule:<20} {why}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
