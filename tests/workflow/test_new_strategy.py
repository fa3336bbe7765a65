"""A new perturbation strategy is one registry line: a copy of the workflow gets `duplication` (a copy of each
selected token inserted at a random gap; the line is the cookbook's recipe) that way and runs a tiny study with it,
through training data, training, exact and cached sampling, evaluation and the report's tables. The copy differs
from the checkout in exactly that file: the schema's enum is the registry's (workflow_lib/registries.py).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from studies.served import job_environment, warm_server
from support.workflow_runs import (
    REPO,
    SESSION_ENV,
    SNAKEMAKE,
    WORKFLOW_CODE,
    copy_workflow,
    tiny_config,
    write_config,
)

pytestmark = pytest.mark.workflow


def registration() -> str:
    """The cookbook's strategy recipe: the line a new strategy adds to the registry."""
    text = (REPO / "docs/cookbook.md").read_text()
    return re.search(r"<!-- recipe: strategy -->\n```python\n(.*?)```", text, flags=re.DOTALL).group(1)


def file_hashes(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for name in WORKFLOW_CODE
        for p in ([root / name] if (root / name).is_file() else (root / name).rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts
    }


def add_strategy(workflow: Path) -> None:
    """What the cookbook's recipe says to do: the registry line."""
    registry = workflow / "workflow_lib/perturb/strategies.py"
    registry.write_text(registry.read_text() + "\n" + registration())


def test_a_strategy_added_to_the_registry_runs_a_whole_study(tmp_path):
    workflow, workdir = tmp_path / "workflow", tmp_path / "work"
    copy_workflow(workflow)
    workdir.mkdir()
    add_strategy(workflow)
    before, after = file_hashes(REPO), file_hashes(workflow)
    assert sorted(k for k in after if before.get(k) != after[k]) == ["workflow_lib/perturb/strategies.py"]
    config = tiny_config()
    config["eval_sets"] = {"syn-test": config["eval_sets"]["syn-test"]}
    grid = {"strategies": ["duplication"], "intensities": [0, 0.2]}
    config["experiments"] = {
        "main": {
            "models": ["tiny"],
            "train_dataset": "synthetic",
            "eval_sets": ["syn-test"],
            "train_perturbation": grid,
            "test_perturbation": {**grid, "modes": ["exact", "cached"]},
        }
    }
    write_config(workdir, config)
    cmd = [
        str(SNAKEMAKE),
        "-s",
        str(workflow / "Snakefile"),
        "--directory",
        str(workdir),
        "--configfile",
        str(workdir / "config.yaml"),
        "--cores",
        "2",
    ]
    # The copy's jobs of one thread run in a warm server of the copy's own environment (its workflow_lib first on
    # PYTHONPATH, before the checkout's): the same outputs, without importing torch in each of them.
    copy_first = os.pathsep.join(filter(None, [str(workflow), SESSION_ENV.get("PYTHONPATH")]))
    env = job_environment({**SESSION_ENV, "PYTHONPATH": copy_first})
    with warm_server(env, tmp_path / "warm.log") as study_env:
        result = subprocess.run(
            cmd, capture_output=True, text=True, cwd=workdir, env=study_env, timeout=900, check=False
        )
    assert "ran workflow_lib.train.trainer" in (tmp_path / "warm.log").read_text()  # warm, not cold
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]

    meta = json.loads(next((workdir / "results/perturbed").rglob("duplication-0.2/seed1.json")).read_text())
    # A copy needs no synonym: every non-special token is eligible, the rows grow by the copies.
    assert meta["eligible_tokens"] == meta["tokens_in"] * meta["condition"]["copies"]
    assert abs(meta["selected_rate_among_eligible"] - 0.2) < 0.03
    assert meta["tokens_out"] - meta["tokens_in"] * 2 == meta["selected_tokens"]  # augment: the original and a copy
    for mode in ("exact", "cached"):
        samples = list((workdir / "results/samples").rglob(f"duplication-0.2-{mode}.parquet"))
        assert len(samples) == 2, mode  # the models trained at 0 and at 0.2
    strategies = (workdir / "results/report/tables/strategies.md").read_text()
    assert "duplication" in strategies and "insertion" not in strategies
    # The checkout's workflow refuses the name: the registry line is what admits it.
    refused = subprocess.run(
        [
            str(SNAKEMAKE),
            "-s",
            str(REPO / "Snakefile"),
            "--directory",
            str(workdir),
            "-n",
            "--configfile",
            str(workdir / "config.yaml"),
        ],
        capture_output=True,
        text=True,
        cwd=workdir,
        check=False,
    )
    assert refused.returncode != 0 and "duplication" in refused.stdout + refused.stderr
