"""The README's numbers that come from the plan stay true (issue 68, item 4): a study that plans more jobs fails
here until the README says so."""

from __future__ import annotations

import re

from support.workflow_runs import REPO, run_snakemake


def test_the_readmes_job_count_is_the_default_studys_plan(tmp_path):
    said = re.search(r"it plans (\d+) now", (REPO / "README.md").read_text())
    assert said, "README.md no longer says how many jobs `make run` plans: update this test with it"
    done = run_snakemake(tmp_path / "work", "-n", configfiles=[REPO / "config.yaml"], cwd=None, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    planned = re.search(r"^total\s+(\d+)$", done.stdout + done.stderr, flags=re.MULTILINE)
    assert planned and int(said.group(1)) == int(planned.group(1)), (said.group(0), planned and planned.group(0))


def test_the_readmes_make_run_time_is_a_measurement_in_the_benchmarks():
    """The `make run` time the README quotes is one docs/benchmarks.md records, at the same commit and job count."""
    readme = " ".join((REPO / "README.md").read_text().split())
    quoted = re.search(r"`make run` took (\d+) minutes (\d+) seconds .*?\(at ([0-9a-f]{7}), (\d+) jobs;", readme)
    assert quoted, "README.md no longer quotes a `make run` time: update this test with it"
    minutes, seconds, commit, jobs = quoted.groups()
    benchmarks = " ".join((REPO / "docs/benchmarks.md").read_text().split())
    recorded = re.search(rf"at {commit}\b[^#]*?\*\*{minutes} min {seconds} s\*\*[^#]*?\b{jobs} jobs", benchmarks)
    assert recorded, f"docs/benchmarks.md records no `make run` of {minutes} min {seconds} s, {jobs} jobs at {commit}"


def _flat(text: str) -> str:
    return " ".join(text.replace("−", "-").split())  # one line, Unicode minus as ASCII


def _between(text: str, start: str, end: str) -> str:
    assert start in text, f"no {start!r}: update this test with the README"
    return text[text.index(start) : text.index(end, text.index(start))]


def _numbers(text: str) -> set[str]:
    """Every number, signed where its sign is one (not the hyphen of 'ROUGE-1' or of a date)."""
    return set(re.findall(r"(?<![\w.+-])[+-]?\d+(?:\.\d+)?", re.sub(r"\d{4}-\d\d-\d\d", "", text)))


def _quoted_from(quoted: str, source: str) -> list[str]:
    """The README's numbers its source does not record: a signed one must be there with its sign."""
    recorded = _numbers(source)
    unsigned = {n.lstrip("+-") for n in recorded}
    return sorted(n for n in _numbers(quoted) if n not in (recorded if n[0] in "+-" else unsigned))


def test_the_readmes_default_study_findings_are_those_docs_default_study_records():
    """The README quotes the default study's findings from docs/default-study.md ("What it found, as generated"): the
    same run (its commit), and every number it quotes is one the docs record, so a finding updated in one and not
    the other fails here."""
    readme = _flat((REPO / "README.md").read_text())
    quoted = _between(readme, "What it found, as generated", "docs/default-study.md) has the rest")
    doc = _flat((REPO / "docs/default-study.md").read_text())
    recorded = _between(doc, "What it found, as generated", "On another machine expect")
    commit = re.search(r"`make run` at ([0-9a-f]{7})", quoted)
    assert commit and f"`make run` at {commit.group(1)}" in recorded, "the README and the docs quote different runs"
    assert not _quoted_from(quoted, doc), _quoted_from(quoted, doc)
    # What ROUGE-1 showed is said of the contrasts the docs say it of
    assert "ROUGE-1 showed no detectable difference in any perturbation contrast" in quoted
    assert "**ROUGE-1** showed no detectable difference in any perturbation contrast" in recorded


def test_the_readmes_real_study_findings_are_those_docs_studies_records():
    """The README's findings of `make real` are docs/studies.md's ("What `make real` found"), and its time is the one
    docs/benchmarks.md measured."""
    readme = _flat((REPO / "README.md").read_text())
    quoted = _between(readme, "Its findings, as generated", "**Sized for the paper's ROUGE-1 gain**")
    studies = _flat((REPO / "docs/studies.md").read_text())
    recorded = _between(studies, "**What `make real` found**", "**Measured on it**")
    time = re.search(r"\((\d{4}-\d\d-\d\d), (\d+) min (\d+) s on 2 cores", quoted)
    assert time, "the README no longer says when and how long `make real` ran: update this test with it"
    day, minutes, seconds = time.groups()
    assert f"`make real` found** ({day}" in recorded
    benchmarks = _flat((REPO / "docs/benchmarks.md").read_text())
    assert re.search(rf"\*\*`make real`\*\* from an empty [^#]*?\*\*{minutes} min {seconds} s\*\*", benchmarks)
    findings = quoted.replace(time.group(0), "")
    assert not _quoted_from(findings, recorded), _quoted_from(findings, recorded)
