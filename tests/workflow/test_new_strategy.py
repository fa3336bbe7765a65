"""A new perturbation strategy, sampling mode, loss, text statistic or MAUVE control is one registry entry each: a
copy of the workflow gets the cookbook's five recipes (`duplication`, a copy of each selected token inserted at a
random gap; `recompute`, Algorithm 2 without the cache reuse; `spherical`, a proper scoring rule; `length`, a
continuation's length in tokens; `reversed`, the human continuation's words reversed), each in its own registry, and
runs one tiny study with all five, through training data, training, sampling in three modes, MAUVE's controls,
evaluation and the report. The copy differs from the checkout in exactly those five files: the schema's enums, the
wildcards and the metric registry are read from them (workflow_lib/registries.py, metric_registry.py). One study for
the five keeps CI's cost at one run.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import re
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from studies.served import job_environment, warm_server
from support.workflow_runs import (
    REPO,
    SESSION_ENV,
    WORKFLOW_CODE,
    copy_workflow,
    run_snakemake,
    tiny_config,
    write_config,
)
from workflow_lib.config_schema import ConfigError, check_schema, load_schema
from workflow_lib.layout import parse

pytestmark = pytest.mark.workflow


# Each cookbook recipe, and the registry it is appended to.
RECIPES = {
    "strategy": "workflow_lib/perturb/strategies.py",
    "sampling mode": "workflow_lib/sample/modes.py",
    "loss": "workflow_lib/train/objectives.py",
    "metric": "workflow_lib/evaluate/textstats.py",
    "control": "workflow_lib/evaluate/control_builders.py",
}


def registration(recipe: str = "strategy") -> str:
    """The cookbook's recipe: the lines a new registry entry adds."""
    text = (REPO / "docs/cookbook.md").read_text()
    return re.search(rf"<!-- recipe: {recipe} -->\n```python\n(.*?)```", text, flags=re.DOTALL).group(1)


def file_hashes(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for name in WORKFLOW_CODE
        for p in ([root / name] if (root / name).is_file() else (root / name).rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts
    }


def add_entries(workflow: Path) -> None:
    """What the cookbook's recipes say to do: each entry appended to its registry."""
    for recipe, path in RECIPES.items():
        registry = workflow / path
        registry.write_text(registry.read_text() + "\n\n" + registration(recipe))


def test_a_strategy_mode_and_loss_added_to_their_registries_run_a_whole_study(tmp_path):
    workflow, workdir = tmp_path / "workflow", tmp_path / "work"
    copy_workflow(workflow)
    workdir.mkdir()
    add_entries(workflow)
    before, after = file_hashes(REPO), file_hashes(workflow)
    assert sorted(k for k in after if before.get(k) != after[k]) == sorted(RECIPES.values())
    config = tiny_config()
    config["eval_sets"] = {"syn-test": config["eval_sets"]["syn-test"]}
    config["evaluation"]["mauve"]["min_texts"] = 10  # the prompts: MAUVE is scored, so its controls are built
    config["objectives"] = {"spherical": {"loss": "spherical"}}
    grid = {"strategies": ["duplication"], "intensities": [0, 0.2]}
    config["experiments"] = {
        "main": {
            "models": ["tiny"],
            "train_dataset": "synthetic",
            "eval_sets": ["syn-test"],
            "objectives": ["spherical"],
            "train_perturbation": grid,
            "test_perturbation": {**grid, "modes": ["exact", "cached", "recompute"]},
        }
    }
    write_config(workdir, config)
    # The copy's jobs of one thread run in a warm server of the copy's own environment (its workflow_lib first on
    # PYTHONPATH, before the checkout's): the same outputs, without importing torch in each of them.
    copy_first = os.pathsep.join(filter(None, [str(workflow), SESSION_ENV.get("PYTHONPATH")]))
    env = job_environment({**SESSION_ENV, "PYTHONPATH": copy_first})
    with warm_server(env, tmp_path / "warm.log") as study_env:
        result = run_snakemake(
            workdir,
            snakefile=workflow / "Snakefile",
            configfiles=[workdir / "config.yaml"],
            cores=2,
            env=study_env,
            timeout=900,
        )
    assert "ran workflow_lib.train.trainer" in (tmp_path / "warm.log").read_text()  # warm, not cold
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]

    meta = json.loads(next((workdir / "results/perturbed").rglob("duplication-0.2/seed1.json")).read_text())
    # A copy needs no synonym: every non-special token is eligible, the rows grow by the copies.
    assert meta["eligible_tokens"] == meta["tokens_in"] * meta["condition"]["copies"]
    assert abs(meta["selected_rate_among_eligible"] - 0.2) < 0.03
    assert meta["tokens_out"] - meta["tokens_in"] * 2 == meta["selected_tokens"]  # augment: the original and a copy
    samples = {}
    for mode in ("exact", "cached", "recompute"):
        samples[mode] = sorted((workdir / "results/samples").rglob(f"duplication-0.2-{mode}.parquet"))
        assert len(samples[mode]) == 2, mode  # the models trained at 0 and at 0.2
        assert all("/spherical/" in str(path) for path in samples[mode])

    # `recompute` draws Algorithm 2's perturbations and tokens as `exact` does (its cache reuse is exact within
    # float32 rounding), and `cached` its own law: the same draws give other tokens.
    def drawn(mode):
        return np.concatenate(
            [np.concatenate(pq.read_table(p).column("continuation_ids").to_pylist()) for p in samples[mode]]
        )

    assert (drawn("recompute") == drawn("exact")).mean() > 0.95  # a token may flip where a uniform meets a rounding
    assert (drawn("cached") != drawn("exact")).any()
    # The spherical loss, -p_y / ||p||_2, lies in [-1, 0); the log score's is positive.
    for path in (workdir / "results/models").rglob("train_summary.json"):
        assert "/spherical/" in str(path) and -1 <= json.loads(path.read_text())["final_loss"] < 0, path
    # The metric: each evaluation's mean over runs of a run's mean continuation length, and a column of the report.
    evaluations = sorted((workdir / "results/metrics").rglob("*-exact.json"))
    assert len(evaluations) == 4  # 2 models x 2 sampling intensities
    for path in evaluations:
        result = json.loads(path.read_text())
        table = pq.read_table(workdir / parse(str(path.relative_to(workdir))).moved("samples"))
        lengths = np.asarray([len(ids) for ids in table.column("continuation_ids").to_pylist()])
        runs = np.asarray(table.column("run").to_pylist())
        expected = np.mean([lengths[runs == r].mean() for r in np.unique(runs)])
        assert result["length_mean"] == pytest.approx(expected), path
    assert "length (tokens per continuation)" in (workdir / "results/report/tables/metrics.md").read_text()
    # The control: its texts beside the others' (the human continuation's words, reversed: the loop's first five
    # words are the last five reversed), scored against the human references, and a column of the summary's table.
    controls = pq.read_table(workdir / "results/controls/syn-test.texts.parquet").to_pylist()
    texts = {(row["control"], row["prompt_id"]): row["text"].split() for row in controls}
    prompts = sorted({p for c, p in texts if c == "reversed"})
    assert len(prompts) == 10 and all(texts["reversed", p][::-1][:5] == texts["loop", p][:5] for p in prompts)
    scored = json.loads(next((workdir / "results/controls").glob("*/syn-test.json")).read_text())
    assert len(scored["controls"]["reversed"]["scores"]) == len(scored["kmeans_seeds"])
    assert "| reversed words |" in (workdir / "results/report/tables/controls.md").read_text()
    strategies = (workdir / "results/report/tables/strategies.md").read_text()
    assert "duplication" in strategies and "insertion" not in strategies
    # The checkout's workflow refuses each name: the registry entry is what admits it.
    refused = run_snakemake(workdir, "-n", configfiles=[workdir / "config.yaml"])
    assert refused.returncode != 0 and "spherical" in refused.stdout + refused.stderr
    # The checkout's schema refuses each name where the paper's recipe is allowed: one name in each study.
    schema = load_schema()
    paper = {"strategies": ["insertion"], "intensities": [0, 0.2]}
    plain = copy.deepcopy(config)
    plain["objectives"] = {}
    plain["experiments"]["main"] |= {"objectives": ["mle"], "train_perturbation": paper, "test_perturbation": paper}
    check_schema(copy.deepcopy(plain), schema)
    for path, name in (
        (("experiments", "main", "test_perturbation", "strategies"), "duplication"),
        (("experiments", "main", "test_perturbation", "modes"), "recompute"),
        (("evaluation", "mauve", "controls", "must_detect"), "reversed"),
    ):
        one = copy.deepcopy(plain)
        node = one
        for key in path[:-1]:
            node = node.setdefault(key, {})
        node[path[-1]] = [name]
        with pytest.raises(ConfigError, match=name):
            check_schema(one, schema)
