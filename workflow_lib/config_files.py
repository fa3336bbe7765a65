"""Reading a study's config files, and checking them from the command line.

Snakemake reads `--configfile` itself and reports a YAML syntax error as "Config file is not valid JSON or YAML",
naming neither the file nor the line. The workflow's own readers (the Snakefile's default `config.yaml`, `make
estimate`, `make check`: workflow_lib/check_config.py) read through `read_yaml`, whose error names both. Below the
config check and the cost model, which read through it.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

import yaml

from workflow_lib.config import ConfigError


class StrictLoader(yaml.SafeLoader):
    """YAML's safe loader, but a key twice in one mapping is an error: YAML keeps the last silently, so the same
    experiment written twice in one file would drop the first without a word. A merge (`<<: *anchor`) may still be
    overridden by the mapping's own keys: that is what it is for."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen: dict[str, yaml.Mark] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge" or not isinstance(key_node, yaml.ScalarNode):
                continue
            if key_node.value in seen:
                first = seen[key_node.value]
                raise yaml.constructor.ConstructorError(
                    None,
                    None,
                    f"the key {key_node.value!r} appears twice in one mapping (first at line {first.line + 1}); "
                    "YAML would keep only the last",
                    key_node.start_mark,
                )
            seen[key_node.value] = key_node.start_mark
        return super().construct_mapping(node, deep=deep)


def read_yaml(path: str | Path) -> dict:
    """The mapping a config file holds ({} for an empty one). A syntax error raises ConfigError naming the file, the
    line and the column (1-based, as an editor counts) and what the parser expected, as does a key twice in one
    mapping (StrictLoader); a file that is not a mapping raises naming the file."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as error:
        raise ConfigError(f"config file {path}: cannot be read ({error.strerror or error})") from None
    try:
        data = yaml.load(text, Loader=StrictLoader)  # a SafeLoader
    except yaml.MarkedYAMLError as error:
        mark, start = error.problem_mark or error.context_mark, error.context_mark
        where = f", line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        what = str(error.problem or error.context)
        if error.context and start is not None and error.problem:  # where the construct that failed began
            what += f" ({error.context} from line {start.line + 1}, column {start.column + 1})"
        raise ConfigError(f"config file {path}{where}: not valid YAML: {what}") from None
    except yaml.YAMLError as error:
        raise ConfigError(f"config file {path}: not valid YAML: {error}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path}: holds a {type(data).__name__}, not a mapping of config keys")
    return data


def exit_on_bad_yaml(path: str | Path) -> None:
    """The Snakefile's check of its default config file before snakemake reads it: a file that `read_yaml` refuses
    ends the run with its message (an absent file is left to snakemake)."""
    if Path(path).exists():
        try:
            read_yaml(path)
        except ConfigError as error:
            sys.exit(f"Invalid configuration: {error}")


def read_configs(paths: Sequence[str | Path]) -> dict:
    """The files merged in order, as snakemake merges `--configfile`s (later keys win, nested mappings merged)."""
    from snakemake.utils import update_config

    config: dict = {}
    for path in paths:
        update_config(config, read_yaml(path))
    return config
