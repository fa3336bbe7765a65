"""The summary's MAUVE variance line: the clustering share and the clustering seeds a run needs."""

from __future__ import annotations

import polars as pl

from workflow_lib.report.summary import variance_line


def test_variance_line_reports_the_share_and_the_seeds_that_put_clustering_under_sampling():
    # shares 0.4, 0.6923 (sigma_c^2 / sigma_s^2 = 2.25) and 0.9: 1, 3 and 10 seeds; 1.0: no sampling variance
    frame = pl.DataFrame({"mauve_clustering_share": [0.4, 2.25 / 3.25, 0.9, 1.0, None]})
    line = variance_line(frame)
    assert "a median 80% of the variance of one (run, clustering seed) score over 4 conditions (range 40%–100%)" in line
    assert "3 seeds (median over conditions; at most 10) put it under the sampling part" in line
    assert "in 1 condition(s) with no sampling variance no number does" in line
    assert "no number of clustering seeds" in variance_line(pl.DataFrame({"mauve_clustering_share": [1.0]}))
    assert "not recorded" in variance_line(pl.DataFrame({"mauve_clustering_share": [None]}, schema={"mauve_clustering_share": pl.Float64}))
