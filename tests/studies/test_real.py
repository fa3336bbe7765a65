"""`make real`: configs/real.yaml (SmolLM2-135M from a GGUF file, WikiText-2, licence texts) run without the network.

- configs/real-local.yaml changes only where files come from, and serves the same bytes configs/real.yaml pins
  wherever this machine has them (the GGUF file, the licences); configs/real-ci.yaml changes only sizes.
- The study plans the rules it should (one fetch and one dequantisation of the GGUF file, three trainings, the
  zero-shot row, two eval sets).
- The post-run checks (studies/real_checks.py, which `make real` runs on the finished study) are each shown failing
  on doctored input.
"""

from __future__ import annotations

import hashlib
import json
import subprocess

import polars as pl
import pytest
import yaml

from studies.real_checks import (
    COLUMNS,
    EXACT,
    ROWS,
    controls_problems,
    expected_seeds,
    provenance_problems,
    row_experiment,
    row_problems,
    summary_problems,
)
from support.plans import job_stats
from support.workflow_runs import REPO, SNAKEMAKE

pytestmark = pytest.mark.workflow

REAL, LOCAL, CI = (REPO / f"configs/{name}.yaml" for name in ("real", "real-local", "real-ci"))
SOURCE_KEYS = {
    "datasets.*.archive.url",
    "datasets.*.archive.sha256",
    "datasets.*.files.*",
    "models.*.gguf.url",
    "models.*.gguf.sha256",
}
SIZE_KEYS = {
    "datasets.*.max_rows",
    "prompts.max_prompts",
    "sampling.runs",
    "sampling.new_tokens",
    "sampling.batch_size",
    "training.batch_size",
    "training.max_length",
    "tokenize.block_size",
    "training.checkpoint_every",
    "experiments.*.seeds",
}


def leaves(tree: dict, prefix: tuple = ()) -> list[tuple]:
    out = []
    for key, value in tree.items():
        out += leaves(value, (*prefix, key)) if isinstance(value, dict) else [(*prefix, key)]
    return out


def allowed(path: tuple, patterns: set[str]) -> bool:
    return any(
        len(p) == len(path) and all(a in ("*", b) for a, b in zip(p, path))
        for p in (pattern.split(".") for pattern in patterns)
    )


def test_local_overlay_changes_only_sources_and_pins_the_same_bytes_as_the_users_config():
    real, local = yaml.safe_load(REAL.read_text()), yaml.safe_load(LOCAL.read_text())
    assert [key for key in leaves(local) if not allowed(key, SOURCE_KEYS)] == []
    assert not allowed(("experiments", "perturbed", "objectives"), SOURCE_KEYS)
    for section in ("datasets", "models"):
        assert set(local.get(section, {})) <= set(real[section]), section
    # The GGUF file and the licences are the very bytes the users' config pins: the same sha256, another host.
    assert local["models"]["smollm2"]["gguf"]["sha256"] == real["models"]["smollm2"]["gguf"]["sha256"]
    pinned = [e["sha256"] for e in real["datasets"]["licences"]["files"]["test"]]
    assert [e["sha256"] for e in local["datasets"]["licences"]["files"]["test"]] == pinned
    for mine, theirs in zip(
        local["datasets"]["licences"]["files"]["test"], real["datasets"]["licences"]["files"]["test"]
    ):
        assert mine["url"].split("/data/main/", 1)[1] == theirs["url"].split("/data/main/", 1)[1]


def test_ci_overlay_changes_only_sizes():
    ci = yaml.safe_load(CI.read_text())
    assert [key for key in leaves(ci) if not allowed(key, SIZE_KEYS)] == []
    # The overlay keeps an across-seeds row for every trained arm (2 seeds: planned, reported "not testable").
    real = yaml.safe_load(REAL.read_text())
    trained = [name for name, exp in real["experiments"].items() if len(exp.get("seeds", [])) > 1]
    assert trained and all(
        len(ci["experiments"].get(name, real["experiments"][name])["seeds"]) >= 2 for name in trained
    )


def test_served_files_are_the_pinned_bytes():
    """What `make real` serves hashes to what the configs pin (the wheel's GGUF file, Debian's licences, the zip)."""
    from studies import real as runner

    try:
        shared = runner.shared_data()
    except SystemExit as error:
        pytest.fail(str(error))
    served = runner.served_files(shared)
    local = yaml.safe_load(LOCAL.read_text())
    by_path = {
        url.split("38518/", 1)[1]: sha
        for url, sha in (
            [(e["url"], e["sha256"]) for e in local["datasets"]["licences"]["files"]["test"]]
            + [(local["models"]["smollm2"]["gguf"]["url"], local["models"]["smollm2"]["gguf"]["sha256"])]
            + [(local["datasets"]["wikitext2"]["archive"]["url"], local["datasets"]["wikitext2"]["archive"]["sha256"])]
        )
    }
    assert sorted(by_path) == sorted(served)
    assert {path: hashlib.sha256(body).hexdigest() for path, body in served.items()} == by_path
    assert runner.wikitext_zip(shared) == runner.wikitext_zip(shared)


def test_the_real_study_plans_its_rules(tmp_path):
    cmd = [
        str(SNAKEMAKE),
        "-s",
        str(REPO / "Snakefile"),
        "--directory",
        str(tmp_path),
        "--configfile",
        str(REAL),
        str(LOCAL),
        "-n",
        "--quiet",
        "rules",
    ]
    result = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, timeout=150)
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    jobs = job_stats(result.stdout + result.stderr)
    assert jobs["tokenizer"] == 1
    # MLE, EMO, MLE + insertion, + the embedding noise and + NEFTune from 3 seeds each, and SmolLM2 with LoRA from one;
    # sampled on 2 eval sets with the zero-shot model, and the first perturbed seed once more in `exact` mode on the
    # licences; one perplexity job a model. Two GGUF models of one file, each fetched and dequantised under its own
    # name (pretrained.GGUF_DOWNLOAD is per model).
    assert jobs["fetch_gguf"] == 2 and jobs["dequantise"] == 2
    assert jobs["train"] == 16 and jobs["sample"] == 2 * 17 + 1 and jobs["perplexity"] == 17


def test_checks_fail_on_doctored_input(tmp_path):
    real = yaml.safe_load(REAL.read_text())
    seeds = real["experiments"]["perturbed"]["seeds"]
    rows = [
        (eval_set, *row, seed, 0.5)
        for row in ROWS
        for eval_set in row_experiment(row, real)["eval_sets"]
        for seed in expected_seeds(row, real)
    ] + [
        (e, *EXACT, s, 0.5)
        for e in real["experiments"]["exact-check"]["eval_sets"]
        for s in real["experiments"]["exact-check"]["seeds"]
    ]
    schema = ["eval_set", *COLUMNS, "seed", "rouge1_mean"]
    metrics = pl.DataFrame(rows, schema=schema, orient="row")
    assert row_problems(metrics, real) == []
    assert row_problems(metrics.filter(pl.col("objective") != "emo"), real)
    assert row_problems(metrics.filter(pl.col("seed") != seeds[-1]), real)  # a seed missing
    assert row_problems(metrics.filter(pl.col("test_mode") != "exact"), real)  # the exact check missing (and baselines)
    assert row_problems(metrics.filter(~((pl.col("test_mode") == "exact") & (pl.col("test_intensity") > 0))), real)
    assert row_problems(metrics.with_columns(pl.lit(float("nan")).alias("rouge1_mean")), real)
    assert row_problems(pl.concat([metrics, metrics.head(1)]), real)  # a row twice
    assert row_problems(metrics.filter(pl.col("train_strategy") != "neftune"), real)  # NEFTune's row missing
    assert row_problems(metrics.filter(pl.col("model") != "smollm2-lora"), real)  # the LoRA model's
    # a row is expected on its own experiment's eval sets (real-ci samples the LoRA model on the licences only)
    lora_on_wikitext = (pl.col("model") == "smollm2-lora") & (pl.col("eval_set") == "wikitext2")
    ci = {
        **real,
        "experiments": {**real["experiments"], "lora": {**real["experiments"]["lora"], "eval_sets": ["licences"]}},
    }
    assert (
        row_problems(metrics.filter(~lora_on_wikitext), ci)
        == []
        != row_problems(metrics.filter(~lora_on_wikitext), real)
    )
    real = yaml.safe_load(REAL.read_text())
    (tmp_path / "pretrained/smollm2").mkdir(parents=True)
    (tmp_path / "data/licences").mkdir(parents=True)
    (tmp_path / "pretrained/smollm2/gguf.json").write_text(
        json.dumps({"sha256": real["models"]["smollm2"]["gguf"]["sha256"]})
    )
    files = [{"sha256": e["sha256"]} for e in real["datasets"]["licences"]["files"]["test"]]
    (tmp_path / "data/licences/test.json").write_text(json.dumps({"provenance": {"files": files}}))
    assert provenance_problems(tmp_path, real) == []
    (tmp_path / "data/licences/test.json").write_text(
        json.dumps({"provenance": {"files": files[:-1] + [{"sha256": "0" * 64}]}})
    )
    assert provenance_problems(tmp_path, real)
    (tmp_path / "pretrained/smollm2/gguf.json").write_text(json.dumps({"sha256": "f" * 64}))
    assert provenance_problems(tmp_path, real)
    whole = (
        "# What this study found\n# What MAUVE can see here\n# The synonyms the perturbation draws\nwikitext2 licences"
    )
    assert summary_problems(whole) == []
    assert summary_problems(whole.replace("# The synonyms the perturbation draws", "")) == [
        "results/summary.md does not mention 'The synonyms the perturbation draws'"
    ]
    assert summary_problems("# What this study found\nwikitext2 licences")
    assert summary_problems("# Summary\nwikitext2")
    cells = pl.DataFrame(
        {"eval_set": ["wikitext2"] * 2, "mauve_mean": [0.9, None], "mauve_status": [None, "too few texts (8)"]}
    )
    (tmp_path / "controls/model-smollm2").mkdir(parents=True)
    assert controls_problems(tmp_path, cells, ["wikitext2"]) == [
        f"wikitext2: no MAUVE controls at {tmp_path}/controls/model-smollm2/wikitext2.json"
    ]
    (tmp_path / "controls/model-smollm2/wikitext2.json").write_text(json.dumps({"status": None}))
    assert controls_problems(tmp_path, cells, ["wikitext2"]) == []
    assert controls_problems(tmp_path, cells.with_columns(pl.lit(None, pl.Utf8).alias("mauve_status")), ["wikitext2"])
    blind = "MAUVE cannot see word salad at n = 50 with smollm2"
    (tmp_path / "controls/model-smollm2/wikitext2.json").write_text(json.dumps({"status": blind}))
    assert controls_problems(tmp_path, cells, ["wikitext2"])  # a number where the controls fail
    refused = pl.DataFrame(
        {"eval_set": ["wikitext2"], "mauve_mean": [None], "mauve_status": [blind]},
        schema_overrides={"mauve_mean": pl.Float64},
    )
    assert controls_problems(tmp_path, refused, ["wikitext2"]) == []
