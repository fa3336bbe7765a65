"""What a hub name or a revision may be: the Hugging Face hub's rules, checked when the study is planned.

A model's `name` and `revision` reach the jobs' command lines (`--model`, `--revision`, quoted) and the hub
clients; a name the hub would refuse is refused when the config is checked (`config.check_input`), naming its
key, rather than at run time in a job's log. The rule is `huggingface_hub.utils.validate_repo_id`'s, restricted to
ASCII (tests/common/test_hub_names.py holds the two side by side), spelt here in the standard library: the
Snakefile checks the config at parse time, in every job. A name that is an existing local folder may hold any
character: it is a path, not a hub id.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

HUB_ID_MAX = 96
# One or two parts of [A-Za-z0-9._-], neither starting nor ending with '.' or '-'.
_PART = r"(?=[A-Za-z0-9_])[A-Za-z0-9._-]+(?<=[A-Za-z0-9_])"
HUB_ID = re.compile(rf"(?:{_PART}/)?{_PART}")
# A branch, tag or commit (`main`, `v1.0`, `refs/pr/3`, a sha): no whitespace, no quote, no shell metacharacter.
REVISION = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._/+-]{0,254}")


def looks_like_path(name: str) -> bool:
    """A model or tokenizer name written as a filesystem path (absolute, ./, ../ or ~), not a hub id."""
    return name.startswith(("/", "./", "../", "~")) or name in (".", "..")


def hub_id_problem(name: str) -> str | None:
    """Why `name` is not a hub repo id (`gpt2`, `HuggingFaceTB/SmolLM2-135M`), or None when it is one."""
    if not HUB_ID.fullmatch(name) or any(len(part) > HUB_ID_MAX for part in name.split("/")):
        return (
            "a hub id is 'name' or 'namespace/name' of letters, digits, '-', '_' and '.' ('.' and '-' neither "
            f"first nor last), at most {HUB_ID_MAX} characters a part"
        )
    if "--" in name or ".." in name:
        return "a hub id has no '--' or '..'"
    if name.endswith(".git"):
        return "a hub id does not end in '.git'"
    return None


def revision_problem(revision: str) -> str | None:
    """Why `revision` is not a branch, tag or commit name the commands may carry, or None."""
    if REVISION.fullmatch(revision) and ".." not in revision:
        return None
    return (
        "a branch, tag or commit name is letters, digits and '.', '_', '-', '/', '+' (no '..', whitespace, quotes "
        "or shell characters such as ; $ ` \\)"
    )


def name_problem(name: str, workdir: Path) -> str | None:
    """Why a `source: hf` name is neither an existing local folder (relative to `workdir`) nor a hub id, or None.
    A name written as a path is left to `config_checks.check_local_names`, which says that the folder is missing."""
    if looks_like_path(name) or (workdir / name).is_dir():
        return None
    if problem := hub_id_problem(name):
        return f"{name!r} is neither a local folder (relative paths are read from {workdir.resolve()}) nor a hub id: {problem}"
    return None


def hub_name_problems(config: dict, workdir: Path) -> Iterator[str]:
    """Every bad hub name or revision of the config as written, as `config key <key>: <why>`: `models.*` and
    `tokenizers.*` (`name`, `revision`, a GGUF source's `gguf.repo` and `gguf.revision`), a hub dataset's `revision`."""
    for section in ("models", "tokenizers"):
        for key, entry in (config.get(section) or {}).items():
            where = f"config key {section}.{key}"
            name, gguf = entry.get("name"), entry.get("gguf") or {}
            if entry.get("source") == "hf" and isinstance(name, str) and (problem := name_problem(name, workdir)):
                yield f"{where}.name: {problem}"
            if isinstance(gguf.get("repo"), str) and (problem := hub_id_problem(gguf["repo"])):
                yield f"{where}.gguf.repo: {gguf['repo']!r} is not a hub id: {problem}"
            for field, value in (("revision", entry.get("revision")), ("gguf.revision", gguf.get("revision"))):
                if isinstance(value, str) and (problem := revision_problem(value)):
                    yield f"{where}.{field}: {value!r}: {problem}"
    for key, dataset in (config.get("datasets") or {}).items():
        revision = dataset.get("revision")
        if isinstance(revision, str) and (problem := revision_problem(revision)):
            yield f"config key datasets.{key}.revision: {revision!r}: {problem}"
