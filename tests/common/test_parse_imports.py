"""Planning imports nothing heavy: while snakemake parses the Snakefile and builds the DAG of the default study and
of the paper's (every input function, param and resource called), no workflow_lib module imports numpy, polars,
torch, pyarrow, pandas, scipy or transformers (issue 53). Those belong to jobs; at parse time they cost seconds on
every invocation (each dry run, each cluster job's own snakemake) and put numerical code into the plan.

An import statement goes through `builtins.__import__` even when the module is already loaded (snakemake itself
loads numpy), so a start-up hook that wraps it records every such import made from a workflow_lib module, and
where."""

from __future__ import annotations

import subprocess

import pytest

from support.workflow_runs import REPO, SNAKEMAKE, run_snakemake

HEAVY = ("numpy", "polars", "torch", "pyarrow", "pandas", "scipy", "transformers")
HOOK = f"""
import builtins, os, sys
_import = builtins.__import__
def _traced(name, globals=None, locals=None, fromlist=(), level=0):
    caller = str((globals or {{}}).get("__name__", ""))
    if level == 0 and name.split(".")[0] in {HEAVY!r} and caller.startswith("workflow_lib"):
        with open(os.environ["PERTURBED_LM_IMPORT_TRACE"], "a") as out:
            out.write(f"{{name}} imported by {{caller}}:{{sys._getframe(1).f_lineno}}\\n")
    return _import(name, globals, locals, fromlist, level)
builtins.__import__ = _traced
"""


@pytest.mark.parametrize("configs", [["config.yaml"], ["configs/paper.yaml"]])
def test_planning_a_study_imports_nothing_heavy(tmp_path, configs):
    hook, trace = tmp_path / "hook", tmp_path / "trace.txt"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(HOOK)
    trace.write_text("")
    done = run_snakemake(
        tmp_path / "work",
        "-n",
        "--quiet",
        "rules",
        configfiles=[REPO / c for c in configs],
        cwd=None,
        timeout=300,
        env={
            "PATH": "/usr/bin:/bin",
            "HOME": str(tmp_path),
            "PYTHONPATH": str(hook),
            "PERTURBED_LM_IMPORT_TRACE": str(trace),
        },
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "sample" in done.stdout + done.stderr  # the plan was built: its jobs were listed
    assert trace.read_text() == "", trace.read_text()


def test_the_trace_sees_a_heavy_import(tmp_path):
    """The hook is an instrument: it records an import of numpy made from a workflow_lib module (here, by importing
    report.statistics, which needs it), though numpy was loaded first."""
    hook, trace = tmp_path / "hook", tmp_path / "trace.txt"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(HOOK)
    code = "import numpy; import workflow_lib.report.statistics"
    done = subprocess.run(
        [str(SNAKEMAKE.parent / "python"), "-c", code],
        cwd=REPO,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": f"{hook}:{REPO}", "PERTURBED_LM_IMPORT_TRACE": str(trace)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "numpy imported by workflow_lib.report.statistics:" in trace.read_text()
