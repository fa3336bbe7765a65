"""The settings an evaluation job reads, built from the config: the rules' params call these."""

from __future__ import annotations


def evaluation_settings(config: dict) -> dict:
    return {**config["evaluation"], "seed": config["seed"]}


def perplexity_settings(config: dict) -> dict:
    return {
        "batch_size": config["sampling"]["batch_size"],
        "precision": config["sampling"]["precision"],
        "seed": config["seed"],
    }


def extrapolation_settings(config: dict, eval_set: str) -> dict:
    """The exact-TV job of one eval set: its grammar, its split, and the settings."""
    es = config["eval_sets"][eval_set]
    return {
        "builtin": config["datasets"][es["dataset"]]["builtin"],
        "split": es["split"],
        "settings": {**config["evaluation"]["extrapolation"], "seed": config["seed"]},
    }
