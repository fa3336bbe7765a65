"""The settings the report's tables job reads, built from the config: the rule's params call these (at Snakefile parse
time: standard library only)."""

from __future__ import annotations

import os

from workflow_lib.grid import report_figures
from workflow_lib.layout import REPORT_FIGURE, REPORT_HTML, SUMMARY


def report_settings(config: dict) -> dict:
    return {
        "intensity": config["report"]["intensity"],
        "eval_order": list(config["eval_sets"]),
        "figures": [REPORT_FIGURE.format(figure=f, ext="png") for f in report_figures(config)],
    }


def report_status(workdir: str = ".") -> str | None:
    """The last line of a finished `snakemake` run (the Snakefile's onsuccess): whether the HTML report holds the
    summary it wrote, and how to refresh it (snakemake writes results, not the report: `make run` runs --report
    after the study). None where the study has no summary yet (a target short of the report)."""
    summary, html = os.path.join(workdir, SUMMARY), os.path.join(workdir, REPORT_HTML)
    if not os.path.exists(summary):
        return None
    if os.path.exists(html) and os.path.getmtime(html) >= os.path.getmtime(summary):
        return f"Report: {REPORT_HTML} is current (summary: {SUMMARY})."
    state = "is older than the summary" if os.path.exists(html) else "is not written yet"
    return (
        f"Report: {REPORT_HTML} {state}: `snakemake --report {REPORT_HTML}` (with the same --configfile) refreshes"
        " it; `make run` and the studies' runners do so after the study."
    )


def tracker_settings(config: dict, workdir: str) -> dict:
    """What the results' logging job reads: the trackers (report.report_to), their folder (training.tracking_dir)
    and the study's name, its working directory's."""
    return {
        "report_to": config["report"]["report_to"],
        "dir": config["training"]["tracking_dir"],
        "study": os.path.basename(os.path.abspath(workdir)),
    }


def report_view(config: dict) -> dict:
    """The part of a validated config that the summary reads (models' sources, names and stand-ins; the eval sets'
    datasets' paths and names): the tables job's config param holds only this, so that an edit anywhere else (a
    tracker, a training key, a comment) does not rerun the report."""
    used = {spec["dataset"] for spec in config.get("eval_sets", {}).values()}
    return {
        "models": {
            key: {f: m[f] for f in ("source", "name", "stand_in_for") if f in m}
            | ({"hub": {"name": m["hub"]["name"]}} if m.get("hub") else {})  # a pinned download's hub name
            for key, m in config["models"].items()
        },
        "eval_sets": {es: {"dataset": spec["dataset"]} for es, spec in config.get("eval_sets", {}).items()},
        "datasets": {
            ds: {f: config["datasets"][ds][f] for f in ("path", "name") if f in config["datasets"][ds]}
            for ds in sorted(used)
        },
    }
