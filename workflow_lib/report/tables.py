"""The paper's tables from the tidy metrics table: Table 1, EMO-Brier, strategies, ablation, other metrics, and the
example continuations. Written as CSV (machine-readable), Markdown and LaTeX (booktabs), the largest mean per column
in bold (the paper's convention) and every caption saying that bold is only that, not a significant difference:
significance is the paired comparisons' ✱ (report.contrasts), which bold never implies. The paper's own Table 1
numbers for the comparison.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from workflow_lib.comparisons import mode_label
from workflow_lib.constants import UNTRAINED
from workflow_lib.files import atomic_path
from workflow_lib.layout import SUMMARY, parse
from workflow_lib.metric_registry import BY_NAME, Metric, shown, shown_in
from workflow_lib.report import escape
from workflow_lib.report.conditions import (
    ABLATION,
    UNTRAINED_LABEL,
    ablation_frame,
    method_frame,
    shown_objective,
)
from workflow_lib.report.resolution import refused
from workflow_lib.report.seeds import pool_seeds

PAPER_DECODER = "unbiased"  # the paper's: ancestral sampling, top_k 0, top_p 1, temperature 1

# docs/method.md §6, the paper's MAUVE (WikiText-2 / WikiText-103 / WebText / WritingPrompts): (unperturbed, perturbed at
# 0.025). MLE's pair is Table 1's MLE and MLE (ours) rows; EMO's and Brier's perturbed rows are the Supplement's tables
# (tex lines 831-879), their unperturbed rows Table 1's.
PAPER_TABLE1 = {
    ("facebook/opt-125m", "mle"): ([0.83, 0.80, 0.44, 0.11], [0.90, 0.87, 0.56, 0.13]),
    ("facebook/opt-125m", "emo"): ([0.80, 0.79, 0.49, 0.10], [0.91, 0.90, 0.61, 0.14]),
    ("facebook/opt-125m", "brier"): ([0.71, 0.67, 0.40, 0.11], [0.89, 0.91, 0.60, 0.15]),
    ("gpt2", "mle"): ([0.74, 0.74, 0.47, 0.10], [0.89, 0.87, 0.57, 0.17]),
    ("gpt2", "emo"): ([0.82, 0.82, 0.58, 0.13], [0.89, 0.90, 0.58, 0.17]),
    ("gpt2", "brier"): ([0.71, 0.74, 0.49, 0.11], [0.90, 0.91, 0.67, 0.19]),
    ("EleutherAI/gpt-neo-1.3B", "mle"): ([0.82, 0.82, 0.54, 0.14], [0.87, 0.87, 0.58, 0.17]),
    ("EleutherAI/gpt-neo-1.3B", "emo"): ([0.85, 0.85, 0.56, 0.13], [0.88, 0.89, 0.62, 0.18]),
    ("EleutherAI/gpt-neo-1.3B", "brier"): ([0.79, 0.79, 0.51, 0.13], [0.91, 0.88, 0.65, 0.22]),
}
PAPER_EVAL_SETS = ["wikitext2", "wikitext103", "webtext", "writingprompts"]
# Why not bold only what the contrasts support: the contrasts compare a cell with its designed partners (perturbed
# against not, an objective against MLE), never a column's best against every other row, so no test says which
# cell is best. Bold stays descriptive and says so.
BOLD_WHY = f"a description, not a significant difference (significance is the ✱ of the paired comparisons in {SUMMARY})"
BOLD_NOTE = f"Bold: the largest mean of its column, {BOLD_WHY}"


# What the ± of every table's cell is (report.seeds.pool_seeds makes the rows; `half_width` the number).
INTERVAL = (
    "mean ± the half-width of its 95% t interval: over sampling runs (df = runs − 1; the TV: over prefixes), or over "
    "training seeds (df = seeds − 1) where a condition was trained from several (the cell says how many)"
)


def cell(mean, half) -> str:
    if mean is None:
        return ""
    return f"{mean:.3f}" if half is None else f"{mean:.3f} ± {half:.3f}"


def half_width(row: dict, metric: str) -> float | None:
    """The 95% t interval's half-width of a cell: t(0.975, df) times its standard error (half its `<metric>_2se`),
    df = seeds - 1 for a row pooled over training seeds, else runs - 1 (at 3 runs t is 4.30, not 2); the exact TV's
    2 SE is over hundreds of prefixes, where t is 2 to the precision shown."""
    from scipy import stats

    twice = row.get(f"{metric}_2se")
    seeds, runs = row.get("seeds") or 1, row.get("runs")
    over_prefixes = (m := BY_NAME.get(metric)) is not None and m.over_prefixes
    df = seeds - 1 if seeds > 1 else (None if over_prefixes or runs is None else runs - 1)
    if twice is None or df == 0:
        return None
    return twice if df is None else float(stats.t.ppf(0.975, df)) * twice / 2


def metric_cell(row: dict, metric: str) -> tuple[str, float | None]:
    """(the cell's text, the mean that ranks it) of one metric of one tidy row. A metric flagged as not
    resolvable (`<metric>_status`, MAUVE's "too few texts (n)": report.resolution) shows its flag and ranks
    nowhere, so it is never the bold best."""
    if status := row.get(f"{metric}_status"):
        return status, None
    mean = row.get(f"{metric}_mean", row.get(metric))
    seeds = row.get("seeds") or 1
    # A condition pooled over training seeds says so in its cell (a row key would split a table's arms by seed count).
    pooled = f" ({seeds} seeds)" if seeds > 1 and mean is not None else ""
    return cell(mean, half_width(row, metric)) + pooled, mean


def pivot_cells(frame: pl.DataFrame, row_keys: list[str], col_key: str, metrics: list[tuple[str, str]], col_order=None):
    """A wide table: one row per row_keys, one column per (col value, metric label) holding 'mean ± 2SE'.
    Returns (rows as dicts of strings, the means for bolding, the column names)."""
    cols = col_order or sorted(set(frame[col_key].to_list()))
    columns = [f"{c} {label}" for c in cols for _, label in metrics]
    keys = frame.select(row_keys).unique(maintain_order=True).rows()
    out, means = [], []
    for key in keys:
        sub = frame.filter(pl.all_horizontal([pl.col(k) == v for k, v in zip(row_keys, key)]))
        row, mean_row = dict(zip(row_keys, map(str, key))), {}
        for c in cols:
            hit = sub.filter(pl.col(col_key) == c)
            for metric, label in metrics:
                name = f"{c} {label}"
                if hit.height:
                    row[name], mean_row[name] = metric_cell(hit.row(0, named=True), metric)
                else:
                    row[name], mean_row[name] = "", None
        out.append(row)
        means.append(mean_row)
    return out, means, row_keys + columns


def long_cells(frame: pl.DataFrame, row_keys: list[str], metrics: list[tuple[str, str]]):
    """A long table: one row per frame row, one column per metric ('mean ± 2SE', or the value where a metric
    has no 2SE column). Returns (rows, means, columns) like pivot_cells."""
    out, means = [], []
    for r in frame.to_dicts():
        cells = {label: metric_cell(r, m) for m, label in metrics}
        out.append({k: str(r[k]) for k in row_keys} | {label: text for label, (text, _) in cells.items()})
        means.append({label: mean for label, (_, mean) in cells.items()})
    return out, means, row_keys + [label for _, label in metrics]


def write_table(
    rows: list[dict],
    means: list[dict],
    columns: list[str],
    stem: str,
    lower_is_better=(),
    caption: str = "",
    unranked=(),
    groups: list | None = None,
) -> None:
    """CSV with the raw strings, Markdown and LaTeX (booktabs) with the best mean of each column in bold:
    the lowest for columns in `lower_is_better`, none for `unranked`; among rows of one `groups` value if given.
    The caption heads the Markdown and, as a comment, the LaTeX, so that what bold means travels with both."""
    groups = groups or [None] * len(rows)
    best = {}
    for col in columns:
        for group in set(groups):
            values = [v for m, g in zip(means, groups) if g == group and (v := m.get(col)) is not None]
            if values and col not in unranked:
                best[(group, col)] = min(values) if col in lower_is_better else max(values)

    def is_best(row, mean, col, group):
        return bool(row.get(col)) and (group, col) in best and mean.get(col) == best[(group, col)]

    path = Path(stem)
    with atomic_path(path.with_suffix(".csv")) as tmp:
        pl.DataFrame(rows, schema={c: pl.Utf8 for c in columns}, orient="row").write_csv(tmp)

    def text(row, mean, col, group):
        value = escape.markdown(row.get(col, ""))
        return f"**{value}**" if is_best(row, mean, col, group) else value

    md = ["| " + " | ".join(escape.markdown(c) for c in columns) + " |", "|" + "---|" * len(columns)]
    md += ["| " + " | ".join(text(r, m, c, g) for c in columns) + " |" for r, m, g in zip(rows, means, groups)]
    if not rows:
        md.append("| " + " | ".join(["(no data in this study)"] + [""] * (len(columns) - 1)) + " |")
    with atomic_path(path.with_suffix(".md")) as tmp:
        tmp.write_text((f"{caption}\n\n" if caption else "") + "\n".join(md) + "\n")

    tex = escape.latex

    def tex_cell(row, mean, col, group):
        value = tex(row.get(col, ""))
        return r"\textbf{" + value + "}" if is_best(row, mean, col, group) else value

    lines = [f"% {' '.join(caption.split())}"] if caption else []  # a comment: one line holds anything
    lines += [
        r"\begin{tabular}{" + "l" * len(columns) + "}",
        r"\toprule",
        " & ".join(tex(c) for c in columns) + r" \\",
        r"\midrule",
    ]
    lines += [" & ".join(tex_cell(r, m, c, g) for c in columns) + r" \\" for r, m, g in zip(rows, means, groups)]
    lines += [r"\bottomrule", r"\end{tabular}"]
    with atomic_path(path.with_suffix(".tex")) as tmp:
        tmp.write_text("\n".join(lines) + "\n")


def listed(words: list[str]) -> str:
    """'a', 'a and b', 'a, b and c'."""
    return " and ".join(words) if len(words) < 3 else f"{', '.join(words[:-1])} and {words[-1]}"


def ranking(metrics: list[Metric]) -> tuple[set[str], set[str]]:
    """(the columns whose lowest mean is the best, the columns no bold ranks) of a table of `metrics`, by label."""
    return {m.label for m in metrics if m.ranked and m.lower_is_better}, {m.label for m in metrics if not m.ranked}


def other_caption(metrics: list[Metric]) -> str:
    """The long table's caption from its metrics' registry entries: each `caption_note`, what bold ranks (lowest for
    a lower-is-better metric), and the metrics it does not rank, each with its `gloss`."""
    notes = "".join(f"; {m.label} {m.caption_note}" for m in metrics if m.caption_note)
    lowest = [m.label for m in metrics if m.ranked and m.lower_is_better]
    unranked = [f"{m.label} ({m.gloss})" if m.gloss else m.label for m in metrics if not m.ranked]
    return (
        f"Other metrics peers report ({INTERVAL}{notes}). Bold: the best mean per eval set"
        + (f" (lowest {listed(lowest)})" if lowest else "")
        + f", {BOLD_WHY}"
        + (f"; {listed(unranked)} {'is' if len(unranked) == 1 else 'are'} not ranked" if unranked else "")
        + "."
    )


def tables(frame: pl.DataFrame, out_dir: str, intensity: float, eval_order: list[str]) -> dict[str, str]:
    """Write every table; returns name -> Markdown text (for the summary). A study with more than one decoder
    has the decoder among each table's row keys; untrained models are rows like the others, marked."""
    out = Path(out_dir)
    written = {}
    frame = pool_seeds(frame)  # one row per condition: several training seeds pooled
    decoder = ["decoder"] if frame["decoder"].n_unique() > 1 else []
    any_untrained = (frame["objective"] == UNTRAINED).any()
    frame = shown_objective(frame)
    untrained_note = f"; {UNTRAINED_LABEL}: the model as released, not trained here" if any_untrained else ""
    # Said in every caption with a MAUVE column when a cell shows it (report.resolution).
    refused_note = (
        (
            '; "too few texts (n)": MAUVE not reported, its runs had n texts per side, below '
            'evaluation.mauve.min_texts; "MAUVE cannot see ...": not reported, the eval set\'s controls show that the '
            "featuriser does not see those degradations of human text at this n (results/report/tables/controls.md)"
        )
        if refused(frame).height
        else ""
    )
    metrics = shown_in("table1")
    named = {t: [label for _, label in shown_in(t)] for t in ("table1", "strategies", "ablation")}  # for captions
    methods = method_frame(frame, intensity)
    specs = {
        "table1": (
            methods,
            ["model", "objective", *decoder, "perturbation"],
            "eval_set",
            metrics,
            (
                f"Table 1: {listed(named['table1'])} ({INTERVAL}), without and with insertion at {intensity:g}"
                f"{untrained_note}{refused_note}. {BOLD_NOTE}."
            ),
        ),
        "emo_brier": (
            methods.filter(pl.col("objective").is_in(["emo", "brier"])),
            ["model", "objective", *decoder, "perturbation"],
            "eval_set",
            metrics,
            f"EMO and Brier without and with perturbation ({', '.join(named['table1'])}){refused_note}. {BOLD_NOTE}.",
        ),
    }
    same = frame.filter(pl.col("train_intensity") == pl.col("test_intensity"))
    same = same.filter((pl.col("train_strategy") == pl.col("test_strategy")) | (pl.col("train_intensity") == 0))
    # The shared intensity-0 baseline is shown under each strategy that ran at some intensity > 0, and no other.
    ran = sorted(set(same.filter(pl.col("train_intensity") > 0)["train_strategy"].to_list())) or ["none"]
    strategies = pl.concat(
        [same.filter(pl.col("train_intensity") == 0).with_columns(pl.lit(s).alias("strategy")) for s in ran]
        + [same.filter(pl.col("train_intensity") > 0).with_columns(pl.col("train_strategy").alias("strategy"))]
    )
    strategies = strategies.with_columns(
        pl.col("train_intensity").map_elements(lambda x: f"{x:g}", return_dtype=pl.Utf8).alias("intensity")
    )
    specs["strategies"] = (
        strategies,
        ["model", "objective", *decoder, "eval_set", "strategy"],
        "intensity",
        shown_in("strategies"),
        (
            f"Perturbation strategies: {listed(named['strategies'])} ({INTERVAL}) by intensity, same strategy and "
            f"intensity at training and sampling{refused_note}. {BOLD_NOTE}."
        ),
    )
    ablation = ablation_frame(frame, intensity)
    specs["ablation"] = (
        ablation,
        ["model", "objective", *decoder, "eval_set", "strategy"],
        "condition",
        shown_in("ablation"),
        (
            f"Ablation: perturbation at training, at sampling, both, or neither ({', '.join(named['ablation'])}, "
            f"{INTERVAL}), per strategy, at intensity {intensity:g} (a strategy that perturbs every position, "
            f"NEFTune, at 1; NEFTune perturbs at training only){refused_note}. {BOLD_NOTE}."
        ),
    )
    for name, (sub, rows_k, col_k, mets, caption) in specs.items():
        order = [e for e in eval_order if e in set(sub[col_k].to_list())] if col_k == "eval_set" else None
        if col_k == "intensity":
            order = sorted(set(sub[col_k].to_list()), key=float)
        if col_k == "condition":
            present = sorted(set(sub[col_k].to_list()))  # "Both", or "Both (<mode>)" (conditions.sampling_mode)
            order = [c for a in ABLATION for c in present if c == a or c.startswith(f"{a} (")]
        rows, means, columns = pivot_cells(sub, rows_k, col_k, mets, order)
        write_table(rows, means, columns, str(out / name), caption=caption)
        written[name] = (out / f"{name}.md").read_text()

    # Other metrics peers report, long (one row per eval set): 20 columns of a wide table do not read in Markdown.
    rank = {e: i for i, e in enumerate(eval_order)}
    shown_other = shown("other")  # the long table's metrics (workflow_lib/metric_registry.py)
    other = methods.filter(pl.any_horizontal(pl.col(m.mean_column).is_not_null() for m in shown_other))
    other = other.with_columns(
        pl.col("eval_set").replace_strict(rank, default=len(rank), return_dtype=pl.Int64).alias("_order")
    )
    other = other.sort(
        ["_order", "eval_set", "model", "objective", pl.col("perturbation") != "no", "perturbation", "decoder", "seed"]
    )
    rows, means, columns = long_cells(
        other,
        ["eval_set", "model", "objective", "perturbation", "decoder"],
        [(m.name, m.label) for m in shown_other],
    )
    lowest, unranked = ranking(shown_other)
    write_table(
        rows,
        means,
        columns,
        str(out / "metrics"),
        lower_is_better=lowest,
        unranked=unranked,
        groups=other["eval_set"].to_list(),
        caption=other_caption(shown_other),
    )
    written["metrics"] = (out / "metrics.md").read_text()
    return written


def paper_comparison(frame: pl.DataFrame, config: dict, intensity: float) -> str:
    """Our MAUVE beside the paper's Table 1 where models and eval sets are the paper's; else a sentence."""
    hub_name = {
        k: m.get("stand_in_for") or (m.get("hub") or m)["name"]  # a pinned download's folder: its hub name
        for k, m in config["models"].items()
        if m["source"] == "hf"
    }
    sets = {}
    for es, spec in config.get("eval_sets", {}).items():
        ds = config["datasets"][spec["dataset"]]
        ident = (ds.get("path", "") + " " + str(ds.get("name", "")) + " " + es).lower()
        for paper_set, needle in zip(PAPER_EVAL_SETS, ["wikitext-2", "wikitext-103", "webtext", "writingprompts"]):
            if needle in ident or paper_set in ident.replace("-", ""):
                sets[paper_set] = es
    methods = method_frame(frame.filter(pl.col("decoder") == PAPER_DECODER), intensity)
    lines = []
    for (hub, objective), (plain, perturbed) in PAPER_TABLE1.items():
        keys = [k for k, n in hub_name.items() if n == hub]
        for key in keys:
            for label, paper in (("no", plain), (f"insertion {intensity:g}", perturbed)):
                ours = []
                for paper_set, paper_value in zip(PAPER_EVAL_SETS, paper):
                    hit = methods.filter(
                        (pl.col("model") == key)
                        & (pl.col("objective") == objective)
                        & (pl.col("perturbation") == label)
                        & (pl.col("eval_set") == sets.get(paper_set, ""))
                    )
                    ours.append(
                        f"{metric_cell(hit.row(0, named=True), 'mauve')[0]} (paper {paper_value:.2f})"
                        if hit.height
                        else f"(paper {paper_value:.2f})"
                    )
                if any(not o.lstrip().startswith("(paper") for o in ours):
                    lines.append(f"| {key} | {objective} | {label} | " + " | ".join(ours) + " |")
    if not lines:
        return "No model and eval set of this study is one of the paper's, so there are no paper numbers to compare with.\n"
    head = "| model | objective | perturbation | " + " | ".join(PAPER_EVAL_SETS) + " |\n|" + "---|" * 7 + "\n"
    intro = f"MAUVE, ours ({INTERVAL}) beside the paper's Table 1:\n\n"
    if stand_ins := rehearsal_stand_ins(config):
        intro = (
            f"**Rehearsal: these numbers mean nothing.** The models are tiny random stand-ins ({stand_ins}) on random "
            "text; the table shows that every cell of the paper's Table 1 is computed, not how close it comes.\n\n"
            + intro
        )
    return intro + head + "\n".join(lines) + "\n"


def rehearsal_stand_ins(config: dict) -> str:
    """'key for hub id, ...' of the models that stand in for hub models (`models.<key>.stand_in_for`), or ''."""
    return ", ".join(f"{key} for {m['stand_in_for']}" for key, m in config["models"].items() if m.get("stand_in_for"))


def examples(prompts_path: str, sample_paths: list[str], stem: str, prompt_index: int = 0) -> None:
    """One prompt, its human continuation, and run 0 of every method's continuation of it."""
    from workflow_lib.files import read_parquet

    prompts = read_parquet(prompts_path).to_pylist()
    prompt = prompts[min(prompt_index, len(prompts) - 1)]
    rows = [{"method": "human", "continuation": prompt["reference"][len(prompt["prefix"]) :].strip()}]
    conditions = {path: parse(str(path)).columns() for path in sample_paths}
    several_decoders = len({c["decoder"] for c in conditions.values()}) > 1
    for path in sorted(sample_paths):
        fields = conditions[path]
        samples = read_parquet(path).to_pylist()
        text = next((s["text"] for s in samples if s["prompt_id"] == prompt["prompt_id"] and s["run"] == 0), "")
        objective = UNTRAINED_LABEL if fields["objective"] == UNTRAINED else fields["objective"]
        label = (
            f"{fields['model']} {objective} train {fields['train_strategy']} {fields['train_intensity']}, "
            f"sample {fields['test_strategy']} {fields['test_intensity']} ({mode_label(fields['test_mode'])})"
            + (f", decoder {fields['decoder']}" if several_decoders else "")
        )
        rows.append({"method": label, "continuation": text.strip()})
    columns = ["method", "continuation"]
    write_table(rows, [{} for _ in rows], columns, stem, caption=f"Prompt: {escape.markdown(prompt['prefix'])}")
