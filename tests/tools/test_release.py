"""Releases (tools/release.py, `make release`): the version's one home is pyproject.toml, CITATION.cff and the
changelog name it, and a release is an annotated tag made only when all three agree and the tree is clean."""

from __future__ import annotations

import re
import subprocess
import tomllib
from pathlib import Path

import pytest

from tools import release

REPO = Path(__file__).resolve().parents[2]
VERSION = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]


def test_citation_and_changelog_name_the_projects_version():
    assert re.search(rf"^version: {re.escape(VERSION)}$", (REPO / "CITATION.cff").read_text(), re.MULTILINE)
    assert f"  version = {{{VERSION}}}" in (REPO / "README.md").read_text()
    assert release.changelog_section((REPO / "CHANGELOG.md").read_text(), VERSION)
    from importlib.metadata import version

    assert version("perturbed-lm") == VERSION  # the installed package's version is pyproject's


IDENTITY = {"GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t", "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t"}


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


@pytest.fixture
def clone(tmp_path) -> Path:
    """A committed copy of the three files a release reads."""
    repo = tmp_path / "repo"
    repo.mkdir()
    for name in ("pyproject.toml", "CITATION.cff", "CHANGELOG.md", "README.md"):
        (repo / name).write_bytes((REPO / name).read_bytes())
    git(repo, "init", "-q")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", "x", "--allow-empty")
    git(repo, "add", ".")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "release")
    return repo


def make_release(repo: Path, version: str) -> subprocess.CompletedProcess:
    """`make release VERSION=...` as the Makefile runs it, on `repo`."""
    return subprocess.run(
        ["make", "-s", "-C", str(REPO), "release", f"VERSION={version}", f"RELEASE_REPO={repo}"],
        capture_output=True,
        text=True,
        env={"PATH": f"{REPO / '.venv/bin'}:/usr/bin:/bin", "HOME": str(repo), **IDENTITY},
        timeout=120,
    )


def test_make_release_tags_the_version_with_its_changelog_section(clone):
    done = make_release(clone, VERSION)
    assert done.returncode == 0, done.stderr
    assert f"tagged v{VERSION}" in done.stdout
    message = git(clone, "tag", "-l", "--format=%(contents)", f"v{VERSION}")
    assert message.startswith(f"perturbed-LM {VERSION}\n") and "### Added" in message
    assert git(clone, "cat-file", "-t", f"v{VERSION}").strip() == "tag"  # annotated, not a lightweight tag
    again = make_release(clone, VERSION)
    assert again.returncode != 0 and f"the tag v{VERSION} exists already" in again.stderr


@pytest.mark.parametrize(
    "edit, refusal",
    [
        (None, "pyproject.toml says version"),  # another VERSION than the project's
        ("CITATION.cff", "CITATION.cff says version 9.9.9"),
        ("CHANGELOG.md", "CHANGELOG.md has no dated section"),
        ("README.md", "README.md's citation says version 9.9.9"),
        ("dirty", "uncommitted changes"),
    ],
)
def test_a_release_whose_files_disagree_is_refused_naming_the_file(clone, edit, refusal):
    version = VERSION if edit else "9.9.8"
    if edit in ("CITATION.cff", "README.md"):
        path = clone / edit
        text = path.read_text()
        path.write_text(text.replace(f"version: {VERSION}", "version: 9.9.9").replace(f"{{{VERSION}}}", "{9.9.9}"))
        git(clone, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", "cited")
    elif edit == "CHANGELOG.md":
        path = clone / edit
        path.write_text(re.sub(rf"## \[{re.escape(VERSION)}\].*\n", "## [old]\n", path.read_text()))
        git(clone, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", "log")
    elif edit == "dirty":
        (clone / "pyproject.toml").write_text((clone / "pyproject.toml").read_text() + "\n")
    done = make_release(clone, version)
    assert done.returncode != 0 and refusal in done.stderr, done.stderr
    assert not git(clone, "tag", "-l").strip()


def test_a_version_that_is_not_x_y_z_never_reaches_git(clone):
    done = make_release(clone, "1.0; touch pwned")
    assert done.returncode != 0 and "is not x.y.z" in done.stderr
    assert not (clone / "pwned").exists() and not (REPO / "pwned").exists()
