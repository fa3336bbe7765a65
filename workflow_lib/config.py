"""The config, read at Snakefile parse time before any job: refused with one line naming its key, or normalised.

`validate_config` is three steps, each a function of its own:
- `check_input`: the config as written. The JSON schema (workflow_lib/schemas/config.schema.yaml) states types, ranges
  and defaults; its raw error is a page of schema internals, so `check_schema` finds the most relevant error and
  names the config key and the allowed values in one line. Reserved names are refused here too.
- `normalise`: fills what the config leaves out, in place (snakemake's `config` must hold it): the schema's
  defaults, each experiment's seeds and train dataset, the predefined objectives and decoders, MixCE's row count,
  a study's one report intensity, a GGUF model's dequantised folder. It refuses only what it cannot fill.
- `check`: what a schema cannot say, on the normalised config, changing nothing: names that refer to other
  sections, splits a dataset has, local files and folders, whether a scratch model's architecture can be built.
The cost section's devices are checked by the cost model (`workflow_lib.cost.devices.check_cost`), which
sits above this module. Imports only the standard library, yaml and jsonschema: every cluster job re-parses the
Snakefile.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Iterator, Mapping
from importlib.resources import files as package_files
from pathlib import Path
from typing import Any

import yaml

from workflow_lib.constants import (
    FEATURISERS,
    NO_TRAIN_DATASET,
    SYNONYMS_FROM_EMBEDDINGS,
    SYNONYMS_FROM_TOKENS,
    UNTRAINED,
)
from workflow_lib.data.pinning import unpinned_http_refusal
from workflow_lib.grid import dataset_splits
from workflow_lib.hub_names import hub_name_problems, looks_like_path
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

# The schema ships inside the package (package data), so a non-editable install validates as a checkout does; the
# Snakefile's validation and an importing workflow read this file, never a checkout beside the package.
SCHEMA_PATH = Path(str(package_files("workflow_lib").joinpath("schemas", "config.schema.yaml")))
# transformers' warpers refuse an int where they take a float (TemperatureLogitsWarper(2) raises), and JSON
# schema's `number` admits `temperature: 2`: these settings are made floats where the config is read.
DECODER_FLOAT_KEYS = ("temperature", "top_p", "typical_p")
# GPT2Config keys the workflow sets from the tokenizer: a user's value would be overwritten or clash.
SET_FROM_TOKENIZER = ("vocab_size", "bos_token_id", "eos_token_id")
# GPT2Config is a strict dataclass: it refuses an int where it declares a float (and a float where it declares
# an int), which JSON schema cannot tell apart (1 and 1.0 are both integers to it).
GPT2_FLOAT_KEYS = ("layer_norm_epsilon", "initializer_range")
GPT2_DEFAULTS = {"n_embd": 768, "n_head": 12}  # GPT2Config's (GPT-2 small's), for unset keys


LINE_FORMATS = ("jsonl", "wikitext", "text")  # formats whose head (whole lines) is itself a valid file
MIXCE_CLEANINGS = ("webtext", "wikitext103", "writingprompts")  # the cleanings that end in MixCE's length window
MIXCE_ROWS = 5000  # MixCE's test and validation size


class ConfigError(ValueError):
    """A config problem, worded for the user: the key, what is wrong, what is allowed."""


def load_schema(path: Path = SCHEMA_PATH) -> dict:
    """The schema, read with libyaml's safe loader where PyYAML has it: 8x faster than the pure-Python one, and every
    Snakemake invocation (each dry run, each cluster job) reads it twice. A node marked `x-registry: <name>` gets the
    registry's names as its enum (workflow_lib/registries.py): a registered objective, strategy, synonym source or
    control is allowed, and documented, without a second list."""
    from workflow_lib.registries import REGISTRIES

    with open(path) as handle:
        schema = yaml.load(handle, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))

    for node in registry_nodes(schema):
        node["enum"] = REGISTRIES[node["x-registry"]]()
    return schema


def registry_nodes(node: Any) -> Iterator[dict]:
    """Every schema node marked `x-registry: <name>`, at any depth."""
    if isinstance(node, dict):
        if "x-registry" in node:
            yield node
        for value in node.values():
            yield from registry_nodes(value)
    elif isinstance(node, list):
        for value in node:
            yield from registry_nodes(value)


def _key(path: Iterable[Any]) -> str:
    return ".".join(str(p) for p in path) or "<top level>"


def _allowed_keys(schema: dict, validator_schema: dict) -> list[str]:
    props = validator_schema.get("properties", {})
    return sorted(props)


def _resolve(alternative: dict, schema: dict) -> dict:
    """A subschema with its `$ref` (to #/$defs/...) followed."""
    while "$ref" in alternative:
        node: Any = schema
        for part in alternative["$ref"].lstrip("#/").split("/"):
            node = node[part]
        alternative = {**node, **{k: v for k, v in alternative.items() if k != "$ref"}}
    return alternative


def _form(alternative: dict, schema: dict) -> str:
    """One allowed form of a value, in words: `auto`, an integer >= 1, a mapping of ..."""
    alt = _resolve(alternative, schema)
    if "const" in alt:
        return repr(alt["const"])
    if "enum" in alt:
        return "one of " + ", ".join(map(repr, alt["enum"]))
    kinds = alt.get("type", "a value")
    kinds = [kinds] if isinstance(kinds, str) else list(kinds)
    words = {
        "integer": "an integer",
        "number": "a number",
        "string": "a string",
        "boolean": "true or false",
        "null": "null",
        "object": "a mapping",
        "array": "a list",
    }
    text = " or ".join(words.get(k, k) for k in kinds)
    if "minimum" in alt:
        text += f" >= {alt['minimum']}"
    if "object" in kinds and isinstance(alt.get("additionalProperties"), dict):
        text += f" of names to {_form(alt['additionalProperties'], schema)}"
    if "object" in kinds and alt.get("required"):
        text += " with " + ", ".join(map(repr, alt["required"]))
    if "array" in kinds and isinstance(alt.get("items"), dict):
        text += f" of {_form(alt['items'], schema)}"
    return text


def schema_defaults(schema: dict, node: dict) -> dict:
    """{key: default} of an object schema's properties, each followed through its `$ref` (the schema's one home of a
    default: no reader of the config repeats one)."""
    out = {}
    for key, sub in node.get("properties", {}).items():
        resolved = _resolve(sub, schema)
        if "default" in resolved:
            out[key] = copy.deepcopy(resolved["default"])
    return out


def _describe_choice(error, schema: dict) -> str:
    """An anyOf/oneOf failure in words: which keys are missing (alternatives that each require keys), which
    alternatives conflict (oneOf matched twice), or which forms the value may take, and the deepest reason."""
    key, instance = _key(error.absolute_path), error.instance
    alternatives = [_resolve(alt, schema) for alt in error.validator_value]
    if all(set(alt) == {"required"} for alt in alternatives):  # e.g. models.<m> with source hf: name or gguf
        options = " or ".join(" and ".join(map(repr, alt["required"])) for alt in alternatives)
        return f"config key {key}: needs {options}; it has none of them (its keys: {', '.join(map(repr, instance))})"
    if error.validator == "oneOf" and "is valid under each of" in error.message:
        return f"config key {key}: {instance!r} matches more than one allowed form; give exactly one"
    shaped = [
        i
        for i, alt in enumerate(alternatives)
        if isinstance(instance, (dict, list))
        and _shape(instance) in ([alt["type"]] if isinstance(alt.get("type"), str) else alt.get("type", []))
    ]
    if len(shaped) == 1:  # a mapping (or list) where one form is a mapping: what is wrong inside it
        from jsonschema.exceptions import best_match

        inside = [e for e in error.context if e.relative_schema_path and e.relative_schema_path[0] == shaped[0]]
        if inside:
            return _describe(best_match(inside), schema)
    forms = "; or ".join(_form(alt, schema) for alt in alternatives)
    return f"config key {key}: {instance!r} is not allowed; allowed: {forms}"


def _shape(instance: Any) -> str:
    return "object" if isinstance(instance, dict) else "array"


def _describe(error, schema: dict) -> str:
    """Turn one jsonschema error into 'config key a.b.c: problem; allowed: ...'."""
    key = _key(error.absolute_path)
    kind = error.validator
    if kind == "additionalProperties":
        allowed = _allowed_keys(schema, error.schema)
        extra = sorted(set(error.instance) - set(allowed)) if isinstance(error.instance, dict) else []
        where = f"config key {key}" if error.absolute_path else "config"
        message = f"{where}: unknown key(s) {', '.join(map(repr, extra))}; allowed keys: {', '.join(allowed)}"
        if key.endswith(".architecture") and set(extra) & set(SET_FROM_TOKENIZER):
            message += f" ({', '.join(SET_FROM_TOKENIZER)} come from the tokenizer)"
        return message
    if kind == "enum":
        return f"config key {key}: {error.instance!r} is not allowed; allowed values: {', '.join(map(repr, error.validator_value))}"
    if kind == "required":
        return f"config key {key}: {error.message}"
    if kind == "type":
        return f"config key {key}: {error.instance!r} has the wrong type; expected {error.validator_value}"
    if kind in ("minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"):
        return f"config key {key}: {error.message} (allowed: {kind} {error.validator_value})"
    if kind in ("anyOf", "oneOf"):
        return _describe_choice(error, schema)
    if kind == "pattern" or (kind == "propertyNames"):
        return f"config key {key}: {error.message} (names use letters, digits, '_', '-', '.')"
    return f"config key {key}: {error.message}"


def check_schema(config: dict, schema: dict | None = None) -> None:
    """Raise ConfigError naming the offending key if the config violates the schema."""
    import jsonschema
    from jsonschema.exceptions import best_match

    moved = sorted(set(config.get("sampling") or {}) & {"top_k", "top_p", "temperature"})
    if moved:
        raise ConfigError(
            f"config key sampling.{moved[0]}: decoding settings are now named decoders, an axis of each "
            "experiment: define e.g. `decoders: {top-p-0.9: {top_p: 0.9}}` and list it in "
            "`experiments.<name>.decoders` (default [unbiased])"
        )

    if "shards" in (config.get("sampling") or {}):
        raise ConfigError(
            "config key sampling.shards: replaced by sampling.shard_batches, the most batches one sampling job "
            "continues (null: one job per evaluation), so that no cost setting moves a shard; the plan refuses shards "
            "predicted past cost.max_minutes and names the value that fits"
        )
    schema = schema or load_schema()
    validator = jsonschema.Draft202012Validator(schema)
    error = best_match(validator.iter_errors(config))
    if error is not None:
        # For propertyNames errors the path points at the parent; the bad name is the instance.
        raise ConfigError(_describe(error, schema))


def local_files(dataset: dict, split: str) -> list[str]:
    files = dataset["files"][split]
    return [files] if isinstance(files, str) else list(files)


def _as_list(files) -> list:
    return list(files) if isinstance(files, list) else [files]


def check_url_dataset(name: str, ds: dict) -> None:
    """What the schema cannot say about downloaded files: entries of one kind, safe member paths, distinct
    local names, heads of line-based files only, two files for WritingPrompts, a sha256 for plain http."""
    from workflow_lib.data.downloads import file_name

    key = f"config key datasets.{name}"
    if ds.get("archive"):
        refusal = unpinned_http_refusal(ds["archive"]["url"], ds["archive"].get("sha256"), f"{key}.archive")
        if refusal:
            raise ConfigError(refusal)
    names: dict[str, dict] = {}
    for split, files in ds["files"].items():
        entries = _as_list(files)
        if ds["format"] == "writingprompts" and len(entries) != 2:
            raise ConfigError(
                f"{key}.files.{split}: format 'writingprompts' takes 2 files ([wp_source, wp_target]), "
                f"got {len(entries)}"
            )
        for entry in entries:
            if ds.get("archive"):
                if not isinstance(entry, str):
                    raise ConfigError(
                        f"{key}.files.{split}: with `archive`, files are the archive's member paths "
                        f"(e.g. writingPrompts/test.wp_source), not {entry!r}"
                    )
                parts = Path(entry).parts
                if Path(entry).is_absolute() or ".." in parts or not parts:
                    raise ConfigError(
                        f"{key}.files.{split}: archive member {entry!r} must be a relative path without '..'"
                    )
                continue
            if not isinstance(entry, dict):
                raise ConfigError(
                    f"{key}.files.{split}: source: url takes {{url: ..., sha256: ...}} entries (or an "
                    f"`archive` whose members `files` names), not {entry!r}"
                )
            if entry.get("head_bytes") and ds["format"] not in LINE_FORMATS:
                raise ConfigError(
                    f"{key}.files.{split}.head_bytes: a head is cut to whole lines, which needs a "
                    f"line-based format ({', '.join(LINE_FORMATS)}), not {ds['format']!r}"
                )
            refusal = unpinned_http_refusal(entry["url"], entry.get("sha256"), f"{key}.files.{split}")
            if refusal:
                raise ConfigError(refusal)
            local = file_name(entry)
            if local in names and names[local] != entry:
                raise ConfigError(
                    f"{key}.files.{split}: {entry['url']} and {names[local]['url']} would both be "
                    f"saved as {local!r}; one dataset's URLs need distinct file names"
                )
            names[local] = entry


def check_recipe(name: str, ds: dict) -> None:
    key = f"config key datasets.{name}"
    splits = dataset_splits(ds)
    if ds.get("top_up") is not None:
        if ds.get("recipe", "raw") != "mixce":
            raise ConfigError(f"{key}.top_up: topping up is part of recipe 'mixce', not {ds.get('recipe', 'raw')!r}")
        if ds["top_up"] not in splits:
            raise ConfigError(
                f"{key}.top_up: dataset {name!r} has no split {ds['top_up']!r}; allowed: {', '.join(splits)}"
            )
    if isinstance(ds.get("max_rows"), dict):
        if ds.get("recipe", "raw") != "raw":
            raise ConfigError(
                f"{key}.max_rows: a cap per split is part of recipe 'raw'; give recipe 'mixce' one number"
            )
        unknown = sorted(set(ds["max_rows"]) - set(splits))
        if unknown:
            raise ConfigError(
                f"{key}.max_rows: dataset {name!r} has no split {unknown[0]!r}; allowed: {', '.join(splits)}"
            )
    if ds.get("recipe") == "mixce" and ds.get("cleaning", "none") not in MIXCE_CLEANINGS:
        raise ConfigError(
            f"{key}.recipe: 'mixce' filters MixCE's cleaned text, so cleaning must be one of "
            f"{', '.join(map(repr, MIXCE_CLEANINGS))}, not {ds.get('cleaning', 'none')!r}"
        )


def _need(name: str, section: dict, key: str, what: str) -> None:
    if name not in section:
        allowed = ", ".join(sorted(section)) or "(none defined)"
        raise ConfigError(f"config key {key}: unknown {what} {name!r}; allowed: {allowed}")


def check_architecture(name: str, model: dict, schema: dict) -> None:
    """A scratch model's GPT2Config arguments build a model; the schema has checked each key's type and range,
    this checks what relates keys (or tells Python's int from float, as GPT2Config does)."""
    key = f"config key models.{name}.architecture"
    arch = model.get("architecture") or {}
    if model["source"] != "scratch":
        if arch:
            raise ConfigError(
                f"{key}: a pretrained (source: {model['source']}) model has its checkpoint's architecture; "
                "remove `architecture`, or use source: scratch"
            )
        return
    properties = schema["$defs"]["model"]["properties"]["architecture"]["properties"]
    integer_keys = [k for k, spec in properties.items() if "integer" in spec.get("type", [])]
    for k, value in arch.items():
        if k in integer_keys and isinstance(value, float):
            raise ConfigError(f"{key}.{k}: GPT2Config takes an integer here, not {value!r}; write {int(value)}")
        if k in GPT2_FLOAT_KEYS and not isinstance(value, float):
            raise ConfigError(
                f"{key}.{k}: GPT2Config takes a float here, not the integer {value!r}; write {float(value)}"
            )
    size = {k: arch.get(k, default) for k, default in GPT2_DEFAULTS.items()}
    said = {k: f"{k} = {v}" + ("" if k in arch else " (unset: GPT2Config's default)") for k, v in size.items()}
    if size["n_embd"] % size["n_head"]:
        raise ConfigError(
            f"{key}: {said['n_embd']} is not divisible by {said['n_head']} (each head gets n_embd / n_head dimensions)"
        )


def default_featuriser(config: dict) -> str | dict:
    """`evaluation.featuriser: auto`: the study's first pretrained model (`{model: key}`: a causal LM's last hidden
    state, which sees what MAUVE's controls degrade; docs/method.md §4), else `minilm`."""
    return next(({"model": key} for key, m in config["models"].items() if m["source"] == "hf"), "minilm")


def check_featuriser(featuriser: str | dict, config: dict, workdir: Path) -> None:
    if isinstance(featuriser, dict):
        key = featuriser["model"]
        _need(key, config["models"], "evaluation.featuriser.model", "model")
        if config["models"][key]["source"] != "hf":
            raise ConfigError(
                f"config key evaluation.featuriser.model: model {key!r} is source: "
                f"{config['models'][key]['source']} (randomly initialised, then trained per condition); a featuriser "
                "is one pretrained checkpoint for every condition: name a source: hf model"
            )
        return
    if featuriser not in FEATURISERS and not (workdir / featuriser / "config.json").is_file():
        raise ConfigError(
            f"config key evaluation.featuriser: {featuriser!r} is not a local model folder (a folder "
            f"with a config.json; relative paths are read from {workdir.resolve()}); allowed: "
            f"{', '.join(map(repr, FEATURISERS))}, auto, {{model: <a models key>}} or such a folder"
        )


def check_local_names(config: dict, workdir: Path) -> None:
    """A hub name that is a filesystem path must exist when the study is planned: otherwise the job would try the
    hub with it and fail at run time, far from the key."""
    for section in ("models", "tokenizers"):
        for name, entry in config[section].items():
            path = entry.get("name")
            if entry["source"] == "hf" and path and looks_like_path(path):
                folder = workdir / Path(path).expanduser()  # an absolute path replaces workdir
                if not folder.is_dir():
                    raise ConfigError(
                        f"config key {section}.{name}.name: {path!r} is a path, and no such folder exists "
                        f"(relative paths are read from {workdir.resolve()})"
                    )


def check_synonym_file(config: dict, used_by: str, workdir: Path) -> None:
    """The `file` source's pairs (synonyms.file) must be named and exist when the study is planned; their content is
    checked by the job that reads them (perturb/synonym_file.py), with errors naming the key and the file."""
    path = config.get("synonyms", {}).get("file")
    if path is None:
        raise ConfigError(
            f"config key synonyms.file: required by {used_by} ('file' synonyms are read from it: a TSV of "
            "word<TAB>synonym[<TAB>weight] lines, docs/usage.md 'Synonym sources')"
        )
    if not (workdir / Path(path).expanduser()).is_file():
        raise ConfigError(
            f"config key synonyms.file: {path!r}: no such file (relative paths are read from {workdir.resolve()})"
        )


def table_intensities(config: dict) -> list[float]:
    """The intensities Table 1's perturbed rows can use: insertion at x > 0 both at training and at sampling in
    some experiment."""
    found = set()
    for exp in config["experiments"].values():
        train, test = exp.get("train_perturbation", {}), exp.get("test_perturbation", {})
        if "insertion" in train.get("strategies", ["insertion"]) and "insertion" in test.get(
            "strategies", ["insertion"]
        ):
            found |= {float(x) for x in train.get("intensities", [0])} & {
                float(x) for x in test.get("intensities", [0])
            }
    return sorted(x for x in found if x > 0)


def check_report_intensity(config: dict) -> None:
    """report.intensity must be one the study runs (`normalise` has made it the study's one where it has one);
    where it has several and report.intensity is none of them, the config is refused, naming them."""
    candidates = table_intensities(config)
    chosen = float(config["report"]["intensity"])
    if not candidates or chosen in candidates:
        return
    raise ConfigError(
        f"config key report.intensity: {chosen:g} is not an intensity of this study, so Table 1 would have "
        "no perturbed rows; it has insertion at the same intensity at training and sampling at "
        f"{', '.join(f'{x:g}' for x in candidates)}: set report.intensity to one of them"
    )


def check(config: dict, workdir: Path | None = None) -> None:
    """Cross-section checks of a normalised config, which they do not change: every referenced name exists,
    splits exist, local files and folders are there, scratch architectures can be built."""
    workdir = Path(workdir or ".")
    datasets = config["datasets"]
    for name, ds in datasets.items():
        check_recipe(name, ds)
        if ds["source"] == "url":
            check_url_dataset(name, ds)
        elif any(isinstance(f, dict) for files in ds.get("files", {}).values() for f in _as_list(files)):
            raise ConfigError(
                f"config key datasets.{name}.files: {{url, sha256}} entries need source: url, "
                f"not source: {ds['source']}"
            )
        if ds["source"] == "local":
            fmt = ds["format"]
            for split in ds["files"]:
                files = local_files(ds, split)
                want = 2 if fmt == "writingprompts" else 1
                if len(files) != want:
                    raise ConfigError(
                        f"config key datasets.{name}.files.{split}: format {fmt!r} takes {want} file(s), got {len(files)}"
                        + (" ([wp_source, wp_target])" if fmt == "writingprompts" else "")
                    )
                for f in files:
                    if not (workdir / f).is_file():
                        raise ConfigError(
                            f"config key datasets.{name}.files.{split}: file not found: {f} (relative paths are read from {workdir.resolve()})"
                        )
    for name, tok in config["tokenizers"].items():
        if tok["source"] == "train":
            _need(tok["dataset"], datasets, f"tokenizers.{name}.dataset", "dataset")
            if "train" not in dataset_splits(datasets[tok["dataset"]]):
                raise ConfigError(
                    f"config key tokenizers.{name}.dataset: dataset {tok['dataset']!r} has no 'train' split to learn from"
                )
    schema = load_schema()
    training_schema = {**schema["properties"]["training"], "$defs": schema["$defs"]}  # training.lora is a $ref
    for name, model in config["models"].items():
        _need(model["tokenizer"], config["tokenizers"], f"models.{name}.tokenizer", "tokenizer")
        gguf_url = (model.get("gguf") or {}).get("url")
        refusal = gguf_url and unpinned_http_refusal(
            gguf_url, model["gguf"].get("sha256"), f"config key models.{name}.gguf"
        )
        if refusal:
            raise ConfigError(refusal)
        if model.get("training"):
            import jsonschema
            from jsonschema.exceptions import best_match

            merged = {**config.get("training", {}), **model["training"]}
            error = best_match(jsonschema.Draft202012Validator(training_schema).iter_errors(merged))
            if error is not None:
                raise ConfigError(
                    _describe(error, training_schema)
                    .replace("config key ", f"config key models.{name}.training.", 1)
                    .replace("config: ", f"config key models.{name}.training: ", 1)
                )
        check_architecture(name, model, schema)
    check_featuriser(config["evaluation"]["featuriser"], config, workdir)
    mauve = config["evaluation"]["mauve"]
    if mauve["controls"]["must_detect"] and mauve["kmeans_seeds"] < 2:
        raise ConfigError(
            "config key evaluation.mauve.kmeans_seeds: MAUVE's controls (evaluation.mauve.controls.must_detect) "
            "compare a control's gap below the human ceiling with the spread of k-means seeds, which 1 seed does "
            "not have: use 2 or more, or must_detect: [] to report MAUVE unchecked"
        )
    for name, es in config.get("eval_sets", {}).items():
        _need(es["dataset"], datasets, f"eval_sets.{name}.dataset", "dataset")
        splits = dataset_splits(datasets[es["dataset"]])
        if es["split"] not in splits:
            raise ConfigError(
                f"config key eval_sets.{name}.split: dataset {es['dataset']!r} has no split {es['split']!r}; allowed: {', '.join(splits)}"
            )
    for name, exp in config["experiments"].items():
        for i, model in enumerate(exp["models"]):
            _need(model, config["models"], f"experiments.{name}.models[{i}]", "model")
        check_train_dataset(name, exp, datasets)
        for i, es in enumerate(exp["eval_sets"]):
            _need(es, config.get("eval_sets", {}), f"experiments.{name}.eval_sets[{i}]", "eval set")
        for i, objective in enumerate(exp.get("objectives", [])):
            if objective == UNTRAINED:
                for model in exp["models"]:
                    if config["models"][model]["source"] != "hf":
                        raise ConfigError(
                            f"config key experiments.{name}.objectives[{i}]: 'untrained' evaluates a "
                            f"pretrained model as it is, but model {model!r} is source: "
                            f"{config['models'][model]['source']} (randomly initialised)"
                        )
                continue
            _need(objective, config["objectives"], f"experiments.{name}.objectives[{i}]", "objective")
        for i, decoder in enumerate(exp.get("decoders", [])):
            _need(decoder, config["decoders"], f"experiments.{name}.decoders[{i}]", "decoder")
        for axis in ("train_perturbation", "test_perturbation"):
            sources = exp.get(axis, {}).get("synonyms", [])
            if "oracle" in sources and datasets.get(exp["train_dataset"], {}).get("source") != "builtin":
                raise ConfigError(
                    f"config key experiments.{name}.{axis}.synonyms: 'oracle' synonyms exist only for a "
                    f"builtin train_dataset, not {exp['train_dataset']!r}"
                )
            if set(sources) & set(SYNONYMS_FROM_EMBEDDINGS):
                for model in exp["models"]:
                    embedding_model(config, config["models"][model]["tokenizer"], f"experiments.{name}.{axis}.synonyms")
            if "file" in sources:
                check_synonym_file(config, f"experiments.{name}.{axis}.synonyms", workdir)
        check_embedding_strategies(name, exp)
    check_lab(config)
    check_local_names(config, workdir)
    check_report_intensity(config)
    from workflow_lib.train.tracking import missing

    if absent := missing(config["training"]["report_to"]):
        raise ConfigError(f"config key training.report_to: not installed: {', '.join(absent)}")


def check_embedding_strategies(name: str, exp: dict) -> None:
    """What the schema cannot say of a strategy (perturb/strategies.py): one for training only (NEFTune) in a
    test_perturbation, and one that perturbs every position at an intensity other than 0 or 1."""
    from workflow_lib.perturb.strategies import get as get_strategy

    for axis in ("train_perturbation", "test_perturbation"):
        grid = exp.get(axis, {})
        for strategy in grid.get("strategies", []):
            rule = get_strategy(strategy)
            if axis == "test_perturbation" and not rule.at_sampling:
                raise ConfigError(
                    f"config key experiments.{name}.test_perturbation.strategies: {strategy} perturbs at training "
                    "only (its authors define no sampling-time perturbation); list it under train_perturbation"
                )
            odd = [x for x in grid.get("intensities", [0]) if float(x) not in (0.0, 1.0)]
            if rule.every_position and odd:
                raise ConfigError(
                    f"config key experiments.{name}.{axis}.intensities: {strategy} perturbs every position, so its "
                    f"intensity is 1 (or 0, the baseline), not {', '.join(f'{float(x):g}' for x in odd)}; give it an "
                    "experiment of its own"
                )


def check_train_dataset(name: str, exp: dict, datasets: dict) -> None:
    """The train dataset must exist and have a train split when the experiment trains, or when its sampling-time
    perturbation learns synonyms from it (distributional). A zero-shot experiment (every objective `untrained`) may
    name none: its paths then say `none` in the dataset's place."""
    key = f"config key experiments.{name}.train_dataset"
    from workflow_lib.grid import trained_objectives

    trains = trained_objectives(exp)
    test = exp.get("test_perturbation", {})
    learned = [s for s in test.get("synonyms", ["distributional"]) if s in SYNONYMS_FROM_TOKENS]
    learns = bool(learned) and any(float(x) > 0 for x in test.get("intensities", [0]))
    needs = (
        f"objectives {', '.join(trains)} train on its train split"
        if trains
        else f"test_perturbation's {', '.join(learned)} synonyms are learned from its train split"
        if learns
        else None
    )
    if exp["train_dataset"] == NO_TRAIN_DATASET:
        if needs:
            raise ConfigError(
                f"{key}: required here ({needs}); only a zero-shot experiment (every objective "
                f"'{UNTRAINED}') sampling without synonyms learned from it may leave it out"
            )
        return
    _need(exp["train_dataset"], datasets, f"experiments.{name}.train_dataset", "dataset")
    if needs and "train" not in dataset_splits(datasets[exp["train_dataset"]]):
        raise ConfigError(f"{key}: dataset {exp['train_dataset']!r} has no 'train' split, and {needs}")


def check_lab(config: dict) -> None:
    """The theory lab needs a group of models trained on the same data: a builtin train_dataset (its true law is
    the yardstick), one training condition and at least two trained models."""
    from workflow_lib.grid import lab_models, train_conditions

    lab = config.get("lab", {})
    for i, name in enumerate(lab.get("experiments", [])):
        key = f"lab.experiments[{i}]"
        _need(name, config["experiments"], key, "experiment")
        exp = config["experiments"][name]
        if config["datasets"][exp["train_dataset"]]["source"] != "builtin":
            raise ConfigError(
                f"config key {key}: experiment {name!r} trains on {exp['train_dataset']!r}, not a builtin "
                "dataset; the lab needs the grammar's true law"
            )
        if len(train_conditions(exp)) != 1:
            raise ConfigError(
                f"config key {key}: experiment {name!r} has {len(train_conditions(exp))} training "
                "conditions; the lab compares models trained on the same data (one condition)"
            )
        if len(lab_models(exp)) < 2:
            raise ConfigError(
                f"config key {key}: experiment {name!r} trains {len(lab_models(exp))} model(s); the lab "
                "needs at least 2 (objectives x seeds x models) to measure their disagreement"
            )
    if any(d > lab["last"] for d in lab["deltas"]):
        raise ConfigError(
            f"config key lab.deltas: every delta must be at most lab.last ({lab['last']}): the "
            "changed positions lie among the last l words, where T acts"
        )


def embedding_model(config: dict, tokenizer: str, key: str = "synonyms.embedding_model") -> str:
    """The model whose input embeddings define `embedding` synonyms for `tokenizer` (`perturb.settings.synonym_model`),
    or a ConfigError naming the key."""
    from workflow_lib.perturb.settings import synonym_model

    chosen = config.get("synonyms", {}).get("embedding_model")
    if chosen is not None:
        _need(chosen, config["models"], "synonyms.embedding_model", "model")
    found = synonym_model(config, tokenizer)
    if found is not None:
        return found
    raise ConfigError(
        f"config key {key}: 'embedding' synonyms need a pretrained (source: hf) model with tokenizer "
        f"{tokenizer!r}; set synonyms.embedding_model or use 'distributional'"
    )


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


def validate_config(config: dict, workdir: Path | None = None) -> dict:
    """Check the config as written, normalise it in place, check the result. Returns config."""
    check_input(config, workdir)
    normalise(config, workdir)
    check(config, workdir)
    return config
