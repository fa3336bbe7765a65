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


def test_perturbation(config: dict, test: SamplingCondition) -> dict:
    """The sampling-time perturbation (the sample and extrapolation jobs apply the same); a strategy of the
    embedding space also gets its noise's settings (`perturb.settings.embedding_settings`)."""
    from workflow_lib.perturb.settings import embedding_settings
    from workflow_lib.perturb.strategies import get as get_strategy

    out = {"strategy": applied_strategy(test.strategy), "intensity": float(test.intensity)}
    if float(test.intensity) > 0 and get_strategy(test.strategy).in_embeddings:
        out["embedding"] = embedding_settings(config, test.strategy)
    return out
