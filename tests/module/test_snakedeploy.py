"""`snakedeploy deploy-workflow` of a tagged release into an empty folder, end to end (docs/usage.md, "Deploying it
with snakedeploy"; issue 67): what it writes, then the deployed workflow's config check and dry run.

The source is a git repository of this working tree's files (what the next commit would hold: a clone of the checkout
would miss what is not committed yet), tagged, with one more commit after the tag that the deployment must not see.
It lies at `<tmp>/github.com/owner/perturbed-LM`: snakedeploy picks its GitHub provider for any source whose address
contains "github" (`snakedeploy/providers.py`), so it runs the steps a user's `snakedeploy deploy-workflow
https://github.com/<owner>/perturbed-LM ... --tag ...` runs (`git clone`, `git checkout <tag>`) and writes the same
`github("owner/perturbed-LM", path="Snakefile", tag=...)` module. (A plain local folder would take its `Local`
provider instead, which ignores the tag and writes the module's snakefile as "Snakefile", relative to the source,
which from `workflow/Snakefile` names no file.)

One thing is substituted, because nothing here reaches the network: snakemake would read that `github(...)` Snakefile
(and the rules beside it) from GitHub at the tag; the test points the module at the Snakefile of a clone of the
source at the tag instead, the same files, and puts that clone on PYTHONPATH for the package (a user installs it:
`pip install git+https://github.com/<owner>/perturbed-LM@v0.1.0`).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from support.plans import job_stats
from support.workflow_runs import REPO, SESSION_ENV, offline, run_snakemake

SNAKEDEPLOY = Path(sys.executable).parent / "snakedeploy"  # requirements/dev.txt
TAG = "v0.0.0-test"
MODULE = f'github("owner/perturbed-LM", path="Snakefile", tag="{TAG}")'

pytestmark = pytest.mark.workflow


def git(folder: Path, *args: str) -> str:
    ident = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
    done = subprocess.run(
        ["git", "-C", str(folder), *args], capture_output=True, text=True, env={**os.environ, **ident}, check=True
    )
    return done.stdout


def working_tree_files() -> list[str]:
    """The files the next commit would hold: the tracked ones and the new ones git does not ignore."""
    listed = git(REPO, "ls-files", "-z", "--cached", "--others", "--exclude-standard").split("\0")
    return sorted(name for name in set(listed) if name and os.path.lexists(REPO / name))


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Path:
    """The tagged release, as a repository at an address that names GitHub; a later commit edits the default study."""
    folder = tmp_path_factory.mktemp("remote") / "github.com/owner/perturbed-LM"
    for name in working_tree_files():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, folder / name, follow_symlinks=False)  # config.yaml stays a link to config/
    git(folder, "init", "-q")
    git(folder, "add", "-A")
    git(folder, "commit", "-qm", "release")
    git(folder, "tag", TAG)
    with open(folder / "config/config.yaml", "a") as handle:
        handle.write("# after the release\n")
    git(folder, "commit", "-qam", "after the release")
    return folder


@pytest.fixture(scope="module")
def deployed(source, tmp_path_factory) -> Path:
    dest = tmp_path_factory.mktemp("deploy") / "my-study"
    done = subprocess.run(
        [str(SNAKEDEPLOY), "deploy-workflow", f"file://{source}", str(dest), "--tag", TAG],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return dest


def test_snakedeploy_writes_the_tagged_default_study_and_a_github_module(deployed):
    assert sorted(p.name for p in deployed.iterdir()) == ["LICENSE", "config", "profiles", "workflow"]
    # config/ of the tag, whole: the default study (not the later commit's) and its guide.
    assert (deployed / "config/config.yaml").read_bytes() == (REPO / "config/config.yaml").read_bytes()
    assert (REPO / "config.yaml").resolve() == (REPO / "config/config.yaml").resolve()  # the study has one home
    assert sorted(p.name for p in (deployed / "config").iterdir()) == ["README.md", "config.yaml"]
    profiles = [name for name in working_tree_files() if name.startswith("profiles/")]
    copied = sorted(p.relative_to(deployed).as_posix() for p in (deployed / "profiles").rglob("*") if p.is_file())
    assert profiles and copied == profiles
    assert all((deployed / name).read_bytes() == (REPO / name).read_bytes() for name in profiles)
    assert (deployed / "LICENSE").read_bytes() == (REPO / "LICENSE").read_bytes()

    snakefile = (deployed / "workflow/Snakefile").read_text()
    assert 'configfile: "config/config.yaml"' in snakefile
    assert "module perturbed_LM:" in snakefile and f"snakefile: \n        {MODULE}\n" in snakefile
    assert "config:\n        config\n" in snakefile and "use rule * from perturbed_LM" in snakefile


def test_the_deployed_workflow_checks_its_config_and_plans_the_default_study(deployed, source, tmp_path):
    # What snakemake would fetch for the module's github(...) at the tag: the tagged clone's Snakefile (no network here).
    tagged = tmp_path / "tagged"
    subprocess.run(["git", "clone", "-q", "--branch", TAG, f"file://{source}", str(tagged)], check=True)
    study = shutil.copytree(deployed, tmp_path / "my-study")  # the other test reads the deployment as written
    snakefile = study / "workflow/Snakefile"
    snakefile.write_text(snakefile.read_text().replace(MODULE, repr(str(tagged / "Snakefile"))))

    bin_dir = os.path.dirname(sys.executable)
    env = {**SESSION_ENV, "PATH": f"{bin_dir}{os.pathsep}{SESSION_ENV.get('PATH', '')}", "PYTHONPATH": str(tagged)}
    check = [sys.executable, "-m", "workflow_lib.check_config", "config/config.yaml"]
    checked = subprocess.run(check, cwd=study, env=offline(env), capture_output=True, text=True, timeout=120)
    assert checked.returncode == 0, checked.stdout + checked.stderr

    # snakemake's own search finds workflow/Snakefile; `--quiet` takes the values after it, so it goes last.
    planned = run_snakemake(None, "-n", "--quiet", "rules", snakefile=None, cwd=study, env=env, timeout=300)
    assert planned.returncode == 0, (planned.stdout + planned.stderr)[-3000:]
    checkout = run_snakemake(
        tmp_path / "checkout", "-n", "--quiet", "rules", configfiles=[REPO / "config.yaml"], cwd=None, timeout=300
    )
    assert checkout.returncode == 0, (checkout.stdout + checkout.stderr)[-3000:]
    stats = job_stats(planned.stdout)
    assert stats["all"] == 1 and stats == job_stats(checkout.stdout)  # the default study's plan, job for job
