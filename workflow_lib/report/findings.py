"""The summary's opening section, "What this study found": plain sentences generated from the numbers.

Three parts:
- for each eval set and metric, whether perturbation helped, hurt or made no detectable difference (the paired
  contrasts after Holm's correction), and the same for each objective against MLE; a contrast with no p (fewer
  than 3 runs, no spread) is "not testable", never counted as no difference, and MAUVE with too few texts per run
  to resolve (report.resolution) is said to be so instead of compared;
- the study's size and what limits it: sampling runs, prompts, training steps, whether the validation loss was
  still falling at the last evaluation, MAUVE's clustering share, and which MAUVE cells had too few texts;
- where the builtin corpus gives the true law, whether MAUVE and the exact TV agree on the conditions' order
  (Spearman's rank correlation, and the condition MAUVE likes best with its TV rank).
Nothing here is written by hand: a sentence whose numbers are missing is left out.
"""

from __future__ import annotations

import polars as pl

from workflow_lib.report.contrasts import METRICS
from workflow_lib.report.resolution import refusal_sentence, refused, resolved

METRIC_ORDER = ("mauve", "rouge1", "perplexity")
TOO_FEW = "too few texts per run to compare"


def _verdicts(part: pl.DataFrame, better: str) -> str:
    """'helped in 2, hurt in 1, no detectable difference in 3 (of 6)' for the rows of one metric. A row with no
    Holm p was not tested: 'not testable in k', never part of 'no detectable difference'."""
    tested = part.filter(pl.col("p_holm").is_not_null())
    untested = part.height - tested.height
    if not tested.height:
        return f"not testable in any of {part.height} (fewer than 3 runs, or no spread)"
    helped = tested.filter(pl.col("significant") & (pl.col("favours") == better)).height
    hurt = tested.filter(pl.col("significant") & (pl.col("favours") != better)).height
    same = tested.height - helped - hurt
    if helped == hurt == 0 and not untested:
        return f"no detectable difference in any of {part.height}"
    return (f"helped in {helped}, hurt in {hurt}, no detectable difference in {same}"
            + (f", not testable in {untested}" if untested else "") + f" (of {part.height})")


def _parts(rows: pl.DataFrame, better: str, refused_mauve: bool, sep: str) -> list[str]:
    """One verdict per metric with rows; MAUVE with no row because its cells had too few texts says so."""
    parts = []
    for m in METRIC_ORDER:
        part = rows.filter(pl.col("metric") == m)
        if part.height:
            parts.append(f"{METRICS[m]}{sep}{_verdicts(part, better)}")
        elif m == "mauve" and refused_mauve:
            parts.append(f"{METRICS[m]}{sep}{TOO_FEW}")
    return parts


def contrast_findings(contrasts: pl.DataFrame | None, frame: pl.DataFrame | None = None) -> list[str]:
    """Per eval set: perturbation vs none, then each objective vs MLE, per metric, after Holm. `frame`: the tidy
    metrics, whose MAUVE cells with too few texts (report.resolution) are named where MAUVE has no contrast."""
    if contrasts is None or contrasts.height == 0:
        return ["No paired comparison was possible in this study, so nothing is said about what helped."]
    too_few = refused(frame) if frame is not None else None
    lines = []
    perturbation = contrasts.filter(pl.col("family") == "perturbation")
    for eval_set in sorted(set(perturbation["eval_set"].to_list())):
        rows = perturbation.filter(pl.col("eval_set") == eval_set)
        flagged = too_few is not None and too_few.filter(pl.col("eval_set") == eval_set).height > 0
        lines.append(f"**{eval_set}**, perturbation against none (per objective and decoder, Holm-corrected): "
                     + "; ".join(_parts(rows, "perturbation", flagged, ": ")) + ".")
    objective = contrasts.filter(pl.col("family") == "objective")
    for name in sorted(set(objective["objective"].to_list())):
        rows = objective.filter(pl.col("objective") == name)
        flagged = too_few is not None and too_few.filter(pl.col("objective") == name).height > 0
        lines.append(f"**{name} against MLE** (every eval set and condition): "
                     + "; ".join(_parts(rows, name, flagged, " ")) + ".")
    return lines


def size_findings(frame: pl.DataFrame, logs: dict[str, pl.DataFrame]) -> list[str]:
    """How big the study is and what limits it."""
    runs, prompts = frame["runs"].drop_nulls(), frame["prompts"].drop_nulls()
    line = (f"Size: {runs.min()}" + (f"-{runs.max()}" if runs.max() != runs.min() else "") + " sampling runs of "
            f"{prompts.min()}" + (f"-{prompts.max()}" if prompts.max() != prompts.min() else "") + " prompts per eval "
            "set.") if runs.len() and prompts.len() else "Size: the metrics record no run or prompt counts."
    lines = [line]
    if logs:
        steps = [int(log["step"].max()) for log in logs.values() if log.height]
        falling = [path for path, log in logs.items()
                   if (v := log["validation_loss"].drop_nulls()).len() >= 2 and v[-1] < v[-2]]
        validated = [path for path, log in logs.items() if log["validation_loss"].drop_nulls().len() >= 2]
        lines.append(f"Training: {min(steps)}" + (f"-{max(steps)}" if max(steps) != min(steps) else "")
                     + f" optimizer steps per model ({len(logs)} models)."
                     + (f" The validation loss was still falling at the last evaluation in {len(falling)} of "
                        f"{len(validated)} models: longer training could change the comparison."
                        if falling else (f" The validation loss had stopped falling in all {len(validated)} models "
                                         "with two or more evaluations." if validated else "")))
    if sentence := refusal_sentence(frame):
        lines.append(sentence)
    share = resolved(frame)["mauve_clustering_share"].drop_nulls()
    if share.len():
        lines.append(f"MAUVE's k-means clustering accounts for a median {share.median():.0%} of a single (run, "
                     "clustering seed) score's variance; the rest is sampling (see the Provenance section).")
    return lines


def mauve_tv_findings(frame: pl.DataFrame) -> list[str]:
    """Where the exact TV is known: does MAUVE order the conditions as the truth does?"""
    from scipy.stats import spearmanr

    lines = []
    truth = frame.filter(pl.col("tv_mean").is_not_null() & pl.col("mauve_mean").is_not_null())
    tv = resolved(truth)  # MAUVE with too few texts is no ranking (report.resolution)
    for eval_set in sorted(set(truth["eval_set"].to_list())):
        rows = tv.filter(pl.col("eval_set") == eval_set)
        if rows.height < 3:
            if refused(truth.filter(pl.col("eval_set") == eval_set)).height:
                lines.append(f"**{eval_set}**: MAUVE is not set against the exact TV to the true law: its runs had too "
                             "few texts to resolve it.")
            continue
        rho = spearmanr(rows["mauve_mean"].to_numpy(), -rows["tv_mean"].to_numpy()).statistic
        best = rows.sort("mauve_mean", descending=True).row(0, named=True)
        rank = rows.sort("tv_mean")["tv_mean"].to_list().index(best["tv_mean"]) + 1
        label = (f"{best['objective']}, training {best['train_strategy']} {best['train_intensity']:g}, sampling "
                 f"{best['test_strategy']} {best['test_intensity']:g}")
        agree = "agree" if rho >= 0.5 else "do not agree"
        lines.append(f"**{eval_set}**: MAUVE and the exact TV to the true law {agree} on the order of the "
                     f"{rows.height} conditions (Spearman ρ = {rho:.2f}, TV's direction flipped so that 1 is full "
                     f"agreement). MAUVE's best ({label}: {best['mauve_mean']:.3f}) ranks {rank} of {rows.height} by TV "
                     f"({best['tv_mean']:.3f})." + (" Do not trust MAUVE alone here." if rho < 0.5 else ""))
    return lines


def findings_section(frame: pl.DataFrame, contrasts: pl.DataFrame | None, logs: dict[str, pl.DataFrame]) -> str:
    """Markdown: the three parts, each a short list."""
    lines = ["Generated from the numbers below (not written by hand).", ""]
    lines += [f"- {s}" for s in contrast_findings(contrasts, frame)]
    lines += [f"- {s}" for s in size_findings(frame, logs)]
    lines += [f"- {s}" for s in mauve_tv_findings(frame)]
    return "\n".join(lines) + "\n"

