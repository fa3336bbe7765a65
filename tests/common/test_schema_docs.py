"""docs/config.md is generated from the schema and kept current."""

from __future__ import annotations

import copy
import subprocess
import sys

from support.workflow_runs import REPO
from workflow_lib.config import load_schema
from workflow_lib.schema_docs import DOCS, render


def schema() -> dict:
    return load_schema()  # with the registries' enums, as schema_docs renders it


def test_committed_reference_is_what_the_schema_gives():
    assert DOCS.read_text() == render(schema()), "docs/config.md is stale: run python -m workflow_lib.schema_docs"


def test_check_mode_fails_on_a_stale_reference(tmp_path):
    changed = copy.deepcopy(schema())
    changed["properties"]["sampling"]["properties"]["new_key"] = {
        "type": "integer",
        "default": 3,
        "description": "a key the docs do not have yet",
    }
    text = render(changed)
    assert "| `sampling.new_key` | integer | 3 |  | a key the docs do not have yet |" in text
    assert text != DOCS.read_text()

    def check(path) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "workflow_lib.schema_docs", "--check", "--output", str(path)],
            cwd=REPO,
            capture_output=True,
            text=True,
            check=False,
        )

    assert check(DOCS).returncode == 0
    stale = tmp_path / "config.md"
    stale.write_text(DOCS.read_text().replace("| `cost.safety` | number | 2 |", "| `cost.safety` | number | 3 |"))
    done = check(stale)
    assert done.returncode == 1 and "is out of date: run python -m workflow_lib.schema_docs" in done.stderr


def test_every_schema_key_is_documented_with_its_default_and_allowed_values():
    text = DOCS.read_text()
    for section in schema()["properties"]:
        assert f"## `{section}`" in text
    assert '| `training.mixed_precision` | string | "auto" | `auto`, `no`, `bf16`, `fp16` |' in text
    assert "| `models.<name>.architecture.n_layer` | integer |" in text  # a map's entries, through $ref
    assert "| `cost.safety` | number | 2 |" in text
    # no description cut short by a comma in a YAML flow mapping (the schema once had five)
    assert "grammar seed (vocabulary, classes, held-out compositions)" in text
