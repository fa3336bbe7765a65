"""The settings a perturb-stage job reads, built from the config and its condition: the rules' params call these."""

from __future__ import annotations

from workflow_lib.layout import TrainCondition, applied_strategy


def synonym_settings(config: dict, tokenizer: str, dataset: str, source: str) -> dict:
    """Everything that changes a synonym table (the source is the job's wildcard)."""
    from workflow_lib.config import embedding_model

    settings = {"k": config["synonyms"]["k"], "min_count": config["synonyms"]["min_count"]}
    if source == "embedding":
        key = embedding_model(config, tokenizer)
        settings["model"] = {"key": key, **config["models"][key]}
    if source == "oracle":
        settings["builtin"] = config["datasets"][dataset]["builtin"]
    return settings


def perturb_settings(cond: TrainCondition, seed: int) -> dict:
    """The training-data perturbation of one condition and seed."""
    return {
        "mode": cond.mode,
        "strategy": applied_strategy(cond.strategy),
        "intensity": float(cond.intensity),
        "copies": cond.copies,
        "seed": int(seed),
    }
