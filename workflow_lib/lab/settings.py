"""The settings a lab job reads, built from the config: the rules' params call this."""

from __future__ import annotations


def lab_settings(config: dict, *keys: str) -> dict:
    """The lab settings a rule's job uses (so that only they trigger its rerun), with the top-level seed."""
    return {**{k: config["lab"][k] for k in keys}, "seed": config["seed"]}
