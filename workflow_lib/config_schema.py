"""The config's JSON schema (workflow_lib/schemas/config.schema.yaml; its keys, types and defaults: docs/config.md)
and its errors in words. A node marked `x-registry` gets a registry's names as its enum (`load_schema`). jsonschema's
raw error is a page of schema internals, so `check_schema` finds the most relevant error and names the config key and
the allowed values in one line: a `ConfigError`, which every config check raises. Imports only the standard library,
yaml and jsonschema.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Iterator
from importlib.resources import files as package_files
from pathlib import Path
from typing import Any

import yaml

# The schema ships inside the package (package data), so a non-editable install validates as a checkout does; the
# Snakefile's validation and an importing workflow read this file, never a checkout beside the package.
SCHEMA_PATH = Path(str(package_files("workflow_lib").joinpath("schemas", "config.schema.yaml")))
# GPT2Config keys the workflow sets from the tokenizer: a user's value would be overwritten or clash.
SET_FROM_TOKENIZER = ("vocab_size", "bos_token_id", "eos_token_id")


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
