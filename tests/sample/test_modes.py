"""The sampling modes' registry (workflow_lib/sample/modes.py): what the schema, the wildcards, the sampler and the
report read from it."""

from __future__ import annotations

import re

import pytest

from workflow_lib.comparisons import mode_label
from workflow_lib.config_schema import load_schema
from workflow_lib.constants import PAPER_STRATEGY
from workflow_lib.perturb.strategies import STRATEGIES
from workflow_lib.sample import modes
from workflow_lib.sample.modes import DEFAULT, MODES, SamplingMode, get, wildcard_pattern
from workflow_lib.sample.sampler import EMBEDDING_SAMPLERS, SAMPLERS


def test_the_schema_wildcard_and_sampler_hold_exactly_the_registered_modes():
    grid = load_schema()["$defs"]["test_perturbation_grid"]["properties"]["modes"]
    assert grid["items"]["enum"] == list(MODES) and DEFAULT in MODES and grid["default"] == [DEFAULT]
    assert re.fullmatch(wildcard_pattern(), DEFAULT) and not re.fullmatch(wildcard_pattern(), "exactly")
    assert list(SAMPLERS) == list(MODES) == list(EMBEDDING_SAMPLERS)
    assert all(callable(steps) for steps in [*SAMPLERS.values(), *EMBEDDING_SAMPLERS.values()])


def test_a_mode_that_is_not_algorithm_2s_law_says_so_in_its_label():
    for mode in MODES.values():
        assert mode_label(mode.name) == (mode.name if mode.algorithm2 else mode.label)
        assert mode.algorithm2 or mode.label, f"{mode.name}: an estimator of its own names itself"
    assert get(DEFAULT).algorithm2


def test_a_bad_entry_is_refused():
    with pytest.raises(ValueError, match="label"):
        SamplingMode("odd", steps="m:a", embedded_steps="m:b", algorithm2=False, label="a (b)")
    with pytest.raises(ValueError, match="registered twice"):
        modes.register(SamplingMode(DEFAULT, steps="m:a", embedded_steps="m:b", algorithm2=True))
    with pytest.raises(ValueError, match="unknown sampling mode"):
        get("soft")


def test_the_papers_strategy_is_registered():
    assert PAPER_STRATEGY in STRATEGIES
