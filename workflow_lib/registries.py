"""The names in the workflow's registries, for the config schema's enums: one home each, the registry itself.

`config_schema.load_schema` fills every schema node marked `x-registry: <name>` with the names the registry holds, so a
new objective, perturbation strategy, sampling mode, synonym source or MAUVE control is allowed by the config, and listed in
docs/config.md, the moment it is registered. The objectives' registry imports torch, and the strategies' and the
controls' sit in stages that read the config (importing them from here would make the config import its readers), so
they are read from their source's syntax tree (the `@register("name")` decorators, the `register(Strategy("name",
...))` calls, the `@control(...)` decorators), as module_deps reads imports: nothing is imported or executed.
Standard library only.
"""

from __future__ import annotations

import ast
from collections.abc import Callable

from workflow_lib.constants import SYNONYM_SOURCES
from workflow_lib.module_deps import _tree, module_path


def _call_name(node: ast.AST) -> str | None:
    if isinstance(node, ast.Call):
        return node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", None)
    return None


def _first_string(call: ast.Call) -> str | None:
    if call.args and isinstance(call.args[0], ast.Constant) and isinstance(call.args[0].value, str):
        return call.args[0].value
    return None


def objective_losses() -> list[str]:
    """The losses train/objectives.py registers with `@register("name")`, in its order."""
    tree = _tree(module_path("workflow_lib.train.objectives"))
    names = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            for decorator in node.decorator_list:
                if isinstance(decorator, ast.Call) and _call_name(decorator) == "register":
                    names.append(_first_string(decorator))
    return [n for n in names if n]


def _registered(module: str, kind: str) -> list[str]:
    """The names a module registers with top-level `register(<kind>("name", ...))` calls, in its order."""
    names = []
    for node in _tree(module_path(module)).body:
        if isinstance(node, ast.Expr) and _call_name(node.value) == "register":
            call = node.value
            assert isinstance(call, ast.Call)
            if call.args and _call_name(call.args[0]) == kind:
                names.append(_first_string(call.args[0]))  # type: ignore[arg-type]
    return [n for n in names if n]


def strategy_names() -> list[str]:
    """The strategies perturb/strategies.py registers with `register(Strategy("name", ...))`, in its order."""
    return _registered("workflow_lib.perturb.strategies", "Strategy")


def sampling_mode_names() -> list[str]:
    """The modes sample/modes.py registers with `register(SamplingMode("name", ...))`, in its order."""
    return _registered("workflow_lib.sample.modes", "SamplingMode")


CONTROL_FIELDS = ("name", "short", "description")  # evaluate/control_builders.py's `control` decorator's arguments


def control_entries() -> list[tuple[str, str, str]]:
    """(name, short, description) of every MAUVE control evaluate/control_builders.py registers with a `@control(...)`
    decorator, in its order (the ceiling first)."""
    path = module_path("workflow_lib.evaluate.control_builders")
    entries: list[tuple[str, str, str]] = []
    for node in _tree(path).body:
        if not isinstance(node, ast.FunctionDef):
            continue
        for decorator in node.decorator_list:
            if not (isinstance(decorator, ast.Call) and _call_name(decorator) == "control"):
                continue
            given = dict(zip(CONTROL_FIELDS, decorator.args)) | {k.arg: k.value for k in decorator.keywords}
            values = [getattr(given.get(field), "value", None) for field in CONTROL_FIELDS]
            if not all(isinstance(v, str) for v in values):
                raise ValueError(f"{path}: @control of {node.name} takes three strings: {', '.join(CONTROL_FIELDS)}")
            name, short, description = (str(v) for v in values)
            entries.append((name, short, description))
    if not entries:
        raise LookupError(f"{path} registers no @control")
    return entries


def degraded_controls() -> list[str]:
    """The MAUVE controls a study may require it to see: every registered control but the ceiling (human text
    itself, registered first)."""
    return [name for name, _, _ in control_entries()[1:]]


REGISTRIES: dict[str, Callable[[], list[str]]] = {
    "objectives": objective_losses,
    "strategies": strategy_names,
    "sampling_modes": sampling_mode_names,
    "synonym_sources": lambda: list(SYNONYM_SOURCES),
    "controls": degraded_controls,
}
