"""The summary's lab section in Markdown: T's constants, the premise classes' sups and verdicts, the global
uncertainties, and the trained models' disagreement, as tables, followed by the findings (lab.findings).

All TVs of trained models are on the models' cells: the words the tokenizer spells as one token, and one "other"
cell for the rest. docs/theory.md, "The theory lab", says what each column is.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from workflow_lib.lab.findings import findings
from workflow_lib.lab.premise_views import constants_frame, sups_frame


def _num(value, digits: int = 3) -> str:
    return "—" if value is None or (isinstance(value, float) and np.isnan(value)) else f"{value:.{digits}f}"


def _row(cells) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


def _table(head: list[str], rows: list[list]) -> list[str]:
    return [_row(head), "|" + "---|" * len(head), *(_row(r) for r in rows)]


def _rows_sample(premise: pl.DataFrame, cls: str, name: str, delta: int) -> str:
    part = premise.filter((pl.col("class") == cls) & (pl.col("perturbation") == name) & (pl.col("delta") == delta))
    return "; ".join(
        f"{r['family']} {r['U_base_rows']:.3f} / {r['U_perturb_rows']:.3f}"
        for r in part.sort("family").iter_rows(named=True)
    )


def _premise_rows(premise: pl.DataFrame) -> list[list]:
    """The sups' rows off the support (delta 0 holds U = 0 by definition)."""
    rows = []
    for r in sups_frame(premise).filter(pl.col("delta") > 0).iter_rows(named=True):
        u_perturb = _num(r["U_perturb"]) + ("" if r["admissible"] else " (self-pairs only)")
        rows.append(
            [
                r["class"],
                r["perturbation"],
                r["delta"],
                _num(r["U_base"]),
                u_perturb,
                r["worst_prefix"],
                _rows_sample(premise, r["class"], r["perturbation"], r["delta"]),
                _num(2 * r["C"]),
                r["robustness"],
                r["robustness_proposition"],
                r["sp_perturb"],
                r["extrapolability"],
            ]
        )
    return rows


def _global_rows(premise: pl.DataFrame) -> list[list]:
    """One row per (class, T): the global uncertainties and the Contractivity verdicts."""
    sups = sups_frame(premise).unique(subset=["class", "perturbation"], keep="first", maintain_order=True)
    return [
        [
            r["class"],
            r["perturbation"],
            _num(r["U_base_inf"]),
            _num(r["U_perturb_inf"]),
            _num(r["alpha"]),
            _num(2 * r["alpha"] * r["U_base_inf"]),
            r["contraction"],
            _num(r["alpha_proposition"]),
            r["contraction_proposition"],
        ]
        for r in sups.iter_rows(named=True)
    ]


def markdown(trained: pl.DataFrame, premise: pl.DataFrame, length: int) -> str:
    """The summary's lab section: T's constants, the premise classes, the trained models, and the findings."""
    consts = constants_frame(premise)
    md = [
        (
            "**T's constants**, exact for the T that runs (alpha, C) beside the Proposition's statement (Prop.); "
            "C on rows: the largest TV(T(.|X'), T(.|X0)) between a row and its own support prefix."
        ),
        "",
    ]
    md += _table(
        ["T", "l", "family", "δ", "α", "α (Prop.)", "C", "C (Prop.)", "C on rows"],
        [
            [
                r["perturbation"],
                r["last"],
                r["family"],
                r["delta"],
                _num(r["alpha"]),
                _num(r["alpha_proposition"]),
                _num(r["C"]),
                _num(r["C_proposition"]),
                _num(r["C_rows"]),
            ]
            for r in consts.iter_rows(named=True)
        ],
    )
    md += [
        "",
        (
            "**Model classes that meet the premise** (pairs agree on the support; docs/theory.md, 'The theory lab'): "
            "U_base(δ) and U_perturb(δ), exact sups over every prefix within δ of the support, the prefix that attains "
            "them, and each theorem's verdict from them. 'On the lab's rows' is a descriptive sample, U_base / "
            "U_perturb at the rows of each family at exactly δ, not U. Extrapolability: whether U_perturb(δ) = 0, "
            "beside its premise SP_perturb; 'self-pairs only': no two distinct members agree on the support once "
            "perturbed."
        ),
        "",
    ]
    md += _table(
        [
            "class",
            "T",
            "δ",
            "U_base(δ)",
            "U_perturb(δ)",
            "attained at",
            "on the lab's rows",
            "2C",
            "robustness",
            "robustness (Prop.'s C)",
            "SP_perturb",
            "extrapolability",
        ],
        _premise_rows(premise),
    )
    md += [
        "",
        (
            "**Global uncertainties and Contractivity** (U^∞ = U(L): no prefix lies farther than L from the "
            "support; Assumption UI holds for both classes)."
        ),
        "",
    ]
    md += _table(
        [
            "class",
            "T",
            "U_base^∞",
            "U_perturb^∞",
            "α",
            "2α U_base^∞",
            "contraction",
            "α (Prop.)",
            "contraction (Prop.'s α)",
        ],
        _global_rows(premise),
    )
    md += [
        "",
        (
            "**Trained models, descriptive**: max / mean pairwise TV over the group on each delta set (not U: the "
            "models disagree on the support), its growth from delta 0, the max from half the draws (Monte Carlo "
            "check), and the TV to the true law. Ĉ: the largest share, over the set's rows, of T's draws in which a "
            "row's perturbed words differ from its support prefix's (the two share T's keys); a pair's TV on a row "
            "exceeds its TV on the support prefix by at most twice that share (asserted)."
        ),
        "",
    ]
    md += _table(
        [
            "family",
            "T",
            "δ",
            "prefixes",
            "draws",
            "U_max",
            "U_mean",
            "growth",
            "U_max (half draws)",
            "support disagreement",
            "Ĉ",
            "TV truth ± 2SE",
        ],
        [
            [
                r["family"],
                r["perturbation"],
                r["delta"],
                r["n_prefixes"],
                r["draws"],
                _num(r["U_max"]),
                _num(r["U_mean"]),
                _num(r["U_growth"]),
                _num(r["U_max_half_draws"]),
                _num(r["support_disagreement"]),
                _num(r["C_draws"]),
                _num(r["tv_truth_mean"]) + ("" if r["tv_truth_2se"] is None else f" ± {r['tv_truth_2se']:.3f}"),
            ]
            for r in trained.iter_rows(named=True)
        ],
    )
    return "\n".join([*md, "", *findings(trained, premise, length)]) + "\n"
