"""The settings a data-stage job reads, built from the config: the rule's params and the tests call these."""

from __future__ import annotations


def prompt_cap(config: dict, eval_set: str) -> int | None:
    """The most prompts an eval set keeps (None: all)."""
    return config["eval_sets"][eval_set]["max_prompts"] or config["prompts"]["max_prompts"]


PLANNED_PROMPTS = 5000  # the prompts planned for an eval set that keeps all of them (`prompt_cap` None)


def planned_prompts(config: dict, eval_set: str) -> int:
    """The prompts an eval set is planned to have, from the config alone: its cap (`PLANNED_PROMPTS` where none),
    or a builtin split's documents where fewer. What the prompts job keeps may be fewer; the plan never reads it."""
    es = config["eval_sets"][eval_set]
    cap = prompt_cap(config, eval_set) or PLANNED_PROMPTS
    dataset = config["datasets"][es["dataset"]]
    return min(cap, dataset["builtin"]["docs"][es["split"]]) if dataset["source"] == "builtin" else cap


def prompt_settings(config: dict, eval_set: str) -> dict:
    """What the prompts job of one eval set reads (docs/method.md §4)."""
    es, p = config["eval_sets"][eval_set], config["prompts"]
    return {
        "prefix_words": es["prefix_words"],
        "reference_words": p["reference_words"],
        "min_chars": p["min_chars"],
        "extra_words": p["extra_words"],
        "forbidden": p["forbidden"],
        "max_prompts": prompt_cap(config, eval_set),
        "min_prompts": p["min_prompts"],
    }
