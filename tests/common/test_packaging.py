"""The package as pip installs it (not editable): everything a job or an importing workflow reads ships inside it.

A workflow that imports this one as a Snakemake module (docs/usage.md, "Using perturbed-LM inside your own
workflow") runs its jobs with the installed package, without a checkout beside it: the config schema, read at parse
time by every run, must be package data (`[tool.setuptools.package-data]` in pyproject.toml), found through
`importlib.resources`, not through a path relative to the source tree.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from support.workflow_runs import REPO

CHECK = """
import sys
from pathlib import Path

import workflow_lib
from workflow_lib.config import SCHEMA_PATH, load_schema, validate_config
from workflow_lib.config_files import read_yaml

assert Path(workflow_lib.__file__).is_relative_to(sys.argv[1]), workflow_lib.__file__
assert "experiments" in load_schema()["properties"]
validate_config(read_yaml(sys.argv[2]), workdir=Path(sys.argv[3]))  # snakemake's validate reads SCHEMA_PATH too
print(SCHEMA_PATH)
"""


def test_a_plain_install_ships_the_schema_and_validates_from_another_folder(tmp_path):
    # A copy of what the build reads: setuptools builds in the source folder (build/, *.egg-info), not in the checkout.
    source, target = tmp_path / "source", tmp_path / "site"
    shutil.copytree(REPO / "workflow_lib", source / "workflow_lib", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(REPO / name, source / name)
    install = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation"]
    done = subprocess.run([*install, "--target", str(target), str(source)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert (target / "workflow_lib" / "schemas" / "config.schema.yaml").is_file()

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    check = [sys.executable, "-c", CHECK, str(target), str(REPO / "config.yaml"), str(REPO)]
    # PYTHONPATH puts the installed copy ahead of the editable one in site-packages; the folder is not the checkout.
    ran = subprocess.run(check, cwd=elsewhere, env={"PYTHONPATH": str(target)}, capture_output=True, text=True)
    assert ran.returncode == 0, ran.stderr
    assert Path(ran.stdout.strip()).is_relative_to(target)
