"""The summary's "Where the theory predicts a gain": per builtin eval set, what the theory predicts, what was measured,
and whether they agree, in that order.

The prediction is computed, not written: from where the eval set's prefixes lie against the training support
(`evaluate.extrapolation.support_shares`: off it, and off it only through its words, which a class-mate maps back).
The measurement is the exact TV's paired contrasts of insertion's arms (report.contrasts); each row gets a verdict:
agrees, disagrees, or not detected with the size the test could have seen. Why reachable prefixes predict a gain
and `ood` none, and why the prediction is a sign, not a size: docs/method.md §4, "Where an eval set lies against
the training support"; docs/default-study.md, "Where the theory predicts a gain".
"""

from __future__ import annotations

import polars as pl

from workflow_lib.report.findings import _size
from workflow_lib.report.statistics import fragile

GAIN, NO_GAIN, IN_SUPPORT = "gain", "no gain", "in support"
PREDICTED = {GAIN: "a gain", NO_GAIN: "no gain", IN_SUPPORT: "no gain (in support)"}


def _share(frame: pl.DataFrame, eval_set: str, column: str) -> float | None:
    values = frame.filter(pl.col("eval_set") == eval_set)[column].drop_nulls() if column in frame.columns else None
    return float(values[0]) if values is not None and values.len() else None


def prediction(off: float, reachable: float) -> str:
    """GAIN where most off-support prefixes are reachable by a class-mate, NO_GAIN where none or few are."""
    if off == 0:
        return IN_SUPPORT
    return GAIN if reachable / off >= 0.5 else NO_GAIN


def predicted_sentence(eval_set: str, off: float, reachable: float, reach_by_source: dict[str, float]) -> str:
    kind = prediction(off, reachable)
    head = f"**{eval_set}**: {off:.0%} of its evaluated prefixes are off the training support"
    if kind == IN_SUPPORT:
        return head + ": nothing to extrapolate, so the theory predicts no gain, only the cost of noise."
    share = reachable / off
    sources = "; ".join(f"{s} {v:.2f}" for s, v in sorted(reach_by_source.items()))
    reach_note = (
        f" A held-out subject's synonym draws are class-mates seen as subjects with probability {sources}."
        if sources
        else ""
    )
    if kind == GAIN:
        return (
            head + f", {share:.0%} of them only through their words (a familiar word in a role only its class-mates "
            "fill in training). Predicted: a gain. Replacing the word by a class-mate maps each into the support, so "
            "under class replacement Assumption SP_perturb holds there and Extrapolability gives U_perturb = 0 against "
            "U_base > 0 (docs/theory.md); insertion keeps the word and adds a synonym, so only its draws that bring a "
            "class-mate into play move the law toward the truth: a gain in sign, small at a low dose." + reach_note
        )
    return (
        head + f", {1 - share:.0%} of them through their class sequence (a held-out class combination), which no "
        "synonym edit changes. Predicted: no gain. U_perturb = U_base (the lab's class off-support on composition rows); "
        "perturbation can only add the cost of noise."
    )


def _arm(row: dict, seeds: bool) -> str:
    """'mle TrainPerturb (train oracle)': the arm's whole label, synonyms included (the findings' shorter label drops
    them, and here they are the point), and its seed where the rows come from several."""
    seed = f" seed {row['seed']}" if seeds and row.get("seed") is not None else ""
    return f"{row['objective']} {row['a']}{seed}"


def _measured(row: dict) -> str:
    """'+0.005 [+0.004, +0.007], p_holm 0.005' (fragile when near the 0.05 line)."""
    interval = f" [{row['low']:+.3f}, {row['high']:+.3f}]" if row["low"] is not None else ""
    near = ", near the 0.05 line: fragile" if fragile(row["p_holm"]) else ""
    return f"{row['difference']:+.3f}{interval}, p_holm {row['p_holm']:.3f}{near}"


def _verdict(row: dict, kind: str) -> str:
    """'agrees', 'disagrees' or 'not detected' for one tested TV row (lower TV favours perturbation)."""
    helped = row["significant"] and row["favours"] == "perturbation"
    hurt = row["significant"] and row["favours"] == "no perturbation"
    if kind == GAIN:
        return "agrees" if helped else "disagrees" if hurt else "not detected"
    return "disagrees" if helped else "agrees"


def _tested(rows: pl.DataFrame, kind: str) -> list[tuple[str, dict]]:
    return [(_verdict(r, kind), r) for r in rows.filter(pl.col("p_holm").is_not_null()).to_dicts()]


def measured_sentence(rows: pl.DataFrame, kind: str) -> str:
    """The count of each verdict over the TV rows of one eval set (each row is in `theory_table`)."""
    verdicts = _tested(rows, kind)
    if not verdicts:
        return "Measured: no TV contrast was testable here, so the prediction is not tested (not testable)."
    counts = {v: sum(1 for w, _ in verdicts if w == v) for v in ("agrees", "disagrees", "not detected")}
    missed = [r["detectable"] for v, r in verdicts if v == "not detected" and r.get("detectable") is not None]
    could = f" (the tests could have seen {_size(min(missed))} to {_size(max(missed))} at 80% power)" if missed else ""
    untested = rows.height - len(verdicts)
    apart = f"; {untested} not testable" if untested else ""
    return (
        "Measured (the exact TV to the true law, arm against none, paired over references, Holm within its table; "
        f"each row in the table below): the theory's prediction agrees with {counts['agrees']} of {len(verdicts)} "
        f"tested rows, disagrees with {counts['disagrees']}, and the gain was not detected in "
        f"{counts['not detected']}{could}{apart}."
    )


def _tv_rows(contrasts: pl.DataFrame) -> pl.DataFrame:
    return contrasts.filter(
        (pl.col("metric") == "tv")
        & pl.col("family").is_in(["perturbation", "ablation"])
        & ~pl.col("a").str.contains(": ")  # insertion's arms; other strategies are labelled "<strategy>: <arm>"
    )


def _predictions(frame: pl.DataFrame) -> dict[str, tuple[float, float]]:
    """Each builtin eval set with recorded support shares: (off the support, reachable by a class-mate)."""
    if "off_support_share" not in frame.columns:
        return {}
    sets = sorted(set(frame.filter(pl.col("off_support_share").is_not_null())["eval_set"].to_list()))
    shares = {e: (_share(frame, e, "off_support_share"), _share(frame, e, "reachable_share")) for e in sets}
    return {e: (off, reach) for e, (off, reach) in shares.items() if off is not None and reach is not None}


def theory_table(frame: pl.DataFrame, contrasts: pl.DataFrame | None) -> str:
    """Markdown: every tested TV row of insertion's arms, per eval set, with the prediction and its verdict."""
    if contrasts is None or not contrasts.height:
        return ""
    from workflow_lib.report.escape import markdown as cell

    tv = _tv_rows(contrasts)
    lines = []
    for eval_set, (off, reachable) in _predictions(frame).items():
        kind = prediction(off, reachable)
        verdicts = _tested(tv.filter(pl.col("eval_set") == eval_set), kind)
        seeds = len({r.get("seed") for _, r in verdicts} - {None}) > 1
        for verdict, r in verdicts:
            said = PREDICTED[kind]
            lines.append(f"| {cell(eval_set)} | {said} | {cell(_arm(r, seeds))} | {cell(_measured(r))} | {verdict} |")
    if not lines:
        return ""
    head = "| eval set | predicted | arm (objective, condition) | TV difference [95%], p_holm | verdict |"
    return "\n".join([head, "|---|---|---|---|---|", *lines]) + "\n"


def theory_findings(frame: pl.DataFrame, contrasts: pl.DataFrame | None) -> list[str]:
    """Per builtin eval set whose extrapolation recorded its support shares: prediction, then the verdicts' counts
    (each row in `theory_table`)."""
    if "off_support_share" not in frame.columns or contrasts is None or not contrasts.height:
        return []
    lines = []
    tv = _tv_rows(contrasts)
    reach_by_source = {}
    if "synonym_reach" in frame.columns:
        for source, value in (
            frame.filter(pl.col("synonym_reach").is_not_null())
            .group_by("test_synonyms")
            .agg(pl.col("synonym_reach").first())
            .iter_rows()
        ):
            reach_by_source[source] = value
    for eval_set, (off, reachable) in _predictions(frame).items():
        rows = tv.filter(pl.col("eval_set") == eval_set)
        kind = prediction(off, reachable)
        lines.append(
            predicted_sentence(eval_set, off, reachable, reach_by_source) + " " + measured_sentence(rows, kind)
        )
    return lines
