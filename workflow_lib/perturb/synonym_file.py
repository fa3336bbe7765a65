"""The `file` synonym source: the user's own pairs (the config's `synonyms.file`), read onto a tokenizer.

One pair a line, `word<TAB>synonym[<TAB>weight]` (a `.csv` file: commas); a pair goes one way, and is kept in each
spelling where both sides are one token of the tokenizer (with and without the leading space a word takes after
another). Skipped pairs are counted in the log, with a few named; no pair left is an error, since the table would
perturb nothing. The format, its header and comments, and the errors: docs/usage.md, "Your own synonyms".
"""

from __future__ import annotations

import csv
import logging
import math
from pathlib import Path

import numpy as np

from workflow_lib.cli import StageError
from workflow_lib.perturb.synonym_table import SynonymTable

log = logging.getLogger("workflow_lib.perturb.synonym_file")
KEY = "synonyms.file"  # the config key that names the file, for every error
HEADER = ("word", "synonym", "weight")


def _error(path: str | Path, problem: str) -> StageError:
    return StageError(f"config key {KEY}: {path}: {problem}")


def read_pairs(path: str | Path) -> list[tuple[str, str, float]]:
    """The file's pairs (word, synonym, weight) in file order, or a StageError naming the key, the file and the line."""
    path = Path(path)
    if not path.is_file():
        raise _error(path, "no such file")
    delimiter = "," if path.suffix.lower() == ".csv" else "\t"
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as err:
        raise _error(path, f"not UTF-8 text ({err})") from None
    pairs = []
    for number, fields in enumerate(csv.reader(lines, delimiter=delimiter), start=1):
        fields = [f.strip() for f in fields]
        if not any(fields) or fields[0].startswith("#"):
            continue
        if number == 1 and tuple(f.lower() for f in fields) == HEADER[: len(fields)] and len(fields) >= 2:
            continue
        separator = "commas" if delimiter == "," else "tabs"
        if len(fields) not in (2, 3) or not fields[0] or not fields[1]:
            raise _error(
                path,
                f"line {number}: expected 2 or 3 columns separated by {separator} (word, synonym[, weight]), "
                f"got {len(fields)}: {lines[number - 1]!r}",
            )
        weight = 1.0
        if len(fields) == 3:
            try:
                weight = float(fields[2])
            except ValueError:
                raise _error(path, f"line {number}: the weight {fields[2]!r} is not a number") from None
            if not math.isfinite(weight) or weight <= 0:
                raise _error(path, f"line {number}: the weight {fields[2]!r} must be a finite number > 0")
        pairs.append((fields[0], fields[1], weight))
    return pairs


def single_tokens(tokenizer, texts: list[str]) -> dict[str, int]:
    """The texts the tokenizer spells as exactly one token, with its id (no special tokens added)."""
    if not texts:
        return {}
    encoded = tokenizer(texts, add_special_tokens=False)["input_ids"]
    return {text: ids[0] for text, ids in zip(texts, encoded, strict=True) if len(ids) == 1}


def load_synonym_pairs(path: str | Path, tokenizer) -> SynonymTable:
    """The synonym table of the file's pairs on `tokenizer` (docs/usage.md, "Your own synonyms")."""
    pairs = read_pairs(path)
    if not pairs:
        raise _error(path, "holds no pair (one `word<TAB>synonym[<TAB>weight]` a line)")
    words = sorted({w for word, synonym, _ in pairs for w in (word, synonym)})
    spellings = [f"{space}{w}" for space in ("", " ") for w in words]
    token = single_tokens(tokenizer, spellings)  # once per distinct word, not per token of any text
    sources, candidates, weights, skipped, itself = [], [], [], [], 0
    for word, synonym, weight in pairs:
        if word == synonym:
            itself += 1
            continue
        kept = False
        for space in ("", " "):
            a, b = token.get(space + word), token.get(space + synonym)
            if a is not None and b is not None and a != b:
                sources.append(a)
                candidates.append(b)
                weights.append(weight)
                kept = True
        if not kept:
            skipped.append(f"{word}\t{synonym}")
    log.info(
        "%s: %d pairs read; %d kept as token pairs (both spellings counted); %d skipped because a side is not one "
        "token of the tokenizer%s; %d skipped pairing a word with itself",
        path,
        len(pairs),
        len(sources),
        len(skipped),
        f" (e.g. {', '.join(repr(s) for s in skipped[:5])})" if skipped else "",
        itself,
    )
    if not sources:
        raise _error(
            path,
            f"none of its {len(pairs)} pairs has both sides as one token of the tokenizer (with or without a leading "
            "space): the table would be empty. Use words the tokenizer keeps whole",
        )
    return table_of_pairs(len(tokenizer), np.array(sources), np.array(candidates), np.array(weights))


def table_of_pairs(vocab_size: int, sources: np.ndarray, candidates: np.ndarray, weights: np.ndarray) -> SynonymTable:
    """A table from (source, candidate, weight) triples, repeated pairs' weights added, candidates in id order."""
    pair_key = sources.astype(np.int64) * vocab_size + candidates.astype(np.int64)
    unique, inverse = np.unique(pair_key, return_inverse=True)
    summed = np.bincount(inverse, weights=weights)
    tokens, cands = unique // vocab_size, unique % vocab_size
    rows, starts = np.unique(tokens, return_index=True)
    ends = np.append(starts[1:], len(tokens))
    return SynonymTable.from_rows(
        vocab_size,
        rows,
        [cands[s:e] for s, e in zip(starts, ends, strict=True)],
        [summed[s:e] for s, e in zip(starts, ends, strict=True)],
    )
