"""Reading what snakemake prints: the jobs of a dry run (rule, outputs, reason) and its job counts."""

from __future__ import annotations

import re
from dataclasses import dataclass

# Rules that aggregate over the whole grid (the report stage, the final target): any change reruns them.
AGGREGATION_OUTPUTS = ("results/report/", "results/summary.md", "results/report.html")


@dataclass(frozen=True)
class PlannedJob:
    rule: str
    outputs: tuple[str, ...]
    reason: str
    text: str

    @property
    def aggregates(self) -> bool:
        return self.rule == "all" or any(o.startswith(AGGREGATION_OUTPUTS) for o in self.outputs)


def planned_jobs(output: str) -> list[PlannedJob]:
    """The jobs of `snakemake -n` output, one per '[date]' block that names a rule."""
    jobs = []
    for block in re.split(r"^\[\w{3} \w{3} .*\]$", output, flags=re.MULTILINE)[1:]:
        rule = re.search(r"^(?:local)?rule (\w+):$", block, flags=re.MULTILINE)
        if rule is None:
            continue
        outputs = re.search(r"^\s+output: (.*)$", block, flags=re.MULTILINE)
        reason = re.search(r"^\s+reason: (.*)$", block, flags=re.MULTILINE)
        jobs.append(
            PlannedJob(rule[1], tuple(outputs[1].split(", ")) if outputs else (), reason[1] if reason else "", block)
        )
    return jobs


def job_stats(output: str) -> dict[str, int]:
    """The first 'Job stats' table of snakemake's output: rule -> count."""
    if "Job stats:" not in output:
        return {}
    table = output.split("Job stats:", 1)[1].split("\n\n", 1)[0]
    return {m[1]: int(m[2]) for m in re.finditer(r"^(\w+)\s+(\d+)$", table, flags=re.MULTILINE) if m[1] != "total"}
