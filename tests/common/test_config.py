"""Config validation: every bad config stops with one line that names the key and what is allowed."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from support.workflow_runs import REPO, snakemake, tiny_config, write_config
from workflow_lib.config import ConfigError, normalise, typed_overrides, validate_config
from workflow_lib.config import check as check_normalised


def check(config: dict, tmp_path: Path | None = None) -> dict:
    return validate_config(copy.deepcopy(config), workdir=tmp_path or Path("."))


def error_of(config: dict, tmp_path: Path | None = None) -> str:
    with pytest.raises(ConfigError) as info:
        check(config, tmp_path)
    return str(info.value)


def test_default_config_is_valid_and_defaults_are_filled():
    config = yaml.safe_load((REPO / "config.yaml").read_text())
    filled = validate_config(config, workdir=REPO)
    assert filled["tokenize"]["splits"] == ["train", "validation"]
    assert filled["prompts"]["min_chars"] == 100
    assert filled["eval_sets"]["synthetic-test"]["prefix_words"] == 20
    assert filled["datasets"]["synthetic"]["cleaning"] == "none"


def test_unknown_key_names_key_and_allowed_keys():
    config = tiny_config()
    config["datasets"]["synthetic"]["colour"] = "red"
    message = error_of(config)
    assert "datasets.synthetic" in message and "'colour'" in message
    assert "allowed keys:" in message and "source" in message


def test_unknown_top_level_key():
    config = tiny_config()
    config["trainning"] = {}
    message = error_of(config)
    assert "'trainning'" in message and "experiments" in message


def test_wrong_type_names_key_and_type():
    config = tiny_config()
    config["tokenize"]["block_size"] = "big"
    message = error_of(config)
    assert "tokenize.block_size" in message and "integer" in message


def test_negative_intensity():
    config = tiny_config()
    config["experiments"]["main"]["train_perturbation"] = {"intensities": [0, -0.1]}
    message = error_of(config)
    assert "experiments.main.train_perturbation.intensities.1" in message and "minimum 0" in message


def test_unknown_enum_lists_allowed_values():
    config = tiny_config()
    config["datasets"]["synthetic"]["source"] = "ftp"
    message = error_of(config)
    assert "datasets.synthetic.source" in message and "'hf'" in message and "'builtin'" in message


def test_unknown_dataset_referenced_by_experiment():
    config = tiny_config()
    config["experiments"]["main"]["train_dataset"] = "wiki"
    message = error_of(config)
    assert "experiments.main.train_dataset" in message and "'wiki'" in message and "synthetic" in message


def test_unknown_eval_set_and_split():
    config = tiny_config()
    config["experiments"]["main"]["eval_sets"] = ["syn-test", "nope"]
    assert "experiments.main.eval_sets[1]" in error_of(config)
    config = tiny_config()
    config["eval_sets"]["syn-test"]["split"] = "dev"
    message = error_of(config)
    assert "eval_sets.syn-test.split" in message and "ood" in message
    # `reach` exists only where a share of the words is held out of the subject role
    config["eval_sets"]["syn-test"]["split"] = "reach"
    message = error_of(config)
    assert "eval_sets.syn-test.split" in message and "no split 'reach'" in message
    builtin = next(d for d in config["datasets"].values() if d["source"] == "builtin").setdefault("builtin", {})
    builtin["context_fraction"] = 0.25
    check(config)
    builtin["context_fraction"] = 1
    assert "context_fraction" in error_of(config)


def test_missing_local_file_names_key_and_path(tmp_path):
    config = tiny_config()
    config["datasets"]["wiki"] = {"source": "local", "format": "wikitext", "files": {"test": "nowhere/wiki.test.raw"}}
    message = error_of(config, tmp_path)
    assert "datasets.wiki.files.test" in message and "nowhere/wiki.test.raw" in message


def test_writingprompts_needs_two_files(tmp_path):
    (tmp_path / "a.wp_source").write_text("x\n")
    config = tiny_config()
    config["datasets"]["wp"] = {"source": "local", "format": "writingprompts", "files": {"test": "a.wp_source"}}
    assert "takes 2 file(s)" in error_of(config, tmp_path)


def test_hf_dataset_requires_path():
    config = tiny_config()
    config["datasets"]["wiki"] = {"source": "hf", "splits": {"test": "test"}}
    assert "'path' is a required property" in error_of(config)


def test_snakemake_stops_before_any_job_with_one_clear_message(workdir):
    config = tiny_config()
    config["experiments"]["main"]["models"] = ["huge"]
    write_config(workdir, config)
    result = snakemake(workdir)
    assert result.returncode != 0
    assert (
        "Invalid configuration: config key experiments.main.models[0]: unknown model 'huge'; allowed: tiny"
        in result.stderr
    )
    # The one line, not a traceback header ("WorkflowError in file .../rules/common.smk, line 46:") that reads as a crash.
    said = [
        line
        for line in (result.stdout + result.stderr).splitlines()
        if line and not line.startswith("Using workflow specific profile")
    ]
    assert said == [
        "Invalid configuration: config key experiments.main.models[0]: unknown model 'huge'; allowed: tiny"
    ], said
    assert not (workdir / "results").exists()


def test_training_hyperparameters_are_checked_before_any_job():
    config = tiny_config()
    config["training"] = {"learning_rate": 0}
    message = error_of(config)
    assert "training.learning_rate" in message and "exclusiveMinimum 0" in message
    config = tiny_config()
    config["models"]["tiny"]["training"] = {"learning_rate": -1.0}
    assert "models.tiny.training.learning_rate" in error_of(config)
    config["models"]["tiny"]["training"] = {"learnin_rate": 1.0}
    assert "models.tiny.training: unknown key(s) 'learnin_rate'" in error_of(config)


def test_unknown_objective_names_key_and_allowed():
    config = tiny_config()
    config["experiments"]["main"]["objectives"] = ["mle", "focal"]
    message = error_of(config)
    assert "experiments.main.objectives[1]" in message and "'focal'" in message and "brier" in message
    config["objectives"] = {"focal": {"loss": "focal"}}
    assert "objectives.focal.loss" in error_of(config)


def test_user_objectives_extend_the_predefined_ones():
    config = tiny_config()
    config["objectives"] = {"alpha3": {"loss": "alpha_power", "alpha": 3}}
    config["experiments"]["main"]["objectives"] = ["mle", "alpha3"]
    filled = check(config)
    assert set(filled["objectives"]) >= {"mle", "brier", "mixce", "tvd", "emo", "alpha3"}


def with_architecture(**changes) -> dict:
    config = tiny_config()
    arch = {**config["models"]["tiny"]["architecture"], **changes}
    config["models"]["tiny"]["architecture"] = {k: v for k, v in arch.items() if v is not ...}
    return config


@pytest.mark.parametrize(
    "changes, expected",
    [
        ({"n_embd": 30, "n_head": 4}, ["models.tiny.architecture: n_embd = 30 is not divisible by n_head = 4"]),
        ({"n_head": ...}, ["n_embd = 16 is not divisible by n_head = 12 (unset: GPT2Config's default)"]),
        ({"n_heads": 2}, ["models.tiny.architecture: unknown key(s) 'n_heads'", "allowed keys:", "n_head,"]),
        ({"vocab_size": 300}, ["models.tiny.architecture: unknown key(s) 'vocab_size'", "come from the tokenizer"]),
        ({"n_layer": 0}, ["models.tiny.architecture.n_layer", "minimum 1"]),
        ({"n_inner": 0}, ["models.tiny.architecture.n_inner", "minimum 1"]),
        ({"attn_pdrop": 1.5}, ["models.tiny.architecture.attn_pdrop", "exclusiveMaximum 1"]),
        ({"activation_function": "gelu2"}, ["models.tiny.architecture.activation_function", "'gelu_new'"]),
        ({"n_embd": "wide"}, ["models.tiny.architecture.n_embd", "integer"]),
        ({"n_embd": 16.0}, ["models.tiny.architecture.n_embd: GPT2Config takes an integer", "write 16"]),
        (
            {"layer_norm_epsilon": 1},
            ["models.tiny.architecture.layer_norm_epsilon: GPT2Config takes a float", "write 1.0"],
        ),
    ],
)
def test_scratch_architecture_that_cannot_be_built_is_refused_before_any_job(changes, expected):
    message = error_of(with_architecture(**changes))
    assert all(part in message for part in expected), message


def test_scratch_architecture_with_every_kind_of_key_is_valid():
    config = with_architecture(
        n_layer=2,
        n_head=4,
        n_embd=32,
        n_positions=32,
        n_inner=None,
        activation_function="relu",
        resid_pdrop=0,
        embd_pdrop=0.0,
        attn_pdrop=0.2,
        layer_norm_epsilon=1.0e-5,
        initializer_range=0.02,
        scale_attn_weights=True,
        scale_attn_by_inverse_layer_idx=False,
        reorder_and_upcast_attn=False,
        tie_word_embeddings=False,
    )
    assert check(config)["models"]["tiny"]["architecture"]["n_inner"] is None


def test_architecture_of_a_pretrained_model_is_refused():
    config = tiny_config()
    config["models"]["gpt2"] = {"source": "hf", "name": "gpt2", "tokenizer": "bpe", "architecture": {"n_layer": 2}}
    message = error_of(config)
    assert "models.gpt2.architecture" in message and "source: scratch" in message


def test_featuriser_is_a_known_name_or_a_local_model_folder(tmp_path):
    config = tiny_config()
    config["evaluation"]["featuriser"] = "models/my-encoder"
    message = error_of(config, tmp_path)
    assert "evaluation.featuriser" in message and "'models/my-encoder'" in message
    assert "'minilm', 'gpt2-large'" in message and "config.json" in message
    (tmp_path / "models/my-encoder").mkdir(parents=True)
    assert "evaluation.featuriser" in error_of(config, tmp_path)  # a folder, but no model in it
    (tmp_path / "models/my-encoder/config.json").write_text("{}")
    assert check(config, tmp_path)["evaluation"]["featuriser"] == "models/my-encoder"
    config["evaluation"]["featuriser"] = "gpt2-large"
    check(config, tmp_path)


def url_dataset(**changes) -> dict:
    return {
        "source": "url",
        "format": "jsonl",
        "cleaning": "webtext",
        "files": {"test": {"url": "https://example.org/v1/webtext.test.jsonl", "sha256": "a" * 64}},
        **changes,
    }


@pytest.mark.parametrize(
    "dataset, expected",
    [
        (
            url_dataset(files={"test": {"url": "ftp://example.org/x.jsonl", "sha256": None}}),
            "does not match '^https?://'",
        ),
        (
            url_dataset(files={"test": {"url": "https://example.org/x.jsonl", "sha256": "abc"}}),
            "datasets.web.files.test",
        ),
        (url_dataset(files={"test": {"url": "https://example.org/x.jsonl"}}), "datasets.web.files.test"),
        (
            url_dataset(files={"test": "data/webtext.test.jsonl"}),
            "datasets.web.files.test: source: url takes {url: ..., sha256: ...} entries",
        ),
        (
            url_dataset(
                format="parquet", files={"test": {"url": "https://e.org/x.parquet", "sha256": None, "head_bytes": 4096}}
            ),
            "datasets.web.files.test.head_bytes: a head is cut to whole lines",
        ),
        (
            url_dataset(
                files={
                    "test": {"url": "https://a.org/x.jsonl", "sha256": None},
                    "train": {"url": "https://b.org/x.jsonl", "sha256": None},
                }
            ),
            "would both be saved as 'x.jsonl'",
        ),
        (
            url_dataset(
                format="writingprompts",
                archive={"url": "https://e.org/wp.tar.gz", "sha256": None},
                files={"test": ["wp/test.wp_source", "../test.wp_target"]},
            ),
            "must be a relative path without '..'",
        ),
        (
            url_dataset(
                format="writingprompts",
                archive={"url": "https://e.org/wp.tar.gz", "sha256": None},
                files={"test": ["wp/test.wp_source"]},
            ),
            "format 'writingprompts' takes 2 files",
        ),
        (
            url_dataset(archive={"url": "https://e.org/wp.tar.gz", "sha256": None}),
            "with `archive`, files are the archive's member paths",
        ),
        (
            {"source": "local", "format": "jsonl", "files": {"test": {"url": "https://e.org/x.jsonl", "sha256": None}}},
            "{url, sha256} entries need source: url",
        ),
        (
            url_dataset(files={"test": {"url": "http://example.org/x.jsonl", "sha256": None}}),
            "config key datasets.web.files.test: http://example.org/x.jsonl is plain http",
        ),
        (
            url_dataset(
                format="writingprompts",
                archive={"url": "http://e.org/wp.tar.gz", "sha256": None},
                files={"test": ["wp/test.wp_source", "wp/test.wp_target"]},
            ),
            "config key datasets.web.archive: http://e.org/wp.tar.gz is plain http",
        ),
    ],
)
def test_url_datasets_are_checked_before_any_job(dataset, expected):
    config = tiny_config()
    config["datasets"]["web"] = dataset
    assert expected in error_of(config)


def test_plain_http_passes_the_check_when_pinned_or_served_from_this_machine():
    config = tiny_config()
    config["datasets"]["web"] = url_dataset(files={"test": {"url": "http://example.org/x.jsonl", "sha256": "a" * 64}})
    config["datasets"]["local"] = url_dataset(files={"test": {"url": "http://127.0.0.1:8000/x.jsonl", "sha256": None}})
    assert check(config)["datasets"]["web"]["files"]["test"]["url"] == "http://example.org/x.jsonl"


def test_the_download_cap_defaults_to_the_fetchs_own_and_reaches_the_fetch_jobs_only_where_set():
    """download.max_bytes null (the default) adds no option, so a study that leaves it alone keeps its fetch jobs'
    params; a value goes to every fetch, a dataset's file or a GGUF checkpoint; 0 is refused naming the key."""
    from types import SimpleNamespace

    from workflow_lib.inputs import Inputs

    config = tiny_config()
    config["datasets"]["web"] = url_dataset()
    config["models"]["smol"] = {
        "source": "hf",
        "tokenizer": next(iter(config["tokenizers"])),
        "gguf": {"url": "https://example.org/smol.gguf", "sha256": "b" * 64},
    }
    file = SimpleNamespace(dataset="web", file="webtext.test.jsonl")
    gguf = SimpleNamespace(gguf_model="smol")
    checked = check(config)
    assert checked["download"] == {"max_bytes": None}
    assert Inputs(checked, Path(".")).fetch_options(file) == f"--sha256 {'a' * 64}"
    assert Inputs(checked, Path(".")).gguf_fetch_options(gguf) == f"--sha256 {'b' * 64}"
    config["download"] = {"max_bytes": 5000}
    checked = check(config)
    assert Inputs(checked, Path(".")).fetch_options(file) == f"--sha256 {'a' * 64} --max-bytes 5000"
    assert Inputs(checked, Path(".")).gguf_fetch_options(gguf) == f"--sha256 {'b' * 64} --max-bytes 5000"
    config["download"] = {"max_bytes": 0}
    assert "download.max_bytes" in error_of(config)


def test_the_schema_states_the_fetchs_default_cap():
    """The reference says what null means; the number lives in fetch.py, so the two must agree."""
    from workflow_lib.config import load_schema
    from workflow_lib.data.fetch import DEFAULT_MAX_BYTES

    described = load_schema()["properties"]["download"]["properties"]["max_bytes"]["description"]
    assert f"null = {DEFAULT_MAX_BYTES} (20 GiB)" in described and DEFAULT_MAX_BYTES == 20 * 2**30


def test_url_datasets_need_no_local_file_and_name_their_downloads():
    from workflow_lib.data.downloads import fetched, split_paths

    config = tiny_config()
    head = {"url": "https://e.org/v1/webtext.train.jsonl?x=1", "sha256": None, "head_bytes": 8192}
    config["datasets"]["web"] = url_dataset(
        files={"test": {"url": "https://e.org/v1/webtext.test.jsonl", "sha256": None}, "train": head}
    )
    config["datasets"]["wp"] = {
        "source": "url",
        "format": "writingprompts",
        "archive": {"url": "https://e.org/data/writingPrompts.tar.gz", "sha256": "b" * 64},
        "files": {"test": ["writingPrompts/test.wp_source", "writingPrompts/test.wp_target"]},
    }
    datasets = check(config)["datasets"]
    assert set(fetched(datasets["web"])) == {"webtext.test.jsonl", "head8192-webtext.train.jsonl"}
    assert split_paths("web", datasets["web"], "train") == ["results/downloads/web/head8192-webtext.train.jsonl"]
    assert list(fetched(datasets["wp"])) == ["writingPrompts.tar.gz"]
    assert split_paths("wp", datasets["wp"], "test") == [
        "results/downloads/wp/unpacked/writingPrompts/test.wp_source",
        "results/downloads/wp/unpacked/writingPrompts/test.wp_target",
    ]


@pytest.mark.parametrize(
    "change, expected",
    [
        (
            lambda c: c["sampling"].update(top_p=0.9),
            "config key sampling.top_p: decoding settings are now named decoders",
        ),
        (
            lambda c: c["experiments"]["main"].update(decoders=["greedy"]),
            "experiments.main.decoders[0]: unknown decoder 'greedy'",
        ),
        (lambda c: c.update(decoders={"unbiased": {"top_k": 40}}), "decoders.unbiased: the name is reserved"),
        (lambda c: c.update(decoders={"hot": {"temperature": 0}}), "decoders.hot.temperature"),
        (
            lambda c: c["experiments"]["main"].update(objectives=["untrained"]),
            "experiments.main.objectives[0]: 'untrained' evaluates a pretrained model as it is, but model 'tiny' is source: scratch",
        ),
        (lambda c: c.update(objectives={"untrained": {"loss": "mle"}}), "objectives.untrained: the name is reserved"),
    ],
)
def test_decoders_and_untrained_models_are_checked_before_any_job(change, expected):
    config = tiny_config()
    change(config)
    assert expected in error_of(config)


def test_decoders_are_named_and_unbiased_is_predefined():
    config = tiny_config()
    config["decoders"] = {"top-p-0.9": {"top_p": 0.9}}
    config["experiments"]["main"]["decoders"] = ["unbiased", "top-p-0.9"]
    filled = check(config)
    assert filled["decoders"]["unbiased"] == {}
    assert filled["decoders"]["top-p-0.9"] == {"top_p": 0.9, "top_k": 0, "temperature": 1.0, "typical_p": 1.0}
    assert check(tiny_config())["experiments"]["main"]["decoders"] == ["unbiased"]


def test_an_integer_temperature_is_a_float_and_samples():
    """`temperature: 2` passes the schema (a number); transformers' TemperatureLogitsWarper refuses an int, so
    the config makes it 2.0, and the decoder draws from softmax(logits / 2)."""
    import torch

    from workflow_lib.sample.decoding import decoded_probs, draw

    config = tiny_config()
    config["decoders"] = {"hot": {"temperature": 2, "top_p": 1}}
    config["experiments"]["main"]["decoders"] = ["hot"]
    hot = check(config)["decoders"]["hot"]
    assert hot["temperature"] == 2.0 and isinstance(hot["temperature"], float) and isinstance(hot["top_p"], float)
    logits = torch.tensor([[2.0, 0.0, -1.0, 0.5]])
    assert torch.allclose(decoded_probs(logits, hot), torch.softmax(logits.double() / 2, dim=-1))
    tokens = draw(logits.repeat(4, 1), torch.tensor([0.05, 0.4, 0.7, 0.99], dtype=torch.float64), hot)
    assert tokens.tolist() == [0, 0, 2, 3]  # inverse CDF of (0.485, 0.178, 0.108, 0.229)


@pytest.mark.parametrize(
    "section, entry",
    [
        ("models", {"source": "hf", "name": "./checkpoints/missing", "tokenizer": "bpe"}),
        ("tokenizers", {"source": "hf", "name": "../tokenizers/missing"}),
    ],
)
def test_a_local_folder_that_does_not_exist_fails_at_plan_time_naming_the_key(tmp_path, section, entry):
    config = tiny_config()
    config[section]["local"] = entry
    assert error_of(config, tmp_path).startswith(
        f"config key {section}.local.name: '{entry['name']}' is a path, and no such folder exists"
    )
    (tmp_path / entry["name"]).mkdir(parents=True)  # the same config with the folder there plans
    check(config, tmp_path)
    config[section]["local"]["name"] = "someone/hub-model"  # a hub id is not checked here (the hub may have it)
    check(config, tmp_path)


def perturbed_at(*intensities: float) -> dict:
    config = tiny_config()
    for i, x in enumerate(intensities):
        config["experiments"][f"p{i}"] = {
            "models": ["tiny"],
            "train_dataset": "synthetic",
            "eval_sets": ["syn-test"],
            "train_perturbation": {"intensities": [x]},
            "test_perturbation": {"intensities": [x]},
        }
    return config


def test_report_intensity_is_derived_when_the_study_has_one_and_refused_when_it_has_others():
    assert check(perturbed_at(0.025))["report"]["intensity"] == 0.025
    assert (
        check(perturbed_at(0.05))["report"]["intensity"] == 0.05
    )  # the default 0.025 is not run; 0.05 is the only one
    message = error_of(perturbed_at(0.05, 0.1))
    assert (
        message.startswith("config key report.intensity: 0.025 is not an intensity of this study")
        and "at 0.05, 0.1: set report.intensity to one of them" in message
    )
    chosen = perturbed_at(0.05, 0.1)
    chosen["report"] = {"intensity": 0.1}
    assert check(chosen)["report"]["intensity"] == 0.1
    assert check(tiny_config())["report"]["intensity"] == 0.025  # nothing perturbed: nothing to choose
    # replacement at 0.05 is not Table 1's (insertion): the default stays, unrefused
    replaced = perturbed_at(0.05)
    replaced["experiments"]["p0"]["train_perturbation"]["strategies"] = ["replacement"]
    assert check(replaced)["report"]["intensity"] == 0.025


def test_check_only_refuses_and_normalise_only_fills():
    """`check` reads a normalised config without changing it, and refuses what `normalise` would have filled (it
    does not fill it itself); `normalise` is idempotent."""
    raw = perturbed_at(0.05)
    raw["datasets"]["mixed"] = {"source": "builtin", "recipe": "mixce", "cleaning": "webtext"}
    filled = normalise(copy.deepcopy(raw), Path("."))
    assert filled["report"]["intensity"] == 0.05 and filled["datasets"]["mixed"]["max_rows"] == 5000
    assert filled["experiments"]["p0"]["seeds"] == [filled["seed"]] and "mle" in filled["objectives"]
    assert filled["decoders"] == {"unbiased": {}}
    frozen = copy.deepcopy(filled)
    check_normalised(filled, Path("."))
    assert filled == frozen
    assert normalise(copy.deepcopy(filled), Path(".")) == frozen
    unfilled = copy.deepcopy(frozen)
    unfilled["report"]["intensity"] = 0.025  # what the config says; normalise makes it the study's one
    with pytest.raises(ConfigError, match="config key report.intensity: 0.025 is not an intensity of this study"):
        check_normalised(unfilled, Path("."))
    assert unfilled["report"]["intensity"] == 0.025


def zero_shot_config(tmp_path: Path) -> dict:
    """A local pretrained checkpoint evaluated as it is, on a dataset that has only a test split."""
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "test.txt").write_text("a document\n")
    config = tiny_config()
    config["datasets"]["held-out"] = {"source": "local", "format": "lines", "files": {"test": "test.txt"}}
    config["tokenizers"]["local"] = {"source": "hf", "name": "./ckpt"}
    config["models"]["local"] = {"source": "hf", "name": "./ckpt", "tokenizer": "local"}
    config["eval_sets"]["held-out"] = {"dataset": "held-out", "split": "test"}
    config["experiments"] = {"zero": {"models": ["local"], "eval_sets": ["held-out"], "objectives": ["untrained"]}}
    return config


def test_a_zero_shot_experiment_needs_no_train_dataset(tmp_path):
    config = zero_shot_config(tmp_path)
    assert check(config, tmp_path)["experiments"]["zero"]["train_dataset"] == "none"
    config["experiments"]["zero"]["train_dataset"] = "held-out"  # no train split: nothing trains on it
    assert check(config, tmp_path)["experiments"]["zero"]["train_dataset"] == "held-out"
    uniform = {"intensities": [0.1], "synonyms": ["uniform"]}  # synonyms that need no corpus
    config["experiments"]["zero"].update(train_dataset="none", test_perturbation=uniform)
    check(config, tmp_path)


@pytest.mark.parametrize(
    "change, expected",
    [
        (
            lambda e: e.update(objectives=["untrained", "mle"]),
            "experiments.zero.train_dataset: required here (objectives mle train on its train split)",
        ),
        (
            lambda e: e.update(test_perturbation={"intensities": [0.1]}),
            (
                "experiments.zero.train_dataset: required here (test_perturbation's distributional synonyms are learned from its "
                "train split)"
            ),
        ),
        (
            lambda e: e.update(train_dataset="held-out", objectives=["untrained", "mle"]),
            "experiments.zero.train_dataset: dataset 'held-out' has no 'train' split, and objectives mle train on its train split",
        ),
        (
            lambda e: e.update(test_perturbation={"intensities": [0.1], "synonyms": ["embedding-words"]}),
            "experiments.zero.train_dataset: required here (test_perturbation's embedding-words synonyms are learned",
        ),
        (
            lambda e: e.update(test_perturbation={"intensities": [0.1], "synonyms": ["file"]}),
            "config key synonyms.file: required by experiments.zero.test_perturbation.synonyms ('file' synonyms",
        ),
        (
            lambda e: e.update(test_perturbation={"intensities": [0.1], "synonyms": ["oracle"]}),
            "experiments.zero.test_perturbation.synonyms: 'oracle' synonyms exist only for a builtin train_dataset, not 'none'",
        ),
    ],
)
def test_an_experiment_that_needs_its_train_dataset_is_refused_without_one(tmp_path, change, expected):
    config = zero_shot_config(tmp_path)
    change(config["experiments"]["zero"])
    assert expected in error_of(config, tmp_path)


def test_the_zero_shot_placeholder_is_not_a_dataset_name(tmp_path):
    config = zero_shot_config(tmp_path)
    config["datasets"]["none"] = config["datasets"].pop("held-out")
    config["eval_sets"]["held-out"]["dataset"] = "none"
    assert "config key datasets.none: the name is reserved" in error_of(config, tmp_path)


def test_nested_command_line_overrides_are_typed_and_a_wrong_type_still_names_its_key():
    """`--config 'sampling={runs: 5}'`: snakemake leaves the nested 5 a string; typed, it validates, and a value of
    the wrong type still fails naming the key."""
    overrides = {
        "seed": 7,
        "name": "study",
        "sampling": {"runs": "5", "new_tokens": "8"},
        "training": {"report_to": ["tensorboard"], "tracking_dir": "runs: [x"},
        "flag": {"on": "true"},
    }
    typed = typed_overrides(overrides)
    assert typed == {
        "seed": 7,
        "name": "study",
        "sampling": {"runs": 5, "new_tokens": 8},
        "training": {"report_to": ["tensorboard"], "tracking_dir": "runs: [x"},
        "flag": {"on": True},
    }
    config = tiny_config()
    config["sampling"] = {**config.get("sampling", {}), **typed["sampling"]}
    assert validate_config(copy.deepcopy(config))["sampling"]["runs"] == 5
    config["sampling"] |= typed_overrides({"sampling": {"runs": "five"}})["sampling"]
    message = error_of(config)
    assert "sampling.runs" in message and "'five'" in message


def test_a_nested_key_set_on_the_command_line_reaches_the_study(workdir):
    """The documented way (docs/usage.md, "Configuring a study"): snakemake --config 'sampling={runs: 3}'."""
    write_config(workdir, tiny_config())
    result = snakemake(workdir, "-n", "--printshellcmds", "--config", "sampling={runs: 3}")
    assert result.returncode == 0, result.stderr[-2000:]
    sampling = [line for line in result.stdout.splitlines() if "-m workflow_lib.sample.sampler" in line]
    assert sampling and all('"runs": 3,' in line for line in sampling)
    wrong = snakemake(workdir, "-n", "--config", "sampling={runs: three}")
    said = wrong.stdout + wrong.stderr
    assert wrong.returncode != 0 and "config key sampling.runs: 'three' has the wrong type" in said, said[-2000:]


@pytest.mark.parametrize(
    "change, message",
    [
        (  # anyOf of required keys: which are missing
            lambda c: c["models"].__setitem__("tiny", {"source": "hf", "tokenizer": "bpe"}),
            "config key models.tiny: needs 'name' or 'gguf'; it has none of them (its keys: 'source', 'tokenizer')",
        ),
        (  # oneOf of forms: the forms allowed
            lambda c: c.setdefault("sampling", {}).__setitem__("shard_batches", "auto"),
            (
                "config key sampling.shard_batches: 'auto' is not allowed; allowed: an integer or null >= 1; or a "
                "mapping of names to an integer or null >= 1"
            ),
        ),
        (  # the right form, wrong inside: the part at fault
            lambda c: c.setdefault("sampling", {}).__setitem__("shard_batches", {"tiny": 0}),
            "config key sampling.shard_batches.tiny: 0 is less than the minimum of 1",
        ),
        (
            lambda c: c.setdefault("evaluation", {}).__setitem__("featuriser", {"modle": "x"}),
            "config key evaluation.featuriser: unknown key(s) 'modle'; allowed keys: model",
        ),
        (
            lambda c: c["datasets"]["synthetic"].__setitem__("max_rows", ["train"]),
            (
                "config key datasets.synthetic.max_rows: ['train'] is not allowed; allowed: null; or an integer >= 1; "
                "or a mapping of names to an integer >= 1"
            ),
        ),
        (
            lambda c: c.setdefault("evaluation", {}).__setitem__("mauve", {"num_buckets": "many"}),
            "config key evaluation.mauve.num_buckets: 'many' is not allowed; allowed: 'auto'; or an integer >= 2",
        ),
    ],
)
def test_a_choice_of_forms_names_what_is_missing_or_allowed(change, message):
    """Issue 53: an anyOf/oneOf failure names the key and what is wrong, never jsonschema's 'is not valid under any
    of the given schemas'."""
    config = tiny_config()
    change(config)
    with pytest.raises(ConfigError) as error:
        validate_config(config)
    assert str(error.value).startswith(message), str(error.value)
    assert "given schemas" not in str(error.value)


@pytest.mark.parametrize(
    "text, message",
    [
        (
            "seed: 1\nsampling:\n  runs: [1, 2\n  batch_size: 3\n",
            (
                "line 4, column 13: not valid YAML: expected ',' or ']', but got ':' (while parsing a flow sequence "
                "from line 3, column 9)"
            ),
        ),
        ("seed: 1\n\tsampling: 2\n", "line 2, column 1: not valid YAML: found character '\\t' that cannot start any"),
        ("- a\n- b\n", "holds a list, not a mapping of config keys"),
    ],
)
def test_a_broken_yaml_file_is_named_with_its_line(tmp_path, text, message):
    """Snakemake's message for a broken config file names neither file nor line; the workflow's reader (the
    Snakefile's default config.yaml, `make estimate`, `make check`) names both."""
    from workflow_lib.check_config import main
    from workflow_lib.config_files import read_yaml

    path = tmp_path / "study.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as error:
        read_yaml(path)
    assert str(error.value) == f"config file {path}: {message}" or str(error.value).startswith(
        f"config file {path}, {message}"
    ), str(error.value)
    assert main([str(path)]) == 1


def test_the_snakefile_names_a_broken_default_config_file(tmp_path):
    import subprocess

    from support.workflow_runs import REPO, SNAKEMAKE

    (tmp_path / "config.yaml").write_text("seed: 1\nsampling:\n  runs: [1, 2\n  batch_size: 3\n")
    done = subprocess.run(
        [str(SNAKEMAKE), "-s", str(REPO / "Snakefile"), "-n", "--directory", str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )
    assert done.returncode == 1
    assert "Invalid configuration: config file config.yaml, line 4, column 13: not valid YAML" in done.stderr, (
        done.stderr
    )
