"""The settings a sampling job reads, from the config and its sampling condition: the rules' params call these."""

from __future__ import annotations

from workflow_lib.layout import SamplingCondition, applied_strategy


def sampling_settings(config: dict, test: SamplingCondition) -> dict:
    """What a sampling job reads: the sampling section, its mode and the seed. Not `shard_batches`: how many jobs share
    an evaluation is in each shard's path (`--shard`), and it changes no sample."""
    settings = {key: value for key, value in config["sampling"].items() if key != "shard_batches"}
    return {**settings, "mode": test.mode, "seed": config["seed"]}


def decoder_settings(config: dict, test: SamplingCondition) -> dict:
    return config["decoders"][test.decoder]


def test_perturbation(test: SamplingCondition) -> dict:
    """The sampling-time perturbation (the sample and extrapolation jobs apply the same)."""
    return {"strategy": applied_strategy(test.strategy), "intensity": float(test.intensity)}
