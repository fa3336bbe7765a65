"""The config, read at Snakefile parse time before any job: refused with one line naming its key, or normalised
(its keys and defaults: docs/config.md). `validate_config` is three steps, each a function of its own:
- `check_input`: the config as written: the schema (config_schema.py) and the names the workflow reserves.
- `normalise`: fills what the config leaves out, in place (snakemake's `config` must hold it): the schema's
  defaults, each experiment's seeds and train dataset, the predefined objectives and decoders, MixCE's row count,
  a study's one report intensity, a GGUF model's dequantised folder. It refuses only what it cannot fill.
- `check` (config_checks.py): what a schema cannot say, on the normalised config, changing nothing.
The cost section's devices are checked by the cost model (`workflow_lib.cost.devices.check_cost`), which sits above
these modules. Imports only the standard library, yaml and jsonschema: every cluster job re-parses the Snakefile.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

# ConfigError, load_schema and SCHEMA_PATH (config_schema.py) and check (config_checks.py) are imported from here too.
from workflow_lib.config_checks import check, table_intensities
from workflow_lib.config_schema import SCHEMA_PATH, ConfigError, check_schema, load_schema, schema_defaults
from workflow_lib.constants import NO_TRAIN_DATASET, UNTRAINED
from workflow_lib.hub_names import hub_name_problems
from workflow_lib.pretrained import GGUFConfigError, normalise_gguf

# The objectives every config has; a config's `objectives` adds to them. Here, in the config's module, which no job
# imports: they reach a job through its params (`objectives.<name>`), so naming one more reruns nothing. DFT
# (Wu et al. 2025, "On the Generalization of SFT") is MixCE with eta = 0 (docs/method.md §2).
PREDEFINED_OBJECTIVES: dict[str, dict] = {
    "mle": {"loss": "mle"},
    "brier": {"loss": "brier"},
    "mixce": {"loss": "mixce", "eta": 0.5},
    "tvd": {"loss": "tvd", "gamma": 0.5, "min_weight": 0.2, "mix": 0.5},
    "emo": {"loss": "emo"},
    "dft": {"loss": "mixce", "eta": 0.0},
}
# The decoders every config has: `unbiased`, ancestral sampling from the model's law (the paper's).
PREDEFINED_DECODERS: dict[str, dict] = {"unbiased": {}}
# transformers' warpers refuse an int where they take a float (TemperatureLogitsWarper(2) raises), and JSON
# schema's `number` admits `temperature: 2`: these settings are made floats where the config is read.
DECODER_FLOAT_KEYS = ("temperature", "top_p", "typical_p")
MIXCE_ROWS = 5000  # MixCE's test and validation size


def default_featuriser(config: dict) -> str | dict:
    """`evaluation.featuriser: auto`: the study's first pretrained model (`{model: key}`: a causal LM's last hidden
    state, which sees what MAUVE's controls degrade; docs/method.md §4), else `minilm`."""
    return next(({"model": key} for key, m in config["models"].items() if m["source"] == "hf"), "minilm")


def typed_overrides(overrides: Mapping) -> dict:
    """`snakemake --config` overrides with every string below the top level read as YAML ('5' -> 5, 'true' ->
    True, '[a, b]' -> a list). Snakemake types a top-level value (`seed=7`) but reads a nested one with YAML's base
    loader, which leaves every leaf a string: `--config 'sampling={runs: 5}'` would give runs '5' and fail the
    schema. A string YAML cannot read stays as it was; a wrong type still fails the schema, naming its key."""

    def typed(value: Any, nested: bool) -> Any:
        if isinstance(value, Mapping):
            return {key: typed(item, True) for key, item in value.items()}
        if isinstance(value, list):
            return [typed(item, True) for item in value]
        if nested and isinstance(value, str):
            try:
                return yaml.safe_load(value)
            except yaml.YAMLError:
                return value
        return value

    return {key: typed(value, False) for key, value in overrides.items()}


def check_input(config: dict, workdir: Path | None = None) -> None:
    """The config as written: the schema (one line naming the key), the names the workflow reserves, and every hub
    name and revision (`hub_names`: before a GGUF model's name becomes its dequantised folder)."""
    check_schema(config)
    for problem in hub_name_problems(config, Path(workdir or ".")):
        raise ConfigError(problem)
    most = (config.get("sampling") or {}).get("shard_batches")
    unknown = sorted(set(most) - set(config["models"]) - {"default"}) if isinstance(most, dict) else []
    if unknown:
        raise ConfigError(
            f"config key sampling.shard_batches.{unknown[0]}: not a model of this config; name one of "
            f"{', '.join(sorted(config['models']))}, or `default` for the others"
        )
    if NO_TRAIN_DATASET in config["datasets"]:
        raise ConfigError(
            f"config key datasets.{NO_TRAIN_DATASET}: the name is reserved (a zero-shot experiment's "
            "paths use it in place of a train dataset)"
        )
    if UNTRAINED in config.get("objectives", {}):
        raise ConfigError(
            f"config key objectives.{UNTRAINED}: the name is reserved for models evaluated without training"
        )
    harness = (config.get("evaluation") or {}).get("lm_eval") or {}
    both = (
        sorted(set(harness.get("tasks") or []) & set(config.get("eval_sets") or {})) if harness.get("eval_sets") else []
    )
    if both:
        raise ConfigError(
            f"config key evaluation.lm_eval.tasks: {both[0]!r} is also an eval set, which evaluation.lm_eval.eval_sets "
            "scores as a task of that name; rename one"
        )
    include = harness.get("include_path")
    if include and not (Path(workdir or ".") / include).is_dir():
        raise ConfigError(
            f"config key evaluation.lm_eval.include_path: {include!r} is not a folder (of task YAML files, relative to "
            "the working directory)"
        )
    neutral = {"temperature": 1.0, "top_k": 0, "top_p": 1.0, "typical_p": 1.0}
    if any(config.get("decoders", {}).get("unbiased", {}).get(k, v) != v for k, v in neutral.items()):
        raise ConfigError(
            "config key decoders.unbiased: the name is reserved for the model's own law (the paper's "
            "sampling); give a truncated or tempered decoder another name"
        )


def normalise(config: dict, workdir: Path | None = None) -> dict:
    """Fill what a checked config leaves out, in place; returns it. Idempotent."""
    from snakemake.utils import validate

    validate(config, str(SCHEMA_PATH))  # the schema's defaults
    schema = load_schema()
    grids = {"train_perturbation": "perturbation_grid", "test_perturbation": "test_perturbation_grid"}
    for exp in config["experiments"].values():
        exp.setdefault("seeds", [config["seed"]])
        exp.setdefault("train_dataset", NO_TRAIN_DATASET)
        for axis, name in grids.items():  # snakemake fills no default behind a $ref: the grid reads these, filled
            exp[axis] = {**schema_defaults(schema, schema["$defs"][name]), **exp.get(axis, {})}
    normalise_lora(config, schema)
    config["objectives"] = {**PREDEFINED_OBJECTIVES, **config.get("objectives", {})}
    config["decoders"] = {name: {} for name in PREDEFINED_DECODERS} | {
        name: {k: float(v) if k in DECODER_FLOAT_KEYS else v for k, v in decoder.items()}
        for name, decoder in config.get("decoders", {}).items()
    }
    # A predefined decoder is its definition, however a config spells its neutral values (check_input refuses others).
    config["decoders"].update(copy.deepcopy(PREDEFINED_DECODERS))
    try:
        normalise_gguf(config, Path(workdir or "."))
    except GGUFConfigError as error:
        raise ConfigError(str(error)) from None
    for ds in config["datasets"].values():
        if ds.get("recipe") == "mixce" and ds.get("max_rows") is None:
            ds["max_rows"] = MIXCE_ROWS
    if config["evaluation"]["featuriser"] == "auto":
        config["evaluation"]["featuriser"] = default_featuriser(config)
    candidates = table_intensities(config)
    if len(candidates) == 1 and float(config["report"]["intensity"]) not in candidates:
        config["report"]["intensity"] = candidates[0]  # a study of one perturbed intensity reports that one
    return config


def normalise_lora(config: dict, schema: dict) -> None:
    """Fill `training.lora` (top level and each model's) with the schema's defaults, alpha and dropout as floats:
    the train job's params are the settings' JSON, so `alpha: 16` and `alpha: 16.0`, or a default spelt out, must
    not read as two runs. A model's `lora` replaces the top-level one whole (training_settings merges shallowly)."""
    node = schema["$defs"]["lora"]  # behind a $ref (and an anyOf with null): snakemake fills no default there
    sections = [config["training"], *(model.get("training") or {} for model in config["models"].values())]
    for section in sections:
        if isinstance(section.get("lora"), dict):
            lora = {**schema_defaults(schema, node), **section["lora"]}
            section["lora"] = {**lora, "alpha": float(lora["alpha"]), "dropout": float(lora["dropout"])}


def drop_removed_experiments(config: dict) -> None:
    """In place: an experiment an overlay sets to null is removed (a later --configfile can replace a key, never
    delete one; `experiments: {dose-0.4: null}` is how it leaves one out, docs/usage.md "Overlays")."""
    experiments = config.get("experiments")
    if isinstance(experiments, dict):
        config["experiments"] = {name: exp for name, exp in experiments.items() if exp is not None}


def validate_config(config: dict, workdir: Path | None = None) -> dict:
    """Check the config as written (an experiment set to null removed), normalise it in place, check the result.
    Returns config."""
    drop_removed_experiments(config)
    check_input(config, workdir)
    normalise(config, workdir)
    check(config, workdir)
    return config
