"""The import scan behind every rule's `code` param, on subpackages, relative imports and `__init__` files."""

from __future__ import annotations

from pathlib import Path

import pytest

from workflow_lib import module_deps
from workflow_lib.module_deps import code_digest, module_closure, module_path

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def fake_package(tmp_path, monkeypatch):
    """A workflow_lib of two stages, written file by file, that the scan reads instead of the real one."""
    root = tmp_path / "workflow_lib"

    def write(files: dict[str, str]) -> Path:
        for name, text in files.items():
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            (root / name).write_text(text)
        return root

    monkeypatch.setattr(module_deps, "PACKAGE_DIR", root)
    module_deps.direct_imports.cache_clear()
    module_deps.module_closure.cache_clear()
    yield write
    module_deps.direct_imports.cache_clear()
    module_deps.module_closure.cache_clear()


def test_a_subpackage_module_runs_every_init_on_its_way(fake_package):
    fake_package(
        {
            "__init__.py": "",
            "files.py": "",
            "stage/__init__.py": "",
            "stage/job.py": "import os\n",
            "other/__init__.py": "",
            "other/unused.py": "",
        }
    )
    assert module_closure("workflow_lib.stage.job") == ("workflow_lib", "workflow_lib.stage", "workflow_lib.stage.job")
    assert module_path("workflow_lib.stage") == module_deps.PACKAGE_DIR / "stage/__init__.py"


def test_relative_imports_resolve_from_the_module_and_from_a_package_init(fake_package):
    fake_package(
        {
            "__init__.py": "",
            "files.py": "",
            "shared.py": "",
            "stage/__init__.py": "from . import helper\n",  # in an __init__, '.' is the package itself
            "stage/helper.py": "",
            "stage/sibling.py": "from ..shared import thing\n",
            "stage/job.py": "from . import sibling\nfrom .. import files\n\ndef main():\n    from ..other.deep import x\n",
            "other/__init__.py": "",
            "other/deep.py": "",
        }
    )
    assert module_closure("workflow_lib.stage.job") == (
        "workflow_lib",
        "workflow_lib.files",
        "workflow_lib.other",
        "workflow_lib.other.deep",
        "workflow_lib.shared",
        "workflow_lib.stage",
        "workflow_lib.stage.helper",
        "workflow_lib.stage.job",
        "workflow_lib.stage.sibling",
    )


def test_a_name_imported_from_a_package_is_not_taken_for_a_module(fake_package):
    fake_package(
        {
            "__init__.py": "",
            "stage/__init__.py": "VALUE = 1\n",
            "stage/job.py": "from workflow_lib.stage import VALUE\n",
        }
    )
    assert module_closure("workflow_lib.stage.job") == ("workflow_lib", "workflow_lib.stage", "workflow_lib.stage.job")


def test_a_missing_module_and_a_relative_import_past_the_top_are_errors(fake_package):
    fake_package({"__init__.py": "", "job.py": "from ... import nothing\n"})
    with pytest.raises(ValueError, match="no source file"):
        module_path("workflow_lib.absent")
    with pytest.raises(ValueError, match="not a workflow_lib module"):
        module_path("numpy")
    with pytest.raises(ValueError, match="beyond the top-level package"):
        module_closure("workflow_lib.job")


def test_the_real_stages_list_their_own_files_and_not_other_stages():
    sample = module_closure("workflow_lib.sample.sampler")
    assert {
        "workflow_lib",
        "workflow_lib.sample",
        "workflow_lib.sample.loops",
        "workflow_lib.sample.decoding",
        "workflow_lib.perturb",
        "workflow_lib.perturb.perturber",
    } <= set(sample)
    assert not any(m.startswith(("workflow_lib.evaluate", "workflow_lib.train", "workflow_lib.report")) for m in sample)
    files = [str(module_path(m)) for m in module_closure("workflow_lib.sample.sampler")]
    assert str(REPO / "workflow_lib/sample/__init__.py") in files and str(REPO / "workflow_lib/__init__.py") in files


def test_the_code_digest_follows_content_not_paths_or_mtimes(fake_package, tmp_path):
    """An edit of a file the module runs changes the digest; an unrelated module's edit, a touch or the same files
    at another path (a clone, a moved checkout) do not."""
    files = {
        "__init__.py": "",
        "stage/__init__.py": "",
        "stage/job.py": "from workflow_lib.stage import helper\n",
        "stage/helper.py": "x = 1\n",
        "other.py": "y = 2\n",
    }
    root = fake_package(files)
    before = code_digest("workflow_lib.stage.job")
    assert before.startswith("sha256:") and len(before) == len("sha256:") + 64
    (root / "other.py").write_text("y = 3\n")
    import os

    os.utime(root / "stage/helper.py", (1, 1))
    module_deps.module_closure.cache_clear()
    assert code_digest("workflow_lib.stage.job") == before
    (root / "stage/helper.py").write_text("x = 2\n")
    assert code_digest("workflow_lib.stage.job") != before
    (root / "stage/helper.py").write_text("x = 1\n")
    assert code_digest("workflow_lib.stage.job") == before
    clone = tmp_path / "elsewhere" / "workflow_lib"
    import shutil

    shutil.copytree(root, clone, copy_function=shutil.copy)  # new path, new mtimes
    module_deps.PACKAGE_DIR = clone  # restored by the fixture's monkeypatch
    module_deps.direct_imports.cache_clear()
    module_deps.module_closure.cache_clear()
    assert code_digest("workflow_lib.stage.job") == before


def unit_graph() -> dict[str, set[str]]:
    """Which part of workflow_lib imports which (a subpackage or a top-level module is one part), anywhere in its
    source, functions included."""
    import pkgutil

    import workflow_lib

    def unit(module: str) -> str:
        return ".".join(module.split(".")[:2])

    graph: dict[str, set[str]] = {}
    for info in pkgutil.walk_packages(workflow_lib.__path__, "workflow_lib."):
        for name in module_deps.direct_imports(info.name):
            if name.startswith("workflow_lib.") and module_deps._is_module(name) and unit(name) != unit(info.name):
                graph.setdefault(unit(info.name), set()).add(unit(name))
    return graph


def test_the_package_is_layered_without_an_import_cycle():
    """No part imports, even inside a function, a part that imports it back: constants at the bottom, the config
    check below the cost model that reads it (issue 33: config.py imported cost.devices)."""
    import graphlib

    graph = unit_graph()
    order = list(graphlib.TopologicalSorter(graph).static_order())  # CycleError names the cycle
    assert "workflow_lib.constants" not in graph  # imports nothing of the package
    assert order.index("workflow_lib.config") < order.index("workflow_lib.cost")
    assert "workflow_lib.cost" not in graph["workflow_lib.config"]
    # The rules' input functions sit on top: what a job reads is planned from the package, never the other way.
    assert not [unit for unit, deps in graph.items() if "workflow_lib.inputs" in deps]


def test_the_costly_jobs_code_leaves_out_the_workflows_data_model():
    """A job reruns when a file its module runs changes (code_digest): the data model that only plans the study
    (layout, grid, inputs, config) is outside the closure of every GPU job, so a refactor of the plan does not
    retrain or resample a finished study. The sampler pulled in layout.py through the strategies' name pattern."""
    planning = {
        "workflow_lib.layout",
        "workflow_lib.grid",
        "workflow_lib.inputs",
        "workflow_lib.config",
        "workflow_lib.config_schema",
        "workflow_lib.config_checks",
        "workflow_lib.config_datasets",
    }
    for module in (
        "workflow_lib.train.trainer",
        "workflow_lib.sample.sampler",
        "workflow_lib.evaluate.metrics",
        "workflow_lib.evaluate.features",
        "workflow_lib.evaluate.perplexity",
        "workflow_lib.evaluate.extrapolation",
        "workflow_lib.perturb.training_data",
        "workflow_lib.report.joint_mauve",
    ):
        assert planning.isdisjoint(module_closure(module)), module


def test_formatting_comments_and_docstrings_change_no_digest_and_executed_code_does(fake_package):
    """The digest is of what Python runs (issue 53): a comment, a reformatting, a docstring added, edited or removed
    at module, class or function level, leave it; a changed constant, name, argument or string that is not a
    docstring (an f-string, a log message) change it."""
    source = 'x = 1\n\n\ndef f(a, b=2):\n    return a + b\n\n\nclass C:\n    y = "text"\n'
    root = fake_package({"__init__.py": "", "stage/__init__.py": "", "stage/job.py": source})

    def digest_of(text: str) -> str:
        (root / "stage/job.py").write_text(text)
        return code_digest("workflow_lib.stage.job")

    before = digest_of(source)
    same = [
        source + "# a comment\n",
        source.replace("x = 1", "x = 1  # why"),
        source.replace("return a + b", "return (\n        a\n        + b\n    )"),
        source.replace("b=2", "b = 2").replace('"text"', "'text'"),
        '"""A module docstring."""\n' + source,
        source.replace("def f(a, b=2):\n", 'def f(a, b=2):\n    """Why f adds."""\n'),
        source.replace("class C:\n", "class C:\n    '''A class docstring.'''\n\n"),
    ]
    assert [digest_of(text) == before for text in same] == [True] * len(same)
    changed = [
        source.replace("x = 1", "x = 2"),
        source.replace("b=2", "b=3"),
        source.replace("a + b", "b + a"),
        source.replace('"text"', '"texts"'),
        source.replace("def f(a, b=2):\n", 'def f(a, b=2):\n    print("Why f adds.")\n'),
        source.replace("x = 1", "x = 1\ny = 0"),
    ]
    assert [digest_of(text) == before for text in changed] == [False] * len(changed)
    assert digest_of(source) == before


def test_the_on_disk_facts_give_the_digest_a_parse_gives_and_a_bad_entry_is_computed_again(
    fake_package, tmp_path, monkeypatch
):
    """The cache (module_deps.cache_folder) is consulted by the sha256 of a file's bytes: a fresh process with it
    warm gets the digest that parsing gives, without or with no cache; an entry that does not parse or is cut short
    is computed again and rewritten; an entry that parses is believed (so a planted one moves the digest: the cache
    is read), and a folder that cannot be written to leaves the digest as it is."""
    import hashlib
    import json

    root = fake_package(
        {
            "__init__.py": "",
            "stage/__init__.py": "",
            "stage/job.py": "from ..stage import helper\n",
            "stage/helper.py": "x = 1\n",
        }
    )

    def digest(cache: str | None) -> str:
        if cache is None:
            monkeypatch.delenv(module_deps.CACHE_ENV, raising=False)
        else:
            monkeypatch.setenv(module_deps.CACHE_ENV, cache)
        for cached in (module_deps._facts, module_deps.direct_imports, module_deps.module_closure):
            cached.cache_clear()  # as a new process
        return code_digest("workflow_lib.stage.job")

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    parsed = digest("")
    assert not (tmp_path / "xdg").exists()  # no cache, nothing written
    assert digest(None) == parsed and digest(None) == parsed  # the default folder, written then read
    assert list((tmp_path / "xdg/perturbed-lm/code").glob(f"form{module_deps.FORM}-py*/*/*.json"))
    folder = tmp_path / "cache"
    assert digest(str(folder)) == parsed and digest(str(folder)) == parsed
    key = hashlib.sha256((root / "stage/helper.py").read_bytes()).hexdigest()
    entry = module_deps.cache_folder() / key[:2] / f"{key}.json"
    good = json.loads(entry.read_text())
    assert good["imports"] == [] and len(good["normal"]) == 64
    for bad in ("{", json.dumps({**good, "normal": "xyz"}), json.dumps({"imports": []}), ""):
        entry.write_text(bad)
        assert digest(str(folder)) == parsed
        assert json.loads(entry.read_text()) == good  # rewritten whole
    entry.write_text(json.dumps({**good, "normal": "0" * 64}))
    assert digest(str(folder)) != parsed  # believed: the cache is what was read
    entry.unlink()
    blocker = tmp_path / "a-file"  # a folder under a file cannot be made, even by root
    blocker.write_text("")
    assert digest(str(blocker / "cache")) == parsed
