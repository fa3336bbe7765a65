"""The summary's "In detail", generated from the numbers (nothing here is written by hand):
- the verdicts: one table per family and unit, a row per eval set (or objective) and metric, after Holm: helped,
  hurt, no detectable difference (with what it could have seen), not testable (why) counted apart, never as no
  difference; rows of the uncalibrated paired t over runs and refused MAUVE cells named as such;
- the study's size and what limits it (runs, prompts, seeds, training steps, MAUVE's clustering share);
- where the builtin corpus gives the true law, whether MAUVE and the exact TV order the conditions alike
  (statistics.rank_agreement: agree / disagree / cannot tell). docs/output.md, "The report".
"""

from __future__ import annotations

from typing import cast

import polars as pl

from workflow_lib.constants import UNTRAINED
from workflow_lib.metric_registry import BY_NAME, IN_FINDINGS, PAPER_GAINS
from workflow_lib.report.conditions import KEYS
from workflow_lib.report.contrasts import CHECKPOINT, PAIRED_T, SEEDS
from workflow_lib.report.paired_tables import untested_reasons
from workflow_lib.report.resolution import BLIND, MAUVE, STATUS, refusal_sentence, refused, resolved
from workflow_lib.report.seeds import SEED_T
from workflow_lib.report.statistics import fragile, rank_agreement

METRIC_ORDER = IN_FINDINGS  # the findings' metrics, in order (workflow_lib/metric_registry.py)
TOO_FEW = "too few texts per run to compare"
BLIND_CELLS = "not compared (its controls fail: MAUVE cannot see degraded human text here)"


def direction_label(metric: str) -> str:
    """'ROUGE-1 (higher is better)': a metric as the summary first names it."""
    return f"{BY_NAME[metric].label} ({'lower' if BY_NAME[metric].lower_is_better else 'higher'} is better)"


def _label(row: dict, models: bool = False) -> str:
    """What tells one row of a verdict from the others: its model (`models`: the rows come from several), objective
    (or eval set, for an objective against MLE), ablation arm and decoder when it is not the unbiased one."""
    parts = [row["model"]] if models else []
    parts.append(row["eval_set"] if row["family"] == "objective" else row["objective"])
    if row["family"] == "ablation":  # the arm with what else varies ('TestPerturb (sample oracle)'): two arms differ
        parts.append(row["a"])
    if row["family"] == "perturbation" and " (" in row["a"]:  # what else varies: its sampling mode, its synonyms
        parts.append("(" + row["a"].split(" (", 1)[1])
    if row["family"] == "objective":
        parts.append(row["b"].removeprefix("mle, "))
    if row.get("decoder") not in (None, "", "unbiased"):
        parts.append(row["decoder"])
    return " ".join(str(p) for p in parts)


def _effect(row: dict, seeds: bool, models: bool = False) -> str:
    """'mle +0.020 [+0.012, +0.028], p_holm 0.003': a resolved row's effect, interval and Holm p (fragile when near
    the line, statistics.FRAGILE); `seeds`: name the row's training seed (its rows come from several)."""
    interval = f" [{row['low']:+.3f}, {row['high']:+.3f}]" if row["low"] is not None else ""
    near = ", near the 0.05 line: fragile" if fragile(row["p_holm"]) else ""
    seed = f" seed {row['seed']}" if seeds and row.get("seed") is not None else ""
    return f"{_label(row, models)}{seed} {row['difference']:+.3f}{interval}, p_holm {row['p_holm']:.3f}{near}"


def _size(x: float) -> str:
    return f"{x:.3f}" if x >= 0.001 else f"{x:.1e}"


def _against_the_paper(rows: pl.DataFrame, low: float, high: float) -> str:
    """'; the paper's gain (0.03) is below that range': where the paper's effect (metric_registry `paper_gain`) sits
    against what the tests could see, so that a null says whether it could have been the paper's effect."""
    metrics = rows["metric"].unique().to_list() if "metric" in rows.columns else []
    if len(metrics) != 1 or metrics[0] not in PAPER_GAINS:
        return ""
    gain = PAPER_GAINS[metrics[0]]
    where = "below" if gain < low else "above" if gain >= high else "within"
    return f"; the paper's gain ({gain:g}) is {where} {'that figure' if low == high else 'that range'}"


def _could_have_seen(rows: pl.DataFrame, paper: bool = False) -> str:
    """'it could have seen 0.012 to 0.020 at 80% power (95% interval of that figure: 0.010 to 0.031)' over rows with a
    detectable effect, then where the paper's gain sits and which rows are near the 0.05 line."""
    seen = rows["detectable"].drop_nulls() if "detectable" in rows.columns else pl.Series([], dtype=pl.Float64)
    if not seen.len():
        return ""
    low, high = _size(cast(float, seen.min())), _size(cast(float, seen.max()))
    span = low if low == high else f"{low} to {high}"
    near = rows.filter(pl.col("p_holm").map_elements(fragile, return_dtype=pl.Boolean))
    fragile_note = (
        f"; {near.height} of them near the 0.05 line (fragile: "
        + ", ".join(f"{_label(r)} p_holm {r['p_holm']:.3f}" for r in near.to_dicts())
        + ")"
        if near.height
        else ""
    )
    uncertain = ""
    if "detectable_high" in rows.columns and rows["detectable_high"].drop_nulls().len():
        # The figure rests on an estimated standard error: at few seeds its interval is wide (statistics.detectable_interval).
        lowest, highest = rows["detectable_low"].drop_nulls().min(), rows["detectable_high"].drop_nulls().max()
        uncertain = f" (95% interval of that figure: {_size(cast(float, lowest))} to {_size(cast(float, highest))})"
    versus = _against_the_paper(rows, cast(float, seen.min()), cast(float, seen.max())) if paper else ""
    return f"it could have seen {span} at 80% power{uncertain}{versus}{fragile_note}"


def _verdicts(part: pl.DataFrame, better: str) -> dict[str, str]:
    """One metric's rows as table cells: `helped` and `hurt` ('1: mle -0.012 [...], p_holm 0.003'), `same` ('3 of 5;
    it could have seen 0.010 to 0.020 at 80% power') and `notes`. A resolved row says its effect and interval; the
    rows with no detectable difference say the smallest effect their test could have detected (statistics.detectable);
    a zero difference has no direction. The three verdicts count tested rows only; a row with no Holm p was not
    tested and is counted apart with its reason in `notes`: 'not testable in 1 (2 seeds)'."""
    tested = part.filter(pl.col("p_holm").is_not_null())
    untested = part.height - tested.height
    paper = better == "perturbation"  # the paper's gains are of perturbation over none
    notes = [f"not testable in {untested} ({untested_reasons(part)})"] if untested else []
    if not tested.height:
        return {
            "helped": "",
            "hurt": "",
            "same": "",
            "notes": f"not testable in any of {part.height} ({untested_reasons(part)})",
        }
    worse = "mle" if better not in ("perturbation",) else "no perturbation"
    helped = tested.filter(pl.col("significant") & (pl.col("favours") == better))
    hurt = tested.filter(pl.col("significant") & (pl.col("favours") == worse))
    same = tested.filter(~(pl.col("significant") & pl.col("favours").is_in([better, worse])))
    # The paired t over runs (MAUVE read without the joint results) has a level no calibration checks.
    fallback = tested.filter(pl.col("method") == PAIRED_T).height
    if fallback:
        notes.insert(0, f"{fallback} by the {PAIRED_T}, whose level is not calibrated: a description")
    seeds = "seed" in part.columns and part["seed"].drop_nulls().n_unique() > 1
    models = "model" in part.columns and part["model"].n_unique() > 1
    effects = lambda rows: (
        f"{rows.height}: " + "; ".join(_effect(r, seeds, models) for r in rows.to_dicts()) if rows.height else "0"
    )
    seen = _could_have_seen(same, paper)
    return {
        "helped": effects(helped),
        "hurt": effects(hurt),
        "same": f"{same.height} of {tested.height}" + (f"; {seen}" if seen and same.height else ""),
        "notes": "; ".join(notes),
    }


def _refusals(flagged: pl.DataFrame) -> list[str]:
    """'too few texts in 2 cells', 'controls failed in 1 cell': the refused MAUVE cells by why (report.resolution)."""
    if not flagged.height:
        return []
    blind = flagged.filter(pl.col(STATUS).str.starts_with(BLIND)).height
    few = flagged.height - blind
    cells = lambda n: f"{n} cell{'s' if n > 1 else ''}"
    return [f"too few texts in {cells(few)}"] * bool(few) + [f"its controls failed in {cells(blind)}"] * bool(blind)


def _mauve_reach(planted: dict | None) -> str:
    """'MAUVE's planted control: ...': what size of MAUVE gap this eval set's test can see (report/planted.py), and
    whether the paper's gain is within it, so that a MAUVE null is read against the instrument."""
    if not planted or planted.get("can_see") is None:
        return ""
    size = f"its test can see MAUVE gaps of {planted['can_see']:.3f} or more at this n (80% power)"
    if planted["sees_target"]:
        return f"MAUVE's planted control: {size}, the paper's gain of {planted['target']:g} included"
    return (
        f"MAUVE's planted control: {size}, so the paper's gain of {planted['target']:g} is below what MAUVE can "
        "see here and a MAUVE null is not evidence against it"
    )


def _metric_rows(rows: pl.DataFrame, better: str, flagged: pl.DataFrame, planted: dict | None = None) -> list[dict]:
    """One table row per metric with rows (metric and its direction, then `_verdicts`' cells). MAUVE cells that are
    not resolvable (`flagged`: too few texts, or controls the featuriser cannot see) are in no contrast: said so in
    place of a verdict when MAUVE has no row, and counted apart beside one when it has. `planted`: the eval set's
    planted control, which MAUVE's row quotes."""
    out = []
    refusals = _refusals(flagged)
    for m in METRIC_ORDER:
        part = rows.filter(pl.col("metric") == m)
        reach = _mauve_reach(planted) if m == MAUVE else ""
        # A perplexity is the base model's: its perturbation rows compare training with and without it only.
        base = BY_NAME[m].kind == "perplexity" and better == "perturbation"
        metric = direction_label(m)
        metric += " of the base model: training perturbation only" if base else ""
        if part.height:
            cells = _verdicts(part, better)
            apart = [f"{' and '.join(refusals)} (not compared)"] if m == MAUVE and refusals else []
            cells["notes"] = "; ".join([n for n in (cells["notes"], *apart, reach) if n])
            out.append({"metric": metric} | cells)
        elif m == MAUVE and refusals:
            blind = flagged.filter(pl.col(STATUS).str.starts_with(BLIND)).height
            note = "; ".join(n for n in (BLIND_CELLS if blind else TOO_FEW, reach) if n)
            out.append({"metric": metric, "helped": "", "hurt": "", "same": "", "notes": note})
    return out


def _units(rows: pl.DataFrame) -> list[tuple[str, pl.DataFrame]]:
    """The rows by what their test is about, the training method first (report.seeds): across training seeds where
    the arms were trained from two or more; otherwise, or beside them, each seed's pair of checkpoints."""
    unit = pl.col("unit").fill_null(CHECKPOINT) if "unit" in rows.columns else pl.lit(CHECKPOINT)
    seeds, checkpoints = rows.filter(unit == SEEDS), rows.filter(unit != SEEDS)
    if not seeds.height:
        return [("about these checkpoints (one training seed: the test covers prompts and runs, not training)", rows)]
    counts = "/".join(str(k) for k in sorted(set(seeds["n"].to_list())))
    return [
        (f"across {counts} training seeds (the training method: {SEED_T}, df = seeds - 1)", seeds),
        ("about each seed's pair of checkpoints (prompts and runs, not training)", checkpoints),
    ]


VERDICT_COLUMNS = ["metric", "helped", "hurt", "no detectable difference", "not testable, notes"]


def verdict_tables(
    contrasts: pl.DataFrame | None, frame: pl.DataFrame | None = None, reach: dict[str, dict] | None = None
) -> dict[str, list[dict]]:
    """The findings' tables, one per family and unit, by title: perturbation vs none and the ablation's one-sided arms
    (a row per eval set and metric), then the objectives vs MLE (a row per objective and metric), after Holm; the
    contrasts across training seeds first where there are any. Each row: `row` (its eval set or objective), `metric`
    and `_verdicts`' cells. `frame`: the tidy metrics, whose refused MAUVE cells (report.resolution) are named where
    MAUVE has no contrast. `reach`: each eval set's planted control (report/planted.py), which its perturbation rows'
    MAUVE verdict quotes (`_mauve_reach`)."""
    if contrasts is None or contrasts.height == 0:
        return {}
    flagged = refused(frame) if frame is not None else pl.DataFrame({"eval_set": [], "objective": [], STATUS: []})
    tables: dict[str, list[dict]] = {}
    for family, what in (
        ("perturbation", "Perturbation against none"),
        ("ablation", "Ablation arms against NoPerturb"),
    ):
        rows_of = contrasts.filter(pl.col("family") == family)
        for eval_set in sorted(set(rows_of["eval_set"].to_list())):
            for phrase, rows in _units(rows_of.filter(pl.col("eval_set") == eval_set)):
                if rows.height:
                    cells = flagged.filter(pl.col("eval_set") == eval_set) if family == "perturbation" else flagged[:0]
                    planted = (reach or {}).get(eval_set) if family == "perturbation" else None
                    title = f"{what}, {phrase}, Holm-corrected (a row per eval set and metric)"
                    found = _metric_rows(rows, "perturbation", cells, planted)
                    tables.setdefault(title, []).extend({"row": eval_set} | r for r in found)
    objective = contrasts.filter(pl.col("family") == "objective")
    for name in sorted(set(objective["objective"].to_list())):
        for phrase, rows in _units(objective.filter(pl.col("objective") == name)):
            if rows.height:
                title = f"Each objective against MLE, {phrase}, Holm-corrected (every eval set and condition)"
                found = _metric_rows(rows, name, flagged.filter(pl.col("objective") == name))
                tables.setdefault(title, []).extend({"row": f"{name} against MLE"} | r for r in found)
    return tables


def contrast_findings(
    contrasts: pl.DataFrame | None, frame: pl.DataFrame | None = None, reach: dict[str, dict] | None = None
) -> list[str]:
    """`verdict_tables` as markdown, each cell escaped (labels come from the config)."""
    from workflow_lib.report.escape import markdown as cell

    tables = verdict_tables(contrasts, frame, reach)
    if not tables:
        return ["No paired comparison was possible in this study, so nothing is said about what helped.\n"]
    out = []
    for title, rows in tables.items():
        first = "objective" if title.startswith("Each objective") else "eval set"
        lines = [f"**{title}**", "", f"| {first} | " + " | ".join(VERDICT_COLUMNS) + " |"]
        lines.append("|---" * (len(VERDICT_COLUMNS) + 1) + "|")
        for r in rows:
            values = [r["row"], r["metric"], r["helped"], r["hurt"], r["same"], r["notes"]]
            lines.append("| " + " | ".join(cell(v) for v in values) + " |")
        out.append("\n".join(lines) + "\n")
    return out


def _seeds_sentence(frame: pl.DataFrame) -> str:
    """How many training seeds each trained arm has, and so what the contrasts can speak of."""
    trained = frame.filter(pl.col("objective") != UNTRAINED) if "seed" in frame.columns else frame[:0]
    keys = [k for k in KEYS if k != "seed" and k in trained.columns]
    counts = trained.group_by(keys).agg(pl.col("seed").n_unique())["seed"] if trained.height else pl.Series([1])
    low, high = cast(int, counts.min()), cast(int, counts.max())
    if high < 2:
        return (
            "each contrast compares two trained models of one training seed, so its test covers prompts and sampling "
            "runs, not training randomness: what it finds is about those checkpoints, not the training methods."
        )
    return (
        f"{low}" + (f"-{high}" if high != low else "") + " training seeds per trained arm: the contrasts across seeds "
        "test the training methods (each seed's difference the unit); those of each seed's checkpoints cover prompts "
        "and sampling runs only."
    )


def size_findings(frame: pl.DataFrame, logs: dict[str, pl.DataFrame]) -> list[str]:
    """How big the study is and what limits it."""
    runs, prompts = frame["runs"].drop_nulls(), frame["prompts"].drop_nulls()
    line = (
        (
            f"Size: {cast(int, runs.min())}"
            + (f"-{cast(int, runs.max())}" if runs.max() != runs.min() else "")
            + " sampling runs of "
            f"{cast(int, prompts.min())}"
            + (f"-{cast(int, prompts.max())}" if prompts.max() != prompts.min() else "")
            + " prompts per eval set; "
            + _seeds_sentence(frame)
        )
        if runs.len() and prompts.len()
        else "Size: the metrics record no run or prompt counts."
    )
    lines = [line]
    if logs:
        steps = [int(cast(float, log["step"].max())) for log in logs.values() if log.height]
        falling = [
            path
            for path, log in logs.items()
            if (v := log["validation_loss"].drop_nulls()).len() >= 2 and v[-1] < v[-2]
        ]
        validated = [path for path, log in logs.items() if log["validation_loss"].drop_nulls().len() >= 2]
        lines.append(
            f"Training: {min(steps)}"
            + (f"-{max(steps)}" if max(steps) != min(steps) else "")
            + f" optimizer steps per model ({len(logs)} models)."
            + (
                f" The validation loss was still falling at the last evaluation in {len(falling)} of "
                f"{len(validated)} models: longer training could change the comparison."
                if falling
                else (
                    f" The validation loss did not fall at the last evaluation in any of the {len(validated)} "
                    "models with two or more evaluations."
                    if validated
                    else ""
                )
            )
        )
    if sentence := refusal_sentence(frame):
        lines.append(sentence)
    share = resolved(frame)["mauve_clustering_share"].drop_nulls()
    if share.len():
        lines.append(
            "MAUVE's k-means clustering accounts for an estimated median "
            f"{cast(float, share.median()):.0%} of a single "
            "(run, clustering seed) score's variance; the rest is sampling (see the Provenance section)."
        )
    return lines


def _half(frame: pl.DataFrame, column: str) -> list[float | None]:
    """A standard error from a '<metric>_2se' column (None where the column or the value is missing)."""
    if column not in frame.columns:
        return [None] * frame.height
    return [None if v is None else v / 2 for v in frame[column].to_list()]


def mauve_tv_findings(frame: pl.DataFrame) -> list[str]:
    """Where the exact TV is known: does MAUVE order the conditions as the truth does? One of three verdicts from
    statistics.rank_agreement (agree / disagree / cannot tell), "cannot tell" whenever the data cannot say: too
    few conditions for the rank correlation to reach the level, no detectable correlation, or an order the means'
    standard errors can reverse. Only "disagree" warns against MAUVE."""
    lines = []
    truth = frame.filter(pl.col("tv_mean").is_not_null())
    tv = resolved(truth)  # scored MAUVE only: one with too few texts is no ranking (report.resolution)
    for eval_set in sorted(set(truth["eval_set"].to_list())):
        rows = tv.filter(pl.col("eval_set") == eval_set)
        if rows.height < 2:
            if refused(truth.filter(pl.col("eval_set") == eval_set)).height:
                why = (
                    "its controls fail (MAUVE cannot see degraded human text here)"
                    if refused(truth.filter(pl.col("eval_set") == eval_set))[STATUS].str.starts_with(BLIND).any()
                    else "its runs had too few texts to resolve it"
                )
                lines.append(f"**{eval_set}**: MAUVE is not set against the exact TV to the true law: {why}.")
            continue
        # TV's direction flipped, so that rho = 1 is full agreement (higher MAUVE, lower TV)
        agreement = rank_agreement(
            rows["mauve_mean"].to_numpy(),
            _half(rows, "mauve_2se"),
            -rows["tv_mean"].to_numpy(),
            _half(rows, "tv_2se"),
            f"mauve-tv|{eval_set}",
        )
        best = rows.sort("mauve_mean", descending=True).row(0, named=True)
        rank = rows.sort("tv_mean")["tv_mean"].to_list().index(best["tv_mean"]) + 1
        label = (
            f"{best['objective']}, training {best['train_strategy']} {best['train_intensity']:g}, sampling "
            f"{best['test_strategy']} {best['test_intensity']:g}"
        )
        numbers = (
            ""
            if agreement.rho is None
            else f" (Spearman ρ = {agreement.rho:.2f}, TV's direction flipped so that 1 is full agreement"
            + ("" if agreement.p is None else f"; permutation p = {agreement.p:.3f}")
            + f"; ρ between {agreement.low:.2f} and {agreement.high:.2f} when each condition's means are redrawn "
            "within their standard errors)"
        )
        head = {
            "agree": f"MAUVE and the exact TV to the true law agree on the order of the {rows.height} conditions",
            "disagree": f"MAUVE and the exact TV to the true law order the {rows.height} conditions in opposite ways",
            "cannot tell": f"the data cannot tell whether MAUVE orders the {rows.height} conditions as the exact TV to "
            f"the true law does: {agreement.why}",
        }[agreement.verdict]
        lines.append(
            f"**{eval_set}**: {head}{numbers}. MAUVE's best ({label}: {best['mauve_mean']:.3f}) ranks {rank} of "
            f"{rows.height} by TV ({best['tv_mean']:.3f})."
            + (" Do not trust MAUVE alone here." if agreement.verdict == "disagree" else "")
        )
    return lines


def findings_section(
    frame: pl.DataFrame,
    contrasts: pl.DataFrame | None,
    logs: dict[str, pl.DataFrame],
    controls: list[dict] | None = None,
) -> str:
    """Markdown: the three parts, each a short list. `controls`: MAUVE's controls per eval set (report.instrument),
    whose planted control says what size of MAUVE gap each eval set's test can see."""
    lines = ["Generated from the numbers below (not written by hand).", ""]
    reach = {r["eval_set"]: r["planted"] for r in controls or [] if r.get("planted")}
    lines += [table for table in contrast_findings(contrasts, frame, reach)]
    lines += [f"- {s}" for s in size_findings(frame, logs)]
    lines += [f"- {s}" for s in mauve_tv_findings(frame)]
    return "\n".join(lines) + "\n"
