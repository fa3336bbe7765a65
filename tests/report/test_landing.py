"""The HTML report opens on the study's findings: the tables job writes the workflow description with "What this study
found" (report.build.landing_page), which the Snakefile hands to Snakemake's report as its first page."""

from __future__ import annotations

from pathlib import Path

from docutils.core import publish_parts
from jinja2 import Environment

from workflow_lib.report.build import landing_page

REPO = Path(__file__).resolve().parents[2]
SUMMARY = """# Summary of the study

## What this study found

Generated from the numbers below (not written by hand).

- **synthetic-ood**, perturbation against none, about these checkpoints (one training seed: ...), Holm-corrected: TV to
  the true law: helped in 0, hurt in 5 (mle +0.020 [+0.012, +0.028], p_holm 0.003), |V| = 200 {not a template}.
- Size: 3 sampling runs of 50 prompts per eval set.

## Provenance

- commit `c0ffee`
"""


def test_the_first_page_is_the_description_then_the_findings_and_renders_cleanly():
    description = (REPO / "report/workflow.rst").read_text()
    page = landing_page(description, SUMMARY)
    assert page.startswith(description.rstrip()) and "What this study found\n---------------------" in page
    assert "Provenance" not in page and "commit" not in page  # the findings section only
    # Snakemake renders the description with Jinja, then docutils: no template error, no RST system message
    html = publish_parts(Environment().from_string(page).render(), writer="html")["html_body"]
    assert "System Message" not in html and "system-message" not in html
    assert "<strong>synthetic-ood</strong>" in html and "|V| = 200 {not a template}" in html
    assert html.count("<li>") == 2


def test_a_summary_without_findings_leaves_the_description_alone():
    assert landing_page("Intro.\n", "# Summary\n\n## Provenance\n") == "Intro.\n"
