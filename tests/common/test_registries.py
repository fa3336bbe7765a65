"""The config schema's enums of objectives, strategies, synonym sources and MAUVE controls come from the registries
themselves (issue 53): what `registries.py` reads from their source is what importing them registers, and the schema
the config is checked against (and docs/config.md) allows exactly those names."""

from __future__ import annotations

import pytest

from support.workflow_runs import tiny_config
from workflow_lib.config import ConfigError, load_schema, validate_config
from workflow_lib.config_schema import registry_nodes
from workflow_lib.registries import REGISTRIES


def enum_at(schema: dict, *path: str) -> list[str]:
    node = schema
    for key in path:
        node = node[key]
    return node["enum"]


def test_the_source_read_registries_are_the_imported_ones():
    from workflow_lib.constants import SYNONYM_SOURCES
    from workflow_lib.evaluate.control_names import CEILING, CONTROLS
    from workflow_lib.perturb.strategies import STRATEGIES
    from workflow_lib.train.objectives import OBJECTIVES

    assert REGISTRIES["objectives"]() == list(OBJECTIVES)
    assert REGISTRIES["strategies"]() == list(STRATEGIES)
    assert REGISTRIES["synonym_sources"]() == list(SYNONYM_SOURCES)
    assert REGISTRIES["controls"]() == [c for c in CONTROLS if c != CEILING]


def test_every_marked_node_gets_its_registrys_names():
    schema = load_schema()
    marked = list(registry_nodes(schema))
    assert {n["x-registry"] for n in marked} == set(REGISTRIES)
    assert all(n["enum"] == REGISTRIES[n["x-registry"]]() for n in marked)


def test_a_name_outside_a_registry_is_refused_naming_the_registered_ones():
    config = tiny_config()
    config["objectives"] = {"mine": {"loss": "hinge"}}
    with pytest.raises(ConfigError, match="objectives.mine.loss: 'hinge' is not allowed; allowed values: 'mle', "):
        validate_config(config)


def test_a_newly_registered_strategy_is_allowed_without_touching_the_schema(monkeypatch):
    """What adding a strategy to the registry does to the schema: its name becomes allowed (the registry's source
    read as it stands, here with one more `register(Strategy(...))` line)."""
    from workflow_lib import module_deps, registries

    strategies = module_deps.module_path("workflow_lib.perturb.strategies")
    extra = strategies.read_text() + '\nregister(Strategy("swap", keep="token", description="test"))\n'
    read = registries._tree
    monkeypatch.setattr(
        registries, "_tree", lambda path: module_deps._parse(extra, str(path)) if path == strategies else read(path)
    )
    assert registries.strategy_names()[-1] == "swap"
    assert "swap" in enum_at(load_schema(), "$defs", "strategies", "items")


def read_with(monkeypatch, module: str, extra: str) -> None:
    """registries reads `module`'s source as it stands plus `extra` (a registry entry appended)."""
    from workflow_lib import module_deps, registries

    path = module_deps.module_path(module)
    text = path.read_text() + extra
    read = registries._tree
    monkeypatch.setattr(registries, "_tree", lambda p: module_deps._parse(text, str(p)) if p == path else read(p))


def test_a_control_is_its_decorator_and_its_three_strings_are_read(monkeypatch):
    """A MAUVE control is one `@control(name, short, description)` builder in evaluate/controls.py: the schema's
    `must_detect` enum and control_names' tables read its name and strings (keywords too); anything but three string
    literals, or a registry without its ceiling first, is refused naming the file."""
    from workflow_lib.registries import control_entries

    added = (
        '\n\n@control("reversed", short="reversed words", description="its words reversed")\ndef r(source):\n    pass\n'
    )
    read_with(monkeypatch, "workflow_lib.evaluate.control_builders", added)
    assert control_entries()[-1] == ("reversed", "reversed words", "its words reversed")
    assert control_entries()[0][0] == "human" and "reversed" in REGISTRIES["controls"]()
    assert "reversed" in enum_at(
        load_schema(),
        "properties",
        "evaluation",
        "properties",
        "mauve",
        "properties",
        "controls",
        "properties",
        "must_detect",
        "items",
    )
    monkeypatch.undo()
    read_with(
        monkeypatch,
        "workflow_lib.evaluate.control_builders",
        '\n\n@control("x", "short", SOME_NAME)\ndef x(s):\n    pass\n',
    )
    with pytest.raises(ValueError, match="control_builders.py: @control of x takes three strings"):
        control_entries()


def test_the_model_type_table_names_real_causal_lms_and_covers_the_tested_families():
    """workflow_lib/model_types.py, the one table of model-type facts (the cost model's gated MLPs, the featuriser's
    decoders): each type is one transformers knows as a causal LM, and every family the suite trains is in it."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    from studies.families import FAMILIES
    from workflow_lib.model_types import DECODERS, GATED, TABLE

    assert set(TABLE) <= set(CONFIG_MAPPING_NAMES) and DECODERS <= set(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)
    assert {"llama", "mistral", "qwen2"} <= GATED and not GATED & {"gpt2", "opt", "gpt_neo", "gpt_neox"}
    from transformers import AutoConfig

    for family in FAMILIES:
        assert AutoConfig.for_model(family.replace("-", "_")).model_type in TABLE, family
