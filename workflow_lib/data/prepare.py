"""The data stage: any corpus -> normalised Parquet (`doc_id`, `text`) -> evaluation prompts.

`download` gives every source (hub, local files, the builtin language) one shape and writes a provenance
sidecar beside it, so later stages never care where text came from. `prompts` applies the paper's (EMO's)
evaluation protocol to one split. Both are called by rules/data.smk; the functions are usable without it.
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path
from typing import Any

from workflow_lib.cli import StageError, parse_json_arg, run
from workflow_lib.data.splits import split_spec
from workflow_lib.files import sha256_file, write_json, write_parquet

log = logging.getLogger("workflow_lib.data.prepare")

HUB_HELP = (
    "Without network access, switch it to local files, e.g.\n"
    "  datasets:\n    {key}:\n      source: local\n      format: wikitext   # or jsonl, writingprompts, text, parquet\n"
    "      files: {{test: path/to/wiki.test.raw}}\n"
    "or point `path` at a local copy of the hub dataset (a folder with its data files)."
)


def load_hub_rows(key: str, spec: dict, split: str) -> tuple[list[str], dict]:
    """Rows of one split of a Hugging Face hub dataset, with what identifies the exact version loaded."""
    import datasets

    from workflow_lib.hub import hub_unreachable

    hub_split = spec["splits"][split]
    if why := hub_unreachable(spec["path"]):
        raise StageError(
            f"datasets.{key}: could not load hub dataset {spec['path']!r}: {why}\n" + HUB_HELP.format(key=key)
        )
    try:
        ds = datasets.load_dataset(spec["path"], spec.get("name"), split=hub_split, revision=spec.get("revision"))
    except Exception as error:  # hub errors come in many types (OSError, ConnectionError, DatasetNotFoundError...)
        raise StageError(
            f"datasets.{key}: could not load hub dataset {spec['path']!r} (config {spec.get('name')!r}, split "
            f"{hub_split!r}): {type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}\n"
            + HUB_HELP.format(key=key)
        ) from error
    field = spec.get("text_field", "text")
    if field not in ds.column_names:
        raise StageError(f"datasets.{key}.text_field: column {field!r} not in {ds.column_names}")
    provenance = {
        "path": spec["path"],
        "name": spec.get("name"),
        "revision": spec.get("revision"),
        "hub_split": hub_split,
        "fingerprint": ds._fingerprint,
    }
    return list(ds[field]), provenance


def load_local_rows(key: str, spec: dict, split: str) -> tuple[list[str], dict]:
    from workflow_lib.data.readers import read_rows

    files = spec["files"][split]
    files = [files] if isinstance(files, str) else list(files)
    try:
        rows, stats = read_rows(spec["format"], files, text_field=spec.get("text_field", "text"))
    except (ValueError, FileNotFoundError) as error:
        raise StageError(f"datasets.{key}.files.{split}: {error}") from error
    provenance = {"format": spec["format"], "files": [{"path": f, "sha256": sha256_file(f)} for f in files], **stats}
    return rows, provenance


def load_builtin_rows(key: str, spec: dict, split: str) -> tuple[list[str], dict]:
    from workflow_lib.data.builtin_corpus import build_grammar

    params = dict(spec["builtin"])
    docs, per_doc, seed = params.pop("docs"), params.pop("sentences_per_doc"), params.pop("seed")
    try:
        grammar = build_grammar(seed=seed, **params)
        rows = grammar.generate(split, n_docs=docs[split], sentences_per_doc=per_doc, seed=seed)
    except ValueError as error:
        raise StageError(f"datasets.{key}.builtin: {error}") from error
    return rows, {"grammar": grammar.to_dict(), "seed": seed, "n_docs": docs[split], "sentences_per_doc": per_doc}


def load_url_rows(key: str, spec: dict, split: str) -> tuple[list[str], dict]:
    """Rows of a split the workflow downloaded (rules fetch and unpack put the files where downloads.py says)."""
    from workflow_lib.data.downloads import source_of, split_paths

    rows, provenance = load_local_rows(key, {**spec, "files": {split: split_paths(key, spec, split)}}, split)
    for record, origin in zip(provenance["files"], source_of(key, spec, split)):
        record.update(origin)  # for a member, the archive's record (below) says whether it was pinned
    if spec.get("archive"):
        from workflow_lib.data.downloads import archive_path

        archive = archive_path(key, spec)
        provenance["archive"] = {
            "url": spec["archive"]["url"],
            "path": archive,
            "sha256": sha256_file(archive),
            "pinned": bool(spec["archive"].get("sha256")),
        }
    return rows, provenance


LOADERS = {"hf": load_hub_rows, "local": load_local_rows, "url": load_url_rows, "builtin": load_builtin_rows}


def normalise(key: str, spec: dict, split: str) -> tuple[Any, dict]:
    """Load and build one split by its recipe: returns an Arrow table (doc_id, text) and its provenance record.

    The record has the source of every split read (a top-up reads two), each step's row count, the top-up and
    the checksum of the final rows.
    """
    import pyarrow as pa

    from workflow_lib.data import recipes

    loaded: dict[str, tuple[list[str], dict]] = {}

    def load(name: str) -> list[str]:  # a top-up may ask for a split more than once
        if name not in loaded:
            loaded[name] = LOADERS[spec["source"]](key, spec, name)
            log.info("%s/%s: %d rows loaded", key, name, len(loaded[name][0]))
        return loaded[name][0]

    spec = split_spec(spec, split)  # the job's own params already are; a direct call may pass the whole entry
    recipe, cleaning = spec.get("recipe", "raw"), spec.get("cleaning", "none")
    try:
        if recipe == "mixce":  # a hub, local or url dataset (a builtin one has no MixCE cleaning)
            splits = list(spec.get("splits") or spec.get("files") or {})
            kept, steps, top_up = recipes.mixce(split, load, cleaning, spec.get("max_rows"), spec.get("top_up"), splits)
        else:
            kept, steps = recipes.raw(load(split), cleaning, spec.get("max_rows"))
            top_up = None
    except ValueError as error:
        raise StageError(f"datasets.{key} split {split!r} (recipe {recipe!r}): {error}") from error
    if not kept or not any(t.strip() for t in kept):
        raise StageError(
            f"datasets.{key} split {split!r}: no text left after recipe {recipe!r} (steps: "
            + ", ".join(f"{s['step']}: {s['rows']}" for s in steps)
            + ")"
        )
    table = pa.table({"doc_id": pa.array(range(len(kept)), pa.int64()), "text": pa.array(kept, pa.string())})
    meta = {
        "dataset": key,
        "split": split,
        "source": spec["source"],
        "provenance": loaded[split][1],
        "recipe": recipe,
        "cleaning": cleaning,
        "max_rows": spec.get("max_rows"),
        "steps": steps,
        "top_up": top_up,
        "rows_loaded": len(loaded[split][0]),
        "rows_written": len(kept),
        "rows_sha256": recipes.rows_sha256(kept),
    }
    if top_up:
        meta["top_up_provenance"] = loaded[top_up["split"]][1]
    return table, meta


def build_prompts(
    key: str,
    table,
    prefix_words: int,
    reference_words: int,
    min_chars: int,
    extra_words: int,
    forbidden: str,
    max_prompts: int | None,
    min_prompts: int = 1,
    source: dict | None = None,
):
    """The eval set's prompts. `source` is the split's provenance record (results/data/<dataset>/<split>.json): when
    the split itself has fewer rows than the prompts asked for, the error names its files and format, whose row
    rule is the usual cause (a one-document-per-line file read as `text` is one row)."""
    from workflow_lib.data.prompts import make_prompts

    need = min(min_prompts, max_prompts or min_prompts)
    if source is not None and table.num_rows < need:
        raise StageError(
            f"eval_sets.{key}: {split_rows(source, table.num_rows)}, fewer than the {need} prompts the eval "
            "set asks for (prompts.min_prompts, or its max_prompts where smaller)"
        )
    try:
        frame, stats = make_prompts(
            table.column("text").to_pylist(),
            table.column("doc_id").to_pylist(),
            prefix_words=prefix_words,
            reference_words=reference_words,
            min_chars=min_chars,
            extra_words=extra_words,
            forbidden=forbidden,
            max_prompts=max_prompts,
            min_prompts=min_prompts,
        )
    except ValueError as error:
        raise StageError(f"eval_sets.{key}: {error}") from error
    return frame, stats


def split_rows(meta: dict, rows: int) -> str:
    """'datasets.mine split test has 1 row (data/test.txt, format text: a row is one paragraph ...)' from a split's
    provenance record."""
    from workflow_lib.data.readers import ROW_RULES

    where = f"datasets.{meta['dataset']} split {meta['split']} has {rows} row{'s' if rows != 1 else ''}"
    provenance = meta.get("provenance", {})
    files = ", ".join(f["path"] for f in provenance.get("files", []))
    fmt = provenance.get("format")
    if fmt:
        return f"{where} ({files}, format {fmt}: a row is {ROW_RULES[fmt]})"
    return f"{where} (source {meta['source']})"


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m workflow_lib.data.prepare")
    sub = parser.add_subparsers(dest="command", required=True)
    dl = sub.add_parser("download", help="one split of a corpus -> normalised Parquet + provenance JSON")
    dl.add_argument("--dataset", required=True, help="the dataset's key in the config")
    dl.add_argument("--spec", required=True, help="the dataset's config section, as JSON")
    dl.add_argument("--split", required=True)
    dl.add_argument("--output", required=True)
    dl.add_argument("--meta", required=True)
    pr = sub.add_parser("prompts", help="normalised split -> evaluation prompts + filter counts")
    pr.add_argument("--eval-set", required=True)
    pr.add_argument("--input", required=True)
    pr.add_argument("--output", required=True)
    pr.add_argument("--meta", required=True)
    pr.add_argument(
        "--settings",
        required=True,
        help="JSON: prefix_words, reference_words, min_chars, extra_words, forbidden, max_prompts, min_prompts",
    )
    pr.add_argument("--source", help="the split's provenance JSON (names its files and format in errors)")
    args = parser.parse_args()

    if args.command == "download":
        spec = parse_json_arg(args.spec, f"datasets.{args.dataset}")
        table, meta = normalise(args.dataset, spec, args.split)
        log.info(
            "%s/%s (recipe %s): %s; sha256 of the rows %s",
            args.dataset,
            args.split,
            meta["recipe"],
            ", ".join(f"{s['step']}: {s['rows']}" for s in meta["steps"]),
            meta["rows_sha256"],
        )
        write_parquet(table, args.output)
        write_json(meta, args.meta)
    else:
        from workflow_lib.files import read_parquet

        settings = parse_json_arg(args.settings, f"eval_sets.{args.eval_set}")
        source = json.loads(Path(args.source).read_text()) if args.source else None
        frame, stats = build_prompts(args.eval_set, read_parquet(args.input), **settings, source=source)
        log.info("%s: %d prompts; filters: %s", args.eval_set, frame.height, stats)
        write_parquet(frame, args.output)
        write_json(
            {"eval_set": args.eval_set, "settings": settings, "prompts": frame.height, "filters": stats}, args.meta
        )


if __name__ == "__main__":
    run(main)
