"""docs/config.md, generated from workflow_lib/schemas/config.schema.yaml: every key with its type, default, allowed values
and description, grouped as the schema is (one section per top-level key; a map of named entries, such as
`datasets`, documents one entry as `datasets.<name>.*`).

    python -m workflow_lib.schema_docs            # rewrite docs/config.md
    python -m workflow_lib.schema_docs --check    # exit 1 if docs/config.md is not what the schema gives

tests/common/test_schema_docs.py fails when the committed file differs from what this writes.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from workflow_lib.config_schema import load_schema

DOCS = Path(__file__).resolve().parent.parent / "docs" / "config.md"
HEADER = """# Configuration reference

Generated from `workflow_lib/schemas/config.schema.yaml` by `python -m workflow_lib.schema_docs`; do not edit by hand
(a test fails when this file and the schema disagree). Keys are dotted paths; `<name>` stands for a name of your
choice (a dataset, a model, an experiment...). A default is what the schema fills in when the key is left out.
"""


def resolve(node: dict, defs: dict) -> dict:
    """A node with its $ref followed (the referencing node's own keys, such as a description, win)."""
    while "$ref" in node:
        target = defs[node["$ref"].rsplit("/", 1)[-1]]
        node = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
    return node


def type_of(node: dict, defs: dict) -> str:
    node = resolve(node, defs)
    if "const" in node:
        return f"`{json.dumps(node['const'])}`"
    if "oneOf" in node or "anyOf" in node:
        options = node["oneOf"] if "oneOf" in node else node["anyOf"]
        return " or ".join(type_of(option, defs) for option in options)
    if "enum" in node and "type" not in node:
        return ", ".join(
            sorted({type(v).__name__.replace("str", "string").replace("NoneType", "null") for v in node["enum"]})
        )
    kind = node.get("type", "object" if "properties" in node else "")
    kinds = kind if isinstance(kind, list) else [kind]
    if "array" in kinds and "items" in node:
        kinds = [f"array of {type_of(node['items'], defs)}" if k == "array" else k for k in kinds]
    return ", ".join(k for k in kinds if k) or "any"


def cell(text) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ").strip()


def rows(path: str, node: dict, defs: dict, out: list) -> None:
    """One row per key under `path`, depth first, in the schema's order."""
    node = resolve(node, defs)
    for key, child in node.get("properties", {}).items():
        child = resolve(child, defs)
        dotted = f"{path}.{key}" if path else key
        allowed = child.get("enum") or (child.get("items", {}) if isinstance(child.get("items"), dict) else {}).get(
            "enum"
        )
        out.append(
            (
                dotted,
                type_of(child, defs),
                json.dumps(child["default"]) if "default" in child else "",
                ", ".join(f"`{v}`" for v in allowed) if allowed else "",
                child.get("description", ""),
            )
        )
        if "properties" in child:
            rows(dotted, child, defs, out)
        elif isinstance(child.get("additionalProperties"), dict):
            rows(f"{dotted}.<name>", child["additionalProperties"], defs, out)
    if isinstance(node.get("additionalProperties"), dict) and not node.get("properties"):
        entry = resolve(node["additionalProperties"], defs)
        if "properties" in entry:
            rows(f"{path}.<name>", entry, defs, out)


def render(schema: dict) -> str:
    defs = schema.get("$defs", {})
    parts = [HEADER]
    for key, node in schema["properties"].items():
        top = resolve(node, defs)
        parts.append(f"\n## `{key}`\n")
        if top.get("description"):
            parts.append(cell(top["description"]) + "\n")
        required = " (required)" if key in schema.get("required", []) else ""
        parts.append(
            f"\nType: {type_of(top, defs)}{required}"
            + (f"; default `{json.dumps(top['default'])}`" if "default" in top and top["default"] != {} else "")
            + ".\n"
        )
        table: list = []
        rows(key, top, defs, table)
        if table:
            parts.append("\n| key | type | default | allowed | description |\n| --- | --- | --- | --- | --- |\n")
            parts.extend(
                f"| `{k}` | {cell(t)} | {cell(d)} | {cell(a)} | {cell(desc)} |\n" for k, t, d, a, desc in table
            )
    return "".join(parts)


def main() -> None:

    parser = argparse.ArgumentParser(prog="python -m workflow_lib.schema_docs", description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the reference is out of date")
    parser.add_argument("--output", type=Path, default=DOCS, help="the reference (default docs/config.md)")
    args = parser.parse_args()
    text = render(load_schema())  # the registries' enums filled
    if args.check:
        if not args.output.is_file() or args.output.read_text() != text:
            sys.exit(f"{args.output} is out of date: run python -m workflow_lib.schema_docs")
        return
    args.output.parent.mkdir(exist_ok=True)
    args.output.write_text(text)


if __name__ == "__main__":
    main()
