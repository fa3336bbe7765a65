"""Aggregation and report: every metrics file of a study -> one tidy table -> the paper's tables and a summary.

`collect` reads the metrics (MAUVE, ROUGE, diversity), extrapolation (exact TV) and perplexity JSON files and
recovers each condition from its path (workflow_lib.contrasts.parse_path), so the tables work for whatever
subset of the grid a config defines: a combination the config does not have is an empty cell, never a zero.
Tables are written as CSV (machine-readable), Markdown and LaTeX (booktabs), best mean per column in bold.
The summary starts with the provenance of the numbers and ends its tables with the paired comparisons of
workflow_lib.contrasts.
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

import polars as pl

from workflow_lib.cli import parse_json_arg, run
from workflow_lib.contrasts import PATH, PERPLEXITY_PATH  # noqa: F401 (report.PATH: the path patterns, as before)
from workflow_lib.contrasts import (ABLATION, KEYS, MODEL_KEYS, UNTRAINED_LABEL, ablation_frame, method_frame, paired_section,
                                    parse_path, read_contrasts, shown_objective, typed)
from workflow_lib.files import atomic_path
from workflow_lib.grid import UNTRAINED

log = logging.getLogger("workflow_lib.report")

METRICS = ["mauve", "rouge1", "rouge2", "rougeL", "distinct_1", "distinct_2", "distinct_3", "distinct_4", "repetition", "rep_4"]
VERSIONS = ["python", "torch", "transformers", "mauve-text", "rouge-score", "workflow"]


def version_column(package: str) -> str:
    return f"version_{package.replace('-', '_')}"


PROVENANCE = {"git_commit": pl.Utf8, "git_dirty": pl.Boolean, **{version_column(v): pl.Utf8 for v in VERSIONS},
              "featuriser": pl.Utf8, "settings_sha256": pl.Utf8}
SCHEMA = ({k: pl.Utf8 for k in KEYS} | {"train_intensity": pl.Float64, "test_intensity": pl.Float64, "copies": pl.Int64, "seed": pl.Int64}
          | {f"{m}_{s}": pl.Float64 for m in METRICS for s in ("mean", "2se")}
          | {"mauve_clustering_share": pl.Float64, "num_buckets": pl.Int64, "runs": pl.Int64, "prompts": pl.Int64,
             "perplexity": pl.Float64, "tv_mean": pl.Float64, "tv_2se": pl.Float64, "tv_law": pl.Utf8} | PROVENANCE)
PAPER_DECODER = "unbiased"  # the paper's: ancestral sampling, top_k 0, top_p 1, temperature 1

# REFERENCE section 6: Table 1 (MAUVE; WikiText-2 / WikiText-103 / WebText / WritingPrompts).
PAPER_TABLE1 = {
    ("facebook/opt-125m", "mle"): ([.83, .80, .44, .11], [.90, .87, .56, .13]),
    ("facebook/opt-125m", "emo"): ([.80, .79, .49, .10], [.91, .90, .61, .14]),
    ("facebook/opt-125m", "brier"): ([.71, .67, .40, .11], [.89, .91, .60, .15]),
    ("gpt2", "mle"): ([.74, .74, .47, .10], [.89, .87, .57, .17]),
    ("gpt2", "emo"): ([.82, .82, .58, .13], [.89, .90, .58, .17]),
    ("gpt2", "brier"): ([.71, .74, .49, .11], [.90, .91, .67, .19]),
    ("EleutherAI/gpt-neo-1.3B", "mle"): ([.82, .82, .54, .14], [.87, .87, .58, .17]),
    ("EleutherAI/gpt-neo-1.3B", "emo"): ([.85, .85, .56, .13], [.88, .89, .62, .18]),
    ("EleutherAI/gpt-neo-1.3B", "brier"): ([.79, .79, .51, .13], [.91, .88, .65, .22]),
}
PAPER_EVAL_SETS = ["wikitext2", "wikitext103", "webtext", "writingprompts"]


def _metric_fields(data: dict) -> dict:
    """The tidy columns of one metrics JSON; a field an older file lacks is null."""
    row = {f"{m}_{s}": data.get(f"{m}_{s}") for m in METRICS for s in ("mean", "2se")}
    buckets = data.get("num_buckets")
    if isinstance(buckets, list):  # runs with different histogram sizes: the largest
        buckets = max(buckets) if buckets else None
    provenance = data.get("provenance") or {}
    versions = provenance.get("versions") or {}
    featuriser = provenance.get("featuriser", data.get("featuriser"))
    row |= {"mauve_clustering_share": (data.get("mauve_variance") or {}).get("clustering_share"), "num_buckets": buckets,
            "runs": data.get("runs"), "prompts": data.get("prompts"),
            "git_commit": provenance.get("git_commit"), "git_dirty": provenance.get("git_dirty"),
            "featuriser": featuriser if featuriser is None or isinstance(featuriser, str) else json.dumps(featuriser, sort_keys=True),
            "settings_sha256": provenance.get("settings_sha256")}
    return row | {version_column(v): versions.get(v) for v in VERSIONS}


def collect(paths: list[str]) -> pl.DataFrame:
    """One row per (condition, eval set, decoder, test condition): metrics, TV and the model's perplexity on
    the eval set (which depends on neither decoder nor sampling) side by side."""
    rows: dict[tuple, dict] = {}
    perplexity: dict[tuple, float] = {}
    for path in paths:
        fields = parse_path(path)
        data = json.loads(Path(path).read_text())
        if fields["kind"] == "perplexity":
            perplexity[tuple(fields[k] for k in MODEL_KEYS + ["eval_set"])] = data.get("perplexity")
            continue
        row = rows.setdefault(tuple(fields[k] for k in KEYS), {k: fields[k] for k in KEYS})
        if fields["kind"] == "metrics":
            row.update(_metric_fields(data))
        else:
            row.update({"tv_mean": data["tv_mean"], "tv_2se": data["tv_2se"], "tv_law": data["law"]})
    joined = set()
    for row in rows.values():
        key = tuple(row[k] for k in MODEL_KEYS + ["eval_set"])
        if key in perplexity:
            row["perplexity"] = perplexity[key]
            joined.add(key)
    for key in sorted(set(perplexity) - joined):
        log.warning("perplexity of %s on %s has no metrics row to join; it is in no table", "/".join(key[:-1]), key[-1])
    strings = {k: pl.Utf8 if k in KEYS else v for k, v in SCHEMA.items()}
    frame = pl.DataFrame([{k: r.get(k) for k in strings} for r in rows.values()], schema=strings, orient="row")
    return typed(frame).sort(KEYS)


def read_metrics(path: str) -> pl.DataFrame:
    """The CSV of `collect`, with its types (a column empty in this study still reads as numbers)."""
    frame = pl.read_csv(path, schema_overrides={k: v for k, v in SCHEMA.items() if k not in ("copies", "seed")})
    return frame.with_columns(pl.col("copies", "seed").cast(pl.Int64))


def cell(mean, se) -> str:
    if mean is None:
        return ""
    return f"{mean:.3f}" if se is None else f"{mean:.3f} ± {se:.3f}"


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
                    m, s = hit[f"{metric}_mean"][0], hit[f"{metric}_2se"][0]
                    row[name], mean_row[name] = cell(m, s), m
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
        out.append({k: str(r[k]) for k in row_keys} | {label: cell(r.get(f"{m}_mean", r.get(m)), r.get(f"{m}_2se"))
                                                        for m, label in metrics})
        means.append({label: r.get(f"{m}_mean", r.get(m)) for m, label in metrics})
    return out, means, row_keys + [label for _, label in metrics]


def write_table(rows: list[dict], means: list[dict], columns: list[str], stem: str, lower_is_better=(), caption: str = "",
                unranked=(), groups: list | None = None) -> None:
    """CSV with the raw strings, Markdown and LaTeX (booktabs) with the best mean of each column in bold:
    the lowest for columns in `lower_is_better`, none for `unranked`; among rows of one `groups` value if given."""
    groups = groups or [None] * len(rows)
    best = {}
    for col in columns:
        for group in set(groups):
            values = [m.get(col) for m, g in zip(means, groups) if g == group and m.get(col) is not None]
            if values and col not in unranked:
                best[(group, col)] = min(values) if col in lower_is_better else max(values)

    def is_best(row, mean, col, group):
        return bool(row.get(col)) and (group, col) in best and mean.get(col) == best[(group, col)]

    stem = Path(stem)
    with atomic_path(stem.with_suffix(".csv")) as tmp:
        pl.DataFrame(rows, schema={c: pl.Utf8 for c in columns}, orient="row").write_csv(tmp)

    def text(row, mean, col, group):
        value = row.get(col, "")
        return f"**{value}**" if is_best(row, mean, col, group) else value

    md = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    md += ["| " + " | ".join(text(r, m, c, g) for c in columns) + " |" for r, m, g in zip(rows, means, groups)]
    if not rows:
        md.append("| " + " | ".join(["(no data in this study)"] + [""] * (len(columns) - 1)) + " |")
    with atomic_path(stem.with_suffix(".md")) as tmp:
        tmp.write_text((f"{caption}\n\n" if caption else "") + "\n".join(md) + "\n")

    def tex(value: str) -> str:
        return value.replace("±", r"$\pm$").replace("_", r"\_").replace("%", r"\%").replace("&", r"\&")

    def tex_cell(row, mean, col, group):
        value = tex(row.get(col, ""))
        return r"\textbf{" + value + "}" if is_best(row, mean, col, group) else value

    lines = [r"\begin{tabular}{" + "l" * len(columns) + "}", r"\toprule", " & ".join(tex(c) for c in columns) + r" \\", r"\midrule"]
    lines += [" & ".join(tex_cell(r, m, c, g) for c in columns) + r" \\" for r, m, g in zip(rows, means, groups)]
    lines += [r"\bottomrule", r"\end{tabular}"]
    with atomic_path(stem.with_suffix(".tex")) as tmp:
        tmp.write_text("\n".join(lines) + "\n")


OTHER_METRICS = [("rouge2", "ROUGE-2"), ("rougeL", "ROUGE-L"), ("perplexity", "perplexity"), ("distinct_2", "distinct-2"),
                 ("repetition", "repetition")]


def tables(frame: pl.DataFrame, out_dir: str, intensity: float, eval_order: list[str]) -> dict[str, str]:
    """Write every table; returns name -> Markdown text (for the summary). A study with more than one decoder
    has the decoder among each table's row keys; untrained models are rows like the others, marked."""
    out = Path(out_dir)
    written = {}
    decoder = ["decoder"] if frame["decoder"].n_unique() > 1 else []
    any_untrained = (frame["objective"] == UNTRAINED).any()
    frame = shown_objective(frame)
    untrained_note = f"; {UNTRAINED_LABEL}: the model as released, not trained here" if any_untrained else ""
    metrics = [("mauve", "MAUVE"), ("rouge1", "ROUGE-1")]
    methods = method_frame(frame, intensity)
    specs = {
        "table1": (methods, ["model", "objective", *decoder, "perturbation"], "eval_set", metrics,
                   f"Table 1: MAUVE and ROUGE-1 (mean ± 2 SE over runs), without and with insertion at {intensity:g}"
                   f"{untrained_note}."),
        "emo_brier": (methods.filter(pl.col("objective").is_in(["emo", "brier"])), ["model", "objective", *decoder, "perturbation"],
                      "eval_set", metrics, "EMO and Brier without and with perturbation (MAUVE, ROUGE-1)."),
    }
    same = frame.filter(pl.col("train_intensity") == pl.col("test_intensity"))
    same = same.filter((pl.col("train_strategy") == pl.col("test_strategy")) | (pl.col("train_intensity") == 0))
    strategies = pl.concat([same.filter(pl.col("train_intensity") == 0).with_columns(pl.lit(s).alias("strategy"))
                            for s in ("insertion", "replacement", "deletion")] +
                           [same.filter(pl.col("train_intensity") > 0).with_columns(pl.col("train_strategy").alias("strategy"))])
    strategies = strategies.with_columns(pl.col("train_intensity").map_elements(lambda x: f"{x:g}", return_dtype=pl.Utf8).alias("intensity"))
    specs["strategies"] = (strategies, ["model", "objective", *decoder, "eval_set", "strategy"], "intensity", [("mauve", "MAUVE")],
                           "Perturbation strategies: MAUVE (mean ± 2 SE) by intensity, same strategy and intensity at training and sampling.")
    ablation = ablation_frame(frame, intensity)
    specs["ablation"] = (ablation, ["model", "objective", *decoder, "eval_set"], "condition", [("mauve", "MAUVE")],
                         "Ablation: perturbation at training, at sampling, both, or neither (MAUVE, mean ± 2 SE).")
    for name, (sub, rows_k, col_k, mets, caption) in specs.items():
        order = [e for e in eval_order if e in set(sub[col_k].to_list())] if col_k == "eval_set" else None
        if col_k == "intensity":
            order = sorted(set(sub[col_k].to_list()), key=float)
        if col_k == "condition":
            order = [c for c in ABLATION if c in set(sub[col_k].to_list())]
        rows, means, columns = pivot_cells(sub, rows_k, col_k, mets, order)
        write_table(rows, means, columns, str(out / name), caption=caption)
        written[name] = (out / f"{name}.md").read_text()

    # Other metrics peers report, long (one row per eval set): 20 columns of a wide table do not read in Markdown.
    rank = {e: i for i, e in enumerate(eval_order)}
    other = methods.filter(pl.any_horizontal(pl.col(f"{m}_mean" if m != "perplexity" else m).is_not_null() for m, _ in OTHER_METRICS))
    other = other.with_columns(pl.col("eval_set").replace_strict(rank, default=len(rank), return_dtype=pl.Int64).alias("_order"))
    other = other.sort(["_order", "eval_set", "model", "objective", pl.col("perturbation") != "no", "perturbation", "decoder", "seed"])
    rows, means, columns = long_cells(other, ["eval_set", "model", "objective", "perturbation", "decoder"], OTHER_METRICS)
    write_table(rows, means, columns, str(out / "metrics"), lower_is_better={"perplexity"},
                unranked={"distinct-2", "repetition"}, groups=other["eval_set"].to_list(),
                caption="Other metrics peers report (mean ± 2 SE over runs; perplexity of the model on the eval set's human "
                        "text, which no sampling setting changes). Bold: best per eval set; distinct-2 (share of distinct "
                        "bigrams) and repetition are descriptive, not ranked.")
    written["metrics"] = (out / "metrics.md").read_text()
    return written


def paper_comparison(frame: pl.DataFrame, config: dict, intensity: float) -> str:
    """Our MAUVE beside the paper's Table 1 where models and eval sets are the paper's; else a sentence."""
    hub_name = {k: m.get("name") for k, m in config["models"].items() if m["source"] == "hf"}
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
                    hit = methods.filter((pl.col("model") == key) & (pl.col("objective") == objective)
                                         & (pl.col("perturbation") == label) & (pl.col("eval_set") == sets.get(paper_set, "")))
                    ours.append(f"{cell(hit['mauve_mean'][0], hit['mauve_2se'][0])} (paper {paper_value:.2f})" if hit.height else f"(paper {paper_value:.2f})")
                if any("±" in o or o[0].isdigit() for o in ours):
                    lines.append(f"| {key} | {objective} | {label} | " + " | ".join(ours) + " |")
    if not lines:
        return "No model and eval set of this study is one of the paper's, so there are no paper numbers to compare with.\n"
    head = "| model | objective | perturbation | " + " | ".join(PAPER_EVAL_SETS) + " |\n|" + "---|" * 7 + "\n"
    return "MAUVE, ours (mean ± 2 SE) beside the paper's Table 1:\n\n" + head + "\n".join(lines) + "\n"


def _file_source(record: dict) -> str:
    """One file of a split's provenance: where it came from and its sha256."""
    where = record.get("url") or record.get("path", "?")
    if record.get("member"):
        where += f" (member {record['member']})"
    if record.get("head_bytes"):
        where += f" (first {record['head_bytes']} bytes, whole lines)"
    pinned = "" if "pinned_sha256" not in record else (
        " (pinned)" if record["pinned_sha256"] else " (not pinned: set this sha256 in the config to pin it)")
    return f"{where}: sha256 `{record.get('sha256', '?')}`{pinned}"


def _sources(provenance: dict, source: str) -> list[str]:
    if source == "hf":
        return [f"hub dataset {provenance['path']} ({provenance.get('name')}), split {provenance.get('hub_split')}, "
                f"revision {provenance.get('revision') or 'unpinned (latest)'}, datasets fingerprint "
                f"`{provenance.get('fingerprint')}`"]
    if source == "builtin":
        return [f"builtin language, grammar seed {provenance.get('seed')}, {provenance.get('n_docs')} documents"]
    lines = [_file_source(f) for f in provenance.get("files", [])]
    if provenance.get("archive"):
        archive = provenance["archive"]
        pinned = "pinned" if archive.get("pinned") else "not pinned: set this sha256 in the config to pin it"
        lines.insert(0, f"archive {archive['url']}: sha256 `{archive['sha256']}` ({pinned})")
    return lines


def data_record(path: str) -> dict:
    """A split's record, named by its path (results/data/<dataset>/<split>.json): one taken from the output cache
    was written by the study that first built it, possibly under another name for the same data."""
    record = json.loads(Path(path).read_text())
    return {**record, "dataset": Path(path).parent.name, "split": Path(path).stem}


def data_section(records: list[dict]) -> str:
    """Where every split came from and how it was built: source, checksums, recipe and each step's rows."""
    lines = []
    for r in sorted(records, key=lambda r: (r["dataset"], r["split"])):
        steps = " → ".join(f"{s['step']} {s['rows']}" for s in r.get("steps", []))
        lines.append(f"- **{r['dataset']}/{r['split']}** (recipe {r.get('recipe', 'raw')}, cleaning {r['cleaning']}): "
                     f"{steps}; {r['rows_written']} rows, sha256 of the rows `{r.get('rows_sha256', '?')}`")
        lines += [f"  - {line}" for line in _sources(r["provenance"], r["source"])]
        if r.get("top_up"):
            top = r["top_up"]
            lines.append(f"  - top-up: {top['rows']} rows (doc_id {top['first_doc_id']} on) from {top['split']}, after "
                         f"its first {top['skipped']} filtered rows:")
            lines += [f"    - {line}" for line in _sources(r["top_up_provenance"], r["source"])]
    return "\n".join(lines) + "\n"


def _distinct(frame: pl.DataFrame, column: str) -> str:
    """The values of a column with how many metrics files hold each, most frequent first."""
    counts = frame.filter(pl.col(column).is_not_null()).group_by(column).len().sort(["len", column], descending=[True, False])
    return "; ".join(f"`{v}` ({n} files)" for v, n in counts.rows()) or "not recorded"


def provenance_section(frame: pl.DataFrame) -> str:
    """Which code, libraries, featuriser and settings made the numbers, as the metrics files record it: every
    distinct value, so a mixed study shows (MAUVE's maintainers: compare only scores computed with identical
    settings)."""
    files = frame.filter(pl.col("mauve_mean").is_not_null() | pl.col("rouge1_mean").is_not_null())
    recorded = files.filter(pl.col("git_commit").is_not_null() | pl.col("settings_sha256").is_not_null())
    if recorded.height == 0:
        return "No metrics file of this study records its provenance (written before provenance was recorded).\n"
    commits = recorded.filter(pl.col("git_commit").is_not_null()).group_by("git_commit").agg(
        pl.len(), pl.col("git_dirty").any().alias("dirty")).sort(["len", "git_commit"], descending=[True, False])
    lines = ["- Code: " + ("; ".join(f"commit `{c}`{' (dirty: uncommitted changes)' if dirty else ''} ({n} files)"
                                     for c, n, dirty in commits.rows()) or "commit not recorded")]
    if commits.height > 1:
        lines.append(f"- ⚠ Warning: the metrics come from {commits.height} different commits; numbers made by different "
                     "code may not be comparable.")
    for label, packages in (("Libraries", ("torch", "transformers", "mauve-text")), ("Also", ("python", "rouge-score", "workflow"))):
        lines.append(f"- {label}: " + "; ".join(f"{v} {_distinct(recorded, version_column(v))}" for v in packages))
    lines.append(f"- MAUVE featuriser: {_distinct(recorded, 'featuriser')}")
    lines.append(f"- Evaluation settings (sha256): {_distinct(recorded, 'settings_sha256')}")
    if recorded.height < files.height:
        lines.append(f"- {files.height - recorded.height} of {files.height} metrics files record no provenance.")
    return "\n".join(lines) + "\n"


def variance_line(frame: pl.DataFrame) -> str:
    """One line: how much of MAUVE's run-to-run variance is k-means clustering rather than sampling."""
    share = frame["mauve_clustering_share"].drop_nulls()
    if not share.len():
        return "MAUVE's variance split (clustering vs sampling) is not recorded in these metrics files.\n"
    return (f"MAUVE variance split: k-means clustering accounts for a median {share.median():.0%} of the variance of "
            f"the per-(run, clustering seed) scores over {share.len()} conditions (range {share.min():.0%}–{share.max():.0%}); "
            "the rest is sampling.\n")


def summary(frame: pl.DataFrame, config: dict, written: dict[str, str], intensity: float, figures: list[str],
            simulation: str | None = None, data: list[dict] | None = None, contrasts: pl.DataFrame | None = None,
            lab: dict[str, str] | None = None) -> str:
    """results/summary.md: provenance first, then the tables, the paired comparisons and the rest.
    `simulation`: the simulation study's summary.md (its table), included as a section; `data`: the data
    stage's records of the splits the study read, listed with their sources; `contrasts`: the paired
    comparisons of workflow_lib.contrasts; `lab`: the theory lab's uncertainty.md of each lab experiment."""
    models = frame.select(KEYS[:9]).unique()
    untrained = models.filter(pl.col("objective") == UNTRAINED).height
    objectives = sorted(set(frame["objective"].to_list()) - {UNTRAINED})
    decoders = sorted(set(frame["decoder"].to_list()))
    parts = [
        "# Summary of the study\n",
        "## Provenance\n", provenance_section(frame),
        f"{models.height - untrained} trained models" + (f" and {untrained} {UNTRAINED_LABEL} models" if untrained else "") +
        f", {frame.select('eval_set').unique().height} eval sets, {frame.height} evaluated "
        f"(model, eval set, sampling condition) combinations; objectives: {', '.join(objectives) or 'none'}; "
        f"decoders: {', '.join(decoders)}; headline perturbation: insertion at {intensity:g}.\n",
        "Each MAUVE / ROUGE cell is the mean over sampling runs ± 2 standard errors; an empty cell is a combination "
        "this configuration does not define." + (f" {UNTRAINED_LABEL}: the model as released, evaluated without training."
                                                  if untrained else "") + "\n",
        variance_line(frame),
        "## Headline table\n", written.get("table1", ""),
        "## Other metrics\n", written.get("metrics", ""),
        "## Ablation\n", written.get("ablation", ""),
    ]
    if contrasts is not None:
        parts += ["## Paired comparisons\n", paired_section(contrasts)]
    parts += ["## Paper comparison\n", paper_comparison(frame, config, intensity)]
    if frame["tv_mean"].drop_nulls().len():
        tv = shown_objective(frame.filter(pl.col("tv_mean").is_not_null()))
        parts += ["## Exact extrapolation error (builtin corpus)\n",
                  "Total variation between the model's next-word law and the grammar's, on in-support (`test`) and "
                  "out-of-support (`ood`) prefixes (lower is better):\n"]
        rows, means, columns = pivot_cells(tv.with_columns(pl.col("train_intensity").cast(pl.Utf8).alias("train α"),
                                                           pl.col("test_intensity").cast(pl.Utf8).alias("test α")),
                                           ["objective", *(["decoder"] if len(decoders) > 1 else []), "train α", "test α"],
                                           "eval_set", [("tv", "TV")])
        parts.append("| " + " | ".join(columns) + " |\n|" + "---|" * len(columns) + "\n" +
                     "\n".join("| " + " | ".join(r[c] for c in columns) + " |" for r in rows) + "\n")
    for experiment, text in (lab or {}).items():
        parts += [f"## Theory lab: extrapolation uncertainty of `{experiment}` (paper Section 3)\n", text.strip() + "\n",
                  f"Figure: `results/lab/{experiment}/figure.png`; table: `results/lab/{experiment}/uncertainty.csv`.\n"]
    if simulation:
        body = simulation.split("\n", 1)[1] if simulation.startswith("# ") else simulation
        parts += ["## Simulation study (paper Section 4)\n", body.strip() + "\n",
                  "Figure: `results/simulation/figure.png` (one panel per vocabulary size, MAE against intensity).\n"]
    if data:
        parts += ["## Data\n", "Each split the study read: its recipe's steps with the rows left after each, and the "
                  "source and sha256 of every file (README, Configuring a study).\n", data_section(data)]
    if figures:
        parts += ["## Figures\n", "\n".join(f"- `{f}`" for f in figures) + "\n"]
    parts.append("Tables are also in `results/report/tables/` as CSV, Markdown and LaTeX; the paired comparisons in "
                 "`results/report/contrasts.csv`.\n")
    return "\n".join(parts)


def examples(prompts_path: str, sample_paths: list[str], stem: str, prompt_index: int = 0) -> None:
    """One prompt, its human continuation, and run 0 of every method's continuation of it."""
    import pyarrow.parquet as pq

    prompts = pq.read_table(prompts_path).to_pylist()
    prompt = prompts[min(prompt_index, len(prompts) - 1)]
    rows = [{"method": "human", "continuation": prompt["reference"][len(prompt["prefix"]):].strip()}]
    conditions = {path: parse_path(str(path).replace("results/samples/", "results/metrics/").replace(".parquet", ".json"))
                  for path in sample_paths}
    several_decoders = len({c["decoder"] for c in conditions.values()}) > 1
    for path in sorted(sample_paths):
        fields = conditions[path]
        samples = pq.read_table(path).to_pylist()
        text = next((s["text"] for s in samples if s["prompt_id"] == prompt["prompt_id"] and s["run"] == 0), "")
        objective = UNTRAINED_LABEL if fields["objective"] == UNTRAINED else fields["objective"]
        label = (f"{fields['model']} {objective} train {fields['train_strategy']} {fields['train_intensity']}, "
                 f"sample {fields['test_strategy']} {fields['test_intensity']} ({fields['test_mode']})"
                 + (f", decoder {fields['decoder']}" if several_decoders else ""))
        rows.append({"method": label, "continuation": text.strip()})
    columns = ["method", "continuation"]
    write_table(rows, [{} for _ in rows], columns, stem, caption=f"Prompt: {prompt['prefix']}")


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m workflow_lib.report")
    sub = parser.add_subparsers(dest="command", required=True)
    co = sub.add_parser("collect")
    co.add_argument("--output", required=True)
    co.add_argument("inputs", nargs="*")
    tb = sub.add_parser("tables")
    tb.add_argument("--metrics", required=True)
    tb.add_argument("--config", required=True, help="JSON: the validated config")
    tb.add_argument("--settings", required=True, help="JSON: headline intensity, eval set order, figures")
    tb.add_argument("--out-dir", required=True)
    tb.add_argument("--summary", required=True)
    tb.add_argument("--simulation", nargs="?", help="the simulation study's summary.md, if it ran")
    tb.add_argument("--data", nargs="*", default=[], help="results/data/<dataset>/<split>.json records to list")
    tb.add_argument("--contrasts", help="results/report/contrasts.csv (python -m workflow_lib.contrasts), if any")
    tb.add_argument("--lab", nargs="*", default=[], help="results/lab/<experiment>/uncertainty.md of the theory lab")
    fg = sub.add_parser("figure")
    fg.add_argument("--metrics", required=True)
    fg.add_argument("--name", required=True)
    fg.add_argument("--stem", required=True)
    fg.add_argument("--intensity", type=float, required=True, help="the headline intensity (ablation)")
    ex = sub.add_parser("examples")
    ex.add_argument("--prompts", required=True)
    ex.add_argument("--stem", required=True)
    ex.add_argument("samples", nargs="+")
    cu = sub.add_parser("curves", help="training and validation loss of one (model, dataset)'s models")
    cu.add_argument("--stem", required=True, help="writes STEM.png and STEM.pdf")
    cu.add_argument("model_dirs", nargs="+", help="results/models/<model>/<dataset>/.../seed<n> folders")
    args = parser.parse_args()
    if args.command == "figure":
        from workflow_lib.lm_figures import FIGURES

        FIGURES[args.name](read_metrics(args.metrics), args.stem, args.intensity)
        return
    if args.command == "curves":
        from workflow_lib.lm_figures import training_curves

        training_curves(args.model_dirs, args.stem)
        return
    if args.command == "examples":
        examples(args.prompts, args.samples, args.stem)
        return
    if args.command == "collect":
        frame = collect(args.inputs)
        with atomic_path(args.output) as tmp:
            frame.write_csv(tmp)
        log.info("%d rows from %d files", frame.height, len(args.inputs))
    else:
        settings = parse_json_arg(args.settings, "report")
        config = parse_json_arg(args.config, "config")
        frame = read_metrics(args.metrics)
        written = tables(frame, args.out_dir, settings["intensity"], settings["eval_order"])
        with atomic_path(args.summary) as tmp:
            simulation = Path(args.simulation).read_text() if args.simulation else None
            records = [data_record(path) for path in args.data]
            contrasts = read_contrasts(args.contrasts) if args.contrasts else None
            tmp.write_text(summary(frame, config, written, settings["intensity"], settings.get("figures", []),
                                   simulation, records, contrasts,
                                   {Path(path).parent.name: Path(path).read_text() for path in args.lab}))


if __name__ == "__main__":
    run(main)
