"""The cookbook (docs/cookbook.md): every recipe's YAML is read from the page and planned (`snakemake -n`)."""

from __future__ import annotations

import re
import subprocess

import pytest
import yaml
from support.study import REPO, SNAKEMAKE, planned_rules

pytestmark = pytest.mark.workflow


def recipes() -> dict[str, dict]:
    text = (REPO / "docs/cookbook.md").read_text()
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


def test_the_cookbook_has_every_recipe():
    assert set(recipes()) == {"own-data", "zero-shot", "with-and-without", "objective"}
    assert "strategy" in python_recipes()  # run by tests/workflow/test_new_strategy.py


def python_recipes() -> dict[str, str]:
    text = (REPO / "docs/cookbook.md").read_text()
    return dict(re.findall(r"<!-- recipe: ([\w-]+) -->\n```python\n(.*?)```", text, flags=re.DOTALL))


def test_own_data_recipe_plans(tmp_path):
    (tmp_path / "data").mkdir()
    for name in ("train.txt", "valid.txt"):
        (tmp_path / "data" / name).write_text("one document\nanother document\n")
    (tmp_path / "data/test.jsonl").write_text('{"text": "a test document"}\n')
    done = plan(tmp_path, recipes()["own-data"])
    assert done.returncode == 0, done.stderr[-2000:]
    assert {"download", "train", "sample", "evaluate"} <= planned_rules(done.stdout)


def test_zero_shot_recipe_runs_without_a_train_dataset(tmp_path):
    """Planned as written (a dataset with a test split only, no train_dataset), then run for real on a GPT-2-shaped
    local checkpoint: no training, both decoders sampled and evaluated, the paths say `none` for the dataset."""
    from support.families import make_checkpoint

    texts = [" ".join(f"the cat {j % 5} sat on mat {(i + j) % 7} and then it went home ." for j in range(12))
             for i in range(40)]  # 132 words each: enough for a prompt and its reference
    (tmp_path / "data").mkdir()
    (tmp_path / "data/test.txt").write_text("\n".join(texts) + "\n")
    make_checkpoint(tmp_path / "checkpoints", "gpt2", texts).rename(tmp_path / "checkpoints/my-gpt2")
    recipe = recipes()["zero-shot"]
    assert "train_dataset" not in recipe["experiments"]["zero-shot"] and list(recipe["datasets"]["mine"]["files"]) == ["test"]
    done = plan(tmp_path, recipe)
    assert done.returncode == 0, done.stderr[-2000:]
    rules = planned_rules(done.stdout)
    assert "train" not in rules and {"sample", "evaluate"} <= rules
    assert done.stdout.count("rule sample:") == 2  # unbiased and nucleus
    small = {"prompts": {"max_prompts": 8}, "sampling": {"runs": 1, "new_tokens": 8},
             "evaluation": {"max_text_length": 64, "mauve": {"kmeans_num_redo": 1, "kmeans_max_iter": 20}}}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump({**recipe, **small}, sort_keys=False))
    ran = subprocess.run([str(SNAKEMAKE), "-s", str(REPO / "Snakefile"), "--directory", str(tmp_path), "--configfile",
                          str(tmp_path / "config.yaml"), "--cores", "2"], capture_output=True, text=True, cwd=tmp_path,
                         check=False, timeout=900)
    assert ran.returncode == 0, (ran.stdout + ran.stderr)[-3000:]
    metrics = sorted(p.relative_to(tmp_path / "results/metrics").as_posix()
                     for p in (tmp_path / "results/metrics").rglob("*.json"))
    assert [m.split("/")[:3] for m in metrics] == [["local", "none", "untrained"]] * 2, metrics
    assert {m.split("/")[-3] for m in metrics} == {"unbiased", "nucleus"}
    assert not (tmp_path / "results/models").exists()


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
