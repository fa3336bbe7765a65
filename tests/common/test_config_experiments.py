"""Config validation of a study's experiments: the report's intensity derived or refused, `check` refuses what
`normalise` fills, and a zero-shot experiment needs a train dataset only where something learns from it."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from support.config_errors import check, error_of
from support.workflow_runs import tiny_config
from workflow_lib.config import ConfigError, normalise
from workflow_lib.config import check as check_normalised


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
