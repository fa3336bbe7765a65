"""The settings the report's tables job reads, built from the config: the rule's params call this."""

from __future__ import annotations

from workflow_lib.grid import report_figures


def report_settings(config: dict) -> dict:
    return {
        "intensity": config["report"]["intensity"],
        "eval_order": list(config["eval_sets"]),
        "figures": [f"results/report/figures/{f}.png" for f in report_figures(config)],
    }
