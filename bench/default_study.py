"""Where a finished study's time went: the job benchmarks (snakemake `benchmark:` files) summed per rule.

Every job of the default study runs on one thread, so a job's wall seconds are what it took of one core; their
sum over the study, divided by the cores, is the least wall time the study could take. Run it after a study,
e.g. after `rm -rf results && time make run`. Last line: `study: {json}`.

    python bench/default_study.py [--results results]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def rule_seconds(results: Path) -> dict[str, dict]:
    """{rule: {"jobs": n, "seconds": total wall s, "mean": s per job}} from results/benchmarks/<rule>/**.tsv."""
    out: dict[str, dict] = {}
    root = results / "benchmarks"
    for tsv in sorted(root.rglob("*.tsv")):
        rel = tsv.relative_to(root).parts
        rule = "lab_laws" if rel[:2] == ("lab", "laws") else "lab_sets" if rel[:2] == ("lab", "sets") else rel[0]
        header, values = tsv.read_text().splitlines()[:2]
        seconds = float(dict(zip(header.split("\t"), values.split("\t")))["s"])
        entry = out.setdefault(rule, {"jobs": 0, "seconds": 0.0})
        entry["jobs"] += 1
        entry["seconds"] += seconds
    for entry in out.values():
        entry["seconds"] = round(entry["seconds"], 1)
        entry["mean"] = round(entry["seconds"] / entry["jobs"], 1)
    return dict(sorted(out.items(), key=lambda kv: -kv[1]["seconds"]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", default="results", type=Path)
    args = parser.parse_args()
    rules = rule_seconds(args.results)
    print("| rule | jobs | job-seconds | per job |\n| --- | --- | --- | --- |")
    for rule, e in rules.items():
        print(f"| {rule} | {e['jobs']} | {e['seconds']:.0f} | {e['mean']:.1f} |")
    total = sum(e["seconds"] for e in rules.values())
    print(f"| **all** | {sum(e['jobs'] for e in rules.values())} | **{total:.0f}** | |")
    print("study: " + json.dumps({"job_seconds": round(total, 1), "rules": rules}))


if __name__ == "__main__":
    main()
