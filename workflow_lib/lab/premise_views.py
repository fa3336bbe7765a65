"""Views of the lab's premise table (lab.theorems' `premise_table`) that the tables, findings and figure read:
T's constants once per (T, family, delta), and the sups once per (class, T, delta).

docs/theory.md, "The theory lab", says what each column is.
"""

from __future__ import annotations

import polars as pl


def constants_frame(premise: pl.DataFrame) -> pl.DataFrame:
    """T's constants per (T, family, delta), one copy (they do not depend on the model class)."""
    return premise.filter(pl.col("class") == premise["class"][0]).select(
        "perturbation",
        "q0",
        "beta",
        "last",
        "family",
        "delta",
        "alpha",
        "alpha_proposition",
        "C",
        "C_proposition",
        "C_rows",
    )


def constants_of(premise: pl.DataFrame) -> dict[tuple, dict]:
    return {(r["perturbation"], r["family"], r["delta"]): r for r in constants_frame(premise).iter_rows(named=True)}


def sups_frame(premise: pl.DataFrame) -> pl.DataFrame:
    """One row per (class, T, delta): the sups and verdicts, which the premise table repeats for every family."""
    return premise.unique(subset=["class", "perturbation", "delta"], keep="first", maintain_order=True)
