"""Hub names and revisions are checked when the study is planned (issue 64): a model's `name` that is neither a
local folder nor a hub id, or a revision with shell characters, is refused naming its key; a local folder may be
named anything."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
from huggingface_hub.utils import HFValidationError, validate_repo_id

from support.workflow_runs import tiny_config
from workflow_lib.config import ConfigError, validate_config
from workflow_lib.hub_names import hub_id_problem, revision_problem

GOOD_IDS = ["gpt2", "facebook/opt-125m", "EleutherAI/gpt-neo-1.3B", "HuggingFaceTB/SmolLM2-135M", "a_b.c", "123"]
BAD_IDS = [
    "gpt2;touch${IFS}/tmp/x;#",
    "gpt2 && id",
    "$(id)",
    "`id`",
    "it's",
    'say"hi',
    "a\\b",
    "a\nb",
    "a/b/c",
    "a--b",
    "a..b",
    ".hidden",
    "trailing-",
    "repo.git",
    "x" * 97,
    "",
]
BAD_REVISIONS = ["main;id", "v1 0", "$(id)", "`id`", "it's", 'a"b', "a\\b", "a\nb", "../x", "-rf", ""]


@pytest.mark.parametrize("name", GOOD_IDS)
def test_hub_ids_the_hub_takes_are_taken(name):
    validate_repo_id(name)  # the hub client's own rule agrees
    assert hub_id_problem(name) is None


@pytest.mark.parametrize("name", BAD_IDS)
def test_names_the_hub_refuses_are_refused(name):
    with pytest.raises(HFValidationError):
        validate_repo_id(name)
    assert hub_id_problem(name)


@pytest.mark.parametrize("revision", ["main", "v1.0", "refs/pr/3", "0123abcdef" * 4, "release+2"])
def test_branch_tag_and_commit_names_are_revisions(revision):
    assert revision_problem(revision) is None


@pytest.mark.parametrize("revision", BAD_REVISIONS)
def test_revisions_with_whitespace_quotes_or_shell_characters_are_refused(revision):
    assert revision_problem(revision)


def hub_model(name: str, **extra) -> dict:
    config = tiny_config()
    config["tokenizers"]["hub"] = {"source": "hf", "name": "gpt2"}
    config["models"]["pretrained"] = {"source": "hf", "name": name, "tokenizer": "hub", **extra}
    return config


def error_of(config: dict, workdir: Path) -> str:
    with pytest.raises(ConfigError) as info:
        validate_config(copy.deepcopy(config), workdir=workdir)
    return str(info.value)


@pytest.mark.parametrize("name", ["gpt2;touch${IFS}/tmp/x;#", "gpt2 $(id)", "a/b/c"])
def test_a_model_name_that_is_no_hub_id_nor_folder_is_refused_naming_its_key(name, tmp_path):
    message = error_of(hub_model(name), tmp_path)
    assert message.startswith("config key models.pretrained.name:") and repr(name) in message, message


def test_a_tokenizer_name_is_checked_alike(tmp_path):
    config = hub_model("gpt2")
    config["tokenizers"]["hub"]["name"] = "gpt2;id"
    assert error_of(config, tmp_path).startswith("config key tokenizers.hub.name:")


@pytest.mark.parametrize("key", ["models.pretrained.revision", "tokenizers.hub.revision"])
def test_a_revision_with_shell_characters_is_refused_naming_its_key(key, tmp_path):
    config = hub_model("gpt2")
    section, entry, _ = key.split(".")
    config[section][entry]["revision"] = "main;touch x"
    message = error_of(config, tmp_path)
    assert message.startswith(f"config key {key}:") and "'main;touch x'" in message, message


def test_a_gguf_repo_and_revision_are_checked(tmp_path):
    config = tiny_config()
    config["models"]["quantised"] = {
        "source": "hf",
        "tokenizer": "bpe",
        "gguf": {"repo": "org/repo;id", "file": "model.gguf"},
    }
    assert error_of(config, tmp_path).startswith("config key models.quantised.gguf.repo:")
    config["models"]["quantised"]["gguf"] = {"repo": "org/repo", "file": "model.gguf", "revision": "a b"}
    assert error_of(config, tmp_path).startswith("config key models.quantised.gguf.revision:")


def test_a_local_folder_may_be_named_anything(tmp_path):
    folder = tmp_path / "my model; $(x) `y` 'q\""
    folder.mkdir()
    config = hub_model(str(folder))
    validate_config(copy.deepcopy(config), workdir=tmp_path)  # an absolute path
    config["models"]["pretrained"]["name"] = folder.name  # relative to the working directory
    validate_config(copy.deepcopy(config), workdir=tmp_path)
