"""The theory lab's markdown: its cells, rows and tables, and the summary's lab section as four captioned tables
then the findings."""

from __future__ import annotations

import polars as pl

from workflow_lib.lab import findings as lab_findings
from workflow_lib.lab import tables as lab_tables


def test_cells_rows_and_tables_render_as_markdown():
    assert (
        lab_tables._num(0.12345) == "0.123" and lab_tables._num(0.12345, 1) == "0.1" and lab_tables._num(2) == "2.000"
    )
    assert lab_tables._num(None) == "—" and lab_tables._num(float("nan")) == "—"
    assert lab_tables._row(["a", 1, None]) == "| a | 1 | None |"
    assert lab_tables._table(["x", "y"], [[1, 2], [3, 4]]) == ["| x | y |", "|---|---|", "| 1 | 2 |", "| 3 | 4 |"]


def test_the_markdown_tables_rows_hold_the_sups_the_bounds_and_the_rows_sample(premise):
    rows = lab_tables._premise_rows(premise)
    assert len(rows) == 2 * 7 * 3  # classes x T's x delta >= 1
    unseen = next(r for r in rows if r[:3] == ["unseen", "u", 1])
    member_tv = premise["member_tv"][0]
    assert unseen[3:8] == [
        f"{member_tv:.3f}",
        f"{member_tv * 0.1:.3f}",
        "an unseen word at position 0, inside T's window",
        lab_tables._rows_sample(premise, "unseen", "u", 1),
        f"{2 * 0.1:.3f}",  # 2 C, C = 1 - beta
    ]
    assert unseen[6].startswith("composition ") and "; synonym " in unseen[6]
    assert unseen[8:] == ["holds", "holds", "fails", "not applicable (SP_perturb fails; U_perturb > 0)"]
    off = next(r for r in rows if r[:3] == ["off-support", "u", 2])
    assert off[4] == "0.000 (self-pairs only)"
    glob = lab_tables._global_rows(premise)
    assert [r[:2] for r in glob] == [
        [c, t] for t in premise["perturbation"].unique(maintain_order=True) for c in ("unseen", "off-support")
    ]
    alpha = 1 - 0.9**16
    assert next(r for r in glob if r[:2] == ["unseen", "u"])[2:] == [
        f"{member_tv:.3f}",
        f"{member_tv * alpha:.3f}",
        f"{alpha:.3f}",
        f"{2 * alpha * member_tv:.3f}",
        "vacuous",
        "1.000",
        "vacuous",
    ]


CAPTIONS = [
    (
        "**T's constants**, exact for the T that runs (alpha, C) beside the Proposition's statement (Prop.); C on rows: "
        "the largest TV(T(.|X'), T(.|X0)) between a row and its own support prefix."
    ),
    (
        "**Model classes that meet the premise** (pairs agree on the support; docs/theory.md, 'The theory lab'): "
        "U_base(δ) and U_perturb(δ), exact sups over every prefix within δ of the support, the prefix that attains them, "
        "and each theorem's verdict from them. 'On the lab's rows' is a descriptive sample, U_base / U_perturb at the rows "
        "of each family at exactly δ, not U. Extrapolability: whether U_perturb(δ) = 0, beside its premise SP_perturb; "
        "'self-pairs only': no two distinct members agree on the support once perturbed."
    ),
    (
        "**Global uncertainties and Contractivity** (U^∞ = U(L): no prefix lies farther than L from the support; "
        "Assumption UI holds for both classes)."
    ),
    (
        "**Trained models, descriptive**: max / mean pairwise TV over the group on each delta set (not U: the models "
        "disagree on the support), its growth from delta 0, the max from half the draws (Monte Carlo check), and the TV "
        "to the true law. Ĉ: the largest share, over the set's rows, of T's draws in which a row's perturbed words differ "
        "from its support prefix's (the two share T's keys); a pair's TV on a row exceeds its TV on the support prefix "
        "by at most twice that share (asserted)."
    ),
]


HEADS = [
    ["T", "l", "family", "δ", "α", "α (Prop.)", "C", "C (Prop.)", "C on rows"],
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
]


def _cells(line: str) -> list[str]:
    assert line.startswith("| ") and line.endswith(" |")
    return line[2:-2].split(" | ")


def test_the_summarys_lab_section_is_four_captioned_tables_then_the_findings(premise):
    """What a reader of the summary sees, block by block: each caption and header as written, and every cell the
    value its frame holds (three decimals, a dash for a missing value): no cell may lose its number."""
    trained = pl.DataFrame(
        {
            "family": ["synonym", "synonym"],
            "perturbation": ["u", "u"],
            "delta": [0, 2],
            "n_prefixes": [6, 5],
            "n_models": [3, 3],
            "draws": [8, 8],
            "U_max": [0.1234, 0.5],
            "U_mean": [0.05, 0.25],
            "U_growth": [0.0, 0.3766],
            "U_max_half_draws": [None, 0.55],
            "support_disagreement": [0.1234, 0.1234],
            "C_draws": [0.0, 0.375],
            "tv_truth_mean": [0.2, 0.3],
            "tv_truth_2se": [None, 0.0125],
        }
    )
    blocks = lab_tables.markdown(trained, premise, 16).split("\n\n")
    assert blocks[-1].endswith("\n") and blocks[-1] == "\n".join(lab_findings.findings(trained, premise, 16)) + "\n"
    assert blocks[:-1:2] == CAPTIONS
    tables = [block.split("\n") for block in blocks[1:-1:2]]
    for table, head in zip(tables, HEADS, strict=True):
        assert _cells(table[0]) == head and table[1] == "|" + "---|" * len(head)

    def num(value):
        return "—" if value is None else f"{value:.3f}"

    consts = premise.filter(pl.col("class") == premise["class"][0])
    assert [_cells(line) for line in tables[0][2:]] == [
        [r["perturbation"], str(r["last"]), r["family"], str(r["delta"])]
        + [num(r[k]) for k in ("alpha", "alpha_proposition", "C", "C_proposition", "C_rows")]
        for r in consts.iter_rows(named=True)
    ]
    assert any("—" in line for line in tables[0][2:])  # class replacement has no Proposition values
    assert [_cells(line) for line in tables[1][2:]] == [[str(c) for c in r] for r in lab_tables._premise_rows(premise)]
    assert [_cells(line) for line in tables[2][2:]] == [[str(c) for c in r] for r in lab_tables._global_rows(premise)]
    assert [_cells(line) for line in tables[3][2:]] == [
        ["synonym", "u", "0", "6", "8", "0.123", "0.050", "0.000", "—", "0.123", "0.000", "0.200"],
        ["synonym", "u", "2", "5", "8", "0.500", "0.250", "0.377", "0.550", "0.123", "0.375", "0.300 ± 0.013"],
    ]
