"""Per-corpus cleaning, registered by name: raw rows -> the rows a corpus is trained or evaluated on.

The recipes are MixCE's data preparation (bloomberg/MixCE-acl2023, data/*_data.py), written as column operations
(docs/method.md §4). Each `clean_<name>(rows, counts=None)` returns the kept rows in input order and, given a dict,
adds how many rows each step dropped; `clean(name, rows)` is the data stage's entry point. "Words" are Python
`str.split()` words (what MixCE and EMO count), matched in Polars by `WORD_PATTERN`, and "strip" removes Python
`str.strip()` whitespace, so both agree with the reference scripts character for character.
"""

from __future__ import annotations

from collections.abc import Callable

import polars as pl

# Python's str.isspace() set (tests check it against Python). Rust regex `\s` (Unicode White_Space) lacks
# U+001C..U+001F, which Python splits on, so the set is spelled out instead of trusting `\s`.
PY_WHITESPACE = (
    "\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008"
    "\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
)
WORD_PATTERN = "[^" + "".join(f"\\x{{{ord(char):x}}}" for char in PY_WHITESPACE) + "]+"

MIN_WORDS_EXCLUSIVE = 50  # MixCE keeps 50 < len(text.split()) < 1000
MAX_WORDS_EXCLUSIVE = 1000

COUNT_KEYS = ("rows_in", "rows_out", "dropped_empty", "dropped_heading", "dropped_length", "empty_rows_kept")


def word_count(text: pl.Expr) -> pl.Expr:
    """Number of whitespace-separated words, equal to `len(s.split())` for every Python string s."""
    return text.str.count_matches(WORD_PATTERN).fill_null(0)


def strip_text(text: pl.Expr) -> pl.Expr:
    """`s.strip()` as a Polars expression."""
    return text.str.strip_chars(PY_WHITESPACE)


def _add(counts: dict | None, key: str, value: int) -> None:
    if counts is not None:
        counts[key] = counts.get(key, 0) + int(value)


def _frame(rows: list[str]) -> pl.DataFrame:
    return pl.DataFrame({"text": rows}, schema={"text": pl.String})


def _drop(frame: pl.DataFrame, keep: pl.Expr, counts: dict | None, key: str) -> pl.DataFrame:
    """Rows of `frame` where `keep` holds; the number removed is added to counts[key]."""
    kept = frame.filter(keep)
    _add(counts, key, frame.height - kept.height)
    return kept


def _keep_length(frame: pl.DataFrame, counts: dict | None) -> pl.DataFrame:
    """Strip, then MixCE's length window; empty rows are counted apart from too short/long ones."""
    frame = frame.with_columns(strip_text(pl.col("text")))
    frame = _drop(frame, pl.col("text") != "", counts, "dropped_empty")
    words = word_count(pl.col("text"))
    return _drop(frame, (words > MIN_WORDS_EXCLUSIVE) & (words < MAX_WORDS_EXCLUSIVE), counts, "dropped_length")


def moses_detokenize(rows: list[str]) -> list[str]:
    """Moses English detokenisation of each row, as MixCE's `detokenizer.perl -l en` pass.

    sacremoses is the Python port of that script; it works on one token list at a time, so this is a row loop.
    """
    from sacremoses import MosesDetokenizer

    detokenizer = MosesDetokenizer(lang="en")
    return [detokenizer.detokenize(row.split()) for row in rows]


def clean_none(rows: list[str], counts: dict | None = None) -> list[str]:
    """Identity: for corpora already in final form (the builtin language, prepared files)."""
    return list(rows)


def clean_wikitext(rows: list[str], counts: dict | None = None) -> list[str]:
    """WikiText-2 as run_clm trains on it: every row verbatim, empty ones included.

    Empty rows tokenise to nothing, so they neither help nor hurt training, and keeping them keeps doc_ids
    equal to hub row indices. They are counted (`empty_rows_kept`) so the record shows how many there were.
    """
    _add(counts, "empty_rows_kept", sum(1 for row in rows if row == ""))
    return list(rows)


def clean_wikitext103(rows: list[str], counts: dict | None = None) -> list[str]:
    """MixCE's WikiText-103: paragraphs only, WikiText's tokenisation undone, 50 < words < 1000.

    Order as in data/wikitext_data.py: newlines to spaces and strip; drop empty rows and headings (first
    character "="); delete every " @" then every "@ " (`sed 's/ @//g'`, then `sed 's/@ //g'`, which turns
    " @-@ " into "-", " @,@ " into "," and " @.@ " into "."); Moses detokenisation; the length window.
    """
    text = pl.col("text")
    frame = _frame(rows).with_columns(
        strip_text(text.str.replace_all("\n", " ", literal=True).str.replace_all("\r", " ", literal=True))
    )
    frame = _drop(frame, text != "", counts, "dropped_empty")
    frame = _drop(frame, ~text.str.starts_with("="), counts, "dropped_heading")
    frame = frame.with_columns(text.str.replace_all(" @", "", literal=True).str.replace_all("@ ", "", literal=True))
    frame = _frame(moses_detokenize(frame["text"].to_list()))
    return _keep_length(frame, counts)["text"].to_list()


def clean_webtext(rows: list[str], counts: dict | None = None) -> list[str]:
    """MixCE's WebText (data/webtext_data.py): "\\n" -> " ", strip, keep 50 < words < 1000."""
    frame = _frame(rows).with_columns(pl.col("text").str.replace_all("\n", " ", literal=True))
    return _keep_length(frame, counts)["text"].to_list()


def clean_writingprompts(rows: list[str], counts: dict | None = None) -> list[str]:
    """MixCE's WritingPrompts: "<newline>" -> " ", `` and '' -> ", Moses detokenisation, 50 < words < 1000.

    Rows are `readers.read_writingprompts` rows (prompt + " " + story). MixCE makes the three replacements in
    the story only; here they apply to the whole row, so a prompt's `` '' quotes also become '"'.
    """
    text = pl.col("text")
    frame = _frame(rows).with_columns(
        strip_text(
            text.str.replace_all("<newline>", " ", literal=True)
            .str.replace_all("``", '"', literal=True)
            .str.replace_all("''", '"', literal=True)
        )
    )
    frame = _frame(moses_detokenize(frame["text"].to_list()))
    return _keep_length(frame, counts)["text"].to_list()


def clean_plain(rows: list[str], counts: dict | None = None) -> list[str]:
    """Generic text: strip each row and drop the empty ones."""
    frame = _frame(rows).with_columns(strip_text(pl.col("text")))
    return _drop(frame, pl.col("text") != "", counts, "dropped_empty")["text"].to_list()


CLEANERS: dict[str, Callable[..., list[str]]] = {
    "none": clean_none,
    "wikitext": clean_wikitext,
    "wikitext103": clean_wikitext103,
    "webtext": clean_webtext,
    "writingprompts": clean_writingprompts,
    "plain": clean_plain,
}


def clean(name: str, rows: list[str]) -> tuple[list[str], dict]:
    """Apply the cleaner `name`; returns the kept rows and every count in COUNT_KEYS (zeros included).

    The counts go into the provenance record, so a reader can see where rows went without rerunning.
    """
    if name not in CLEANERS:
        raise ValueError(f"unknown cleaning {name!r}; allowed: {', '.join(CLEANERS)}")
    counts = dict.fromkeys(COUNT_KEYS, 0)
    kept = CLEANERS[name](list(rows), counts)
    counts["rows_in"], counts["rows_out"] = len(rows), len(kept)
    return kept, counts
