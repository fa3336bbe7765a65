"""The cookbook (docs/cookbook.md): each recipe is a file under configs/examples/, shown whole on the page, and its
command is run as the page writes it (from the repository, the study folder `studies/<name>` made temporary)."""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

import pytest
import yaml

from support.workflow_runs import REPO, planned_rules, run_snakemake

pytestmark = pytest.mark.workflow

RECIPE = re.compile(
    r"<!-- recipe: (configs/examples/[\w-]+\.yaml) -->\n```yaml\n(.*?)```\n\n```bash\n(.*?)\n```", flags=re.DOTALL
)


def recipes() -> dict[str, tuple[str, str]]:
    """{name: (the file's text as the page shows it, the command)}."""
    page = (REPO / "docs/cookbook.md").read_text()
    return {Path(path).stem: (body, command) for path, body, command in RECIPE.findall(page)}


def run_recipe(name: str, studies: Path, run: list[str] | None = None) -> subprocess.CompletedProcess:
    """The page's command for `name`, from the repository, with `studies/` under `studies`; with `run`, those
    arguments in place of `-n`, as the page says to run the study."""
    argv = shlex.split(recipes()[name][1])
    assert argv[0] == "snakemake" and argv[1:3] == ["--directory", f"studies/{name}"] and argv[-1] == "-n", argv
    args = [*argv[3:-1], *(run if run is not None else ["-n"])]
    return run_snakemake(studies / name, *args, snakefile=None, cwd=REPO, timeout=900)


def test_every_recipe_is_a_file_the_page_shows_whole():
    found = recipes()
    assert set(found) == {"own-data", "zero-shot", "with-and-without", "objective", "lora-7b", "longer", "more-arms"}
    assert {p.stem for p in (REPO / "configs/examples").glob("*.yaml")} == set(found)
    for name, (body, command) in found.items():
        assert body == (REPO / f"configs/examples/{name}.yaml").read_text(), name
        assert command.endswith(f"configs/examples/{name}.yaml -n"), command
    assert "strategy" in python_recipes()  # run by tests/workflow/test_new_strategy.py


def python_recipes() -> dict[str, str]:
    text = (REPO / "docs/cookbook.md").read_text()
    return dict(re.findall(r"<!-- recipe: ([\w-]+) -->\n```python\n(.*?)```", text, flags=re.DOTALL))


def test_own_data_recipe_plans(tmp_path):
    data = tmp_path / "own-data/data"
    data.mkdir(parents=True)
    for name in ("train.txt", "valid.txt"):
        (data / name).write_text("one document\nanother document\n")
    (data / "test.jsonl").write_text('{"text": "a test document"}\n')
    done = run_recipe("own-data", tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert {"download", "train", "sample", "evaluate"} <= planned_rules(done.stdout)
    assert not (tmp_path / "own-data/results").exists()


def test_zero_shot_recipe_runs_without_a_train_dataset(tmp_path):
    """Planned as the page writes it (a dataset with a test split only, no train_dataset), then run for real on a
    GPT-2-shaped local checkpoint, smaller (`--config`): no training, both decoders sampled and evaluated, the
    paths say `none` for the dataset."""
    from studies.families import make_checkpoint

    texts = [
        " ".join(f"the cat {j % 5} sat on mat {(i + j) % 7} and then it went home ." for j in range(12))
        for i in range(40)
    ]  # 132 words each: enough for a prompt and its reference
    study = tmp_path / "zero-shot"
    (study / "data").mkdir(parents=True)
    (study / "data/test.txt").write_text("\n".join(texts) + "\n")
    make_checkpoint(study / "checkpoints", "gpt2", texts).rename(study / "checkpoints/my-gpt2")
    recipe = yaml.safe_load(recipes()["zero-shot"][0])
    assert "train_dataset" not in recipe["experiments"]["zero-shot"] and list(recipe["datasets"]["mine"]["files"]) == [
        "test"
    ]
    done = run_recipe("zero-shot", tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    rules = planned_rules(done.stdout)
    assert "train" not in rules and {"sample", "evaluate"} <= rules
    assert done.stdout.count("rule sample:") == 2  # unbiased and nucleus
    ran = run_recipe(
        "zero-shot",
        tmp_path,
        [
            "--cores",
            "2",
            "--config",
            "prompts={max_prompts: 8}",
            "sampling={runs: 1, new_tokens: 8}",
            "evaluation={max_text_length: 64, mauve: {kmeans_num_redo: 1, kmeans_max_iter: 20}}",
        ],
    )
    assert ran.returncode == 0, (ran.stdout + ran.stderr)[-3000:]
    metrics = sorted(
        p.relative_to(study / "results/metrics").as_posix() for p in (study / "results/metrics").rglob("*.json")
    )
    assert [m.split("/")[:3] for m in metrics] == [["local", "none", "untrained"]] * 2, metrics
    assert {m.split("/")[-3] for m in metrics} == {"unbiased", "nucleus"}
    assert not (study / "results/models").exists()


def test_with_and_without_recipe_plans_both_conditions(tmp_path):
    done = run_recipe("with-and-without", tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.count("rule train:") == 2 and done.stdout.count("rule sample:") == 2
    assert "/insertion-0.025/" in done.stdout and "/none-0/" in done.stdout


def test_objective_overlay_adds_its_objective_to_the_default_study(tmp_path):
    """Given after config.yaml, as the page's command gives it: the default study's jobs and the new objective's."""
    done = run_recipe("objective", tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    trained = set(re.findall(r"results/models/tiny/synthetic/([\w.-]+)/", done.stdout))
    assert {"mle", "brier", "mixce", "tvd", "emo", "power-1.5"} <= trained, trained
    alone = run_snakemake(
        tmp_path / "alone", "-n", snakefile=None, configfiles=["configs/examples/objective.yaml"], cwd=REPO, timeout=300
    )
    assert alone.returncode != 0 and "'datasets' is a required property" in alone.stdout + alone.stderr


def test_longer_overlay_adds_the_longer_model_to_the_default_study(tmp_path):
    done = run_recipe("longer", tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "results/models/tiny-long/synthetic/mle/" in done.stdout
    assert "results/models/tiny/synthetic/brier/" in done.stdout  # the default study's jobs too


def test_more_arms_overlay_adds_the_embedding_space_and_the_second_dose_to_the_default_study(tmp_path):
    done = run_recipe("more-arms", tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "results/models/tiny/synthetic/mle/none/augment-m1/embedding-noise-0.025/" in done.stdout
    assert "/unbiased/none/embedding-noise-0.025-exact" in done.stdout  # noise at sampling too
    assert "results/models/tiny/synthetic/mle/distributional/augment-m1/insertion-0.4/" in done.stdout
    assert "results/report/figures/intensity.png" in done.stdout  # a second dose: MAUVE against intensity
    assert "results/models/tiny/synthetic/brier/" in done.stdout


def test_studies_side_by_side_write_their_own_results(tmp_path):
    for study in ("small", "other"):
        folder = tmp_path / "studies" / study
        folder.mkdir(parents=True)
        done = run_snakemake(folder, "-n", configfiles=[REPO / "config.yaml"], cwd=None, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
        assert "train" in planned_rules(done.stdout)  # each folder plans the whole study: nothing is shared


def test_lora_7b_overlay_plans_its_two_trainings_beside_the_paper_study(tmp_path):
    """Given after configs/paper.yaml: the 7B model's trainings with and without perturbation, with LoRA in their
    settings (its memory and GPU-hours: tests/cost/test_lora_cost.py)."""
    done = run_recipe("lora-7b", tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    trained = set(re.findall(r"results/models/llama-2-7b/wikitext2/mle/[^\s,]+/seed42", done.stdout))
    assert trained == {
        "results/models/llama-2-7b/wikitext2/mle/embedding/augment-m1/insertion-0.025/seed42",
        "results/models/llama-2-7b/wikitext2/mle/none/augment-m1/none-0/seed42",
    }
    assert "results/models/gpt2/wikitext2/mle/" in done.stdout  # the paper's study is still there
