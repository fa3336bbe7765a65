"""Distinct-n and repetition of continuations, on hand-made token sequences and against a plain-Python count."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from workflow_lib.evaluate.textstats import continuation_tokens, text_stats


def flat(rows: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    values = np.array([t for row in rows for t in row], dtype=np.int64)
    return values, np.concatenate([[0], np.cumsum([len(r) for r in rows])])


def test_known_answers():
    rows = [[1, 2, 3, 4, 1, 2, 3, 4], [5, 5, 5], [1, 2, 3, 4, 5]]
    stats = text_stats(*flat(rows), np.array([0, 0, 1]), 2)
    # run 0: 11 tokens, ids {1..5}; bigrams 7 + 2 with 4 + 1 distinct; 4-grams 5 + 0 with 4 distinct
    assert stats["distinct_1"].tolist() == pytest.approx([5 / 11, 1.0])
    assert stats["distinct_2"].tolist() == pytest.approx([5 / 9, 1.0])
    assert stats["distinct_4"].tolist() == pytest.approx([4 / 5, 1.0])
    # [1,2,3,4,1,2,3,4] repeats the 4-gram 1 2 3 4; [5,5,5] has no 4-gram at all
    assert stats["repetition"].tolist() == [0.5, 0.0]
    assert stats["rep_4"].tolist() == pytest.approx([(1 - 4 / 5 + 0) / 2, 0.0])


def test_ngrams_never_cross_continuations():
    stats = text_stats(*flat([[1, 2], [1, 2]]), np.array([0, 0]), 1)
    assert stats["distinct_2"].tolist() == [0.5]  # "1 2" twice; "2 1" across the boundary is not an n-gram
    assert stats["distinct_3"].tolist() == [0.0] and stats["repetition"].tolist() == [0.0]


def test_large_token_ids_are_kept_apart():
    big = 2**31 - 1  # n-gram keys must not collide whatever the vocabulary size
    stats = text_stats(*flat([[big, 0, big, 0], [0, big, 0, big]]), np.array([0, 1]), 2)
    assert stats["distinct_2"].tolist() == pytest.approx([2 / 3, 2 / 3])


def naive(rows, run_of_row, n_runs):
    out = {f"distinct_{n}": [] for n in (1, 2, 3, 4)} | {"repetition": [], "rep_4": []}
    for r in range(n_runs):
        members = [row for row, run in zip(rows, run_of_row) if run == r]
        for n in (1, 2, 3, 4):
            grams = [tuple(row[i : i + n]) for row in members for i in range(len(row) - n + 1)]
            out[f"distinct_{n}"].append(len(set(grams)) / len(grams) if grams else 0.0)
        fours = [[tuple(row[i : i + 4]) for i in range(len(row) - 3)] for row in members]
        out["repetition"].append(np.mean([len(set(g)) < len(g) for g in fours]))
        out["rep_4"].append(np.mean([1 - len(set(g)) / len(g) if g else 0.0 for g in fours]))
    return out


def test_matches_a_plain_python_count():
    rng = np.random.default_rng(0)
    rows = [rng.integers(0, 6, rng.integers(0, 15)).tolist() for _ in range(60)]
    runs = rng.integers(0, 3, 60)
    stats = text_stats(*flat(rows), runs, 3)
    for name, expected in naive(rows, runs, 3).items():
        assert stats[name].tolist() == pytest.approx(expected), name


def test_continuation_tokens_from_ids_and_from_words():
    ids = pa.chunked_array(
        [pa.array([[1, 2], [3]], pa.list_(pa.int32())), pa.array([[], [4, 5, 6]], pa.list_(pa.int32()))]
    )
    values, offsets = continuation_tokens(pa.table({"continuation_ids": ids, "text": ["x", "y", "z", "w"]}).slice(1))
    assert values.tolist() == [3, 4, 5, 6] and offsets.tolist() == [0, 1, 1, 4]
    values, offsets = continuation_tokens(pa.table({"text": ["the cat the", "", "cat  sat"]}))
    assert offsets.tolist() == [0, 3, 3, 5]
    assert values[0] == values[2] and values[1] == values[3] and len(set(values.tolist())) == 3
