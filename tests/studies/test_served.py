"""studies/served.py and the finished-study checks the drivers run: a check that finds a problem fails `make real` /
`make rehearsal` (exit status 1, the problem printed), and a study whose files all hold passes; the report's browser
check is skipped without chromium only where the run does not require it (CI requires it)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import polars as pl
import yaml

from studies import browser, served
from studies.real_checks import COLUMNS, expected_rows, finished_problems
from support.workflow_runs import REPO

REAL = REPO / "configs/real.yaml"


def test_a_check_that_finds_a_problem_fails_the_run(tmp_path, monkeypatch, capsys):
    commands = []

    def run(command, **kwargs):
        commands.append(command)
        return subprocess.CompletedProcess(command, 0)

    monkeypatch.setattr(served.subprocess, "run", run)
    args = ("study", tmp_path, [REAL], {"a/b": b"x"}, 0, ["--cores", "1"])
    assert served.run_served_study(*args, lambda workdir, configs: [], start=0.0) == 0
    assert served.run_served_study(*args, lambda workdir, configs: ["a cell is missing"], start=0.0) == 1
    out = capsys.readouterr().out
    assert "study: check failed: a cell is missing" in out and "study: FAILED (1 problems)" in out
    assert any("--report" in command for command in commands)  # the report is written before the checks


def test_a_failed_study_is_not_checked(tmp_path, monkeypatch):
    monkeypatch.setattr(served.subprocess, "run", lambda command, **kwargs: subprocess.CompletedProcess(command, 3))
    checked = []
    code = served.run_served_study(
        "study", tmp_path, [REAL], {}, 0, [], lambda workdir, configs: checked.append(1) or [], start=0.0
    )
    assert (code, checked) == (3, [])


def test_without_chromium_the_browser_check_is_skipped_unless_required(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(browser, "chromium", lambda: None)
    monkeypatch.delenv(browser.REQUIRE_ENV, raising=False)
    assert browser.browser_problems(tmp_path) == []
    assert "not opened in a browser" in capsys.readouterr().out
    monkeypatch.setenv(browser.REQUIRE_ENV, "1")
    assert browser.browser_problems(tmp_path) == [
        f"no chromium on PATH to open {tmp_path / 'report.html'} in, and {browser.REQUIRE_ENV}=1"
    ]


def finished_real_study(workdir: Path, real: dict) -> None:
    """The files `make real`'s checks read, as a finished study that holds would have them."""
    results = workdir / "results"
    rows = [
        (e, *row, s, 0.5, None, "MAUVE cannot see word salad here")
        for row, (experiment, seeds) in expected_rows(real).items()
        for e in real["experiments"][experiment]["eval_sets"]
        for s in seeds
    ]
    schema = ["eval_set", *COLUMNS, "seed", "rouge1_mean", "mauve_mean", "mauve_status"]
    (results / "report").mkdir(parents=True)
    pl.DataFrame(rows, schema=schema, orient="row").write_csv(results / "report/metrics.csv")
    (results / "pretrained/smollm2").mkdir(parents=True)
    model = real["models"]["smollm2"]
    if model.get("gguf"):  # offline (configs/real-local.yaml): the GGUF file it was dequantised from
        (results / "pretrained/smollm2/gguf.json").write_text(json.dumps(model["gguf"]))
    else:  # configs/real.yaml: the released files, fetched by fetch_model (data/hub_files.py)
        files = {name: {"sha256": digest} for name, digest in model["files"].items()}
        record = {"name": model["name"], "revision": model["revision"], "files": files}
        (results / "pretrained/smollm2/hub.json").write_text(json.dumps(record))
    (results / "data/licences").mkdir(parents=True)
    files = [{"sha256": e["sha256"]} for e in real["datasets"]["licences"]["files"]["test"]]
    (results / "data/licences/test.json").write_text(json.dumps({"provenance": {"files": files}}))
    (results / "summary.md").write_text(
        "# What this study found\n# What MAUVE can see here\n# The synonyms the perturbation draws\nwikitext2 licences\n"
    )
    (results / "controls/model-smollm2").mkdir(parents=True)
    for eval_set in real["eval_sets"]:
        status = {"status": "MAUVE cannot see word salad here"}
        (results / f"controls/model-smollm2/{eval_set}.json").write_text(json.dumps(status))


def test_the_real_studys_checks_hold_on_a_study_that_holds_and_name_what_is_missing(tmp_path, monkeypatch):
    monkeypatch.setattr(browser, "chromium", lambda: None)
    monkeypatch.delenv(browser.REQUIRE_ENV, raising=False)
    real = yaml.safe_load(REAL.read_text())
    finished_real_study(tmp_path, real)
    assert finished_problems(tmp_path, [REAL]) == []
    (tmp_path / "results/summary.md").write_text(
        "# What this study found\n# The synonyms the perturbation draws\nwikitext2 licences\n"
    )
    assert finished_problems(tmp_path, [REAL]) == ["results/summary.md does not mention 'What MAUVE can see here'"]
    monkeypatch.setenv(browser.REQUIRE_ENV, "1")
    assert len(finished_problems(tmp_path, [REAL])) == 2  # and the report was not opened
