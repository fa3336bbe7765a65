"""The summary's MAUVE variance line: the clustering share and the clustering seeds a run needs."""

from __future__ import annotations

import polars as pl

from workflow_lib.report.summary import variance_line


def test_variance_line_reports_the_share_and_the_seeds_that_put_clustering_under_sampling():
    # shares 0.4, 0.6923 (sigma_c^2 / sigma_s^2 = 2.25) and 0.9: 1, 3 and 10 seeds; 1.0: the sampling estimate hit
    # its floor at 0, which is "could not be separated", never "no sampling variance"
    frame = pl.DataFrame({"mauve_clustering_share": [0.4, 2.25 / 3.25, 0.9, 1.0, None]})
    line = variance_line(frame)
    assert (
        "an estimated median 80% of the variance of one (run, clustering seed) score over 4 conditions (range 40%–100%)"
        in line
    )
    assert "the sampling part floored at 0" in line and "unbiased" not in line
    assert "3 seeds (median over conditions; at most 10) put it under the sampling part" in line
    assert "In 1 condition(s) the estimated sampling variance is 0 (floored)" in line
    assert "cannot separate sampling from clustering there" in line and "no sampling variance" not in line
    floored = variance_line(pl.DataFrame({"mauve_clustering_share": [1.0]}))
    assert "In every condition the estimated sampling variance is 0 (floored)" in floored and "no seed count" in floored
    assert "no sampling variance" not in floored
    assert "not recorded" in variance_line(
        pl.DataFrame({"mauve_clustering_share": [None]}, schema={"mauve_clustering_share": pl.Float64})
    )
