"""Prompt extraction (EMO's protocol) on known rows: exact prefixes, references and per-filter counts."""

from __future__ import annotations

import polars as pl
import pytest

from workflow_lib.data.prompts import make_prompts


def words(n: int, tag: str) -> list[str]:
    return [f"{tag}{i:03d}" for i in range(n)]  # 4 characters each: 110 words is well over 100 characters


def stats(rows_in, min_chars=0, min_words=0, forbidden=0, eligible=None, max_prompts=0, prompts=None) -> dict:
    return {
        "rows_in": rows_in,
        "dropped_min_chars": min_chars,
        "dropped_min_words": min_words,
        "dropped_forbidden": forbidden,
        "rows_eligible": eligible,
        "dropped_max_prompts": max_prompts,
        "prompts": prompts,
    }


def test_prefix_and_reference_are_whitespace_words():
    a = words(120, "a")
    # irregular whitespace (tabs, newlines, runs, leading/trailing) is re-joined with single spaces
    text = " " + "\t".join(a[:5]) + "\n\n" + "  ".join(a[5:]) + " \n"
    frame, counts = make_prompts([text], None)
    assert frame.to_dicts() == [
        {
            "prompt_id": 0,
            "doc_id": 0,
            "prefix": " ".join(a[:20]),
            "reference": " ".join(a[:100]),
        }
    ]
    assert counts == stats(1, eligible=1, prompts=1)


def test_schema():
    frame, _ = make_prompts([" ".join(words(110, "a"))], [7])
    assert frame.schema == pl.Schema(
        {"prompt_id": pl.Int64, "doc_id": pl.Int64, "prefix": pl.String, "reference": pl.String}
    )


def test_each_filter_in_order_with_exact_counts():
    long_words = " ".join(words(110, "k"))  # 110 words, 549 characters: passes everything
    rows = [
        long_words,  # kept (doc 10)
        "short row == with heading marks",  # < 100 chars: counted as min_chars only
        "x " * 60,  # 120 chars but 60 words
        " == " + " ".join(words(109, "h")),  # 110 words, contains "==" ("= =" would not count)
        "== " + " ".join(words(50, "h")),  # few words and "==": counted as min_words (earlier filter)
        "a" * 99,  # 99 chars
        "b" * 100,  # exactly 100 chars, one word: min_words
        " ".join(words(109, "m")),  # 109 words: one short
        " ".join(words(110, "n")),  # exactly 110 words: kept (doc 18)
        " ".join(words(110, "p")) + " a=b=c",  # single "=" is fine: kept (doc 19)
    ]
    frame, counts = make_prompts(rows, list(range(10, 20)))
    assert counts == stats(10, min_chars=2, min_words=4, forbidden=1, eligible=3, prompts=3)
    assert frame["doc_id"].to_list() == [10, 18, 19]
    assert frame["prompt_id"].to_list() == [0, 1, 2]
    assert frame["prefix"].to_list() == [" ".join(words(20, t)) for t in "knp"]
    assert frame["reference"].to_list() == [" ".join(words(100, t)) for t in "knp"]


def test_max_prompts_keeps_the_first_rows():
    rows = [" ".join(words(110, tag)) for tag in "abcde"]
    rows.insert(1, "too short")
    frame, counts = make_prompts(rows, None, max_prompts=3)
    assert frame["doc_id"].to_list() == [0, 2, 3]
    assert frame["prefix"].to_list() == [" ".join(words(20, t)) for t in "abc"]
    assert counts == stats(6, min_chars=1, eligible=5, max_prompts=2, prompts=3)


def test_max_prompts_above_available():
    frame, counts = make_prompts([" ".join(words(110, "a"))], None, max_prompts=5000)
    assert frame.height == 1
    assert counts == stats(1, eligible=1, prompts=1)


def test_custom_lengths_and_no_forbidden_filter():
    rows = ["== one two three four five", "a b c d", "p q r s t u v"]
    frame, counts = make_prompts(
        rows, [5, 6, 7], prefix_words=2, reference_words=3, min_chars=0, extra_words=0, forbidden=None
    )
    assert frame.to_dicts() == [
        {"prompt_id": 0, "doc_id": 5, "prefix": "== one", "reference": "== one two three four"},
        {"prompt_id": 1, "doc_id": 7, "prefix": "p q", "reference": "p q r s t"},
    ]
    assert counts == stats(3, min_words=1, eligible=2, prompts=2)
    assert (
        make_prompts(rows, None, prefix_words=2, reference_words=3, min_chars=0, extra_words=0, forbidden="")[1][
            "dropped_forbidden"
        ]
        == 0
    )


def test_forbidden_is_a_literal_substring():
    rows = ["a.b " + " ".join(words(110, "a")), " ".join(words(110, "b"))]
    frame, counts = make_prompts(rows, None, forbidden=".")
    assert frame["doc_id"].to_list() == [1]
    assert counts["dropped_forbidden"] == 1


def test_nothing_left_raises_with_counts():
    rows = ["short", "x " * 60, "== " + " ".join(words(110, "h"))]
    with pytest.raises(ValueError) as error:
        make_prompts(rows, None)
    assert str(error.value) == (
        "no prompts left from 3 rows (fewer than 1: prompts.min_prompts): 1 shorter than 100 characters, 1 with fewer than 110 words "
        "(20 prefix + 80 reference + 10 extra), 1 containing '=='"
    )


def test_fewer_prompts_than_min_prompts_raises_and_max_prompts_lowers_the_floor():
    rows = [" ".join(words(110, "a"))] * 5 + ["short"] * 20
    with pytest.raises(
        ValueError,
        match=r"only 5 prompts left from 25 rows \(fewer than 10: prompts.min_prompts\): 20 "
        "shorter than 100 characters",
    ):
        make_prompts(rows, None, min_prompts=10)
    frame, _ = make_prompts(rows, None, min_prompts=10, max_prompts=4)  # asks for 4: the floor is 4
    assert frame.height == 4
    with pytest.raises(ValueError, match="only 5 prompts left"):
        make_prompts(rows, None, min_prompts=10, max_prompts=6)


def test_empty_input_raises():
    with pytest.raises(ValueError, match="no prompts left from 0 rows"):
        make_prompts([], [])


def test_argument_errors():
    with pytest.raises(ValueError, match="doc_ids has 1 entries but texts has 2"):
        make_prompts(["a", "b"], [0])
    with pytest.raises(ValueError, match="max_prompts must be >= 1"):
        make_prompts(["a"], None, max_prompts=0)
    with pytest.raises(ValueError, match="prefix_words >= 1"):
        make_prompts(["a"], None, prefix_words=0)
