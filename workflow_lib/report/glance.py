"""The summary's first screen: what the study found, one short sentence a finding, under the three questions a reader
asks (does perturbation help, which objective, can the instruments see).

Each sentence gives its effect and 95% interval, or, over more rows, the range of the effects and how many rows;
where nothing was detected, the size its tests could have seen (statistics.detectable); and each metric's direction
where it is first named. Every number is a contrast row's (report.contrasts) or a control's (report.instrument);
the detail, with every row named, follows under "In detail" (report.theory_check, report.findings).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import cast

import polars as pl

from workflow_lib.metric_registry import BY_NAME, IN_FINDINGS, PAPER_GAINS
from workflow_lib.report.contrasts import CHECKPOINT, SEEDS
from workflow_lib.report.findings import direction_label
from workflow_lib.report.resolution import MAUVE
from workflow_lib.report.theory_check import GAIN, prediction

PERTURBATION, OBJECTIVE, INSTRUMENTS = "Does perturbation help?", "Which objective?", "Can the instruments see?"
QUESTIONS = (PERTURBATION, OBJECTIVE, INSTRUMENTS)
MOST = 10  # sentences on the first screen, the opening one included
EVERY = ("eval_set", "objective", "seed", "variant")  # what may tell one of a sentence's rows from another
RECIPE = "mle"  # the paper trains and samples MLE with the perturbation (docs/method.md §1)


@dataclass(frozen=True)
class Line:
    """One sentence of the first screen. `question`: the heading it sits under ('' for the opening sentence);
    `rows`: the contrast rows whose numbers it quotes (empty for a sentence of controls or logs)."""

    question: str
    text: str
    rows: pl.DataFrame = field(default_factory=pl.DataFrame)


def _effect(row: dict) -> str:
    return f"{row['difference']:+.3f} [{row['low']:+.3f}, {row['high']:+.3f}]"


def _size(x: float) -> str:
    return f"{x:.3f}" if x >= 0.001 else f"{x:.1e}"


def _span(values: pl.Series, signed: bool) -> str:
    low, high = cast(float, values.min()), cast(float, values.max())
    show = (lambda x: f"{x:+.3f}") if signed else _size
    return show(low) if show(low) == show(high) else f"{show(low)} to {show(high)}"


def _variant(row: dict) -> str:
    """What tells a row from its sentence's others: 'oracle synonyms' for '... (train oracle, sample oracle)'."""
    if row["family"] == "ablation":
        return row["a"]
    inner = row["a"].split(" (", 1)[1].rstrip(")") if " (" in row["a"] else ""
    parts = [p.split(" ", 1) for p in inner.split(", ") if " " in p]
    if len(parts) == 2 and [p[0] for p in parts] == ["train", "sample"] and parts[0][1] == parts[1][1]:
        return f"{parts[0][1]} synonyms"
    return inner


def _labels(rows: pl.DataFrame, by: tuple[str, ...]) -> list[str]:
    """Each row's label: those of `by` (eval_set, objective, seed, variant) that differ among the rows."""
    dicts = rows.to_dicts()

    def field(k: str) -> Callable[[dict], str]:
        return lambda r: str(r.get(k))

    keys = [field(k) for k in by if k in rows.columns and rows[k].n_unique() > 1]
    if "variant" in by and len({_variant(r) for r in dicts}) > 1:
        keys.append(_variant)
    return [" ".join(k(r) for k in keys) for r in dicts]


def _group(rows: pl.DataFrame, upto: int, labels: dict[int, str]) -> str:
    """Up to `upto` rows: each effect with its interval and label (`labels`, by the rows' `index`); more: the range
    of their effects."""
    if rows.height <= upto:
        return ", ".join(f"{_effect(r)} {labels[r['index']]}".strip() for r in rows.to_dicts())
    return _span(rows["difference"], signed=True)


def tally(
    rows: pl.DataFrame, better: str, upto: int = 1, could: bool = True, by: tuple[str, ...] = ("objective",)
) -> str:
    """'better in 1 (-0.010 [-0.016, -0.004]), worse in 2 (+0.045 to +0.058), no detectable difference in 1 (it
    could have seen 0.012) of 4 rows': the rows by their Holm-corrected verdict, `better` the arm a better value
    favours (its name in `favours`); up to `upto` rows of a verdict each with its interval, more as their range.
    `could`: say what size the rows with no detectable difference could have seen; `by`: what a row's label names
    (`_labels`)."""
    rows = rows.with_row_index("index")
    labels = dict(zip(rows["index"].to_list(), _labels(rows, by)))
    tested = rows.filter(pl.col("p_holm").is_not_null())
    significant = tested.filter(pl.col("significant"))
    groups = [
        ("better", significant.filter(pl.col("favours") == better)),
        ("worse", significant.filter(pl.col("favours") != better)),
        ("no detectable difference", tested.filter(~pl.col("significant"))),
    ]
    groups = [(word, group) for word, group in groups if group.height]
    untested = rows.height - tested.height
    alone = len(groups) == 1 and not untested
    parts = []
    for word, group in groups:
        inner = [_group(group, upto, labels)]
        seen = group["detectable"].drop_nulls() if word.startswith("no") and could else pl.Series([], dtype=pl.Float64)
        inner += [f"it could have seen {_span(seen, signed=False)}"] if seen.len() else []
        count = (
            {1: "1 row", 2: "both rows"}.get(group.height, f"all {group.height} rows") if alone else str(group.height)
        )
        parts.append(f"{word} in {count}" + (f" ({'; '.join(inner)})" if inner else ""))
    if untested:
        parts.append(f"not testable in {untested}")
    return parts[0] if alone else ", ".join(parts) + f" of {rows.height} rows"


class _Names:
    """A metric's label, with its direction the first time it is named."""

    def __init__(self) -> None:
        self.named: set[str] = set()

    def __call__(self, metric: str) -> str:
        if metric in self.named:
            return BY_NAME[metric].label
        self.named.add(metric)
        return direction_label(metric)


def _unit_rows(contrasts: pl.DataFrame) -> tuple[pl.DataFrame, str]:
    """The rows the first screen reads, and what they are about: the contrasts across training seeds where the arms
    were trained from several (the training methods), else each pair of checkpoints."""
    unit = pl.col("unit").fill_null(CHECKPOINT) if "unit" in contrasts.columns else pl.lit(CHECKPOINT)
    seeds = contrasts.filter(unit == SEEDS)
    if seeds.height:
        counts = "/".join(str(k) for k in sorted(set(seeds["n"].to_list())))
        return seeds, (
            f"Across {counts} training seeds per arm: each finding tests the training methods (paired t over the "
            "seeds, Holm-corrected, 95% intervals)."
        )
    return contrasts.filter(unit != SEEDS), (
        "One training seed per arm: each finding is about these checkpoints, not the training methods "
        "(Holm-corrected, 95% intervals)."
    )


def _unbiased(rows: pl.DataFrame) -> pl.DataFrame:
    """The rows of the unbiased decoder where a study has several (the findings below name the others)."""
    plain = rows.filter(pl.col("decoder").fill_null("").is_in(["", "unbiased"]))
    return plain if plain.height else rows


def _classes(frame: pl.DataFrame, eval_sets: list[str]) -> list[tuple[str, list[str]]]:
    """The eval sets grouped by the theory's prediction where the builtin corpus gives it (report.theory_check),
    else each eval set alone (at most three, or all together)."""
    shares = {}
    if {"off_support_share", "reachable_share"} <= set(frame.columns):
        for row in frame.filter(pl.col("off_support_share").is_not_null()).iter_rows(named=True):
            if row["reachable_share"] is not None:
                shares[row["eval_set"]] = prediction(row["off_support_share"], row["reachable_share"])
    if shares and set(eval_sets) <= set(shares):
        gain = [e for e in eval_sets if shares[e] == GAIN]
        none = [e for e in eval_sets if shares[e] != GAIN]
        return [
            *([(f"Where the theory predicts a gain ({', '.join(gain)})", gain)] if gain else []),
            *([(f"Where it predicts none ({', '.join(none)})", none)] if none else []),
        ]
    if len(eval_sets) > 3:
        return [(f"On every eval set ({len(eval_sets)})", eval_sets)]
    return [(f"On {e}", [e]) for e in eval_sets]


def _primary(rows: pl.DataFrame) -> str | None:
    """The first metric of the findings' order (the exact TV first) with a tested row of the paper's recipe."""
    recipe = rows.filter(
        (pl.col("family") == "perturbation") & (pl.col("objective") == RECIPE) & pl.col("p_holm").is_not_null()
    )
    return next((m for m in IN_FINDINGS if recipe.filter(pl.col("metric") == m).height), None)


def _recipe(rows: pl.DataFrame) -> pl.DataFrame:
    return rows.filter((pl.col("family") == "perturbation") & (pl.col("objective") == RECIPE))


def _perturbation(rows: pl.DataFrame, frame: pl.DataFrame, metric: str, name: _Names) -> list[Line]:
    """The paper's recipe against none per class of eval set, then every arm against none."""
    arms = rows.filter(pl.col("family").is_in(["perturbation", "ablation"]) & (pl.col("metric") == metric))
    recipe = _recipe(arms)
    lines = []
    for where, sets in _classes(frame, sorted(set(recipe["eval_set"].to_list()))):
        part = recipe.filter(pl.col("eval_set").is_in(sets))
        lines.append(Line(PERTURBATION, f"{where}: {name(metric)} {tally(part, 'perturbation', 2, by=EVERY)}.", part))
    if arms.height > recipe.height:
        lines.append(
            Line(
                PERTURBATION,
                f"Every arm against none (all objectives, sides, strategies): {name(metric)} "
                f"{tally(arms, 'perturbation')}.",
                arms,
            )
        )
    return lines


def _objectives(rows: pl.DataFrame, metric: str, name: _Names, room: int) -> list[Line]:
    """Each objective against MLE: a sentence each where `room` allows, else one for all."""
    against = rows.filter((pl.col("family") == "objective") & (pl.col("metric") == metric))
    objectives = sorted(set(against["objective"].to_list()))
    each = [(o, against.filter(pl.col("objective") == o)) for o in objectives]
    if len(each) <= room:
        return [
            Line(OBJECTIVE, f"{o} against MLE, {name(metric)}: {tally(part, o, by=('eval_set',))}.", part)
            for o, part in each
        ]
    text = (
        f"Against MLE, {name(metric)}: "
        + "; ".join(f"{o} {tally(part, o, by=('eval_set',))}" for o, part in each)
        + "."
    )
    return [Line(OBJECTIVE, text, against)] if each else []


def _mauve(rows: pl.DataFrame, controls: list[dict], name: _Names, primary: str) -> list[Line]:
    """Whether MAUVE sees its controls, what size of gap its planted control says the tests can see, and where it
    is read (and is not the first screen's own metric), what perturbation did to it."""
    if not controls:
        return []
    scored = [r for r in controls if not r.get("floor")]
    blind = [r for r in scored if r.get("status")]
    text = f"{name(MAUVE)} sees its controls on {len(scored) - len(blind)} of {len(controls)} eval sets"
    if blind:
        statuses = sorted({r["status"] for r in blind})
        why = statuses[0] if len(statuses) == 1 else "see What MAUVE can see here"
        text += f"; it is not read on {len(blind)} ({why})"
    if floor := len(controls) - len(scored):
        text += f"; not scored on {floor} (too few texts)"
    planted = [r["planted"] for r in controls if r.get("planted") and r["planted"].get("can_see") is not None]
    if planted:
        see = pl.Series([p["can_see"] for p in planted])
        target = planted[0]["target"]
        where = "below" if target < cast(float, see.min()) else "within" if target >= cast(float, see.max()) else "near"
        text += (
            f"; its planted control says its tests could see gaps of {_span(see, signed=False)} or more, the "
            f"paper's gain ({target:g}) is {where} that"
        )
    part = rows.filter((pl.col("family") == "perturbation") & (pl.col("metric") == MAUVE))
    if part.height and primary != MAUVE:
        text += f"; every objective's perturbation against none: {tally(part, 'perturbation')}"
        return [Line(INSTRUMENTS, text + ".", part)]
    return [Line(INSTRUMENTS, text + ".")]


def _reach(rows: pl.DataFrame, metric: str, name: _Names, primary: str | None) -> list[Line]:
    """A metric the paper reports a gain in: what perturbation did to it, what size its tests could see, and
    that gain against it. Where the recipe's sentences above already gave its rows, only the last two."""
    part = rows.filter((pl.col("family") == "perturbation") & (pl.col("metric") == metric))
    if not part.height:
        return []
    seen = part["detectable"].drop_nulls()
    gain = PAPER_GAINS[metric]
    said = metric == primary and part.height == _recipe(part).height
    text = name(metric) + (
        "" if said else f", every objective's perturbation against none: {tally(part, 'perturbation', could=False)}"
    )
    if seen.len():
        low, high = cast(float, seen.min()), cast(float, seen.max())
        where = "below" if gain < low else "above" if gain >= high else "within"
        text += f"{':' if said else ';'} its tests could see {_span(seen, signed=False)}, the paper's gain ({gain:g}) is {where} that"
    return [Line(INSTRUMENTS, text + ".", part)]


def _others(rows: pl.DataFrame, primary: str, name: _Names, room: int) -> list[Line]:
    """The recipe against none on the findings' other metrics (perplexity: its training only), while `room` lasts."""
    lines: list[Line] = []
    for metric in IN_FINDINGS:
        part = _recipe(rows).filter(pl.col("metric") == metric)
        if metric == primary or metric in PAPER_GAINS or not part.height or len(lines) >= room:
            continue
        what = "Of the base model (the recipe's training only), " if BY_NAME[metric].kind == "perplexity" else ""
        lines.append(Line(PERTURBATION, f"{what}{name(metric)}: {tally(part, 'perturbation', 2, by=EVERY)}.", part))
    return lines


def glance_lines(contrasts: pl.DataFrame | None, frame: pl.DataFrame, controls: list[dict] | None = None) -> list[Line]:
    """The first screen's sentences, at most MOST: the unit first, then the three questions in order; the
    objectives' sentences merge into one, and the recipe's other metrics are left to the detail, where there is no
    room."""
    if contrasts is None or not contrasts.height:
        return [Line("", "No paired comparison was possible in this study, so nothing is said about what helped.")]
    rows, unit = _unit_rows(contrasts)
    rows = _unbiased(rows)
    name = _Names()
    metric = _primary(rows)
    head = [Line("", unit), *(_perturbation(rows, frame, metric, name) if metric else [])]
    perturbed = rows.filter(pl.col("family") == "perturbation")
    instruments = bool(controls) + sum(1 for m in PAPER_GAINS if m != MAUVE and m in perturbed["metric"])
    middle = _objectives(rows, metric, name, MOST - len(head) - instruments) if metric else []
    tail = _mauve(rows, controls or [], name, metric or "")
    tail += [line for m in PAPER_GAINS if m != MAUVE for line in _reach(rows, m, name, metric)]
    extra = _others(rows, metric, name, MOST - len(head) - len(middle) - len(tail)) if metric else []
    return [*head, *extra, *middle, *tail][:MOST]


def glance_section(contrasts: pl.DataFrame | None, frame: pl.DataFrame, controls: list[dict] | None = None) -> str:
    """Markdown: the opening sentence, then each question in bold, with what its sentences compare, and its
    sentences as bullets."""
    lines = glance_lines(contrasts, frame, controls)
    recipe = _recipe(contrasts) if contrasts is not None and contrasts.height else pl.DataFrame()
    notes = {
        PERTURBATION: (
            f" (the paper's recipe, MLE with {recipe['a'][0].split(' (')[0]} at training and sampling, against none)"
            if recipe.height
            else ""
        ),
        OBJECTIVE: " (each objective against MLE, with and without the recipe)",
        INSTRUMENTS: "",
    }
    out = [line.text for line in lines if not line.question]
    for question in QUESTIONS:
        under = [line.text for line in lines if line.question == question]
        if under:
            out += ["", f"**{question}**{notes[question]}", "", *(f"- {text}" for text in under)]
    return "\n".join(out) + "\n"
