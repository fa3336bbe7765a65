"""The README's cookbook: every recipe's YAML is read from the README and planned (`snakemake -n`)."""

from __future__ import annotations

import re
import subprocess

import pytest
import yaml
from support.study import REPO, SNAKEMAKE, planned_rules

pytestmark = pytest.mark.workflow


def recipes() -> dict[str, dict]:
    text = (REPO / "README.md").read_text()
    return {name: yaml.safe_load(body) for name, body in
            re.findall(r"<!-- recipe: ([\w-]+) -->\n```yaml\n(.*?)```", text, flags=re.DOTALL)}


def plan(workdir, config: dict, *args: str) -> subprocess.CompletedProcess:
    (workdir / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    return subprocess.run([str(SNAKEMAKE), "-s", str(REPO / "Snakefile"), "--directory", str(workdir), "--configfile",
                           str(workdir / "config.yaml"), "-n", *args], capture_output=True, text=True, cwd=workdir,
                          check=False, timeout=300)


def on_default(recipe: dict) -> dict:
    """The default study with the recipe's sections in place of its own (its experiments replaced)."""
    config = yaml.safe_load((REPO / "config.yaml").read_text())
    config.pop("lab", None)
    return {**config, **recipe}


def test_the_readme_has_every_recipe():
    assert set(recipes()) == {"own-data", "zero-shot", "with-and-without", "objective"}


def test_own_data_recipe_plans(tmp_path):
    (tmp_path / "data").mkdir()
    for name in ("train.txt", "valid.txt"):
        (tmp_path / "data" / name).write_text("one document\nanother document\n")
    (tmp_path / "data/test.jsonl").write_text('{"text": "a test document"}\n')
    done = plan(tmp_path, recipes()["own-data"])
    assert done.returncode == 0, done.stderr[-2000:]
    assert {"download", "train", "sample", "evaluate"} <= planned_rules(done.stdout)


def test_zero_shot_recipe_plans_no_training_and_both_decoders(tmp_path):
    (tmp_path / "data").mkdir()
    for name in ("train.txt", "test.txt"):
        (tmp_path / "data" / name).write_text("one document\nanother document\n")
    (tmp_path / "checkpoints/my-gpt2").mkdir(parents=True)
    done = plan(tmp_path, recipes()["zero-shot"])
    assert done.returncode == 0, done.stderr[-2000:]
    rules = planned_rules(done.stdout)
    assert "train" not in rules and {"sample", "evaluate"} <= rules
    assert done.stdout.count("rule sample:") == 2  # unbiased and nucleus


def test_with_and_without_recipe_plans_both_conditions(tmp_path):
    done = plan(tmp_path, on_default(recipes()["with-and-without"]))
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.count("rule train:") == 2 and done.stdout.count("rule sample:") == 2


def test_objective_recipe_plans_the_new_objective(tmp_path):
    done = plan(tmp_path, on_default(recipes()["objective"]))
    assert done.returncode == 0, done.stderr[-2000:]
    assert "objective=power-1.5" in done.stdout.replace(" ", "") or "/power-1.5/" in done.stdout


def test_studies_side_by_side_write_their_own_results(tmp_path):
    for study in ("small", "other"):
        folder = tmp_path / "studies" / study
        folder.mkdir(parents=True)
        done = subprocess.run([str(SNAKEMAKE), "-s", str(REPO / "Snakefile"), "--directory", str(folder),
                               "--configfile", str(REPO / "config.yaml"), "-n"], capture_output=True, text=True,
                              check=False, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
        assert "train" in planned_rules(done.stdout)  # each folder plans the whole study: nothing is shared
