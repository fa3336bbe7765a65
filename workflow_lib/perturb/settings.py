"""The settings a perturb-stage job reads, built from the config and its condition: the rules' params call these."""

from __future__ import annotations

from workflow_lib.constants import SYNONYMS_FROM_EMBEDDINGS
from workflow_lib.layout import TrainCondition, applied_strategy
from workflow_lib.perturb.strategies import get as get_strategy


def synonym_model(config: dict, tokenizer: str) -> str | None:
    """The model whose input embeddings define `embedding` synonyms for `tokenizer`: `synonyms.embedding_model`, else
    the first pretrained (source: hf) model with that tokenizer, else None (`config.embedding_model` refuses it)."""
    chosen = config.get("synonyms", {}).get("embedding_model")
    if chosen is not None:
        return chosen
    return next((n for n, m in config["models"].items() if m["tokenizer"] == tokenizer and m["source"] == "hf"), None)


def synonym_settings(config: dict, tokenizer: str, dataset: str, source: str) -> dict:
    """Everything that changes a synonym table (the source is the job's wildcard; the config check has made sure an
    `embedding` source has its model)."""
    settings = {"k": config["synonyms"]["k"], "min_count": config["synonyms"]["min_count"]}
    if source in SYNONYMS_FROM_EMBEDDINGS:
        key = synonym_model(config, tokenizer)
        assert key is not None, "config.check refuses embedding synonyms without a model"
        settings["model"] = {"key": key, **config["models"][key]}
    if source == "oracle":
        settings["builtin"] = config["datasets"][dataset]["builtin"]
    return settings


def perturb_settings(config: dict, cond: TrainCondition, seed: int) -> dict:
    """The training-data perturbation of one condition and seed; for a strategy of the embedding space also its
    noise (`embedding_settings`), which the data carries to the trainer."""
    settings = {
        "mode": cond.mode,
        "strategy": applied_strategy(cond.strategy),
        "intensity": cond.level,
        "copies": cond.copies,
        "seed": int(seed),
    }
    if not cond.is_baseline and get_strategy(cond.strategy).in_embeddings:
        settings["embedding"] = embedding_settings(config, cond.strategy)
    return settings


def embedding_settings(config: dict, strategy: str) -> dict:
    """What an embedding-space strategy's noise needs beyond its intensity (the config's `embedding_perturbation`):
    NEFTune's alpha, or the noise's law and scale. Only the keys the strategy reads, so that editing another's
    reruns nothing."""
    section = config["embedding_perturbation"]
    read = {
        key: section[key] if isinstance(section[key], str) else float(section[key])
        for key in get_strategy(strategy).settings
    }
    return {"strategy": strategy, **read}
