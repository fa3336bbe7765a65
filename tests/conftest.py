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
    """The paper's study (configs/paper.yaml) planned once from an empty folder, `snakemake -n --printshellcmds`, with
    the CPU seconds it took (`support.workflow_runs.PaperPlan`): its job counts are read by the paper config's tests
    (tests/workflow/test_paper_config.py: the counts, the planning time and every job's command line) and the
    rehearsal's (tests/studies/test_rehearsal.py), each of which planned it alone before. Printing the 3,455 jobs'
    commands costs no more CPU than `--quiet rules` (27.0 against 28.6 s, one run each)."""
    from support.workflow_runs import PaperPlan, paper_dry_run

    workdir = tmp_path_factory.mktemp("paper-plan")
    result, seconds = paper_dry_run(workdir, "--printshellcmds")
    return PaperPlan(workdir, result, seconds)


# `make test` runs the suite on 2 pytest-xdist workers (docs/benchmarks.md, "Test suite time"): every test module goes to
# one worker whole, so that its module fixtures are built once, and the modules that share a session fixture go to
# the same worker, so that the tiny study and the paper's plan are each made once. (xdist's own `--dist loadgroup`
# does not group under pytest 9, whose node ids it can no longer rename.) A module that starts using a session
# fixture is refused at collection until it is listed here.
SHARED_FIXTURE_MODULES = {
    "tests/lab/test_lab_workflow.py": "tiny_study",
    "tests/workflow/test_workflow.py": "tiny_study",
    "tests/evaluate/test_harness.py": "tiny_study",
    "tests/studies/test_rehearsal.py": "paper_plan",
    "tests/workflow/test_paper_config.py": "paper_plan",
}
SHARED_FIXTURES = frozenset(SHARED_FIXTURE_MODULES.values())


def module_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def pytest_xdist_make_scheduler(config, log):
    from xdist.scheduler import LoadScopeScheduling

    class ModuleScheduling(LoadScopeScheduling):
        """xdist's scope scheduling with a module (or the modules sharing a session fixture) as the unit; the largest
        units are handed out first (xdist's default: by number of tests)."""

        def _split_scope(self, nodeid: str) -> str:
            return SHARED_FIXTURE_MODULES.get(module_of(nodeid), module_of(nodeid))

    return ModuleScheduling(config, log)


def pytest_collection_modifyitems(config, items):
    unlisted = sorted(
        {
            f"{module_of(item.nodeid)} (uses {name})"
            for item in items
            for name in SHARED_FIXTURES & set(item.fixturenames)
            if SHARED_FIXTURE_MODULES.get(module_of(item.nodeid)) != name
        }
    )
    if unlisted:
        raise pytest.UsageError(f"tests/conftest.py: add to SHARED_FIXTURE_MODULES: {', '.join(unlisted)}")
