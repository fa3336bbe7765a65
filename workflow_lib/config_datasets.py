"""The datasets section's checks beyond the schema (docs/config.md, `datasets`), a part of `config_checks.check`:
downloaded files (safe archive members, distinct local names, heads of line-based files only, a sha256 for plain
http), what a recipe allows, and local files, which must exist when the study is planned.
"""

from __future__ import annotations

from pathlib import Path

from workflow_lib.config_schema import ConfigError
from workflow_lib.data.pinning import unpinned_http_refusal
from workflow_lib.grid import dataset_splits

LINE_FORMATS = ("jsonl", "wikitext", "text")  # formats whose head (whole lines) is itself a valid file
MIXCE_CLEANINGS = ("webtext", "wikitext103", "writingprompts")  # the cleanings that end in MixCE's length window


def local_files(dataset: dict, split: str) -> list[str]:
    files = dataset["files"][split]
    return [files] if isinstance(files, str) else list(files)


def _as_list(files) -> list:
    return list(files) if isinstance(files, list) else [files]


def check_url_dataset(name: str, ds: dict) -> None:
    """What the schema cannot say about downloaded files: entries of one kind, safe member paths, distinct
    local names, heads of line-based files only, two files for WritingPrompts, a sha256 for plain http."""
    from workflow_lib.data.downloads import file_name

    key = f"config key datasets.{name}"
    if ds.get("archive"):
        refusal = unpinned_http_refusal(ds["archive"]["url"], ds["archive"].get("sha256"), f"{key}.archive")
        if refusal:
            raise ConfigError(refusal)
    names: dict[str, dict] = {}
    for split, files in ds["files"].items():
        entries = _as_list(files)
        if ds["format"] == "writingprompts" and len(entries) != 2:
            raise ConfigError(
                f"{key}.files.{split}: format 'writingprompts' takes 2 files ([wp_source, wp_target]), "
                f"got {len(entries)}"
            )
        for entry in entries:
            if ds.get("archive"):
                if not isinstance(entry, str):
                    raise ConfigError(
                        f"{key}.files.{split}: with `archive`, files are the archive's member paths "
                        f"(e.g. writingPrompts/test.wp_source), not {entry!r}"
                    )
                parts = Path(entry).parts
                if Path(entry).is_absolute() or ".." in parts or not parts:
                    raise ConfigError(
                        f"{key}.files.{split}: archive member {entry!r} must be a relative path without '..'"
                    )
                continue
            if not isinstance(entry, dict):
                raise ConfigError(
                    f"{key}.files.{split}: source: url takes {{url: ..., sha256: ...}} entries (or an "
                    f"`archive` whose members `files` names), not {entry!r}"
                )
            if entry.get("head_bytes") and ds["format"] not in LINE_FORMATS:
                raise ConfigError(
                    f"{key}.files.{split}.head_bytes: a head is cut to whole lines, which needs a "
                    f"line-based format ({', '.join(LINE_FORMATS)}), not {ds['format']!r}"
                )
            refusal = unpinned_http_refusal(entry["url"], entry.get("sha256"), f"{key}.files.{split}")
            if refusal:
                raise ConfigError(refusal)
            local = file_name(entry)
            if local in names and names[local] != entry:
                raise ConfigError(
                    f"{key}.files.{split}: {entry['url']} and {names[local]['url']} would both be "
                    f"saved as {local!r}; one dataset's URLs need distinct file names"
                )
            names[local] = entry


def check_recipe(name: str, ds: dict) -> None:
    key = f"config key datasets.{name}"
    splits = dataset_splits(ds)
    if ds.get("top_up") is not None:
        if ds.get("recipe", "raw") != "mixce":
            raise ConfigError(f"{key}.top_up: topping up is part of recipe 'mixce', not {ds.get('recipe', 'raw')!r}")
        if ds["top_up"] not in splits:
            raise ConfigError(
                f"{key}.top_up: dataset {name!r} has no split {ds['top_up']!r}; allowed: {', '.join(splits)}"
            )
    if isinstance(ds.get("max_rows"), dict):
        if ds.get("recipe", "raw") != "raw":
            raise ConfigError(
                f"{key}.max_rows: a cap per split is part of recipe 'raw'; give recipe 'mixce' one number"
            )
        unknown = sorted(set(ds["max_rows"]) - set(splits))
        if unknown:
            raise ConfigError(
                f"{key}.max_rows: dataset {name!r} has no split {unknown[0]!r}; allowed: {', '.join(splits)}"
            )
    if ds.get("recipe") == "mixce" and ds.get("cleaning", "none") not in MIXCE_CLEANINGS:
        raise ConfigError(
            f"{key}.recipe: 'mixce' filters MixCE's cleaned text, so cleaning must be one of "
            f"{', '.join(map(repr, MIXCE_CLEANINGS))}, not {ds.get('cleaning', 'none')!r}"
        )


def check_datasets(datasets: dict, workdir: Path) -> None:
    """Each dataset's recipe, its downloaded files (source: url), and its local files (source: local): as many as
    its format takes, each present."""
    for name, ds in datasets.items():
        check_recipe(name, ds)
        if ds["source"] == "url":
            check_url_dataset(name, ds)
        elif any(isinstance(f, dict) for files in ds.get("files", {}).values() for f in _as_list(files)):
            raise ConfigError(
                f"config key datasets.{name}.files: {{url, sha256}} entries need source: url, "
                f"not source: {ds['source']}"
            )
        if ds["source"] == "local":
            fmt = ds["format"]
            for split in ds["files"]:
                files = local_files(ds, split)
                want = 2 if fmt == "writingprompts" else 1
                if len(files) != want:
                    raise ConfigError(
                        f"config key datasets.{name}.files.{split}: format {fmt!r} takes {want} file(s), got {len(files)}"
                        + (" ([wp_source, wp_target])" if fmt == "writingprompts" else "")
                    )
                for f in files:
                    if not (workdir / f).is_file():
                        raise ConfigError(
                            f"config key datasets.{name}.files.{split}: file not found: {f} (relative paths are read from {workdir.resolve()})"
                        )
