"""Each theorem's verdict for the premise classes, from their exact U(delta) (lab.premise), in one table.

The verdicts read the sups over every prefix within delta (`premise.class_sups`), never the lab's rows: U is a sup,
and a sample of prefixes can only bound it from below. The rows stay in the table as a descriptive sample
(`U_base_rows`, `U_perturb_rows`: the largest members' TV on the rows at exactly delta), checked to lie below the
sups. Every check compares a value with a bound through `verdict`, whether the bound is the theorem's (exact alpha
and C of the T that runs) or the Proposition's as stated; the latter can fail, and does for l < L.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from workflow_lib.data.builtin_corpus import BuiltinGrammar
from workflow_lib.lab import perturbation, prefix_sets, premise

TOLERANCE = 1e-12
NOT_PROPOSITION = "not applicable (not the Proposition's T)"


def verdict(value: float, bound: float, cap: float) -> str:
    """How an exact value stands against a theorem's bound: 'violated' when it exceeds the bound; else 'vacuous'
    when the bound is at least `cap`, the largest TV the class can show anywhere (the bound says nothing); else
    'holds'."""
    if value > bound + TOLERANCE:
        return "violated"
    return "vacuous" if bound + TOLERANCE >= cap else "holds"


def not_applicable(u_perturb: float) -> str:
    """Extrapolability where its premise SP_perturb fails: the theorem says nothing, so U_perturb > 0 there is no
    violation and U_perturb = 0 no confirmation; the cell says which was measured."""
    return f"not applicable (SP_perturb fails; U_perturb {'> 0' if u_perturb > TOLERANCE else '= 0'})"


def sp_perturb_holds(q0: str, beta: float, last: int, length: int, delta: int) -> bool:
    """Assumption SP_perturb (paper lines 477-480) for every X' within delta: T(.|X') = T(.|X0) for some support X0.

    At delta 0 every X' is a support prefix. Beyond, X'_delta of `premise.worst_prefixes` (an unseen noun at
    position 0) breaks it unless T forgets every word: uniform replacement at beta < 1 keeps each word with
    probability 1 - beta, so T(.|X') determines X', which is off the support; at beta 1 with l < L it keeps the words
    before the window, and no support prefix holds an unseen word; class replacement keeps classes, and no support
    class sequence starts with a noun. Uniform replacement of all L words at beta 1 has one law for every X."""
    return delta == 0 or (q0 == "uniform" and beta >= 1 and last >= length)


def lab_runs(specs: dict[str, dict], length: int) -> dict[str, dict]:
    """The T's the premise classes are run under: the configured ones, and each uniform one also at l = L (the
    Proposition's setting) and at l = L with beta = 1 - 1/(4 L), where the Proposition's alpha is 1/4 and the
    Contractivity bound has something to say."""
    runs = dict(specs)
    for name, spec in specs.items():
        if spec["q0"] == "uniform" and spec["last"] < length:
            runs[f"{name}, l = L"] = {**spec, "last": length}
        if spec["q0"] == "uniform":
            beta = 1 - 1 / (4 * length)
            runs[f"{name}, l = L, beta = {beta:.4g}"] = {**spec, "last": length, "beta": beta}
    return runs


def premise_table(
    grammar: BuiltinGrammar,
    lex: prefix_sets.Lexicon,
    frame: pl.DataFrame,
    specs: dict[str, dict],
    length: int,
    seed: int,
    draws: int,
) -> pl.DataFrame:
    """One row per (class, T, family, delta): U_base(delta) and U_perturb(delta) as sups over every prefix within
    delta, with the prefix that attains them; the same on the lab's rows of that family (a sample); T's exact
    constants and the Proposition's; and each theorem's verdict. The sups and verdicts do not depend on the family.

    `frame`: the prefix table (row, family, delta, base, ids, truth) in row order. `specs`: T name -> {q0, beta,
    last}, extended by `lab_runs`. `draws`: keyed draws of T per row for `premise.check_shares_against_draws`."""
    ids = np.stack(frame["ids"].to_list()).astype(np.int64)
    families, deltas = frame["family"].to_numpy(), frame["delta"].to_numpy()
    bases = ids[_base_rows(frame)]
    support = np.flatnonzero(deltas == 0)
    spread = premise.max_pairwise_tv(premise.member_laws(np.array(frame["truth"].to_list())[support]))
    keys = perturbation.keys_for(seed, frame["base"].to_numpy())
    delta_values = sorted({int(d) for d in deltas})
    sup_deltas = [*delta_values, length]  # d(X', X) <= L always, so U(L) = U^inf (Proposition 1 (iv))
    records = []
    for name, spec in lab_runs(specs, length).items():
        q0, beta, last = spec["q0"], float(spec["beta"]), int(spec["last"])
        c_rows, _ = perturbation.row_tv_to_base(lex, ids, bases, q0, beta, last)
        alpha = perturbation.exact_constants(q0, beta, last, length, 0)[0]
        alpha_prop = perturbation.proposition_constants(beta, last, 0)[0] if q0 == "uniform" else None
        for cls in premise.CLASSES:
            sups = premise.class_sups(grammar, lex, cls, q0, beta, last, ids[support[0]], sup_deltas)
            u_base, u_perturb = spread * sups["U_base"], spread * sups["U_perturb"]
            rows_base = spread * premise.outside_a(grammar, lex, cls, ids)
            rows_share = np.zeros(len(ids))
            if sups["admissible"]:
                rows_share = premise.leave_share(grammar, lex, cls, ids, q0, beta, last)
                premise.check_shares_against_draws(grammar, lex, cls, ids, rows_share, q0, beta, last, keys, draws)
            glob = {
                "U_base_inf": u_base[-1],
                "U_perturb_inf": u_perturb[-1],
                "contraction": verdict(u_perturb[-1], 2 * alpha * u_base[-1], spread),
                "contraction_proposition": NOT_PROPOSITION
                if alpha_prop is None
                else verdict(u_perturb[-1], 2 * alpha_prop * u_base[-1], spread),
            }
            for at, delta in enumerate(delta_values):
                c = perturbation.exact_constants(q0, beta, last, length, delta)[1]
                c_prop = perturbation.proposition_constants(beta, last, delta)[1] if q0 == "uniform" else None
                sp = sp_perturb_holds(q0, beta, last, length, delta)
                at_delta = {
                    "class": cls,
                    "perturbation": name,
                    "q0": q0,
                    "beta": beta,
                    "last": last,
                    "delta": delta,
                    "member_tv": spread,
                    "admissible": sups["admissible"],
                    "U_base": u_base[at],
                    "U_perturb": u_perturb[at],
                    "worst_prefix": premise.describe_worst(delta, last, length),
                    "alpha": alpha,
                    "alpha_proposition": alpha_prop,
                    "C": c,
                    "C_proposition": c_prop,
                    "robustness": verdict(u_perturb[at], 2 * c, spread),
                    "robustness_proposition": NOT_PROPOSITION
                    if c_prop is None
                    else verdict(u_perturb[at], 2 * c_prop, spread),
                    "sp_perturb": "—" if delta == 0 else "holds" if sp else "fails",
                    "extrapolability": "—"
                    if delta == 0
                    else verdict(u_perturb[at], 0.0, np.inf)
                    if sp
                    else not_applicable(u_perturb[at]),
                    **glob,
                }
                for family in sorted(set(families[deltas == delta])):
                    idx = np.flatnonzero((families == family) & (deltas == delta))
                    records.append(
                        {
                            **at_delta,
                            "family": family,
                            "n_prefixes": idx.size,
                            "U_base_rows": float(rows_base[idx].max()),
                            "U_perturb_rows": float(spread * rows_share[idx].max()),
                            "C_rows": float(c_rows[idx].max()),
                        }
                    )
    table = pl.DataFrame(records, orient="row", infer_schema_length=None)
    check_rows_within_sups(table)
    return table


def check_rows_within_sups(table: pl.DataFrame) -> None:
    """The rows at delta are prefixes within delta, so their values cannot exceed the sups: a row above its sup
    means a sup was computed over too few prefixes, which is a bug and stops the job."""
    over = table.filter(
        (pl.col("U_base_rows") > pl.col("U_base") + TOLERANCE)
        | (pl.col("U_perturb_rows") > pl.col("U_perturb") + TOLERANCE)
    )
    if over.height:
        r = over.row(0, named=True)
        raise ValueError(
            f"premise class {r['class']}, T = {r['perturbation']}, {r['family']} rows at delta "
            f"{r['delta']}: U on the rows ({r['U_base_rows']:.6f}, {r['U_perturb_rows']:.6f}) exceeds "
            f"the sup over every prefix ({r['U_base']:.6f}, {r['U_perturb']:.6f})"
        )


def _base_rows(frame: pl.DataFrame) -> np.ndarray:
    """Per row, the row of its support prefix (same family and base, delta 0)."""
    support = frame.filter(pl.col("delta") == 0).select("family", "base", pl.col("row").alias("base_row"))
    return frame.join(support, on=["family", "base"], how="left", maintain_order="left")["base_row"].to_numpy()
