"""The workflow tests' shared study: a tiny config, and snakemake run on it in a temporary folder."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
SNAKEMAKE = Path(sys.executable).parent / "snakemake"


def tiny_builtin(**docs) -> dict:
    """A builtin corpus small enough for a workflow test to finish in seconds."""
    return {"source": "builtin", "builtin": {"seed": 7, "words_per_class": 4, "sentences_per_doc": 16,
                                             "docs": {"train": 60, "validation": 10, "test": 20, "ood": 20, **docs}}}


def tiny_config() -> dict:
    return {
        "seed": 1,
        "datasets": {"synthetic": tiny_builtin()},
        "tokenizers": {"bpe": {"source": "train", "dataset": "synthetic", "vocab_size": 300}},
        "models": {"tiny": {"source": "scratch", "tokenizer": "bpe",
                            "architecture": {"n_layer": 1, "n_head": 1, "n_embd": 16, "n_positions": 128}}},
        "tokenize": {"block_size": 32},
        "prompts": {"max_prompts": 10},
        "training": {"batch_size": 8},
        "sampling": {"runs": 2, "new_tokens": 8},
        "evaluation": {"max_text_length": 64, "mauve": {"kmeans_num_redo": 1, "kmeans_max_iter": 50},
                       "extrapolation": {"draws": 8}},  # the default 32 costs 4x; 8 is enough to test the path
        "eval_sets": {"syn-test": {"dataset": "synthetic", "split": "test"},
                      "syn-ood": {"dataset": "synthetic", "split": "ood"}},
        "experiments": {"main": {"models": ["tiny"], "train_dataset": "synthetic", "eval_sets": ["syn-test", "syn-ood"]}},
    }


WORKFLOW_CODE = ["Snakefile", "config.yaml", "rules", "workflow_lib", "report", "profiles", "envs"]


def copy_workflow(dest: Path) -> Path:
    """A copy of the workflow's code in `dest`, so a test may edit it without touching the checkout."""
    import shutil

    dest.mkdir(parents=True, exist_ok=True)
    for name in WORKFLOW_CODE:
        source = REPO / name
        if source.is_dir():
            shutil.copytree(source, dest / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(source, dest / name)
    return dest


def write_config(workdir: Path, config: dict) -> Path:
    path = workdir / "config.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def snakemake(workdir: Path, *args: str, timeout: int = 600, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run the real workflow on `workdir/config.yaml`, with workdir as the working directory."""
    cmd = [str(SNAKEMAKE), "-s", str(REPO / "Snakefile"), "--directory", str(workdir),
           "--configfile", str(workdir / "config.yaml"), "--cores", "2", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=workdir, env=env)


def planned_rules(output: str) -> set[str]:
    """Rule names with jobs in snakemake's 'Job stats' table (of a dry run or a run), `all` left out."""
    from support.plans import job_stats

    return set(job_stats(output)) - {"all"}
