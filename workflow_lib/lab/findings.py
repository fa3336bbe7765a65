"""The lab's findings: plain sentences read off its tables, one per T, per premise class and T, and per group of
trained models, and where alpha(T) < 1/2 starts (computed from the lab's settings, not read).

docs/theory.md, "The theory lab", says what each number is and where the paper defines it.
"""

from __future__ import annotations

from typing import cast

import polars as pl

from workflow_lib.lab import perturbation
from workflow_lib.lab.premise_views import constants_frame, sups_frame


def _span(values: pl.Series) -> str:
    low, high = cast(float, values.min()), cast(float, values.max())
    return f"{low:.3f}" if abs(high - low) < 5e-4 else f"{low:.3f} to {high:.3f}"


def _by_delta(labels: list[str], deltas: list[int]) -> str:
    """'holds' when every delta reads the same, else 'holds (delta 1, 2), vacuous (delta 4)'."""
    groups = {label: [d for d, lab in zip(deltas, labels) if lab == label] for label in dict.fromkeys(labels)}
    if len(groups) == 1:
        return labels[0]
    return ", ".join(f"{label} (delta {', '.join(map(str, ds))})" for label, ds in groups.items())


def _extrapolability(verdict: str, sp: str) -> str:
    """Extrapolability's conclusion with its premise: a verdict only where SP_perturb holds (else the cell already
    says 'not applicable')."""
    return f"{verdict}, SP_perturb holds" if sp == "holds" else verdict


def _contraction_findings(premise: pl.DataFrame, length: int) -> str:
    """Where alpha(T) < 1/2 starts, from the code's exact alpha, and the gains the exact sups show where the bound
    is vacuous (it is sufficient for a gain, not necessary)."""
    exact_beta, prop_beta = perturbation.contraction_betas(length)
    gains = [
        f"class `{r['class']}`, T = {r['perturbation']}: U_perturb^inf = {r['U_perturb_inf']:.3f} < U_base^inf = "
        f"{r['U_base_inf']:.3f} at alpha = {r['alpha']:.3f}"
        for r in sups_frame(premise)
        .unique(subset=["class", "perturbation"], keep="first", maintain_order=True)
        .iter_rows(named=True)
        if r["admissible"] and 2 * r["alpha"] >= 1 and r["U_perturb_inf"] < r["U_base_inf"] - 5e-4
    ]
    return (
        f"- The Contractivity bound 2 alpha U_base^inf is below U_base^inf only where alpha(T) < 1/2: with l < L "
        f"never (alpha = 1); with l = L = {length}, uniform replacement has the exact alpha = 1 - beta^L < 1/2 for "
        f"beta > {exact_beta:.4f} (the Proposition's bound (1 - beta) L < 1/2 asks beta > {prop_beta:.4f}). The "
        "bound is sufficient for a gain, not necessary: "
        + ("; ".join(gains) + "." if gains else "no admissible class here gains where the bound is vacuous.")
    )


def findings(trained: pl.DataFrame, premise: pl.DataFrame, length: int) -> list[str]:
    """Plain sentences read off the tables; every number is one the tables hold or one the code computes from
    the lab's settings (the beta where alpha(T) = 1/2)."""
    lines = []
    consts = constants_frame(premise).filter(pl.col("delta") > 0)
    for (name,), part in consts.group_by("perturbation", maintain_order=True):
        r = part.row(0, named=True)
        worst = cast(float, part["C_rows"].max())
        if r["q0"] == "uniform":
            lines.append(
                f"- **T = {name}** (uniform replacement of the last {r['last']} of {length} words, beta = {r['beta']}): "
                f"alpha(T) = {r['alpha']:.3f} and C = {_span(part['C'])} for delta >= 1, exactly; the Proposition states "
                f"alpha <= {r['alpha_proposition']:.3f} and C = {_span(part['C_proposition'])}. On the lab's rows, whose "
                f"changes lie inside the window, TV(T(.|X'), T(.|X0)) is at most {worst:.3f}."
            )
        else:
            kept = (
                "0 exactly where every change keeps its class"
                if r["beta"] >= 1
                else "at most 1 - beta^m (m changes; a bound, not the value) where every change keeps its class"
            )
            lines.append(
                f"- **T = {name}** (class replacement, beta = {r['beta']}): alpha(T) = {r['alpha']:.0f} and "
                f"C = {cast(float, part['C'].max()):.0f} for delta >= 1 (a changed function word or a held-out class "
                f"sequence is never restored); on the rows TV(T(.|X'), T(.|X0)) is {kept}, else 1 (max {worst:.3g})."
            )
    lines.append(_contraction_findings(premise, length))
    sups = sups_frame(premise)
    for (cls, name), part in sups.group_by(["class", "perturbation"], maintain_order=True):
        off = part.filter(pl.col("delta") > 0).sort("delta")
        if not off.height:
            continue
        g, deltas = off.row(0, named=True), off["delta"].to_list()
        rows_top = cast(
            float, premise.filter((pl.col("class") == cls) & (pl.col("perturbation") == name))["U_perturb_rows"].max()
        )
        if g["admissible"]:
            reach = (
                f"U_perturb(delta) = {', '.join(f'{u:.3f}' for u in off['U_perturb'])} at delta = "
                f"{', '.join(map(str, deltas))} (attained by {off['worst_prefix'][-1]}); on the lab's rows "
                f"U_perturb reaches {rows_top:.3f}"
            )
        else:
            reach = (
                "T moves a support prefix off the support with positive probability, so no two distinct members "
                "agree on the support once perturbed: the sup runs over a member paired with itself, and "
                "U_perturb(delta) = 0 at every delta"
            )
        extrapolability = [_extrapolability(v, sp) for v, sp in zip(off["extrapolability"], off["sp_perturb"])]
        lines.append(
            f"- **Premise class `{cls}`, T = {name}**, sups over every prefix within delta: U_base(delta) = "
            f"{_span(off['U_base'])} for delta >= 1; {reach}. Robustness (2C): "
            f"{_by_delta(off['robustness'].to_list(), deltas)}; with the Proposition's C: "
            f"{_by_delta(off['robustness_proposition'].to_list(), deltas)}; Extrapolability (U_perturb = 0): "
            f"{_by_delta(extrapolability, deltas)}; "
            f"Contractivity (Assumption UI holds: every base pair agrees on the support): U_perturb^inf = "
            f"{g['U_perturb_inf']:.3f} against 2 alpha U_base^inf = {2 * g['alpha'] * g['U_base_inf']:.3f}, "
            f"{g['contraction']}; with the Proposition's alpha: {g['contraction_proposition']}."
        )
    for (family, name), part in trained.group_by(["family", "perturbation"], maintain_order=True):
        part = part.sort("delta")
        first, last = part.row(0, named=True), part.row(-1, named=True)
        mc = (
            ""
            if last["U_max_half_draws"] is None
            else f"; from half of the {last['draws']} draws U_max at delta = {last['delta']} would be "
            f"{last['U_max_half_draws']:.3f}"
        )
        lines.append(
            f"- **Trained models, {family} rows, T = {name}**: the {first['n_models']} models disagree by "
            f"{first['U_max']:.3f} (max TV) on the support and by {last['U_max']:.3f} at delta = {last['delta']} "
            f"(growth {last['U_growth']:+.3f}){mc}; TV to the truth {first['tv_truth_mean']:.3f} -> "
            f"{last['tv_truth_mean']:.3f}. They do not agree on the support, so this is not U of any class."
        )
    return lines
