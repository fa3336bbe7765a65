"""Widen mutmut's test selection from the tests that called a function to every test in those tests' files.

Why: mutmut runs a mutant only against the tests that called the mutated function during its stats run. A
module-scoped fixture (the lab's prefix table, `premise_table`'s table) runs once, inside the first test that uses
it, so the module's later tests are never run against the fixture's functions' mutants, and a mutant they would kill
is reported as surviving (`theorems.not_applicable` mutant 2, killed by a test mutmut never ran: docs/benchmarks.md).
Widening to whole test files restores them; it costs time only for the mutants that survive.

Usage, from the repository root after a `mutmut run` has collected its stats (mutants/mutmut-stats.json):

    python -m tools.mutmut_widen workflow_lib.lab.
    mutmut run --max-children 2 $(mutmut results | awk '/: survived$/ {sub(":", "", $1); print $1}')

The second line reruns the survivors with the widened selection (mutmut reruns a mutant it is given by name). A
later `mutmut run` that finds new tests adds their stats to the file; widen again after it.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path

STATS = Path("mutants") / "mutmut-stats.json"


def widen(tests_by_function: dict[str, list[str]], durations: dict[str, float], prefix: str) -> int:
    """In place: every function whose name starts with `prefix` gets every known test (a key of `durations`) of
    each file one of its tests lies in. Returns the number of tests added."""
    by_file: dict[str, set[str]] = defaultdict(set)
    for test in durations:
        by_file[test.split("::")[0]].add(test)
    added = 0
    for function, tests in tests_by_function.items():
        if not function.startswith(prefix):
            continue
        wider = set(tests).union(*(by_file[test.split("::")[0]] for test in tests))
        added += len(wider) - len(tests)
        tests_by_function[function] = sorted(wider)
    return added


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tools.mutmut_widen", description=__doc__.split("\n")[0])
    parser.add_argument("prefix", help="the functions to widen, by the start of their mutmut name (workflow_lib.lab.)")
    args = parser.parse_args(argv)
    if not STATS.is_file():
        raise SystemExit(f"no {STATS}: run `mutmut run` first, from the repository root")
    stats = json.loads(STATS.read_text())
    added = widen(stats["tests_by_mangled_function_name"], stats["duration_by_test"], args.prefix)
    tmp = STATS.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(stats, indent=4))
    tmp.replace(STATS)
    print(f"{STATS}: {added} tests added to the selections of {args.prefix}*")


if __name__ == "__main__":
    main()
