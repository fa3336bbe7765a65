"""studies.design (`make design`): the calculator reads the real study of the size asked for, with that study's
config files, and passes the rest of its arguments on; without a finished study it stops with a clear message."""

from __future__ import annotations

import pytest

from studies import design
from studies.real import REPO, WORKDIRS, study_configs


def test_the_size_names_the_study_and_its_config_files(monkeypatch):
    seen = []
    monkeypatch.setattr("workflow_lib.report.design.main", lambda argv: seen.append(argv))
    design.main(["--ci", "--effect", "mauve=0.05", "--device", "h100"])
    design.main([])
    design.main(["--mauve"])
    ci, cpu, mauve = seen
    assert mauve == [
        "--configfile",
        *map(str, study_configs("mauve")),
        "--results",
        str(REPO / WORKDIRS["mauve"] / "results"),
    ]
    assert ci == [
        "--configfile",
        *map(str, study_configs("ci")),
        "--results",
        str(REPO / WORKDIRS["ci"] / "results"),
        "--effect",
        "mauve=0.05",
        "--device",
        "h100",
    ]
    assert cpu[-2:] == ["--results", str(REPO / "results/real/results")]


def test_no_finished_study_is_a_clear_stop(tmp_path):
    from workflow_lib.report.design import main

    with pytest.raises(SystemExit, match="no variance components; finish the pilot study first"):
        main(["--configfile", str(REPO / "config.yaml"), "--results", str(tmp_path / "results")])
