"""The documentation: a README a newcomer reads in minutes, and a MkDocs site that builds with no broken link,
no missing anchor and no page outside its nav."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
MKDOCS = Path(sys.executable).parent / "mkdocs"


def build(root: Path, tmp_path: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            str(MKDOCS),
            "build",
            "--strict",
            "--config-file",
            str(root / "mkdocs.yml"),
            "--site-dir",
            str(tmp_path / "site"),
        ],
        capture_output=True,
        text=True,
        cwd=root,
        timeout=300,
        check=False,
    )


def test_the_readme_is_short():
    assert len((REPO / "README.md").read_text().splitlines()) <= 250


def test_every_page_is_in_the_nav_and_the_site_builds_strictly(tmp_path):
    nav = yaml.safe_load((REPO / "mkdocs.yml").read_text())["nav"]
    listed = {page for entry in nav for page in entry.values()}
    assert listed == {p.name for p in (REPO / "docs").glob("*.md")}
    done = build(REPO, tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "site/cookbook/index.html").is_file() and (tmp_path / "site/method/index.html").is_file()


def test_a_broken_link_or_anchor_or_a_page_outside_the_nav_fails_the_build(tmp_path):
    """The strict build is a check that can fail: on a copy of the docs with a broken link, a link to a missing
    section, then a page left out of the nav, it stops."""
    root = tmp_path / "copy"
    root.mkdir()
    shutil.copy(REPO / "mkdocs.yml", root / "mkdocs.yml")
    shutil.copytree(REPO / "docs", root / "docs")
    page = root / "docs/usage.md"
    original = page.read_text()
    page.write_text(original + "\nSee [the missing page](no-such-page.md).\n")
    broken = build(root, tmp_path / "a")
    assert broken.returncode != 0 and "no-such-page.md" in broken.stderr
    page.write_text(original + "\nSee [a missing section](cluster.md#no-such-section).\n")
    anchor = build(root, tmp_path / "c")
    assert anchor.returncode != 0 and "no-such-section" in anchor.stderr
    page.write_text(original)
    (root / "docs/orphan.md").write_text("# Not in the nav\n")
    orphan = build(root, tmp_path / "b")
    assert orphan.returncode != 0 and "orphan.md" in orphan.stderr
