"""The settings a sampling job reads, from the config and its sampling condition: the rules' params call these."""

from __future__ import annotations

from workflow_lib.layout import SamplingCondition, applied_strategy


def sampling_settings(config: dict, test: SamplingCondition) -> dict:
    return {**config["sampling"], "mode": test.mode, "seed": config["seed"]}


def decoder_settings(config: dict, test: SamplingCondition) -> dict:
    return config["decoders"][test.decoder]


def test_perturbation(test: SamplingCondition) -> dict:
    """The sampling-time perturbation (the sample and extrapolation jobs apply the same)."""
    return {"strategy": applied_strategy(test.strategy), "intensity": float(test.intensity)}
