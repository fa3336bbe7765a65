"""results/summary.md: the provenance of the numbers (versions, commit, data records), the tables, the MAUVE variance
split and the paired comparisons of `contrasts`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

import polars as pl

from workflow_lib.constants import UNTRAINED
from workflow_lib.report.collect import version_column
from workflow_lib.report.conditions import KEYS, UNTRAINED_LABEL, shown_objective
from workflow_lib.report.instrument import controls_section
from workflow_lib.report.paired_tables import paired_section
from workflow_lib.report.resolution import BLIND, STATUS, refused, resolved
from workflow_lib.report.seeds import pool_seeds
from workflow_lib.report.tables import INTERVAL, paper_comparison, pivot_cells, rehearsal_stand_ins


def _file_source(record: dict) -> str:
    """One file of a split's provenance: where it came from and its sha256."""
    where = record.get("url") or record.get("path", "?")
    if record.get("member"):
        where += f" (member {record['member']})"
    if record.get("head_bytes"):
        where += f" (first {record['head_bytes']} bytes, whole lines)"
    pinned = (
        ""
        if "pinned_sha256" not in record
        else (" (pinned)" if record["pinned_sha256"] else " (not pinned: set this sha256 in the config to pin it)")
    )
    return f"{where}: sha256 `{record.get('sha256', '?')}`{pinned}"


def _sources(provenance: dict, source: str) -> list[str]:
    if source == "hf":
        return [
            (
                f"hub dataset {provenance['path']} ({provenance.get('name')}), split {provenance.get('hub_split')}, "
                f"revision {provenance.get('revision') or 'unpinned (latest)'}, datasets fingerprint "
                f"`{provenance.get('fingerprint')}`"
            )
        ]
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
        lines.append(
            f"- **{r['dataset']}/{r['split']}** (recipe {r.get('recipe', 'raw')}, cleaning {r['cleaning']}): "
            f"{steps}; {r['rows_written']} rows, sha256 of the rows `{r.get('rows_sha256', '?')}`"
        )
        lines += [f"  - {line}" for line in _sources(r["provenance"], r["source"])]
        if r.get("top_up"):
            top = r["top_up"]
            lines.append(
                f"  - top-up: {top['rows']} rows (doc_id {top['first_doc_id']} on) from {top['split']}, after "
                f"its first {top['skipped']} filtered rows:"
            )
            lines += [f"    - {line}" for line in _sources(r["top_up_provenance"], r["source"])]
    return "\n".join(lines) + "\n"


def _distinct(frame: pl.DataFrame, column: str) -> str:
    """The values of a column with how many metrics files hold each, most frequent first."""
    counts = (
        frame.filter(pl.col(column).is_not_null())
        .group_by(column)
        .len()
        .sort(["len", column], descending=[True, False])
    )
    return "; ".join(f"`{v}` ({n} files)" for v, n in counts.rows()) or "not recorded"


def provenance_section(frame: pl.DataFrame) -> str:
    """Which code, libraries, featuriser and settings made the numbers, as the metrics files record it: every
    distinct value, so a mixed study shows (MAUVE's maintainers: compare only scores computed with identical
    settings)."""
    files = frame.filter(pl.col("mauve_mean").is_not_null() | pl.col("rouge1_mean").is_not_null())
    recorded = files.filter(pl.col("git_commit").is_not_null() | pl.col("settings_sha256").is_not_null())
    if recorded.height == 0:
        return "No metrics file of this study records its provenance (written before provenance was recorded).\n"
    commits = (
        recorded.filter(pl.col("git_commit").is_not_null())
        .group_by("git_commit")
        .agg(pl.len(), pl.col("git_dirty").any().alias("dirty"))
        .sort(["len", "git_commit"], descending=[True, False])
    )
    lines = [
        "- Code: "
        + (
            "; ".join(
                f"commit `{c}`{' (dirty: uncommitted changes)' if dirty else ''} ({n} files)"
                for c, n, dirty in commits.rows()
            )
            or "commit not recorded"
        )
    ]
    if commits.height > 1:
        lines.append(
            f"- ⚠ Warning: the metrics come from {commits.height} different commits; numbers made by different "
            "code may not be comparable."
        )
    for label, packages in (
        ("Libraries", ("torch", "transformers", "mauve-text")),
        ("Also", ("python", "rouge-score", "workflow")),
    ):
        lines.append(f"- {label}: " + "; ".join(f"{v} {_distinct(recorded, version_column(v))}" for v in packages))
    lines.append(f"- MAUVE featuriser: {_distinct(recorded, 'featuriser')}")
    lines.append(f"- Evaluation settings (sha256): {_distinct(recorded, 'settings_sha256')}")
    if recorded.height < files.height:
        lines.append(f"- {files.height - recorded.height} of {files.height} metrics files record no provenance.")
    return "\n".join(lines) + "\n"


def variance_line(frame: pl.DataFrame) -> str:
    """One line: how much of MAUVE's variance is k-means clustering rather than sampling (one-way random-effects
    ANOVA estimates, evaluate.metrics.variance_split), and how many clustering seeds a run needs for its
    clustering part to fall under its sampling part. That count follows from the share alone: with
    x = clustering share, sigma^2_c / sigma^2_s = x / (1 - x), and K seeds divide sigma^2_c by K.

    What the line may not say: the sampling part's estimate is floored at 0, and with a few runs it hits that floor
    often even when sampling varies (at 3 runs and 5 seeds, with probability 0.35-0.38 at clustering shares of
    0.80-0.83). A share of 100% is that floor: the estimate could not separate the two parts, which is not "no sampling
    variance". Floored estimates are not unbiased either, so the shares are called estimates."""
    share = resolved(frame)["mauve_clustering_share"].drop_nulls()  # a score with too few texts splits nothing
    if not share.len() and refused(frame).height:
        return (
            "MAUVE's variance split (clustering vs sampling) is not reported: no MAUVE cell of this study had "
            "enough texts per run to resolve the score.\n"
        )
    if not share.len():
        return (
            "MAUVE's variance split (clustering vs sampling) is not recorded in these metrics files (it needs "
            "at least 2 runs and 2 clustering seeds).\n"
        )
    line = (
        f"MAUVE variance split (one-way random-effects ANOVA estimates over runs × clustering seeds, the sampling "
        f"part floored at 0): k-means clustering accounts for an estimated median "
        f"{cast(float, share.median()):.0%} of the "
        f"variance of one (run, clustering seed) score over {share.len()} conditions (range "
        f"{cast(float, share.min()):.0%}–{cast(float, share.max()):.0%}); the rest is sampling. "
    )
    ratio = share.filter(share < 1)
    needed = (ratio / (1 - ratio)).floor().cast(pl.Int64) + 1
    floored = share.len() - ratio.len()
    why = (
        "the run means varied no more than their clustering noise predicts, so the estimate cannot separate "
        "sampling from clustering there; with few runs this happens often even when sampling varies"
    )
    if needed.len():
        line += (
            f"A run's score averages its clustering seeds, which divides the clustering part by their number: "
            f"{needed.sort()[needed.len() // 2]} seeds (median over conditions; at most "
            f"{cast(int, needed.max())}) put it under the "
            "sampling part"
        )
        line += (
            f". In {floored} condition(s) the estimated sampling variance is 0 (floored): {why}, and no seed "
            "count is given.\n"
            if floored
            else ".\n"
        )
    else:
        line += (
            f"In every condition the estimated sampling variance is 0 (floored): {why}, so no seed count is given.\n"
        )
    return line


VARIANCE_CAPTION = (
    "Each perturbation contrast's difference split into its sources (report.variance; docs/method.md §4, \"Variance "
    "components and the design calculator\"): between training seeds, the prompts' shared effect, how a prompt's "
    "difference moves between seeds, a text's sampling run and MAUVE's k-means seed, each an ANOVA estimate with its "
    "95% interval; `seed mean` is the variance of one seed's mean difference, what the test across seeds divides by. "
    "With 3 seeds, `seed mean`'s interval runs from 0.27 to 39.5 times its estimate (2 degrees of freedom). Every contrast's "
    "components are in tables/variance.csv; `make design` reads them to size a study for a target effect.\n\n"
)


@dataclass(frozen=True)
class StudyResults:
    """What the summary reads of a finished study: its metrics table and the rest of what the tables job is given.
    `written`: the tables' Markdown by name (report.tables); `figures`: the report's figure paths; `simulation`: the
    simulation study's summary.md (its table), included as a section; `data`: the data stage's records of the
    splits the study read, listed with their sources; `contrasts`: the paired comparisons of
    workflow_lib.report.contrasts; `lab`: the theory lab's uncertainty.md of each lab experiment; `logs`: each
    trained model folder's train_log.csv (the findings say whether validation was still falling); `controls`: MAUVE's
    controls of each eval set (report.instrument)."""

    frame: pl.DataFrame
    written: dict[str, str]
    figures: list[str] = field(default_factory=list)
    simulation: str | None = None
    data: list[dict] = field(default_factory=list)
    contrasts: pl.DataFrame | None = None
    lab: dict[str, str] = field(default_factory=dict)
    logs: dict[str, pl.DataFrame] = field(default_factory=dict)
    controls: list[dict] = field(default_factory=list)


def tv_bias_line(tv: pl.DataFrame) -> str:
    """The Monte Carlo bias the sampling-perturbed TV rows carry, as the extrapolation jobs estimated it: the
    table's caption names the bias, and a reader comparing two TVs needs its size beside the 2 SE."""
    perturbed = tv.filter((pl.col("tv_draws") > 1) & pl.col("tv_bias_estimate").is_not_null())
    if not perturbed.height:
        return ""
    worst = perturbed.sort("tv_bias_estimate", descending=True).row(0, named=True)
    bias, draws, least_2se = float(worst["tv_bias_estimate"]), int(worst["tv_draws"]), perturbed["tv_2se"].min()
    return (
        f" Here the split-half estimate of that bias (it sizes it, it does not bound it) is at most {bias:.2g} over "
        f"the {perturbed.height} sampling-perturbed rows, at {draws} draws; their smallest 2 SE is "
        f"{cast(float, least_2se):.2g}."
    )


def summary(results: StudyResults, config: dict, intensity: float) -> str:
    """results/summary.md: what the study found (at a glance, report.glance, then in detail), what MAUVE can see,
    provenance, then the tables, the paired comparisons and the rest."""
    frame, written, figures, simulation = results.frame, results.written, results.figures, results.simulation
    data, contrasts, lab, logs = results.data, results.contrasts, results.lab, results.logs
    from workflow_lib.report.aa_null import null_sentences
    from workflow_lib.report.design_range import neftune_lines
    from workflow_lib.report.dose_response import trend_findings, trend_rows, trend_table
    from workflow_lib.report.findings import findings_section
    from workflow_lib.report.glance import glance_section
    from workflow_lib.report.multiplicity import multiplicity_sentence
    from workflow_lib.report.realised import CAPTION as REALISED_CAPTION
    from workflow_lib.report.realised import realised_table
    from workflow_lib.report.theory_check import theory_findings, theory_table

    theory = theory_findings(frame, contrasts)
    theory_rows = theory_table(frame, contrasts)
    trends = trend_rows(frame)
    dose = trend_findings(trends)
    design = neftune_lines(list((logs or {}).keys()))
    multiplicity = multiplicity_sentence(contrasts)
    null = null_sentences(contrasts)
    realised = realised_table(frame, list((logs or {}).keys()))

    models = frame.select(KEYS[:9]).unique()
    untrained = models.filter(pl.col("objective") == UNTRAINED).height
    objectives = sorted(set(frame["objective"].to_list()) - {UNTRAINED})
    decoders = sorted(set(frame["decoder"].to_list()))
    rehearsal = rehearsal_stand_ins(config)
    parts = [
        "# Summary of the study\n",
        *(
            [
                (
                    f"**A rehearsal on stand-ins, whose numbers mean nothing**: {rehearsal}. It shows that the study runs end to "
                    "end, not what it finds.\n"
                )
            ]
            if rehearsal
            else []
        ),
        "## What this study found\n",
        glance_section(contrasts, frame, results.controls),
        "### In detail\n",
        *(
            [
                "**Where the theory predicts a gain** (per builtin eval set: the prediction, then the measurement, "
                "then whether they agree; docs/default-study.md):\n\n"
                + "".join(f"- {s}\n" for s in theory)
                + "\n"
                + (f"{theory_rows}\n" if theory_rows else "")
            ]
            if theory
            else []
        ),
        *(
            [
                "**The dose-response** (one test of the slope across the perturbed intensities, training seeds as its "
                'unit; docs/method.md §4, "The dose-response"):\n\n' + "".join(f"- {s}\n" for s in dose) + "\n"
            ]
            if dose
            else []
        ),
        findings_section(frame, contrasts, logs or {}, results.controls),
        *(
            ["".join(f"- {s}\n" for s in [*design, *([multiplicity] if multiplicity else [])]) + "\n"]
            if design or multiplicity
            else []
        ),
        *(
            [
                '## The A/A null\n\nOne method against itself (`report.aa_null`; docs/method.md §4, "The A/A null"): '
                "the seed-level test across training seeds.\n\n" + "".join(f"- {s}\n" for s in null) + "\n"
            ]
            if null
            else []
        ),
        "## What MAUVE can see here\n",
        controls_section(results.controls, written.get("controls", "")),
        *(["## The synonyms the perturbation draws\n", written["synonyms"]] if "synonyms" in written else []),
        *(
            ["## Where the variance comes from\n", VARIANCE_CAPTION, written["variance"]]
            if "variance" in written
            else []
        ),
        *(["## Perturbation realised\n", REALISED_CAPTION, realised] if realised else []),
        "## Provenance\n",
        provenance_section(frame),
        f"{models.height - untrained} trained models"
        + (f" and {untrained} {UNTRAINED_LABEL} models" if untrained else "")
        + f", {frame.select('eval_set').unique().height} eval sets, {frame.height} evaluated "
        f"(model, eval set, sampling condition) combinations; objectives: {', '.join(objectives) or 'none'}; "
        f"decoders: {', '.join(decoders)}; headline perturbation: insertion at {intensity:g}.\n",
        f"Each MAUVE / ROUGE cell is the {INTERVAL}; an empty cell is a combination "
        "this configuration does not define. Bold marks the largest mean of a column, not a significant difference: "
        "what is significant is the ✱ of the paired comparisons below."
        + (f" {UNTRAINED_LABEL}: the model as released, evaluated without training." if untrained else "")
        + (
            ' A MAUVE cell that reads "too few texts (n)" had n texts per side in a run, fewer than '
            "evaluation.mauve.min_texts: it is not reported, compared or marked."
            if refused(frame).filter(~pl.col(STATUS).str.starts_with(BLIND)).height
            else ""
        )
        + (
            ' A MAUVE cell that reads "MAUVE cannot see ..." is one whose eval set\'s controls failed ("What MAUVE '
            'can see here"): it is not reported, compared or marked.'
            if refused(frame).filter(pl.col(STATUS).str.starts_with(BLIND)).height
            else ""
        )
        + "\n",
        variance_line(frame),
        "## Headline table\n",
        written.get("table1", ""),
        "## Other metrics\n",
        written.get("metrics", ""),
        "## Ablation\n",
        written.get("ablation", ""),
    ]
    if trends.height:
        parts += [
            "## Dose-response\n",
            (
                "Per arm and metric: the mean over training seeds at each perturbed intensity, and the mean of the "
                "seeds' least-squares slopes on log2(α) with its 95% t interval (df = seeds - 1); Holm over every row "
                "of this table. MAUVE's prediction is the paper's (its curve falls over 0.025-0.4); the others have "
                "none.\n\n"
            ),
            trend_table(trends),
        ]
    if contrasts is not None:
        parts += ["## Paired comparisons\n", paired_section(contrasts)]
    parts += ["## Paper comparison\n", paper_comparison(frame, config, intensity)]
    if frame["tv_mean"].drop_nulls().len():
        tv = shown_objective(pool_seeds(frame.filter(pl.col("tv_mean").is_not_null())))  # a row per condition
        parts += [
            "## Extrapolation error against the exact law (builtin corpus)\n",
            (
                "Total variation between the model's next-word law and the grammar's exact one, on in-support "
                "(`test`) and out-of-support (`ood`) prefixes (lower is better; ± 2 SE over prefixes, or the 95% t "
                "half-width over training seeds where a condition has several). A condition "
                "that perturbs at sampling averages its law over the test perturbation's draws, which biases its TV "
                "upward by a little (docs/method.md, 'The exact TV's Monte Carlo bias')." + tv_bias_line(tv) + "\n"
            ),
        ]
        # which perturbation, where a study has several strategies (insertion's and the embedding space's rows at
        # one intensity are different conditions)
        strategies = (set(tv["train_strategy"].to_list()) | set(tv["test_strategy"].to_list())) - {"none", None}
        named = len(strategies) > 1
        # several synonym tables: each its own row (a pivot keyed without them would merge two arms into one cell)
        synonyms_vary = tv["train_synonyms"].n_unique() > 2 or tv["test_synonyms"].n_unique() > 2
        rows, _means, columns = pivot_cells(
            tv.with_columns(
                pl.col("train_strategy").alias("train T"),
                pl.col("train_intensity").cast(pl.Utf8).alias("train α"),
                pl.col("test_strategy").alias("test T"),
                pl.col("test_intensity").cast(pl.Utf8).alias("test α"),
                pl.col("train_synonyms").alias("train synonyms"),
                pl.col("test_synonyms").alias("test synonyms"),
            ),
            [
                *(["model"] if tv["model"].n_unique() > 1 else []),
                "objective",
                *(["decoder"] if len(decoders) > 1 else []),
                *(["train T"] if named else []),
                "train α",
                *(["train synonyms"] if synonyms_vary else []),
                *(["test T"] if named else []),
                "test α",
                *(["test synonyms"] if synonyms_vary else []),
            ],
            "eval_set",
            [("tv", "TV")],
        )
        parts.append(
            "| "
            + " | ".join(columns)
            + " |\n|"
            + "---|" * len(columns)
            + "\n"
            + "\n".join("| " + " | ".join(r[c] for c in columns) + " |" for r in rows)
            + "\n"
        )
    for experiment, text in (lab or {}).items():
        parts += [
            f"## Theory lab: extrapolation uncertainty of `{experiment}` (paper Section 3)\n",
            text.strip() + "\n",
            f"Figure: `results/lab/{experiment}/figure.png`; table: `results/lab/{experiment}/uncertainty.csv`.\n",
        ]
    if simulation:
        body = simulation.split("\n", 1)[1] if simulation.startswith("# ") else simulation
        parts += [
            "## Simulation study (paper Section 4)\n",
            body.strip() + "\n",
            "Figure: `results/simulation/figure.png` (one panel per vocabulary size, MAE against intensity).\n",
        ]
    if data:
        parts += [
            "## Data\n",
            (
                "Each split the study read: its recipe's steps with the rows left after each, and the "
                "source and sha256 of every file (docs/usage.md, 'Configuring a study').\n"
            ),
            data_section(data),
        ]
    if figures:
        parts += ["## Figures\n", "\n".join(f"- `{f}`" for f in figures) + "\n"]
    parts.append(
        "Tables are also in `results/report/tables/` as CSV, Markdown and LaTeX; the paired comparisons in "
        "`results/report/contrasts.csv`.\n"
    )
    return "\n".join(parts)
