"""The settings a simulation fit reads, built from the config: the rule's params call this."""

from __future__ import annotations


def simulation_settings(config: dict) -> dict:
    """Everything in `simulation` that changes a fit (the vocabulary size is the job's wildcard)."""
    settings = {k: v for k, v in config["simulation"].items() if k not in ("enabled", "vocab_sizes")}
    settings["seed"] = config["seed"] if settings["seed"] is None else settings["seed"]
    return settings
