"""The conda environments' post-deploy scripts install the package the workflow runs, wherever Snakemake copied the
script to (workflow_lib/install_source.py, envs/*.post-deploy.sh; issue 67): from a checkout, editable, and from
the git commit a module's package was installed from. Each is run from a temporary folder, as Snakemake runs it,
into a fresh virtual environment."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from support.workflow_runs import REPO
from workflow_lib.install_source import DISTRIBUTION, EDITABLE, SOURCE, deploy_environment, source_of

SCRIPTS = sorted((REPO / "envs").glob("*.post-deploy.sh"))


def test_the_source_comes_from_the_distributions_record():
    assert source_of(None, "0.1.0") == (f"{DISTRIBUTION}==0.1.0", False)  # from an index: the release
    folder = '{"dir_info": {"editable": true}, "url": "file:///home/me/perturbed%20LM"}'
    assert source_of(folder, "0.1.0") == ("/home/me/perturbed LM", True)
    assert source_of('{"dir_info": {}, "url": "file:///src"}', "0.1.0") == ("/src", False)
    git = {
        "url": "https://github.com/o/perturbed-LM",
        "vcs_info": {"vcs": "git", "commit_id": "abc1", "requested_revision": "v0.1.0"},
    }
    assert source_of(json.dumps(git), "0.1.0") == ("git+https://github.com/o/perturbed-LM@abc1", False)
    archive = {"url": "https://example.org/perturbed_lm-0.1.0.tar.gz", "archive_info": {}}
    assert source_of(json.dumps(archive), "0.1.0") == ("https://example.org/perturbed_lm-0.1.0.tar.gz", False)
    assert deploy_environment() == {SOURCE: str(REPO), EDITABLE: "1"}  # this checkout, as the tests run it


def test_every_environment_runs_the_same_script():
    assert len(SCRIPTS) == len(list((REPO / "envs").glob("*.yaml"))) and len({p.read_text() for p in SCRIPTS}) == 1


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Path:
    """A committed copy of what the build reads (setuptools writes build files beside it, not in the checkout)."""
    folder = tmp_path_factory.mktemp("source") / "perturbed-LM"
    shutil.copytree(REPO / "workflow_lib", folder / "workflow_lib", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(REPO / name, folder / name)
    ident = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
    for command in (["init", "-q"], ["add", "."], ["commit", "-qm", "release"]):
        subprocess.run(["git", "-C", str(folder), *command], check=True, env={**os.environ, **ident})
    return folder


def deployed(tmp_path: Path, environment: dict[str, str]) -> tuple[subprocess.CompletedProcess, Path]:
    """Run the post-deploy script from a temporary file (as Snakemake does for a module read from GitHub) with the
    new environment's python first on PATH; pip works offline, with this venv's setuptools to build."""
    env_dir = tmp_path / "env"
    venv.create(env_dir, with_pip=True)
    builder = tmp_path / "builder"  # the build backend only (setuptools >= 64), not the checkout's editable package
    builder.mkdir()
    site = next(Path(p) for p in sys.path if p.endswith("site-packages") and (Path(p) / "setuptools").is_dir())
    for name in ("setuptools", "_distutils_hack", "pkg_resources"):
        if (site / name).exists():
            (builder / name).symlink_to(site / name)
    script = tmp_path / "tmpab12cd.post-deploy.sh"
    shutil.copy(SCRIPTS[0], script)
    env = {
        "PATH": f"{env_dir / 'bin'}:/usr/bin:/bin",
        "HOME": str(tmp_path),
        "PYTHONPATH": str(builder),
        "PIP_NO_INDEX": "1",
        "PIP_NO_BUILD_ISOLATION": "0",  # pip's reading: no isolated build environment (it would download setuptools)
        **environment,
    }
    done = subprocess.run(["sh", str(script)], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    return done, env_dir / "bin" / "python"


def where(python: Path, tmp_path: Path) -> dict:
    """What the new environment imports, and what it would tell its own post-deploy scripts."""
    code = "import json, workflow_lib; from workflow_lib.install_source import deploy_environment as d\n"
    code += "print(json.dumps({'file': workflow_lib.__file__, 'deploy': d()}))"
    done = subprocess.run([str(python), "-c", code], capture_output=True, text=True, cwd=tmp_path, env={"HOME": "/"})
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_from_a_checkout_the_script_installs_it_editable(source, tmp_path):
    done, python = deployed(tmp_path, {SOURCE: str(source), EDITABLE: "1"})
    assert done.returncode == 0, done.stdout + done.stderr
    found = where(python, tmp_path)
    assert Path(found["file"]) == source / "workflow_lib/__init__.py"  # the checkout itself: an edit reaches the jobs
    assert found["deploy"] == {SOURCE: str(source), EDITABLE: "1"}


def test_from_a_git_commit_the_script_installs_that_commit(source, tmp_path):
    commit = subprocess.run(["git", "-C", str(source), "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    url = f"git+file://{source}@{commit.strip()}"
    done, python = deployed(tmp_path, {SOURCE: url, EDITABLE: "0"})
    assert done.returncode == 0, done.stdout + done.stderr
    found = where(python, tmp_path)
    assert "site-packages" in found["file"] and not found["file"].startswith(str(source))
    assert found["deploy"] == {SOURCE: url, EDITABLE: "0"}  # a module's module would install the same commit


def test_without_the_workflows_variables_the_script_stops_saying_why(tmp_path):
    script = tmp_path / "x.post-deploy.sh"
    shutil.copy(SCRIPTS[0], script)
    done = subprocess.run(["sh", str(script)], capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"})
    assert done.returncode != 0 and "PERTURBED_LM_SOURCE: is set by the workflow (rules/common.smk)" in done.stderr
