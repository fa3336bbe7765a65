"""The theory lab's verdict tests' tiny grammar, its prefix sets and the lab's settings, and the `lab` command run
in-process on them (tests/lab/conftest.py and the tests/lab/test_verdict*.py modules)."""

from __future__ import annotations

import json
import sys

from workflow_lib.lab import verdicts

BUILTIN = {"seed": 7, "words_per_class": 4}
SETS = {"prefixes": 6, "length": 16, "deltas": [0, 1, 2], "last": 12, "tries": 16, "seed": 3}
SETTINGS = {
    "last": 12,
    "length": 16,
    "draws": 2,
    "premise_draws": 4,
    "seed": 3,
    "perturbations": {"syn": {"q0": "uniform", "beta": 0.9}},
}


def run_cli(monkeypatch, folder, laws, settings=SETTINGS, builtin=BUILTIN):
    """The `lab` command in-process; a str settings or builtin is passed as it is (JSON or not)."""
    monkeypatch.setattr(
        sys,
        "argv",
        [
            "lab",
            "--prefixes",
            str(folder / "prefixes.parquet"),
            "--laws",
            *laws,
            "--builtin",
            builtin if isinstance(builtin, str) else json.dumps(builtin),
            "--settings",
            settings if isinstance(settings, str) else json.dumps(settings),
            "--csv",
            str(folder / "out/u.csv"),
            "--premise",
            str(folder / "out/p.csv"),
            "--markdown",
            str(folder / "out/u.md"),
            "--figure",
            str(folder / "out/fig"),
        ],
    )
    verdicts.main()
