"""The files that let others reuse and cite the project: LICENSE, CITATION.cff and the README's citing section."""

from __future__ import annotations

import re
import tomllib

import pytest
import yaml

from support.workflow_runs import REPO

PAPER = "Perturbation is All You Need for Extrapolating Language Models"


def test_license_is_mit_and_citation_names_the_software_and_the_seed_paper():
    assert (REPO / "LICENSE").read_text().startswith("MIT License")
    cff = yaml.safe_load((REPO / "CITATION.cff").read_text())
    assert cff["cff-version"] == "1.2.0" and cff["type"] == "software" and cff["license"] == "MIT"
    assert cff["message"] and cff["authors"] and cff["title"].startswith("perturbed-LM")
    assert cff["version"] == tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    paper = cff["references"][0]
    assert paper["title"] == PAPER and paper["type"] == "article"
    assert [a["family-names"] for a in paper["authors"]] == ["Cen", "Zhu", "Shen", "Shi"]


def test_readme_ends_with_how_to_cite_both():
    readme = (REPO / "README.md").read_text()
    last = re.split(r"^## ", readme, flags=re.MULTILINE)[-1]
    assert last.startswith("License and citing")
    assert "CITATION.cff" in last and "LICENSE" in last and PAPER in last and "@software" in last


SHIPPED_TEXT = [
    "README.md",
    "ARCHITECTURE.md",
    "docs",
    "rules",
    "workflow_lib",
    "configs",
    "bench",
    "config.yaml",
    "tests",
]


def shipped_files():
    for name in SHIPPED_TEXT:
        path = REPO / name
        yield from (
            [path]
            if path.is_file()
            else (
                p
                for p in path.rglob("*")
                if p.suffix in {".md", ".py", ".smk", ".yaml"} and "__pycache__" not in p.parts
            )
        )


def method_sections() -> set[str]:
    return set(re.findall(r"^## (\d)\. ", (REPO / "docs/method.md").read_text(), flags=re.MULTILINE))


def test_method_reference_ships_and_every_citation_of_it_names_a_section():
    assert method_sections() == {str(n) for n in range(1, 8)}
    cited, stale = set(), []
    for path in shipped_files():
        text = path.read_text()
        cited |= set(re.findall(r"docs/method\.md §(\d)", text))
        cited |= set(re.findall(r"docs/method\.md §\d and §(\d)", text))
        if path.name != "test_project_files.py" and re.search(r"REFERENCE( section|\.md)", text):
            stale.append(str(path.relative_to(REPO)))
    assert stale == []  # the team's private notes do not ship: cite docs/method.md
    assert cited and cited <= method_sections()


def cited_paths(text: str) -> set[str]:
    """Repository paths a document names in backticks (`workflow_lib/train/objectives.py`, `rules/common.smk`)."""
    roots = "workflow_lib|rules|configs|tests|docs|bench|profiles|envs"  # not report/: also results/report/
    return {m.rstrip(".:,") for m in re.findall(rf"`((?:{roots})/[\w./-]*)", text)}


@pytest.mark.parametrize(
    "document",
    [
        "README.md",
        "ARCHITECTURE.md",
        # not docs/benchmarks.md: a dated log, each entry naming files as they were at its commit
        *sorted(p.relative_to(REPO).as_posix() for p in (REPO / "docs").glob("*.md") if p.name != "benchmarks.md"),
    ],
)
def test_documents_cite_only_files_that_ship(document):
    missing = sorted(p for p in cited_paths((REPO / document).read_text()) if not (REPO / p).exists())
    assert missing == []


def test_a_citation_of_a_missing_file_is_caught():
    assert cited_paths("see `workflow_lib/no_such.py` and `rules/common.smk`") == {
        "workflow_lib/no_such.py",
        "rules/common.smk",
    }
    assert not (REPO / "workflow_lib/no_such.py").exists()


def test_the_git_hooks_run_what_make_lint_and_ci_run():
    """.pre-commit-config.yaml's hooks and `make lint` (which .ci/run runs) name the same tools, with the venv's
    pinned versions; and the reformat commit git blame skips is named."""
    makefile = (REPO / "Makefile").read_text()
    recipe = makefile.split("\nlint: ")[1].split("\n\n")[0]
    linted = {line.split()[0].removeprefix("$(BIN)/") for line in recipe.splitlines()[1:] if line.strip()}
    hooks = yaml.safe_load((REPO / ".pre-commit-config.yaml").read_text())["repos"][0]["hooks"]
    hooked = {hook["entry"].split()[0].removeprefix(".venv/bin/") for hook in hooks}
    assert linted == hooked == {"snakemake", "snakefmt", "ruff", "mypy"}
    pinned = (REPO / "requirements.txt").read_text() + (REPO / "requirements/dev.txt").read_text()
    assert all(re.search(rf"^{tool}==", pinned, flags=re.MULTILINE) for tool in hooked)
    assert "make lint" in (REPO / ".ci/run").read_text()
    revs = [line for line in (REPO / ".git-blame-ignore-revs").read_text().splitlines() if not line.startswith("#")]
    assert revs and all(re.fullmatch(r"[0-9a-f]{40}", rev) for rev in revs)


def test_make_help_lists_every_target_with_one_line():
    """`make help` (issue 53): each .PHONY target once, with its description; a target without one would be missing."""
    import subprocess

    makefile = (REPO / "Makefile").read_text()
    phony = re.search(r"^\.PHONY: (.+)$", makefile, re.MULTILINE).group(1).split()  # type: ignore[union-attr]
    defined = set(re.findall(r"^([a-z-]+):", makefile, re.MULTILINE))
    assert set(phony) <= defined, set(phony) - defined  # no .PHONY name without a rule
    listed = subprocess.run(["make", "-s", "help"], cwd=REPO, capture_output=True, text=True, check=True).stdout
    names = [line.split()[0] for line in listed.splitlines()]
    assert sorted(names) == sorted(phony) and all(len(line.split()) > 1 for line in listed.splitlines())


def imported_modules(path) -> set[str]:
    """Every module a file imports, `from a import b` counted as both `a` and `a.b`."""
    import ast

    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found |= {node.module, *(f"{node.module}.{alias.name}" for alias in node.names)}
    return found


@pytest.mark.parametrize("package", ["studies", "tools"])
def test_studies_and_tools_are_tested_where_they_live(package):
    """As tests/<stage>/ tests workflow_lib/<stage>/, tests/<package>/ imports every module of <package>/; and
    neither it nor the workflow's package imports the test support (tests/support/, `support`)."""
    tests = set().union(*(imported_modules(path) for path in (REPO / "tests" / package).glob("test_*.py")))
    modules = {f"{package}.{path.stem}" for path in (REPO / package).glob("*.py") if path.stem != "__init__"}
    assert modules and sorted(modules - tests) == []
    for path in [*(REPO / package).rglob("*.py"), *(REPO / "workflow_lib").rglob("*.py")]:
        assert not any(name.split(".")[0] == "support" for name in imported_modules(path)), path
