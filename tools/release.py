"""Tag a release: `make release VERSION=x.y.z` (docs/development.md, "Releases").

The version has one home, pyproject.toml; CITATION.cff and the README's citation repeat it for citation tools and
CHANGELOG.md names it in a dated section. This checks that the three agree with VERSION and that the tree is committed and clean, then makes
the annotated tag `v<VERSION>` on HEAD, its message the changelog's section. Nothing is pushed. Standard library
only (tomllib); the version is never put into a shell.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tomllib
from pathlib import Path

SEMVER = re.compile(r"\d+\.\d+\.\d+")


class ReleaseError(Exception):
    """What stops a release, naming the file to fix."""


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise ReleaseError(f"git {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout


def changelog_section(text: str, version: str) -> str:
    """The body of CHANGELOG.md's `## [version] - YYYY-MM-DD` section (Keep a Changelog)."""
    match = re.search(
        rf"^## \[{re.escape(version)}\] - \d{{4}}-\d{{2}}-\d{{2}}\n(.*?)(?=^## |\Z)", text, re.MULTILINE | re.DOTALL
    )
    if match is None or not match.group(1).strip():
        raise ReleaseError(f"CHANGELOG.md has no dated section '## [{version}] - YYYY-MM-DD' with its changes")
    return match.group(1).strip()


def check(repo: Path, version: str) -> str:
    """The tag's message, once every check passes."""
    if not SEMVER.fullmatch(version):
        raise ReleaseError(f"VERSION={version!r} is not x.y.z")
    project = tomllib.loads((repo / "pyproject.toml").read_text())["project"]["version"]
    if project != version:
        raise ReleaseError(f"pyproject.toml says version {project}, not {version}: the version's one home")
    cited = re.search(r"^version: *['\"]?([^'\"\s]+)", (repo / "CITATION.cff").read_text(), re.MULTILINE)
    if cited is None or cited.group(1) != version:
        raise ReleaseError(f"CITATION.cff says version {cited and cited.group(1)}, not {version}")
    quoted = re.search(r"^  version = \{([^}]*)\}", (repo / "README.md").read_text(), re.MULTILINE)
    if quoted is None or quoted.group(1) != version:
        raise ReleaseError(f"README.md's citation says version {quoted and quoted.group(1)}, not {version}")
    notes = changelog_section((repo / "CHANGELOG.md").read_text(), version)
    if git(repo, "status", "--porcelain", "--untracked-files=no").strip():
        raise ReleaseError("the working tree has uncommitted changes: a tag names a commit")
    if git(repo, "tag", "--list", f"v{version}").strip():
        raise ReleaseError(f"the tag v{version} exists already")
    return f"perturbed-LM {version}\n\n{notes}\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tools/release.py", description=__doc__.splitlines()[0])
    parser.add_argument("version", help="x.y.z, as in pyproject.toml")
    parser.add_argument("--repo", type=Path, default=Path.cwd())
    args = parser.parse_args(argv)
    try:
        message = check(args.repo, args.version)
        git(args.repo, "tag", "--annotate", "--cleanup=verbatim", f"v{args.version}", "--message", message)
    except ReleaseError as error:
        print(f"release: {error}", file=sys.stderr)
        return 1
    print(
        f"tagged v{args.version} on {git(args.repo, 'rev-parse', '--short', 'HEAD').strip()}: push it with "
        f"`git push origin v{args.version}`"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
