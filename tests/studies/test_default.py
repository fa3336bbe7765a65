"""studies.default (`make run`): the study's jobs go to a warm server unless --cold, its other arguments reach
snakemake and the report, and the report is written only after the study succeeded."""

from __future__ import annotations

import contextlib
import subprocess
import sys

import pytest

from studies import default
from studies.warm import ENV


@pytest.fixture
def calls(monkeypatch):
    seen: list = []
    codes = {"study": 0}

    @contextlib.contextmanager
    def server(env, log):
        seen.append(("server", log.relative_to(default.REPO).as_posix()))
        yield {**env, ENV: "jobs.sock"}

    def run(command, cwd, env):
        seen.append((command[1:], env.get(ENV), cwd))
        return subprocess.CompletedProcess(command, 0 if "--report" in command else codes["study"])

    monkeypatch.setattr(default, "warm_server", server)
    monkeypatch.setattr(default.subprocess, "run", run)
    monkeypatch.delenv(ENV, raising=False)
    return seen, codes


def test_the_study_runs_warm_then_its_report_runs_with_the_same_arguments(calls, monkeypatch):
    seen, _ = calls
    monkeypatch.setattr(sys, "argv", ["default", "--cores", "2", "--forceall", "--configfile", "my.yaml"])
    assert default.main() == 0
    assert seen == [
        ("server", "results/logs/warm.log"),
        (["--cores", "2", "--forceall", "--configfile", "my.yaml"], "jobs.sock", default.REPO),
        (["--report", "results/report.html", "--forceall", "--configfile", "my.yaml"], None, default.REPO),
    ]


def test_cold_starts_no_server_and_a_failed_study_writes_no_report(calls, monkeypatch):
    seen, codes = calls
    codes["study"] = 3
    monkeypatch.setattr(sys, "argv", ["default", "--cores", "1", "--cold"])
    assert default.main() == 3
    assert seen == [(["--cores", "1"], None, default.REPO)]
