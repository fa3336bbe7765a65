"""Which workflow_lib source files a rule runs, found by a static import scan, and their content's digest.

Snakemake reruns a job when its shell command changes, not when a module the command runs changes. So every rule
that runs `python -m workflow_lib.<stage>.<module>` has a `code` param, `code_digest(module)`: the sha256 of what
Python executes (the syntax tree without docstrings, `_normal_text`) of that module and of every workflow_lib module
it imports, directly or through others, at the top or inside a function. Nothing is imported or executed: the
source is parsed with `ast`, and what a file's bytes give is kept on disk by their sha256 (`cache_folder`). Standard
library only (and workflow_lib.files, which is too). What reruns and why: docs/usage.md, "Incremental reruns";
docs/development.md, "Extension points, and what reruns".
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import re
import sys
from functools import cache
from pathlib import Path

from workflow_lib.files import write_json

PACKAGE = "workflow_lib"
PACKAGE_DIR = Path(__file__).resolve().parent
FORM = 1  # the version of `_normal` and of the cached facts: a change to either must raise it
CACHE_ENV = "PERTURBED_LM_CODE_CACHE"  # a folder for the cache; empty: none


def _source(module: str) -> Path | None:
    """The file that `import module` runs: a package's __init__.py or a module's .py; None outside the package."""
    if module != PACKAGE and not module.startswith(PACKAGE + "."):
        return None
    folder = PACKAGE_DIR.joinpath(*module.split(".")[1:])
    if (folder / "__init__.py").is_file():
        return folder / "__init__.py"
    return folder.with_suffix(".py") if folder.with_suffix(".py").is_file() else None


def module_path(module: str) -> Path:
    """The source file of a workflow_lib module or subpackage ('workflow_lib.data.fetch' -> .../data/fetch.py,
    'workflow_lib.data' -> .../data/__init__.py)."""
    if module != PACKAGE and not module.startswith(PACKAGE + "."):
        raise ValueError(f"{module!r} is not a {PACKAGE} module")
    path = _source(module)
    if path is None:
        raise ValueError(f"no source file for {module!r} (looked under {PACKAGE_DIR})")
    return path


def _is_module(name: str) -> bool:
    return _source(name) is not None


def _parents(module: str) -> list[str]:
    """The packages Python imports before `module` ('a.b.c' -> ['a', 'a.b']), whose __init__.py files run too."""
    parts = module.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


@cache
def _parse(text: str, filename: str) -> ast.Module:
    return ast.parse(text, filename=filename)


def _tree(path: Path) -> ast.Module:
    """A source file's syntax tree, parsed once per process and content (the import scan and the digest read it)."""
    return _parse(path.read_text(), str(path))


def cache_folder() -> Path | None:
    """Where the facts of source files are kept: $PERTURBED_LM_CODE_CACHE (empty: nowhere), else
    perturbed-lm/code under $XDG_CACHE_HOME or ~/.cache; one folder per FORM and Python version (`ast` differs)."""
    root = os.environ.get(CACHE_ENV)
    if root == "":
        return None
    if root is None:
        root = os.path.join(
            os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "perturbed-lm", "code"
        )
    return Path(root) / f"form{FORM}-py{sys.version_info[0]}.{sys.version_info[1]}"


def _raw_imports(tree: ast.Module) -> list[list]:
    """[level, module or None, [names]] of every import statement, in the order `ast.walk` meets them."""
    out: list[list] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.append([0, None, [alias.name for alias in node.names]])
        elif isinstance(node, ast.ImportFrom):
            out.append([node.level, node.module, [alias.name for alias in node.names]])
    return out


_HEX = re.compile(r"[0-9a-f]{64}")


def _well_formed(facts) -> bool:
    return (
        isinstance(facts, dict)
        and isinstance(facts.get("normal"), str)
        and _HEX.fullmatch(facts["normal"]) is not None
        and isinstance(facts.get("imports"), list)
        and all(
            isinstance(i, list)
            and len(i) == 3
            and isinstance(i[0], int)
            and (i[1] is None or isinstance(i[1], str))
            and isinstance(i[2], list)
            and all(isinstance(n, str) for n in i[2])
            for i in facts["imports"]
        )
    )


@cache
def _facts(data: bytes, filename: str) -> dict:
    """{"normal": sha256 hex of the normal form, "imports": `_raw_imports`} of a source file's bytes."""
    key = hashlib.sha256(data).hexdigest()
    folder = cache_folder()
    entry = folder / key[:2] / f"{key}.json" if folder is not None else None
    if entry is not None:
        try:
            facts = json.loads(entry.read_text())
            if _well_formed(facts):
                return facts
        except (OSError, ValueError):
            pass
    text = data.decode()
    facts = {
        "normal": hashlib.sha256(_normal_text(text, filename)).hexdigest(),
        "imports": _raw_imports(_parse(text, filename)),
    }
    if entry is not None:
        try:
            write_json(facts, entry)  # a temporary name, then a rename: a reader never sees half an entry
        except OSError:
            pass
    return facts


def file_facts(path: Path) -> dict:
    return _facts(path.read_bytes(), str(path))


@cache
def direct_imports(module: str) -> frozenset[str]:
    """Every module name imported anywhere in `module`'s source (absolute; relative imports resolved)."""
    path = module_path(module)
    # A relative import counts from the package that holds the module; a package's __init__ is its own package.
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    names: set[str] = set()
    for level, base, aliases in file_facts(path)["imports"]:
        if base is None and level == 0:  # `import a.b`
            names.update(aliases)
            continue
        if level:
            parts = package.split(".")
            if level - 1 >= len(parts):
                raise ValueError(f"{path}: relative import beyond the top-level package")
            base_name = ".".join(
                [*parts[: len(parts) - (level - 1)], base] if base else parts[: len(parts) - (level - 1)]
            )
        else:
            base_name = base
        names.add(base_name)
        # `from workflow_lib.lab import laws` imports a submodule, not a name.
        names.update(f"{base_name}.{alias}" for alias in aliases if alias != "*")
    return frozenset(names)


@cache
def module_closure(module: str) -> tuple[str, ...]:
    """`module`, every workflow_lib module it imports, transitively, and every package on the way (whose
    __init__.py runs first): all the files that `python -m module` executes from this package."""
    seen, todo = set(), [module]
    while todo:
        current = todo.pop()
        if current in seen:
            continue
        seen.add(current)
        todo.extend(_parents(current))
        for name in direct_imports(current):
            if name.split(".")[0] == PACKAGE and _is_module(name):
                todo.append(name)
    return tuple(sorted(seen))


DOCUMENTED = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)


def _without_docstring(body: list) -> list:
    first = body[0] if body else None
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
        return body[1:]
    return body


def _normal(value) -> str:
    """A node as text: its class and its fields, without positions, comments (never in the tree), docstrings, or the
    empty and None fields that Python versions add or drop (3.12's `type_params`, 3.13's dump), so the text changes
    when the code Python runs changes and only then."""
    if isinstance(value, ast.AST):
        fields = []
        for name, field in ast.iter_fields(value):
            if name == "body" and isinstance(value, DOCUMENTED):
                field = _without_docstring(field)
            if field is None or field == [] or name in ("type_comment", "kind"):
                continue
            fields.append(f"{name}={_normal(field)}")
        return f"{type(value).__name__}({','.join(fields)})"
    if isinstance(value, list):
        return "[" + ",".join(_normal(v) for v in value) + "]"
    return repr(value)


@cache
def _normal_text(text: str, filename: str) -> bytes:
    """What of a source file Python executes: its syntax tree without docstrings, as text (`_normal`). A comment, a
    docstring, a blank line or a reformatting leaves it unchanged; so does any edit that leaves the tree the same."""
    return _normal(_parse(text, filename)).encode()


def code_digest(module: str) -> str:
    """'sha256:<hex>' of what `python -m <module>` runs from this package: each file's path inside the package and
    its normal form (the syntax tree without docstrings), in sorted order. The same in every checkout, whatever its
    path, mtimes, formatting, comments or docstrings; any change to the code that runs changes it."""
    digest = hashlib.sha256()
    for name in module_closure(module):
        path = module_path(name)
        digest.update(path.relative_to(PACKAGE_DIR).as_posix().encode() + b"\0")
        digest.update(bytes.fromhex(file_facts(path)["normal"]))
    return "sha256:" + digest.hexdigest()


def third_party_imports(module: str) -> set[str]:
    """Top-level names of the modules outside the standard library and workflow_lib that `module` may import."""
    names: set[str] = set()
    for current in module_closure(module):
        names.update(name.split(".")[0] for name in direct_imports(current))
    return {n for n in names if n != PACKAGE and n not in sys.stdlib_module_names and n != "__future__"}
