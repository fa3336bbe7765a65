"""The settings an evaluation job reads, built from the config: the rules' params call these."""

from __future__ import annotations

from workflow_lib.featuriser import Featuriser


def featuriser_settings(config: dict) -> dict:
    """What loads the MAUVE featuriser of a normalised config: `featuriser`, the load path (a name the featuriser
    knows, a folder, or a hub id); `featuriser_revision`; and `featuriser_label`, how the report names it. A study
    model (`{model: name}`) loads its pretrained checkpoint: the hub id or folder its `name` holds (a GGUF model's
    dequantised folder, workflow_lib/pretrained.py)."""
    chosen = Featuriser.from_config(config)
    path, revision = chosen.source(config)
    return {"featuriser": path, "featuriser_revision": revision, "featuriser_label": chosen.label}


def evaluation_settings(config: dict) -> dict:
    """What the evaluation's CPU jobs read (evaluate, mauve_controls, mauve_contrast): the evaluation section less the
    planted control's share, which only the control texts and the planted_control job use (`planted_settings`), so
    that a change of it reruns no other job, and less the lm-evaluation-harness's, which only the lm_eval job reads
    (`lm_eval_settings`)."""
    e = {k: v for k, v in config["evaluation"].items() if k != "lm_eval"}
    controls = {k: v for k, v in e["mauve"]["controls"].items() if k != "planted_fraction"}
    return {**e, "mauve": {**e["mauve"], "controls": controls}, **featuriser_settings(config), "seed": config["seed"]}


def planted_settings(config: dict) -> dict:
    """The planted_control job's settings: the evaluation's, with the planted control's share."""
    settings = evaluation_settings(config)
    fraction = config["evaluation"]["mauve"]["controls"]["planted_fraction"]
    settings["mauve"]["controls"] = {**settings["mauve"]["controls"], "planted_fraction": fraction}
    return settings


def feature_settings(config: dict) -> dict:
    """What the featurisation jobs (features, sample_features) read: the featuriser, its layout and batch, and
    MAUVE's floor (a cell under it is not featurised); nothing of k-means or the controls' rule, whose edits then
    recluster without featurising again."""
    e = config["evaluation"]
    return {
        **featuriser_settings(config),
        **{k: e[k] for k in ("feature_text", "max_text_length", "feature_batch_size")},
        "mauve": {"min_texts": e["mauve"]["min_texts"]},
    }


def control_text_settings(config: dict, eval_set: str) -> dict:
    """What the control_texts job of one eval set reads: how its prompts were cut, and the study's seed."""
    from workflow_lib.data.settings import prompt_settings
    from workflow_lib.grid import planted_source

    cut = prompt_settings(config, eval_set)
    return {
        "prefix_words": cut["prefix_words"],
        "reference_words": cut["reference_words"],
        "forbidden": cut["forbidden"],
        "seed": config["seed"],
        "planted": {
            "fraction": config["evaluation"]["mauve"]["controls"]["planted_fraction"],
            "source": planted_source(config, eval_set),
        },
    }


def perplexity_settings(config: dict) -> dict:
    return {
        "batch_size": config["sampling"]["batch_size"],
        "precision": config["sampling"]["precision"],
        "seed": config["seed"],
    }


def lm_eval_settings(config: dict) -> dict:
    """The lm_eval job's settings (evaluate/harness.py): the tasks and how to run them, the sampling's batch and
    precision, the study's seed. Not the tasks' folder's path, which is an input: its files, not its name, change a
    result."""
    harness = config["evaluation"]["lm_eval"]
    return {
        "tasks": sorted(harness["tasks"]),
        "limit": harness["limit"],
        "num_fewshot": harness["num_fewshot"],
        "local_only": harness["local_only"],
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
