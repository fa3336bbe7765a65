"""Local corpus files -> the list of raw row strings of one split.

Every reader returns rows in file order and does no cleaning, so that a local file and the same corpus
loaded from the Hugging Face hub give identical rows; cleaning is a separate, named step (cleaning.py).
Text is decoded as UTF-8 with `errors="replace"`: a corpus with a few broken bytes still loads, and
`read_rows` reports how many rows needed a replacement so the loss is visible in the provenance record.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

FORMATS = ("wikitext", "jsonl", "writingprompts", "text", "lines", "parquet")
# What one row (a document) is in each format: error messages quote it when a split has too few rows.
ROW_RULES = {
    "wikitext": "every line, blank ones as empty rows (the cleaning drops them)",
    "jsonl": "one JSON object per line",
    "writingprompts": "line i of wp_source with line i of wp_target",
    "text": "one paragraph: the lines up to a blank line (for one document per line, use format: lines)",
    "lines": "one non-blank line",
    "parquet": "one row of the text_field column",
}

# Decoding with "surrogateescape" turns each undecodable byte into a lone surrogate U+DC80..U+DCFF, which valid
# UTF-8 can never produce, so a row needed replacing exactly when it holds one. JSON "\ud8xx" escapes can also
# leave lone surrogates, which Arrow and Polars refuse, so any lone surrogate is treated the same way.
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def _repair(line: str) -> tuple[str, bool]:
    """The line as `errors="replace"` decoding would give it, and whether anything was replaced."""
    if not _LONE_SURROGATE.search(line):
        return line, False
    try:
        raw = line.encode("utf-8", errors="surrogateescape")
    except UnicodeEncodeError:  # a surrogate that did not come from a byte (a JSON escape)
        return _LONE_SURROGATE.sub("\ufffd", line), True
    return raw.decode("utf-8", errors="replace"), True


def _lines(path: str | Path) -> list[str]:
    """Lines exactly as Python's text-mode iteration yields them (universal newlines, terminator kept).

    Only \\n, \\r and \\r\\n end a line, as in the Hugging Face loaders, unlike `str.splitlines`, which would
    also split on U+2028, form feeds and the like found inside real paragraphs.
    """
    with open(path, encoding="utf-8", errors="surrogateescape") as handle:
        return list(handle)


def _read_wikitext(path: str | Path) -> tuple[list[str], int]:
    rows, undecodable = [], 0
    for line in _lines(path):
        line, replaced = _repair(line)
        undecodable += replaced
        # Same rule as the hub's `wikitext` loader: a line is a row, whitespace-only lines become "".
        rows.append(line if line.strip() else "")
    return rows, undecodable


def _read_jsonl(path: str | Path, field: str = "text") -> tuple[list[str], int]:
    rows, undecodable = [], 0
    for number, line in enumerate(_lines(path), start=1):
        if not line.strip():
            continue  # a trailing blank line is common and carries no record
        line, replaced = _repair(line)
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            raise ValueError(f"{path}, line {number}: invalid JSON ({error.msg})") from error
        if not isinstance(record, dict) or field not in record:
            raise ValueError(f"{path}, line {number}: no field {field!r} in this JSON record")
        text = record[field]
        if not isinstance(text, str):
            raise ValueError(  # noqa: TRY004 - a fault of the data file, reported as the other ones are
                f"{path}, line {number}: field {field!r} is {type(text).__name__}, not a string"
            )
        text, escaped = _repair(text)
        undecodable += replaced or escaped
        rows.append(text)
    return rows, undecodable


def _read_writingprompts(source_path: str | Path, target_path: str | Path) -> tuple[list[str], int]:
    prompts, stories = _lines(source_path), _lines(target_path)
    if len(prompts) != len(stories):
        raise ValueError(
            f"WritingPrompts files differ in line count: {source_path} has {len(prompts)}, "
            f"{target_path} has {len(stories)}; they must be line-aligned (prompt i <-> story i)"
        )
    rows, undecodable = [], 0
    for prompt, story in zip(prompts, stories):
        prompt, bad_prompt = _repair(prompt)
        story, bad_story = _repair(story)
        undecodable += bad_prompt or bad_story
        # MixCE joins the stripped prompt and story with one space (data/writingprompts_data.py).
        rows.append(f"{prompt.strip()} {story.strip()}")
    return rows, undecodable


def _read_plain_text(path: str | Path) -> tuple[list[str], int]:
    rows, undecodable, paragraph, paragraph_bad = [], 0, [], False
    for line in [*_lines(path), ""]:  # the sentinel "" closes the last paragraph
        line, replaced = _repair(line)
        if line.strip():
            paragraph.append(line.rstrip("\r\n"))
            paragraph_bad = paragraph_bad or replaced
        elif paragraph:
            rows.append("\n".join(paragraph))
            undecodable += paragraph_bad
            paragraph, paragraph_bad = [], False
    return rows, undecodable


def _read_lines(path: str | Path) -> tuple[list[str], int]:
    """One document per non-blank line (what most one-document-per-line .txt files are); `text` instead joins
    lines up to a blank line into one document."""
    rows, undecodable = [], 0
    for line in _lines(path):
        line, replaced = _repair(line)
        if line.strip():
            rows.append(line.rstrip("\r\n"))
            undecodable += replaced
    return rows, undecodable


def _read_parquet_text(path: str | Path, column: str = "text") -> tuple[list[str], int]:
    import pyarrow.parquet as pq

    from workflow_lib.files import read_parquet

    names = pq.read_schema(path).names
    if column not in names:
        raise ValueError(f"{path}: no column {column!r} (columns: {names})")
    values = read_parquet(path, columns=[column]).column(column).to_pylist()
    # Arrow strings are valid UTF-8 already; a null cell is an empty row, not a missing one, so row indices
    # stay aligned with the file.
    return ["" if value is None else str(value) for value in values], 0


def read_wikitext_raw(path: str | Path) -> list[str]:
    """Rows of a WikiText `wiki.*.raw` / `*.txt` file, identical to the hub's `Salesforce/wikitext` rows.

    Each line is one row, kept verbatim with its trailing "\\n"; a whitespace-only line becomes "" (so the
    hub's " = Valkyria Chronicles III = \\n" and "" rows come out the same from the local file).
    """
    return _read_wikitext(path)[0]


def read_jsonl(path: str | Path, field: str = "text") -> list[str]:
    """The `field` of every JSON line (e.g. the GPT-2 output dataset's `webtext.test.jsonl`).

    Blank lines are skipped; bad JSON, a missing field or a non-string value raise ValueError naming the
    file and the 1-based line number, because a silently skipped record would shift every later doc_id.
    """
    return _read_jsonl(path, field)[0]


def read_writingprompts(source_path: str | Path, target_path: str | Path) -> list[str]:
    """fairseq WritingPrompts pairs: row i = stripped prompt line i + " " + stripped story line i.

    The text stays tokenised ("<newline>", ``, '' and spaced punctuation); `cleaning.clean_writingprompts`
    undoes that. Files of different line counts are misaligned, which raises ValueError.
    """
    return _read_writingprompts(source_path, target_path)[0]


def read_plain_text(path: str | Path) -> list[str]:
    """One row per paragraph: runs of non-blank lines separated by blank (whitespace-only) lines.

    Paragraphs rather than lines because a plain-text document is usually hard-wrapped, and a wrapped line
    is too short to hold a 20-word prefix and its 80-word continuation. The lines of a paragraph are joined
    with "\\n" as written (terminators dropped), so the text is otherwise untouched.
    """
    return _read_plain_text(path)[0]


def read_parquet_text(path: str | Path, column: str = "text") -> list[str]:
    """The string column `column` of a Parquet file (e.g. a hub dataset's downloaded parquet shard).

    A missing column raises ValueError listing the columns present; null cells become "".
    """
    return _read_parquet_text(path, column)[0]


def read_rows(fmt: str, files: list[str], text_field: str = "text") -> tuple[list[str], dict]:
    """Rows of one split from local files in format `fmt`, and counts for the provenance record.

    Several files of a one-file format are read in the given order and concatenated. WritingPrompts takes
    exactly two files, `[wp_source, wp_target]`. `text_field` names the JSON field or Parquet column.
    Returns `(rows, {"rows": n, "undecodable_rows": k})`, k being rows in which some bytes were not valid
    UTF-8 and were replaced by U+FFFD.
    """
    if fmt not in FORMATS:
        raise ValueError(f"unknown input format {fmt!r}; allowed formats: {', '.join(FORMATS)}")
    files = [str(f) for f in files]
    if not files:
        raise ValueError(f"no input files given for format {fmt!r}")
    for path in files:
        if not Path(path).is_file():
            raise FileNotFoundError(f"{fmt} input file not found: {path}")

    if fmt == "writingprompts":
        if len(files) != 2:
            raise ValueError(
                f"writingprompts needs exactly two files [wp_source, wp_target], got {len(files)}: {files}"
            )
        rows, undecodable = _read_writingprompts(files[0], files[1])
    else:
        read_one: Callable[[str], tuple[list[str], int]] = {
            "wikitext": _read_wikitext,
            "jsonl": lambda path: _read_jsonl(path, text_field),
            "text": _read_plain_text,
            "lines": _read_lines,
            "parquet": lambda path: _read_parquet_text(path, text_field),
        }[fmt]
        rows, undecodable = [], 0
        for path in files:
            file_rows, file_undecodable = read_one(path)
            rows.extend(file_rows)
            undecodable += file_undecodable
    return rows, {"rows": len(rows), "undecodable_rows": undecodable}
