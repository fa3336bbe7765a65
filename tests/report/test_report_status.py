"""The last lines of a plain `snakemake` run: whether results/report.html holds the summary it wrote
(report/settings.py, report_status; the Snakefile's onsuccess)."""

from __future__ import annotations

import os

from workflow_lib.layout import REPORT_HTML, SUMMARY
from workflow_lib.report.settings import report_status


def test_it_says_whether_the_report_is_current_and_how_to_refresh_it(tmp_path):
    assert report_status(str(tmp_path)) is None  # no summary yet: a target short of the report
    summary, html = tmp_path / SUMMARY, tmp_path / REPORT_HTML
    summary.parent.mkdir(parents=True)
    summary.write_text("# Summary\n")
    assert "is not written yet" in report_status(str(tmp_path))
    html.write_text("<html></html>")
    os.utime(html, (1_000, 1_000))
    stale = report_status(str(tmp_path))
    assert "is older than the summary" in stale and f"snakemake --report {REPORT_HTML}" in stale
    os.utime(html, (summary.stat().st_mtime + 1,) * 2)
    assert report_status(str(tmp_path)) == f"Report: {REPORT_HTML} is current (summary: {SUMMARY})."
