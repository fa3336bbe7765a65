"""Aggregation and report: every metrics file of a study -> one tidy table -> the paper's tables and a summary.

`collect` reads the metrics (MAUVE, ROUGE, diversity), extrapolation (exact TV) and perplexity JSON files and
recovers each condition from its path (workflow_lib.report.conditions.parse_path), so the tables work for whatever
subset of the grid a config defines: a combination the config does not have is an empty cell, never a zero.
Tables are written as CSV (machine-readable), Markdown and LaTeX (booktabs), the largest mean per column in bold
(a description, not a significant difference: the captions say so; contrasts.csv holds the tests).
The summary starts with the provenance of the numbers and ends its tables with the paired comparisons of
workflow_lib.report.contrasts.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from workflow_lib.cli import parse_json_arg, run
from workflow_lib.files import atomic_path
from workflow_lib.report.collect import collect, read_metrics
from workflow_lib.report.contrasts import read_contrasts
from workflow_lib.report.summary import StudyResults, data_record, summary
from workflow_lib.report.tables import examples, tables

log = logging.getLogger("workflow_lib.report.build")


FINDINGS = "## What this study found\n"
# The workflow's report description, beside the package (the Snakefile's `report:` names it too); the tables rule
# reruns on its content (a params digest), not on its file's time, so a clone or a touch reruns nothing.
DESCRIPTION = Path(__file__).resolve().parents[2] / "report" / "workflow.rst"


def landing_page(description: str, summary_text: str) -> str:
    """The HTML report's first page (Snakemake shows the workflow description there, beside the job graph): the
    description, then the summary's "What this study found" as reStructuredText. The findings' Markdown is bold and
    bullets, which RST reads alike; a '|' would open an RST substitution and is escaped, and the block is raw for the
    Jinja pass Snakemake renders the description with."""
    if FINDINGS not in summary_text:
        return description
    findings = summary_text.split(FINDINGS, 1)[1].split("\n## ", 1)[0].strip().replace("|", "\\|")
    title = FINDINGS.removeprefix("## ").strip()
    return f"{description.rstrip()}\n\n{title}\n{'-' * len(title)}\n\n{{% raw %}}\n{findings}\n{{% endraw %}}\n"


def main() -> None:
    # @FILE: arguments read from FILE, one a line (the workflow's gather jobs get their paths so).
    parser = argparse.ArgumentParser(prog="python -m workflow_lib.report.build", fromfile_prefix_chars="@")
    sub = parser.add_subparsers(dest="command", required=True)
    co = sub.add_parser("collect")
    co.add_argument("--output", required=True)
    co.add_argument("inputs", nargs="*")
    tb = sub.add_parser("tables")
    tb.add_argument("--metrics", required=True)
    tb.add_argument(
        "--config",
        required=True,
        help="JSON: the part of the validated config the summary reads (workflow_lib.report.settings.report_view)",
    )
    tb.add_argument("--settings", required=True, help="JSON: headline intensity, eval set order, figures")
    tb.add_argument("--out-dir", required=True)
    tb.add_argument("--summary", required=True)
    tb.add_argument(
        "--description", default=str(DESCRIPTION), help="the HTML report's static description (report/workflow.rst)"
    )
    tb.add_argument("--landing", help="writes the description with the study's findings: the HTML report's first page")
    tb.add_argument("--simulation", nargs="?", help="the simulation study's summary.md, if it ran")
    tb.add_argument("--data", nargs="*", default=[], help="results/data/<dataset>/<split>.json records to list")
    tb.add_argument(
        "--contrasts", help="results/report/contrasts.csv (python -m workflow_lib.report.contrasts), if any"
    )
    tb.add_argument("--lab", nargs="*", default=[], help="results/lab/<experiment>/uncertainty.md of the theory lab")
    tb.add_argument("--models", nargs="*", default=[], help="trained model folders (their train_log.csv)")
    tb.add_argument("--controls", nargs="*", default=[], help="results/controls/<featuriser>/<eval set>.json")
    tb.add_argument(
        "--planted", nargs="*", default=[], help="results/report/planted/<featuriser>/<eval set>.json (planted.py)"
    )
    tb.add_argument("--synonyms", help="results/report/tables/synonyms.md (the synonym audit), if any")
    tb.add_argument("--variance", help="results/report/tables/variance.md (report.variance), if any")
    fg = sub.add_parser("figure")
    fg.add_argument("--metrics", required=True)
    fg.add_argument("--name", required=True)
    fg.add_argument("--stem", required=True)
    fg.add_argument("--intensity", type=float, required=True, help="the headline intensity (ablation)")
    fg.add_argument(
        "--contrasts",
        help="results/report/contrasts.csv: the extrapolation figure's paired intervals (without it: unpaired ± 2 SE)",
    )
    ex = sub.add_parser("examples")
    ex.add_argument("--prompts", required=True)
    ex.add_argument("--stem", required=True)
    ex.add_argument("samples", nargs="+")
    cu = sub.add_parser("curves", help="training and validation loss of one (model, dataset)'s models")
    cu.add_argument("--stem", required=True, help="writes STEM.png and STEM.pdf")
    cu.add_argument("model_dirs", nargs="+", help="results/models/<model>/<dataset>/.../seed<n> folders")
    args = parser.parse_args()
    if args.command == "figure":
        from workflow_lib.report.figures import FIGURES
        from workflow_lib.report.seeds import pool_seeds

        # one point per condition: a condition's training seeds pooled (report.seeds)
        contrasts = read_contrasts(args.contrasts) if args.contrasts else None
        FIGURES[args.name](pool_seeds(read_metrics(args.metrics)), args.stem, args.intensity, contrasts=contrasts)
        return
    if args.command == "curves":
        from workflow_lib.report.figures import training_curves

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
        from workflow_lib.report.instrument import controls_table, read_controls

        controls = read_controls(args.controls, args.planted)
        written["controls"] = controls_table(controls, str(Path(args.out_dir) / "controls"))
        if args.synonyms:
            written["synonyms"] = Path(args.synonyms).read_text()
        if args.variance:
            written["variance"] = Path(args.variance).read_text()
        with atomic_path(args.summary) as tmp:
            simulation = Path(args.simulation).read_text() if args.simulation else None
            records = [data_record(path) for path in args.data]
            contrasts = read_contrasts(args.contrasts) if args.contrasts else None
            from workflow_lib.report.figures import read_train_log

            tmp.write_text(
                summary(
                    StudyResults(
                        frame,
                        written,
                        figures=settings.get("figures", []),
                        simulation=simulation,
                        data=records,
                        contrasts=contrasts,
                        lab={Path(path).parent.name: Path(path).read_text() for path in args.lab},
                        logs={path: read_train_log(path) for path in args.models},
                        controls=controls,
                    ),
                    config,
                    settings["intensity"],
                )
            )
        if args.landing:
            with atomic_path(args.landing) as tmp:
                tmp.write_text(landing_page(Path(args.description).read_text(), Path(args.summary).read_text()))


if __name__ == "__main__":
    run(main)
