"""Config validation: every bad config stops with one line that names the key and what is allowed, snakemake too,
before any job; a choice of forms says what is missing; a broken YAML file is named with its line; overrides given
with `--config` are typed and reach the study."""

from __future__ import annotations

import copy

import pytest
import yaml

from support.config_errors import error_of
from support.workflow_runs import REPO, snakemake, tiny_config, write_config
from workflow_lib.config import ConfigError, typed_overrides, validate_config


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
    from support.workflow_runs import run_snakemake

    (tmp_path / "config.yaml").write_text("seed: 1\nsampling:\n  runs: [1, 2\n  batch_size: 3\n")
    done = run_snakemake(tmp_path, "-n", timeout=120)
    assert done.returncode == 1
    assert "Invalid configuration: config file config.yaml, line 4, column 13: not valid YAML" in done.stderr, (
        done.stderr
    )
