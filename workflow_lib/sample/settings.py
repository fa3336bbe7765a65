"""The settings a sampling job reads, from the config and its sampling condition: the rules' params call these. And
how many sampling jobs an evaluation has (`sampling_shards`): the plan's decision, read by the rules' input functions
and by the cost model, which only checks it. Not in shards.py: the sampling jobs' code digest covers that file, so a
change to the plan there would resample a finished study."""

from __future__ import annotations

from workflow_lib.data.settings import planned_prompts
from workflow_lib.layout import SamplingCondition, applied_strategy
from workflow_lib.sample.shards import shard_count


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

    out = {"strategy": applied_strategy(test.strategy), "intensity": test.level}
    if test.perturbed and get_strategy(test.strategy).in_embeddings:
        out["embedding"] = embedding_settings(config, test.strategy)
    return out


def shard_batches(config: dict, model: str) -> int | None:
    """`sampling.shard_batches` for `model`: the value, or a mapping's entry for the model, else its `default`."""
    value = config["sampling"]["shard_batches"]
    return value.get(model, value.get("default")) if isinstance(value, dict) else value


def sampling_shards(config: dict, eval_set: str, model: str) -> int:
    """How many shards an evaluation's sampling has: its planned rows (`planned_prompts` x sampling.runs, never the
    downloaded data, so the number does not move once data exist) in shards of at most `shard_batches` batches.
    Nothing of the cost model enters it (issue 53)."""
    s = config["sampling"]
    rows = planned_prompts(config, eval_set) * s["runs"]
    return shard_count(rows, s["batch_size"], shard_batches(config, model))
