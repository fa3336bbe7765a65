"""Aggregation and report: every metrics file of a study -> one tidy table -> the paper's tables and a summary.

`collect` reads the metrics (MAUVE, ROUGE-1) and extrapolation (exact TV) JSON files and recovers each
condition from its path, so the tables work for whatever subset of the grid a config defines: a combination
the config does not have is an empty cell, never a zero. Tables are written as CSV (machine-readable),
Markdown and LaTeX (booktabs), best mean per column in bold.
"""

from __future__ import annotations

import argparse
import json
import logging
import re
from pathlib import Path

import polars as pl

from workflow_lib.cli import parse_json_arg, run
from workflow_lib.files import atomic_path

log = logging.getLogger("workflow_lib.report")

PATH = re.compile(
    r"results/(?P<kind>metrics|extrapolation)/(?P<model>[^/]+)/(?P<dataset>[^/]+)/(?P<objective>[^/]+)/(?P<train_synonyms>[^/]+)/"
    r"(?P<train_mode>[^/]+)-m(?P<copies>\d+)/(?P<train_strategy>[a-z]+)-(?P<train_intensity>[0-9.]+)/seed(?P<seed>\d+)/"
    r"(?P<eval_set>[^/]+)/(?P<test_synonyms>[^/]+)/(?P<test_strategy>[a-z]+)-(?P<test_intensity>[0-9.]+)-(?P<test_mode>[a-z]+)\.json$")
KEYS = ["model", "dataset", "objective", "train_synonyms", "train_mode", "copies", "train_strategy", "train_intensity", "seed",
        "eval_set", "test_synonyms", "test_strategy", "test_intensity", "test_mode"]
ABLATION = {(False, False): "NoPerturb", (True, False): "TrainPerturb", (False, True): "TestPerturb", (True, True): "Both"}

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


def collect(paths: list[str]) -> pl.DataFrame:
    """One row per (condition, eval set, test condition): metrics and TV side by side."""
    rows: dict[tuple, dict] = {}
    for path in paths:
        match = PATH.search(str(path))
        if match is None:
            raise ValueError(f"{path}: not a metrics or extrapolation path of this workflow")
        fields = match.groupdict()
        row = rows.setdefault(tuple(fields[k] for k in KEYS), {k: fields[k] for k in KEYS})
        data = json.loads(Path(path).read_text())
        if fields["kind"] == "metrics":
            row.update({k: data.get(k) for k in ("mauve_mean", "mauve_2se", "rouge1_mean", "rouge1_2se", "runs", "prompts")})
        else:
            row.update({"tv_mean": data["tv_mean"], "tv_2se": data["tv_2se"], "tv_law": data["law"]})
    schema = {k: pl.Utf8 for k in KEYS} | {"mauve_mean": pl.Float64, "mauve_2se": pl.Float64, "rouge1_mean": pl.Float64,
                                           "rouge1_2se": pl.Float64, "runs": pl.Int64, "prompts": pl.Int64,
                                           "tv_mean": pl.Float64, "tv_2se": pl.Float64, "tv_law": pl.Utf8}
    frame = pl.DataFrame([{k: r.get(k) for k in schema} for r in rows.values()], schema=schema, orient="row")
    frame = frame.with_columns(pl.col("train_intensity").cast(pl.Float64), pl.col("test_intensity").cast(pl.Float64),
                               pl.col("copies").cast(pl.Int64), pl.col("seed").cast(pl.Int64))
    return frame.sort(KEYS)


def read_metrics(path: str) -> pl.DataFrame:
    return pl.read_csv(path, schema_overrides={k: pl.Utf8 for k in KEYS if k not in ("copies", "seed")}
                       | {"train_intensity": pl.Float64, "test_intensity": pl.Float64, "mauve_2se": pl.Float64,
                          "rouge1_2se": pl.Float64, "tv_mean": pl.Float64, "tv_2se": pl.Float64, "tv_law": pl.Utf8})


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


def write_table(rows: list[dict], means: list[dict], columns: list[str], stem: str, lower_is_better=(), caption: str = "") -> None:
    """CSV with the raw strings, Markdown and LaTeX (booktabs) with the best mean of each column in bold."""
    best = {}
    for col in columns:
        values = [m.get(col) for m in means if m.get(col) is not None]
        if values:
            best[col] = min(values) if col in lower_is_better else max(values)
    stem = Path(stem)
    with atomic_path(stem.with_suffix(".csv")) as tmp:
        pl.DataFrame(rows, schema={c: pl.Utf8 for c in columns}, orient="row").write_csv(tmp)

    def text(row, mean, col, bold):
        value = row.get(col, "")
        return bold(value) if value and col in best and mean.get(col) == best[col] else value

    md = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    md += ["| " + " | ".join(text(r, m, c, lambda v: f"**{v}**") for c in columns) + " |" for r, m in zip(rows, means)]
    if not rows:
        md.append("| " + " | ".join(["(no data in this study)"] + [""] * (len(columns) - 1)) + " |")
    with atomic_path(stem.with_suffix(".md")) as tmp:
        tmp.write_text((f"{caption}\n\n" if caption else "") + "\n".join(md) + "\n")

    def tex(value: str) -> str:
        return value.replace("±", r"$\pm$").replace("_", r"\_").replace("%", r"\%").replace("&", r"\&")

    lines = [r"\begin{tabular}{" + "l" * len(columns) + "}", r"\toprule", " & ".join(tex(c) for c in columns) + r" \\", r"\midrule"]
    def tex_cell(row, mean, col):
        value = tex(row.get(col, ""))
        return r"\textbf{" + value + "}" if row.get(col) and col in best and mean.get(col) == best[col] else value

    lines += [" & ".join(tex_cell(r, m, c) for c in columns) + r" \\" for r, m in zip(rows, means)]
    lines += [r"\bottomrule", r"\end{tabular}"]
    with atomic_path(stem.with_suffix(".tex")) as tmp:
        tmp.write_text("\n".join(lines) + "\n")


def ablation_frame(frame: pl.DataFrame, intensity: float) -> pl.DataFrame:
    """The ablation's four conditions at the headline intensity (insertion), labelled."""
    frame = frame.filter(pl.col("train_intensity").is_in([0.0, intensity]) & pl.col("test_intensity").is_in([0.0, intensity])
                         & pl.col("train_strategy").is_in(["none", "insertion"]) & pl.col("test_strategy").is_in(["none", "insertion"]))
    return frame.with_columns(pl.struct(["train_intensity", "test_intensity"]).map_elements(
        lambda s: ABLATION[(s["train_intensity"] > 0, s["test_intensity"] > 0)], return_dtype=pl.Utf8).alias("condition"))


def method_frame(frame: pl.DataFrame, intensity: float) -> pl.DataFrame:
    """Table 1's rows: each objective without perturbation (train 0, test 0) and with it (both at `intensity`,
    the headline strategy insertion)."""
    plain = frame.filter((pl.col("train_intensity") == 0) & (pl.col("test_intensity") == 0))
    perturbed = frame.filter((pl.col("train_intensity") == intensity) & (pl.col("test_intensity") == intensity)
                             & (pl.col("train_strategy") == "insertion") & (pl.col("test_strategy") == "insertion"))
    return pl.concat([plain.with_columns(pl.lit("no").alias("perturbation")),
                      perturbed.with_columns(pl.lit(f"insertion {intensity:g}").alias("perturbation"))])


def tables(frame: pl.DataFrame, out_dir: str, intensity: float, eval_order: list[str]) -> dict[str, str]:
    """Write every table; returns name -> Markdown text (for the summary)."""
    out = Path(out_dir)
    written = {}
    metrics = [("mauve", "MAUVE"), ("rouge1", "ROUGE-1")]
    methods = method_frame(frame, intensity)
    specs = {
        "table1": (methods, ["model", "objective", "perturbation"], "eval_set", metrics,
                   f"Table 1: MAUVE and ROUGE-1 (mean ± 2 SE over runs), without and with insertion at {intensity:g}."),
        "emo_brier": (methods.filter(pl.col("objective").is_in(["emo", "brier"])), ["model", "objective", "perturbation"],
                      "eval_set", metrics, "EMO and Brier without and with perturbation (MAUVE, ROUGE-1)."),
    }
    same = frame.filter(pl.col("train_intensity") == pl.col("test_intensity"))
    same = same.filter((pl.col("train_strategy") == pl.col("test_strategy")) | (pl.col("train_intensity") == 0))
    strategies = pl.concat([same.filter(pl.col("train_intensity") == 0).with_columns(pl.lit(s).alias("strategy"))
                            for s in ("insertion", "replacement", "deletion")] +
                           [same.filter(pl.col("train_intensity") > 0).with_columns(pl.col("train_strategy").alias("strategy"))])
    strategies = strategies.with_columns(pl.col("train_intensity").map_elements(lambda x: f"{x:g}", return_dtype=pl.Utf8).alias("intensity"))
    specs["strategies"] = (strategies, ["model", "objective", "eval_set", "strategy"], "intensity", [("mauve", "MAUVE")],
                           "Perturbation strategies: MAUVE (mean ± 2 SE) by intensity, same strategy and intensity at training and sampling.")
    ablation = ablation_frame(frame, intensity)
    specs["ablation"] = (ablation, ["model", "objective", "eval_set"], "condition", [("mauve", "MAUVE")],
                         "Ablation: perturbation at training, at sampling, both, or neither (MAUVE, mean ± 2 SE).")
    for name, (sub, rows_k, col_k, mets, caption) in specs.items():
        order = [e for e in eval_order if e in set(sub[col_k].to_list())] if col_k == "eval_set" else None
        if col_k == "intensity":
            order = sorted(set(sub[col_k].to_list()), key=float)
        if col_k == "condition":
            order = [c for c in ABLATION.values() if c in set(sub[col_k].to_list())]
        rows, means, columns = pivot_cells(sub, rows_k, col_k, mets, order)
        write_table(rows, means, columns, str(out / name), caption=caption)
        written[name] = (out / f"{name}.md").read_text()
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
    methods = method_frame(frame, intensity)
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


def summary(frame: pl.DataFrame, config: dict, written: dict[str, str], intensity: float, figures: list[str],
            simulation: str | None = None, data: list[dict] | None = None) -> str:
    """results/summary.md. `simulation`: the simulation study's summary.md (its table), included as a section;
    `data`: the data stage's records of the splits the study read, listed with their sources."""
    n_models = frame.select(KEYS[:9]).unique().height
    parts = [
        "# Summary of the study\n",
        f"{n_models} trained models, {frame.select('eval_set').unique().height} eval sets, {frame.height} evaluated "
        f"(model, eval set, sampling condition) combinations; objectives: {', '.join(sorted(set(frame['objective'].to_list())))}; "
        f"headline perturbation: insertion at {intensity:g}.\n",
        "Each MAUVE / ROUGE-1 cell is the mean over sampling runs ± 2 standard errors; an empty cell is a combination "
        "this configuration does not define.\n",
        "## Headline table\n", written.get("table1", ""),
        "## Ablation\n", written.get("ablation", ""),
        "## Paper comparison\n", paper_comparison(frame, config, intensity),
    ]
    if frame["tv_mean"].drop_nulls().len():
        tv = frame.filter(pl.col("tv_mean").is_not_null())
        parts += ["## Exact extrapolation error (builtin corpus)\n",
                  "Total variation between the model's next-word law and the grammar's, on in-support (`test`) and "
                  "out-of-support (`ood`) prefixes (lower is better):\n"]
        rows, means, columns = pivot_cells(tv.with_columns(pl.col("train_intensity").cast(pl.Utf8).alias("train α"),
                                                           pl.col("test_intensity").cast(pl.Utf8).alias("test α")),
                                           ["objective", "train α", "test α"], "eval_set", [("tv", "TV")])
        parts.append("| " + " | ".join(columns) + " |\n|" + "---|" * len(columns) + "\n" +
                     "\n".join("| " + " | ".join(r[c] for c in columns) + " |" for r in rows) + "\n")
    if simulation:
        body = simulation.split("\n", 1)[1] if simulation.startswith("# ") else simulation
        parts += ["## Simulation study (paper Section 4)\n", body.strip() + "\n",
                  "Figure: `results/simulation/figure.png` (one panel per vocabulary size, MAE against intensity).\n"]
    if data:
        parts += ["## Data\n", "Each split the study read: its recipe's steps with the rows left after each, and the "
                  "source and sha256 of every file (README, Configuring a study).\n", data_section(data)]
    if figures:
        parts += ["## Figures\n", "\n".join(f"- `{f}`" for f in figures) + "\n"]
    parts.append("Tables are also in `results/report/tables/` as CSV, Markdown and LaTeX.\n")
    return "\n".join(parts)


def examples(prompts_path: str, sample_paths: list[str], stem: str, prompt_index: int = 0) -> None:
    """One prompt, its human continuation, and run 0 of every method's continuation of it."""
    import pyarrow.parquet as pq

    prompts = pq.read_table(prompts_path).to_pylist()
    prompt = prompts[min(prompt_index, len(prompts) - 1)]
    rows = [{"method": "human", "continuation": prompt["reference"][len(prompt["prefix"]):].strip()}]
    for path in sorted(sample_paths):
        match = PATH.search(str(path).replace("results/samples/", "results/metrics/").replace(".parquet", ".json"))
        fields = match.groupdict()
        samples = pq.read_table(path).to_pylist()
        text = next((s["text"] for s in samples if s["prompt_id"] == prompt["prompt_id"] and s["run"] == 0), "")
        label = (f"{fields['model']} {fields['objective']} train {fields['train_strategy']} {fields['train_intensity']}, "
                 f"sample {fields['test_strategy']} {fields['test_intensity']} ({fields['test_mode']})")
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
    fg = sub.add_parser("figure")
    fg.add_argument("--metrics", required=True)
    fg.add_argument("--name", required=True)
    fg.add_argument("--stem", required=True)
    fg.add_argument("--intensity", type=float, required=True, help="the headline intensity (ablation)")
    ex = sub.add_parser("examples")
    ex.add_argument("--prompts", required=True)
    ex.add_argument("--stem", required=True)
    ex.add_argument("samples", nargs="+")
    args = parser.parse_args()
    if args.command == "figure":
        from workflow_lib.lm_figures import FIGURES

        FIGURES[args.name](read_metrics(args.metrics), args.stem, args.intensity)
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
            tmp.write_text(summary(frame, config, written, settings["intensity"], settings.get("figures", []),
                                   simulation, records))


if __name__ == "__main__":
    run(main)
