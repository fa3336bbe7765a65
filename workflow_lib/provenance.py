"""What produced a result: the code's commit, the library versions and a hash of the settings.

Every metrics JSON carries `provenance(settings)`, so a number in a table can be traced to the code and the
settings that made it, and two numbers computed with different settings (MAUVE's maintainers: compare only
scores computed with identical settings) are told apart by `settings_sha256`. Standard library only, so any
module may import it without paying for torch.
"""

from __future__ import annotations

import functools
import hashlib
import json
import subprocess
import sys
from importlib import metadata
from pathlib import Path

PACKAGES = {
    "torch": "torch",
    "transformers": "transformers",
    "mauve-text": "mauve-text",
    "rouge-score": "rouge-score",
    "workflow": "perturbed-lm",
}  # field -> distribution name
CODE_ROOT = Path(__file__).resolve().parent
# What runs a study, relative to the checkout: an uncommitted change here makes results "dirty"; untracked files
# (data folders, results) and edits elsewhere (README, docs, configs, whose values reach jobs as params) do not.
WORKFLOW_PATHS = ("Snakefile", "rules", "workflow_lib", "envs", "profiles", "report", "pyproject.toml")


def _git(*args: str) -> str | None:
    try:
        done = subprocess.run(["git", *args], cwd=CODE_ROOT, capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.SubprocessError):  # no git, or it hangs
        return None
    return done.stdout if done.returncode == 0 else None


@functools.lru_cache(maxsize=1)
def git_state() -> tuple[str | None, bool | None]:
    """(commit, dirty) of the checkout that holds workflow_lib; (None, None) outside a git checkout, or when
    workflow_lib is an installed copy that merely sits inside some other repository (a conda env in a project).
    Dirty: a tracked file under WORKFLOW_PATHS differs from the commit."""
    found = (_git("rev-parse", "--show-toplevel", "HEAD") or "").splitlines()
    if len(found) != 2 or Path(found[0]).resolve() != CODE_ROOT.parent:
        return None, None
    status = _git("status", "--porcelain", "--untracked-files=no", "--", *(f":(top){path}" for path in WORKFLOW_PATHS))
    return found[1].strip(), None if status is None else bool(status.strip())


def package_version(distribution: str) -> str | None:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def settings_sha256(settings: dict) -> str:
    return hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()


def provenance(settings: dict, featuriser: str | None = None) -> dict:
    commit, dirty = git_state()
    versions = {"python": sys.version.split()[0]} | {field: package_version(name) for field, name in PACKAGES.items()}
    return {
        "git_commit": commit,
        "git_dirty": dirty,
        "versions": versions,
        "featuriser": featuriser,
        "settings_sha256": settings_sha256(settings),
    }
