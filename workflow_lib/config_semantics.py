"""What the schema cannot see: values that pass their own checks but together would make a study other than the
one its config says; each error names the keys to change.

Run after `config.validate_config` (rules/common.smk, check_config.py), beside the cost model's checks: it reads a
model's context as the cost model does (cost/shapes.py), which the config layer does not import. The checks (a block
longer than `training.max_length` or the model's context, an eval set on the experiment's own training split,
`select_best` without validation): docs/usage.md, "What the config check refuses beyond the schema".
"""

from __future__ import annotations

from pathlib import Path

from workflow_lib.config import ConfigError


def training_settings(config: dict, model: str) -> tuple[dict, dict[str, str]]:
    """The training settings `model` trains with (its own `training` over the study's) and, per setting, the
    config key it comes from."""
    from workflow_lib.train.settings import training_settings as merged

    own = config["models"][model].get("training") or {}
    settings = merged(config, model, seed=0)  # the seed is no setting these checks read
    keys = {k: f"models.{model}.training.{k}" if k in own else f"training.{k}" for k in settings}
    return settings, keys


def model_context(config: dict, model: str, workdir: Path) -> int | None:
    """The longest sequence `models.<model>` takes, where it is known before its job runs, else None."""
    from workflow_lib.cost.shapes import GPT2_SMALL, model_config

    spec = config["models"][model]
    if spec["source"] == "scratch":
        return (spec.get("architecture") or {}).get("n_positions") or GPT2_SMALL["n_positions"]
    if not spec.get("name"):  # a GGUF file: its context is read when it is dequantised
        return None
    found = model_config(spec, workdir)
    if not found:
        return None
    return found.get("n_positions") or found.get("max_position_embeddings")


def check_lengths(config: dict, workdir: Path) -> None:
    """block_size <= max_length, and within the context of every model an experiment trains."""
    from workflow_lib.grid import trained_objectives

    block = config["tokenize"]["block_size"]
    trained = sorted({m for exp in config["experiments"].values() if trained_objectives(exp) for m in exp["models"]})
    for model in trained:
        settings, keys = training_settings(config, model)
        longest, where = settings["max_length"], keys["max_length"]
        if block > longest:
            raise ConfigError(
                f"config key tokenize.block_size: {block} tokens a block, above {where} = {longest}: every training "
                f"row of models.{model} would be cut to {longest} tokens and the rest of its block never trained on; "
                f"lower tokenize.block_size or raise {where}"
            )
        context = model_context(config, model, workdir)
        if context is not None and block > context:
            raise ConfigError(
                f"config key tokenize.block_size: {block} tokens a block, beyond the context of models.{model} "
                f"({context} positions); lower tokenize.block_size to {context} or less"
            )


def check_eval_splits(config: dict) -> None:
    """No experiment evaluates on the split it trains on."""
    from workflow_lib.grid import trained_objectives

    for name, exp in config["experiments"].items():
        if not trained_objectives(exp):
            continue
        for i, eval_set in enumerate(exp["eval_sets"]):
            es = config["eval_sets"][eval_set]
            if es["dataset"] == exp["train_dataset"] and es["split"] == "train":
                raise ConfigError(
                    f"config key experiments.{name}.eval_sets[{i}]: eval set {eval_set!r} is the 'train' split of "
                    f"{exp['train_dataset']!r}, the text experiments.{name} trains on: its scores would measure "
                    "memorisation, not generation; evaluate on a held-out split (eval_sets.<name>.split)"
                )


def check_select_best(config: dict) -> None:
    """select_best has a validation loss to select by."""
    from workflow_lib.grid import dataset_splits, trained_objectives

    for name, exp in config["experiments"].items():
        if not trained_objectives(exp):
            continue
        for model in exp["models"]:
            settings, keys = training_settings(config, model)
            if not settings["select_best"]:
                continue
            has_split = "validation" in dataset_splits(config["datasets"][exp["train_dataset"]])
            if not settings["validation"] or not has_split:
                why = (
                    f"{keys['validation']} is false"
                    if not settings["validation"]
                    else f"dataset {exp['train_dataset']!r} (experiments.{name}.train_dataset) has no 'validation' split"
                )
                raise ConfigError(
                    f"config key {keys['select_best']}: keeps the checkpoint of lowest validation loss, but {why}: "
                    f"models.{model} in experiments.{name} would compute none; give the dataset a validation split "
                    "or set select_best: false"
                )


def check_semantics(config: dict, workdir: Path) -> None:
    check_lengths(config, workdir)
    check_eval_splits(config)
    check_select_best(config)
