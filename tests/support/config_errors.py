"""A config validated as the workflow validates it (a copy, so that a test may reuse it), or the one line it is
refused with: for the config tests (tests/common/test_config*.py)."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from workflow_lib.config import ConfigError, validate_config


def check(config: dict, tmp_path: Path | None = None) -> dict:
    return validate_config(copy.deepcopy(config), workdir=tmp_path or Path("."))


def error_of(config: dict, tmp_path: Path | None = None) -> str:
    with pytest.raises(ConfigError) as info:
        check(config, tmp_path)
    return str(info.value)
