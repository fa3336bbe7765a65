"""Values that pass the schema but together make another study than the config says: each is refused before any
job runs, naming the keys (workflow_lib/config_semantics.py; issue 64)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np
import pytest

from support.workflow_runs import snakemake, tiny_config, write_config
from workflow_lib.config import ConfigError, validate_config
from workflow_lib.config_files import read_yaml
from workflow_lib.config_semantics import check_semantics


def check(config: dict, workdir: Path = Path(".")) -> None:
    check_semantics(validate_config(copy.deepcopy(config), workdir=workdir), workdir)


def error_of(config: dict, workdir: Path = Path(".")) -> str:
    with pytest.raises(ConfigError) as info:
        check(config, workdir)
    return str(info.value)


def test_a_block_longer_than_max_length_is_refused_naming_both_keys():
    config = tiny_config()
    config["training"]["max_length"] = 16  # blocks of 32: every row would lose its second half
    message = error_of(config)
    assert message.startswith("config key tokenize.block_size: 32") and "training.max_length = 16" in message
    config["training"]["max_length"] = 32
    check(config)
    config["models"]["tiny"]["training"] = {"max_length": 24}  # a model's own setting is named as its own
    assert "models.tiny.training.max_length = 24" in error_of(config)


def test_a_block_beyond_a_models_context_is_refused(tmp_path):
    config = tiny_config()
    config["models"]["tiny"]["architecture"]["n_positions"] = 24  # blocks of 32
    assert "beyond the context of models.tiny (24 positions)" in error_of(config)
    # A local checkpoint's context comes from its config.json.
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt/config.json").write_text(json.dumps({"model_type": "gpt2", "n_positions": 16, "vocab_size": 300}))
    config = tiny_config()
    config["models"]["local"] = {"source": "hf", "name": "ckpt", "tokenizer": "bpe"}
    config["experiments"]["main"]["models"] = ["local"]
    assert "beyond the context of models.local (16 positions)" in error_of(config, tmp_path)


def test_an_eval_set_on_the_split_the_experiment_trains_on_is_refused():
    config = tiny_config()
    config["eval_sets"]["syn-train"] = {"dataset": "synthetic", "split": "train"}
    config["experiments"]["main"]["eval_sets"].append("syn-train")
    message = error_of(config)
    assert message.startswith("config key experiments.main.eval_sets[2]: eval set 'syn-train' is the 'train' split")
    # A zero-shot experiment trains on nothing: the train split is held-out text for it.
    config["models"]["hub"] = {"source": "hf", "name": "gpt2", "tokenizer": "bpe"}
    config["experiments"]["main"] = {
        "models": ["hub"],
        "train_dataset": "synthetic",
        "eval_sets": ["syn-train"],
        "objectives": ["untrained"],
    }
    check(config)


def test_select_best_without_a_validation_loss_is_refused(tmp_path):
    config = tiny_config()
    config["training"]["select_best"] = True
    check(config, tmp_path)  # the builtin corpus has a validation split
    config["training"]["validation"] = False
    assert error_of(config).startswith("config key training.select_best: keeps the checkpoint of lowest validation")
    config["training"]["validation"] = True
    (tmp_path / "train.txt").write_text("some text to train on\n")
    config["datasets"]["plain"] = {"source": "local", "format": "text", "files": {"train": "train.txt"}}
    config["experiments"]["main"]["train_dataset"] = "plain"
    message = error_of(config, tmp_path)
    assert "dataset 'plain' (experiments.main.train_dataset) has no 'validation' split" in message


def test_a_key_written_twice_in_one_mapping_is_refused_naming_the_line(tmp_path):
    path = tmp_path / "study.yaml"
    path.write_text("experiments:\n  a: {models: [tiny]}\n  b: {models: [tiny]}\n  a: {models: [other]}\n")
    with pytest.raises(ConfigError, match=r"study\.yaml, line 4, column 3: .*the key 'a' appears twice .*line 2"):
        read_yaml(path)
    # The workflow reads its --configfile again through read_yaml: snakemake's own reader keeps the last.
    write_config(tmp_path, tiny_config())
    (tmp_path / "config.yaml").write_text((tmp_path / "config.yaml").read_text() + "seed: 2\n")
    plan = snakemake(tmp_path, "-n")
    assert plan.returncode == 1 and "config.yaml, line" in plan.stderr and "the key 'seed' appears twice" in plan.stderr
    # A merge's keys may be overridden by the mapping's own: what a merge is for.
    path.write_text("base: &b {k: 1, r: 2}\nmodel:\n  <<: *b\n  k: 3\n")
    assert read_yaml(path)["model"] == {"k": 3, "r": 2}


def test_the_training_job_refuses_a_row_beyond_the_models_context():
    from workflow_lib.cli import StageError
    from workflow_lib.train.batches import Ragged, check_context

    class Rows:
        def __init__(self, lengths):
            self.inputs = Ragged(np.zeros(sum(lengths), np.int64), np.concatenate([[0], np.cumsum(lengths)]))

    class LM:
        class config:
            n_positions = 40

    check_context(LM(), {"max_length": 64}, [Rows([32, 40])])
    check_context(LM(), {"max_length": 40}, [Rows([32, 48])])  # cut at 40
    with pytest.raises(StageError, match=r"training\.max_length: the longest training row is 41 tokens"):
        check_context(LM(), {"max_length": 64}, [Rows([32]), Rows([41])])  # validation rows count too
