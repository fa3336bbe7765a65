"""Shared fixtures: no test may touch the network, and workflow tests run snakemake in a temporary folder."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_DATASETS_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"

import support.workflow_runs  # noqa: F401 - first, to keep the environment as the session started (SESSION_ENV)


@pytest.fixture(scope="module")
def one_thread():
    """Tiny models run fastest on one thread; on a busy machine, more threads wait on each other (10x slower)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    return tmp_path


@pytest.fixture(scope="session")
def tiny_study(tmp_path_factory) -> Path:
    """One finished tiny study (`support.workflow_runs.tiny_study_config`), run once for the training, sampling, report and
    lab tests: each used to run its own. A test that edits its config.yaml to read a dry run puts it back."""
    from support.workflow_runs import snakemake, tiny_study_config, write_config

    workdir = tmp_path_factory.mktemp("tiny-study")
    write_config(workdir, tiny_study_config())
    result = snakemake(workdir, timeout=1500)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return workdir


@pytest.fixture(scope="session")
def paper_plan(tmp_path_factory):
    """The paper's study (configs/paper.yaml) planned once from an empty folder, `snakemake -n --quiet rules`, with
    the CPU seconds it took (`support.workflow_runs.PaperPlan`): its job counts are read by the paper config's test
    (tests/workflow/test_paper_config.py) and the rehearsal's (tests/studies/test_rehearsal.py), each of which planned
    it alone before, the former also its CPU seconds."""
    from support.workflow_runs import PaperPlan, paper_dry_run

    workdir = tmp_path_factory.mktemp("paper-plan")
    result, seconds = paper_dry_run(workdir, "--quiet", "rules")
    return PaperPlan(workdir, result, seconds)


# `make test` runs the suite on 2 pytest-xdist workers with `--dist loadgroup` (BENCHMARKS.md, "Test suite time"):
# every test module goes to one worker whole, so that its module fixtures are built once, and the modules that share
# a session fixture go to the same worker, so that the tiny study and the paper's plan are each made once. The
# fixtures' modules are handed out first: they are the longest units, and a long unit last would leave a worker idle.
SHARED_FIXTURES = ("tiny_study", "paper_plan")


def pytest_collection_modifyitems(config, items):
    groups: dict[str, str] = {}
    for item in items:
        module = item.nodeid.split("::", 1)[0]
        shared = next((name for name in SHARED_FIXTURES if name in item.fixturenames), None)
        if shared or module not in groups:
            groups[module] = shared or groups.get(module) or module
    for item in items:
        item.add_marker(pytest.mark.xdist_group(groups[item.nodeid.split("::", 1)[0]]))
    first = set(SHARED_FIXTURES)
    items.sort(key=lambda item: groups[item.nodeid.split("::", 1)[0]] not in first)  # stable: the order is kept
