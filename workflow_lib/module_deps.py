"""Which workflow_lib source files a rule runs, found by a static import scan.

Snakemake reruns a job when its shell command changes, not when a module that the command runs changes. So
every rule that runs `python -m workflow_lib.<module>` lists, as inputs, that module's file and the files of
every workflow_lib module it imports, directly or through others, at the top or inside a function (heavy
imports live inside functions): editing one of them makes the job's outputs older than an input, and the job
and what follows it rerun. Nothing is imported or executed: the source is parsed with `ast`, once per module
and process, which takes a few milliseconds at Snakefile parse time. Standard library only.
"""

from __future__ import annotations

import ast
import sys
from functools import lru_cache
from pathlib import Path

PACKAGE = "workflow_lib"
PACKAGE_DIR = Path(__file__).resolve().parent


def module_path(module: str) -> Path:
    """The source file of a workflow_lib module ('workflow_lib.data' -> .../workflow_lib/data.py)."""
    if module == PACKAGE:
        return PACKAGE_DIR / "__init__.py"
    if not module.startswith(PACKAGE + "."):
        raise ValueError(f"{module!r} is not a {PACKAGE} module")
    path = PACKAGE_DIR.joinpath(*module.split(".")[1:]).with_suffix(".py")
    if not path.is_file():
        raise ValueError(f"no source file for {module!r} (looked for {path})")
    return path


def _is_module(name: str) -> bool:
    return name == PACKAGE or PACKAGE_DIR.joinpath(*name.split(".")[1:]).with_suffix(".py").is_file()


@lru_cache(maxsize=None)
def direct_imports(module: str) -> frozenset[str]:
    """Every module name imported anywhere in `module`'s source (absolute; relative imports resolved)."""
    tree = ast.parse(module_path(module).read_text(), filename=str(module_path(module)))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")[: -node.level] if module != PACKAGE else []
                base_name = ".".join([*base, node.module] if node.module else base) or PACKAGE
            else:
                base_name = node.module
            names.add(base_name)
            # `from workflow_lib import objectives` imports a submodule, not a name.
            names.update(f"{base_name}.{alias.name}" for alias in node.names if alias.name != "*")
    return frozenset(names)


@lru_cache(maxsize=None)
def module_closure(module: str) -> tuple[str, ...]:
    """`module` and every workflow_lib module it imports, transitively, with the package itself."""
    seen, todo = {PACKAGE}, [module]
    while todo:
        current = todo.pop()
        if current in seen:
            continue
        seen.add(current)
        for name in direct_imports(current):
            if name.split(".")[0] == PACKAGE and _is_module(name):
                todo.append(name)
    return tuple(sorted(seen))


def module_files(module: str) -> list[str]:
    """The source files a `python -m <module>` job runs from this package, as absolute paths."""
    return [str(module_path(m)) for m in module_closure(module)]


def third_party_imports(module: str) -> set[str]:
    """Top-level names of the modules outside the standard library and workflow_lib that `module` may import."""
    names = set()
    for current in module_closure(module):
        names.update(name.split(".")[0] for name in direct_imports(current))
    return {n for n in names if n != PACKAGE and n not in sys.stdlib_module_names and n != "__future__"}
