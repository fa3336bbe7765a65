"""Installs by hash (issue 64): every file `make install` has pip fetch is pinned by sha256, but torch (installed by
version, its wheel differing per platform and accelerator); the jobs' runtime apart from the test and docs tools."""

from __future__ import annotations

import re

import pytest

from support.workflow_runs import REPO

LOCKS = {
    "runtime": REPO / "requirements.txt",
    "pip": REPO / "requirements/pip.txt",
    "dev": REPO / "requirements/dev.txt",
    "trackers": REPO / "requirements/trackers.txt",
    "harness": REPO / "requirements/harness.txt",
    "smollm2": REPO / "requirements/smollm2.txt",
}
TOOLS = {"pytest", "hypothesis", "mutmut", "mkdocs", "playwright", "ruff", "snakefmt", "mypy", "pre-commit"}


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def entries(path) -> dict[str, tuple[str, list[str]]]:
    """A lock's requirements: name -> (version, sha256 hashes), reading pip's format (a backslash continues a
    line, # starts a comment)."""
    text = re.sub(r"\\\n", " ", path.read_text())
    out = {}
    for line in text.splitlines():
        line = line.split(" #", 1)[0].strip() if not line.lstrip().startswith("#") else ""
        if not line:
            continue
        match = re.match(r"^([A-Za-z0-9_.\-]+)==(\S+)((?:\s+--hash=sha256:[0-9a-f]{64})*)\s*$", line)
        assert match, f"{path.name}: not a pinned, hashed requirement: {line[:120]}"
        out[canonical(match[1])] = (match[2], re.findall(r"sha256:([0-9a-f]{64})", match[3]))
    return out


@pytest.mark.parametrize("name", sorted(LOCKS))
def test_every_requirement_of_a_lock_is_pinned_by_hash(name):
    locked = entries(LOCKS[name])
    assert locked, name
    assert [dist for dist, (_, hashes) in locked.items() if not hashes] == []
    assert "torch" not in locked  # installed first, by version


def test_the_runtime_holds_no_test_or_docs_tool_and_the_tools_hold_the_runtimes_versions():
    runtime, dev = entries(LOCKS["runtime"]), entries(LOCKS["dev"])
    assert TOOLS & set(runtime) == set() and TOOLS <= set(dev)
    for extra in ("dev", "trackers", "harness"):
        shared = set(runtime) & set(entries(LOCKS[extra]))
        assert {d: runtime[d][0] for d in shared} == {d: entries(LOCKS[extra])[d][0] for d in shared}, extra
    # What the jobs import directly is in the runtime's lock (requirements.in names it).
    direct = {
        canonical(m[1])
        for line in (REPO / "requirements.in").read_text().splitlines()
        if (m := re.match(r"^([A-Za-z0-9_.\-]+)", line))
    }
    assert direct - {"torch"} <= set(runtime)


def test_make_installs_every_lock_with_require_hashes_and_torch_by_the_version_requirements_in_names():
    makefile = (REPO / "Makefile").read_text()
    recipes = [line.strip() for line in makefile.splitlines() if line.startswith("\t") and "pip install" in line]
    installs = [line for line in recipes if "-r " in line]
    named = {re.search(r"-r (\S+)", line)[1] for line in installs}
    assert named == {str(path.relative_to(REPO)) for path in LOCKS.values()}
    assert all("--require-hashes" in line for line in installs)
    assert "grep -E '^torch==' requirements.in" in makefile
    assert re.search(r"^torch==\S+$", (REPO / "requirements.in").read_text(), flags=re.MULTILINE)
    # pip fetches nothing else: every other `pip install` is the checkout itself or the lock tool's own venv.
    others = [line for line in recipes if "-r " not in line]
    assert all("-e ." in line or "^torch==" in line or ".venv-lock" in line for line in others), others
