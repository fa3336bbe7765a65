"""Cleaning recipes on hand-made rows, with the exact rows kept and the counts of each drop."""

from __future__ import annotations

import random
import sys

import polars as pl
import pytest

from workflow_lib.data.cleaning import CLEANERS, COUNT_KEYS, PY_WHITESPACE, clean, strip_text, word_count


def words(n: int, tag: str = "w") -> str:
    return " ".join(f"{tag}{i}" for i in range(n))


def counts(**nonzero: int) -> dict:
    return {key: nonzero.get(key, 0) for key in COUNT_KEYS}


# --- Word counting and stripping agree with Python ---------------------------------------------------------


def test_whitespace_set_is_pythons():
    assert PY_WHITESPACE == "".join(chr(c) for c in range(sys.maxunicode + 1) if chr(c).isspace())


def test_word_count_and_strip_match_python():
    rng = random.Random(0)
    alphabet = list(PY_WHITESPACE) + list("ab@=\u200bé")  # U+200B is not whitespace in Python
    texts = ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12))) for _ in range(3000)]
    texts += ["", " ", "a\x1cb", "a\u2028b c", "\u3000x\u3000"]
    frame = pl.DataFrame({"t": texts}).select(n=word_count(pl.col("t")), s=strip_text(pl.col("t")))
    assert frame["n"].to_list() == [len(t.split()) for t in texts]
    assert frame["s"].to_list() == [t.strip() for t in texts]


# --- Registry ----------------------------------------------------------------------------------------------


def test_registry_names():
    assert sorted(CLEANERS) == sorted(["none", "wikitext", "wikitext103", "webtext", "writingprompts", "plain"])


def test_unknown_name_lists_allowed():
    with pytest.raises(ValueError, match="allowed: none, wikitext, wikitext103, webtext, writingprompts, plain"):
        clean("wikitext2", ["x"])


def test_none_is_identity():
    rows = ["", " a \n", "b"]
    assert clean("none", rows) == (["", " a \n", "b"], counts(rows_in=3, rows_out=3))


def test_wikitext_keeps_everything_and_counts_empty_rows():
    rows = ["", " = Title = \n", "", " Some text @-@ here . \n"]
    assert clean("wikitext", rows) == (
        ["", " = Title = \n", "", " Some text @-@ here . \n"],
        counts(rows_in=4, rows_out=4, empty_rows_kept=2),
    )


def test_empty_input():
    for name in CLEANERS:
        assert clean(name, []) == ([], counts())


# --- WikiText-103 (MixCE) ----------------------------------------------------------------------------------


def test_wikitext103():
    body = words(50)
    rows = [
        "",
        " \n",
        " = Robert Boulter = \n",
        " = = Career = = \n",
        f' The 1 @,@ 000 @-@ year @.@ plan , Teddy \'s " Story " ( 2004 ) . {body} \n',
        " Too short . \n",
        f" {words(50, 'x')} \n",  # exactly 50 words: MixCE keeps 50 < n only
        f" {words(999, 'y')} \n",  # 999 words: kept
        f" {words(1000, 'z')} \n",  # 1000 words: dropped
    ]
    kept, stats = clean("wikitext103", rows)
    assert kept == [
        f'The 1,000-year.plan, Teddy\'s "Story" (2004). {body}',
        words(999, "y"),
    ]
    assert stats == counts(rows_in=9, rows_out=2, dropped_empty=2, dropped_heading=2, dropped_length=3)


def test_wikitext103_joiners_are_deleted_like_sed():
    # `sed 's/ @//g'` then `sed 's/@ //g'`: any " @" and any "@ " go, not only the three joiners.
    rows = [f"mail me @ home , a @b and c@ d {words(50)}"]
    assert clean("wikitext103", rows)[0] == [f"mail me home, ab and cd {words(50)}"]


def test_wikitext103_heading_is_checked_after_strip():
    rows = [f"   ={words(60)}", f"a = {words(60)}"]
    kept, stats = clean("wikitext103", rows)
    assert kept == [f"a = {words(60)}"]
    assert stats["dropped_heading"] == 1


# --- WebText (MixCE) ---------------------------------------------------------------------------------------


def test_webtext():
    body = words(49)
    rows = [
        f"Title line\n\nFirst paragraph , untouched.\n{body}\n",
        "\n\n",
        f"  {words(50)}  ",
        f"{words(999)}",
        f"{words(1000)}",
    ]
    kept, stats = clean("webtext", rows)
    # only "\n" becomes a space; the rest (punctuation spacing, double spaces inside) stays as written
    assert kept == [f"Title line  First paragraph , untouched. {body}", words(999)]
    assert stats == counts(rows_in=5, rows_out=2, dropped_empty=1, dropped_length=2)


# --- WritingPrompts (MixCE) --------------------------------------------------------------------------------


def test_writingprompts():
    body = words(40)
    row = (
        "[ WP ] You are `` the chosen one '' . "
        f"It was n't me , she said . <newline> <newline> `` Really ? '' he asked . {body}"
    )
    kept, stats = clean("writingprompts", [row, "[ WP ] Short prompt . A short story <newline> .", ""])
    # Moses joins "'s"-style clitics but leaves the Penn "n't" split as it is
    assert kept == [f'[WP] You are "the chosen one". It was n\'t me, she said. "Really?" he asked. {body}']
    assert stats == counts(rows_in=3, rows_out=1, dropped_empty=1, dropped_length=1)


# --- Plain -------------------------------------------------------------------------------------------------


def test_plain():
    rows = ["  a line  \n", "", " \t\n", "para\none\n"]
    assert clean("plain", rows) == (["a line", "para\none"], counts(rows_in=4, rows_out=2, dropped_empty=2))


def test_cleaner_functions_work_without_counts():
    assert CLEANERS["plain"]([" a "]) == ["a"]
    assert CLEANERS["wikitext"]([""]) == [""]
