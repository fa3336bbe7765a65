"""The theory lab's verdict tests' shared inputs: a tiny grammar's prefix sets and models' laws on disk, and the
premise table of a few T's on it."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from support.lab_files import BUILTIN, SETS
from workflow_lib.lab import prefix_sets, theorems
from workflow_lib.lab.laws import build_sets, grammar_of


@pytest.fixture
def lab_files(tmp_path):
    """A tiny grammar's prefix sets and three models' (random) laws on disk."""
    sets = build_sets(grammar_of(BUILTIN), SETS)
    pl.from_arrow(sets).write_parquet(tmp_path / "prefixes.parquet")
    words = len(sets.column("truth")[0])
    rng = np.random.default_rng(0)
    paths = []
    for m in range(3):
        paths.append(tmp_path / f"m{m}.npz")
        np.savez(
            paths[-1],
            laws=rng.dirichlet(np.ones(words + 1), size=(2, sets.num_rows)),
            perturbations=np.array(["none", "syn"]),
            single=np.ones(words, dtype=bool),
        )
    return tmp_path, [str(p) for p in paths]


@pytest.fixture(scope="module")
def premise():
    """The premise table for uniform replacement of all 16 words at beta 0.9, 0.972 (alpha between 1/3 and 1/2)
    and 1, and class replacement, at delta up to 3."""
    grammar = grammar_of(BUILTIN)
    frame = pl.from_arrow(build_sets(grammar, {**SETS, "deltas": [0, 1, 2, 3]})).sort("row")
    specs = {
        "u": {"q0": "uniform", "beta": 0.9, "last": 16},
        "s": {"q0": "synonym", "beta": 1.0, "last": 12},
        "all": {"q0": "uniform", "beta": 1.0, "last": 16},
        "c": {"q0": "uniform", "beta": 0.972, "last": 16},
    }
    lex = prefix_sets.lexicon(grammar, SETS["seed"])
    return theorems.premise_table(grammar, lex, frame, specs, 16, SETS["seed"], draws=4)
