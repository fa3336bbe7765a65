"""The summary's "Paired comparisons" section: the study-wide sentences, what the marks mean, and one Markdown table
per (family, metric) of `contrasts.csv` (report.contrasts computes them; this module only writes them)."""

from __future__ import annotations

from collections import Counter
from typing import cast

import polars as pl

from workflow_lib.comparisons import NULL, RESAMPLES_PER_COMPARISON
from workflow_lib.metric_registry import PAIRED as METRICS
from workflow_lib.report.conditions import ABLATION, shown_objective
from workflow_lib.report.contrasts import (
    CHECKPOINT,
    FAMILIES,
    JOINT,
    PAIRED_T,
    PERMUTATION,
    RESAMPLES,
    SEEDS,
)
from workflow_lib.report.statistics import (
    ALPHA,
    FRAGILE,
    MIN_RUNS,
    MIN_SEEDS,
    STOP_AFTER,
    fragile,
)


def _number(x: float | None) -> str:
    return "" if x is None else f"{x:+.3f}"


def _p(p: float | None, why: str | None = None) -> str:
    if p is None:
        return f"not testable ({why or 'no p'})"
    return "<0.001" if p < 0.001 else f"{p:.3f}"


def untested_reasons(rows: pl.DataFrame) -> str:
    """Why the rows with no Holm p were not tested: '2 runs', or '2 runs: 3; no spread: 1' when the reasons differ.
    A row written before the reason was recorded says 'no p'."""
    untested = rows.filter(pl.col("p_holm").is_null())
    reasons = untested["not_testable"].to_list() if "not_testable" in untested.columns else [None] * untested.height
    counts = Counter(reason or "no p" for reason in reasons)
    if len(counts) == 1:
        return next(iter(counts))
    return "; ".join(f"{reason}: {k}" for reason, k in sorted(counts.items()))


def study_sentences(frame: pl.DataFrame, metric: str = "mauve") -> list[str]:
    """'N of M ... contrasts (MAUVE) favour ...; K of them are significant after Holm correction', per family
    and per ablation arm and objective, and how many of the M were not tested and why (fewer than 3 runs, no
    spread, too few prompts), which are neither significant nor evidence of no difference. A difference that shows as
    0.000 at the tables' three decimals has no direction and favours neither side. Where some contrasts were tested
    across training seeds, those are counted (the training method), else each seed's checkpoints."""
    sub = frame.filter(pl.col("metric") == metric)
    if "unit" in sub.columns:
        unit = pl.col("unit").fill_null(CHECKPOINT)
        sub = sub.filter(unit == (SEEDS if sub.filter(unit == SEEDS).height else CHECKPOINT))
    groups = [("perturbation", "perturbation", "perturbation", sub.filter(pl.col("family") == "perturbation"))]
    ablation = sub.filter(pl.col("family") == "ablation")
    # Insertion's arms are labelled by the arm alone, every other strategy's "<strategy>: <arm>" (comparisons.pairs).
    others = sorted({a.split(": ")[0] for a in ablation["a"].to_list() if ": " in a})
    for prefix in ["", *(f"{s}: " for s in others)]:
        for arm in ABLATION[1:]:
            name = f"{prefix.replace(': ', ' ')}{arm}-vs-NoPerturb"
            rows = ablation.filter(pl.col("a").str.starts_with(prefix + arm))
            groups.append((name, "perturbation", "perturbation", rows))
    objective = sub.filter(pl.col("family") == "objective")
    for name in sorted(set(objective["objective"].to_list())):
        groups.append((f"{name}-vs-MLE", name, name, objective.filter(pl.col("objective") == name)))
    lines = []
    for what, side, favoured, part in groups:
        if part.height:
            shown = pl.col("difference").round(3) != 0
            favour = part.filter((pl.col("favours") == side) & shown)
            zero = part.filter(~shown).height
            untested = part.filter(pl.col("p_holm").is_null()).height
            lines.append(
                f"{favour.height} of {part.height} {what} contrasts ({METRICS[metric]}) favour {favoured}; "
                f"{favour['significant'].sum()} of them are significant after Holm correction"
                + (f"; {zero} show a difference of 0.000 (no direction)" if zero else "")
                + (f"; not testable: {untested} of the {part.height} ({untested_reasons(part)})." if untested else ".")
            )
    return lines


def _swaps_heading(part: pl.DataFrame) -> str:
    """', B = 3200' (the table's random swaps), ', all 1024 swaps' when every row enumerated its 2^n, or ''."""
    drawn = part.filter(pl.col("resamples").is_not_null())
    if not drawn.height:
        return ""
    if all(b == 2**n for b, n in drawn.select("resamples", "n").rows()):
        counts = sorted(set(drawn["resamples"].to_list()))
        return f", all {'/'.join(map(str, counts))} swaps (exact)"
    return f", B = {cast(int, drawn['resamples'].max())}"


def paired_section(frame: pl.DataFrame) -> str:
    """Markdown: the study-wide sentences, what the marks mean, then one table per (family, metric)."""
    if frame.height == 0:
        return "This study has no pair of conditions that a table compares.\n"
    lines = [f"- {s}" for s in study_sentences(frame)]
    lines += [
        "",
        (
            f"✱ marks a contrast whose Holm-corrected p (over its family and metric's table) is below {ALPHA:g}. "
            "Difference = A − B with its 95% interval, which is per row and not corrected for the table's other "
            f"rows (the mark is). MAUVE: {JOINT} (the human text and both arms' samples clustered together, once per "
            "clustering seed, and both MAUVEs computed from that quantisation; a swap exchanges the arms' continuations "
            "of a (prompt, run), which share prompt and seed), percentile bootstrap interval over prompts, descriptive "
            f"only; without those results, {PAIRED_T} (t interval). ROUGE "
            f"and perplexity: {PERMUTATION} (docs/method.md §4): with no difference, a prompt's two values are "
            "exchangeable, so swapping them at random (for ROUGE, flipping the sign of the prompt's difference; for "
            "perplexity, swapping its NLL and tokens) draws from the exact null distribution; p = (1 + swaps as "
            "extreme as the data)/(B + 1), or the share of all 2^n swaps when 2^n ≤ B, and a row stops once "
            f"{STOP_AFTER} swaps reach its statistic (p = {STOP_AFTER}/swaps drawn; Besag and Clifford 1991). "
            "Each is exact at any number of prompts under the null that a prompt's two values are exchangeable. "
            f"B per table in its heading: at least {RESAMPLES}, and {RESAMPLES_PER_COMPARISON} per comparison, so "
            "that a Monte Carlo row's smallest p, 1/(B + 1), survives Holm's correction. Their interval is the t "
            'interval over prompts (perplexity: of its linearisation). "not testable (why)" is a contrast that '
            f"could not be marked, never a finding of no difference: fewer than {MIN_RUNS} runs, every run moved by "
            f"the same amount (no spread to test), too few prompts for any swap to reach p < {ALPHA:g}, or too few "
            "for any row of its table to reach Holm's first step (all 2^n swaps give no p below 2/2^n); it takes "
            "no part in Holm's correction. MAUVE is compared only where both "
            "sides had enough texts per run to resolve it. Higher is better except for perplexity and the TV to the "
            "true law (builtin eval sets: each reference's mean TV over its prefixes, paired over references). "
            "Where both arms were trained from several seeds, a table of its own tests the training method across "
            f"them (the mean over seeds of each seed's difference, its t interval with seeds − 1 degrees of freedom, "
            f"the between-seed sd; fewer than {MIN_SEEDS} seeds: not testable); the per-checkpoint tables speak of "
            "those checkpoints only. *detectable*: the smallest true difference the row's test finds with 80% power "
            "at Holm's first step (0.05/m), from its interval, with that figure's 95% interval where its test has "
            "degrees of freedom (the standard error it rests on is an estimate: at 3 seeds, 0.52 to 6.3 times it). "
            "*fragile*: a Holm p in "
            f"[{FRAGILE[0]:g}, {FRAGILE[1]:g}), near the 0.05 line, which a rerun on another machine can move across it."
        ),
        "",
    ]
    shown = shown_objective(frame)

    def varies(column):  # a column worth showing: more than one value (perplexity rows have no decoder)
        return len({v for v in shown[column].to_list() if v not in (None, "")}) > 1

    columns = [
        "model",
        *(["dataset"] if varies("dataset") else []),
        "objective",
        "eval_set",
        *[k for k in ("decoder", "seed") if varies(k)],
    ]
    titles = {
        "perturbation": "With vs without perturbation",
        "ablation": "Ablation arms vs NoPerturb",
        "objective": "Each objective vs MLE",
        NULL: "A/A null: one method's later seeds vs its earlier seeds",
    }
    unit = pl.col("unit").fill_null(CHECKPOINT) if "unit" in shown.columns else pl.lit(CHECKPOINT)
    for family in FAMILIES:
        for metric, label in METRICS.items():
            for kind in (SEEDS, CHECKPOINT):
                part = shown.filter((pl.col("family") == family) & (pl.col("metric") == metric) & (unit == kind))
                if part.height:
                    lines += _table(part, f"{titles[family]}: {label}", columns, kind)
    return "\n".join(lines)


def _table(part: pl.DataFrame, title: str, columns: list[str], unit: str) -> list[str]:
    """One Holm table: its rows, each with its interval, Holm p, mark and what it could have seen (80% power)."""
    how = part["method"][0] + _swaps_heading(part)
    seeds = unit == SEEDS
    what = "across training seeds: the training method" if seeds else "each pair of checkpoints"
    extra = " sd between seeds |" if seeds else ""
    columns = [c for c in columns if not (seeds and c == "seed")]
    lines = [
        f"### {title}, {what} ({how})",
        "",
        "| " + " | ".join(columns) + " | A vs B | difference [95% interval] |" + extra + " p (Holm) | | detectable |",
        "|" + "---|" * (len(columns) + 5 + seeds),
    ]
    for r in part.to_dicts():
        interval = f" [{_number(r['low'])}, {_number(r['high'])}]" if r["low"] is not None else ""
        if seeds:
            interval += f" (t, df {r['n'] - 1})" if r["low"] is not None else ""
        identity = [str(r[c]) if r[c] not in (None, "") else "—" for c in columns]
        spread = f" {r['spread']:.3f} |" if seeds and r.get("spread") is not None else (" |" if seeds else "")
        seen = r.get("detectable")
        seen_text = "" if seen is None else f"{seen:.3f}"
        if seen is not None and r.get("detectable_high") is not None:
            seen_text += f" [{r['detectable_low']:.3f}, {r['detectable_high']:.3f}]"
        lines.append(
            "| " + " | ".join(identity) + f" | {r['a']} vs {r['b']} | {_number(r['difference'])}{interval} |{spread} "
            f"{_p(r['p_holm'], r.get('not_testable'))}{' (fragile)' if fragile(r['p_holm']) else ''} | "
            f"{'✱' if r['significant'] else ''} | {seen_text} |"
        )
    return [*lines, ""]
