"""MAUVE's controls (workflow_lib.evaluate.controls, control_scores): the control texts, their scores and the rule
that reports MAUVE, and what a failing rule does to a cell (not scored)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from workflow_lib.cli import StageError
from workflow_lib.data.prompts import make_prompts
from workflow_lib.evaluate import control_scores, controls
from workflow_lib.evaluate.control_names import CEILING, CONTROLS
from workflow_lib.evaluate.control_scores import score_controls, verdict
from workflow_lib.evaluate.controls import control_texts
from workflow_lib.evaluate.features import features_table
from workflow_lib.evaluate.metrics import evaluate

MAUVE = {
    "num_buckets": "auto",
    "max_buckets": 500,
    "kmeans_num_redo": 1,
    "kmeans_max_iter": 50,
    "discretization": 25,
    "scaling": 5,
    "kmeans_seeds": 3,
    "min_texts": 20,
    "controls": {"must_detect": ["shuffled", "loop", "salad"]},
}


def rows_and_prompts(n_rows: int = 30, words: int = 40, prefix: int = 5, reference: int = 10):
    """Rows of distinct words w<row>_<i>, headings between them, and the prompts cut from them."""
    texts = []
    for r in range(n_rows):
        texts.append(" ".join(f"w{r}_{i}" for i in range(words)))
        texts.append(f" == Heading {r} == ")  # dropped by the prompts' forbidden filter, and from the ceiling's stream
    prompts, _ = make_prompts(texts, None, prefix, reference, min_chars=10, extra_words=2)
    return texts, prompts.to_arrow()


def built(seed: int = 1, **kwargs):
    texts, prompts = rows_and_prompts(**kwargs)
    table = control_texts(prompts, texts, list(range(len(texts))), "set", 5, 10, "==", seed)
    return texts, prompts, table


def by_control(table) -> dict[str, list[list[str]]]:
    out: dict[str, list[list[str]]] = {}
    for name, text in zip(table.column("control").to_pylist(), table.column("text").to_pylist(), strict=True):
        out.setdefault(name, []).append(text.split())
    return out


def test_each_control_is_what_it_says():
    texts, prompts, table = built()
    got = by_control(table)
    assert list(got) == list(CONTROLS) and all(len(v) == prompts.num_rows for v in got.values())
    continuations = [
        r[len(p) :].split() for r, p in zip(prompts["reference"].to_pylist(), prompts["prefix"].to_pylist())
    ]
    for i, words in enumerate(continuations):
        assert len(words) == 10
        assert sorted(got["shuffled"][i]) == sorted(words)
        assert got["loop"][i] == (words[:5] * 2)
        assert len(got["salad"][i]) == 10
        assert got["swapped"][i] != words and got["swapped"][i] in continuations
        # the ceiling: the same row's words after the reference (a row has 40 words, the reference ends at 15)
        row = int(words[0].split("_")[0][1:])
        assert got[CEILING][i] == [f"w{row}_{k}" for k in range(15, 25)]
    assert sum(s != c for s, c in zip(got["shuffled"], continuations)) > len(continuations) // 2
    vocabulary = {w for t in texts if "==" not in t for w in t.split()}
    assert all(w in vocabulary for salad in got["salad"] for w in salad)  # no heading word: they were dropped
    assert table.column("text")[0].as_py().startswith(" ")  # a continuation, as a samples file holds one


def test_the_ceiling_continues_into_the_next_rows_and_wraps_past_the_last():
    texts, prompts = rows_and_prompts(n_rows=3, words=22)
    table = control_texts(prompts, texts, list(range(len(texts))), "set", 5, 10, "==", 1)
    ceiling = by_control(table)[CEILING]
    assert ceiling[0] == [f"w0_{k}" for k in range(15, 22)] + ["w1_0", "w1_1", "w1_2"]
    assert ceiling[2] == [f"w2_{k}" for k in range(15, 22)] + ["w0_0", "w0_1", "w0_2"]


def test_control_texts_are_the_same_bytes_for_the_same_seed_and_differ_for_another():
    _, _, a = built(seed=3)
    _, _, b = built(seed=3)
    _, _, c = built(seed=4)
    assert a.equals(b)
    for name in ("shuffled", "salad"):
        assert by_control(a)[name] != by_control(c)[name], name
    assert by_control(a)[CEILING] == by_control(c)[CEILING] and by_control(a)["loop"] == by_control(c)["loop"]


def test_controls_need_two_prompts():
    texts, prompts = rows_and_prompts(n_rows=1)
    with pytest.raises(StageError, match="at least 2 prompts"):
        control_texts(prompts, texts, list(range(len(texts))), "set", 5, 10, "==", 1)


def test_a_control_is_seen_only_beyond_the_k_means_spread_and_every_must_detect_control_decides():
    scores = {
        CEILING: [0.95, 0.97, 0.99],
        "shuffled": [0.50, 0.60, 0.70],  # gap 0.37 > the wider range 0.2: seen
        "loop": [0.70, 0.90, 0.95],  # gap 0.12 < range 0.25: not seen
        "salad": [0.10, 0.10, 0.10],
        "swapped": [0.99, 0.99, 0.99],
    }
    result = verdict(scores, ["shuffled", "loop", "salad"], 50, "minilm")
    rows = result["controls"]
    assert (
        rows["shuffled"]["seen"] and rows["salad"]["seen"] and not rows["loop"]["seen"] and not rows["swapped"]["seen"]
    )
    assert rows["loop"]["gap"] == pytest.approx(0.97 - np.mean([0.7, 0.9, 0.95]))
    assert rows["loop"]["margin"] == pytest.approx(0.25) and rows[CEILING]["seen"] is None
    assert result["status"] == "MAUVE cannot see a 5-word loop at n = 50 with minilm"
    assert verdict(scores, ["shuffled", "salad"], 50, "minilm")["status"] is None
    assert verdict(scores, [], 50, "minilm")["status"] is None
    blind = verdict({**scores, "shuffled": [0.96] * 3}, ["shuffled", "loop"], 50, "x")["status"]
    assert blind == "MAUVE cannot see shuffled words, a 5-word loop at n = 50 with x"
    # one seed has no spread to compare a gap with: nothing is seen
    one = verdict({k: v[:1] for k, v in scores.items()}, ["salad"], 50, "x")
    assert not one["controls"]["salad"]["seen"] and one["status"].startswith("MAUVE cannot see word salad")


def control_features(prompts: int, shift: dict[str, float], seed: int = 0):
    """Human features (a Gaussian cloud) and control features: each control the same cloud moved by `shift`."""
    rng = np.random.default_rng(seed)
    human = rng.normal(size=(prompts, 8)).astype(np.float32)
    blocks, names, ids = [], [], []
    for name in CONTROLS:
        blocks.append(rng.normal(size=(prompts, 8)).astype(np.float32) + shift.get(name, 0.0))
        names += [name] * prompts
        ids += list(range(prompts))
    keys = {"control": pa.array(names), "prompt_id": pa.array(ids, pa.int64())}
    return human, features_table(keys, np.vstack(blocks), len(names))


SETTINGS = {"mauve": MAUVE, "seed": 5, "featuriser_label": "feat", "feature_text": "continuation"}


def test_a_seeing_instrument_passes_and_a_blind_one_fails_on_real_mauve():
    human, seeing = control_features(60, {"shuffled": 4.0, "loop": 4.0, "salad": 4.0})
    result = score_controls(human, seeing, SETTINGS)
    assert result["status"] is None and result["kmeans_seeds"] == [5, 6, 7] and result["texts"] == 60
    assert all(result["controls"][c]["seen"] for c in ("shuffled", "loop", "salad"))
    assert not result["controls"]["swapped"]["seen"]  # the same law as the human text
    human, blind = control_features(60, {"loop": 4.0})
    result = score_controls(human, blind, SETTINGS)
    assert result["status"] == "MAUVE cannot see shuffled words, word salad at n = 60 with feat"
    assert result["feature_text"] == "continuation"


def test_under_the_floor_the_controls_are_not_scored():
    human, _ = control_features(10, {})
    keys = {"control": pa.array(["human"] * 10), "prompt_id": pa.array(range(10), pa.int64())}
    result = score_controls(human, features_table(keys, None, 10), SETTINGS)
    assert result["floor"] == "too few texts (10)" and result["status"] is None and result["controls"] == {}


def test_a_blind_eval_set_s_cells_are_not_scored_and_keep_their_rouge(texts=None):
    """The controls' status refuses MAUVE as too few texts do: evaluate writes the status instead of a score and reads
    no feature; ROUGE is computed as ever."""
    prompts = pa.table(
        {"prompt_id": pa.array(range(25), pa.int64()), "prefix": ["a b"] * 25, "reference": ["a b c d e"] * 25}
    )
    samples = pa.table(
        {
            "prompt_id": pa.array(list(range(25)) * 2, pa.int64()),
            "run": pa.array([0] * 25 + [1] * 25, pa.int32()),
            "continuation_ids": pa.array([[1, 2, 3]] * 50, pa.list_(pa.int32())),
            "text": [" c d e"] * 50,
        }
    )
    settings = {**SETTINGS, "featuriser": "minilm", "rouge_include_prefix": True}
    blind = "MAUVE cannot see word salad at n = 25 with feat"
    no_features = pa.table({"prompt_id": pa.array([], pa.int64()), "run": pa.array([], pa.int64())})
    summary, curves, _ = evaluate(samples, prompts, np.zeros((25, 4), np.float32), no_features, settings, 5, blind)
    assert summary["mauve_status"] == blind and summary["mauve_mean"] is None and curves.num_rows == 0
    assert summary["rouge1_mean"] == pytest.approx(1.0)
    with pytest.raises(StageError, match="does not hold each sample once"):  # the same cell, seen: it reads them
        evaluate(samples, prompts, np.zeros((25, 4), np.float32), no_features, settings, 5, None)


def test_the_controls_cli_writes_texts_and_a_verdict(tmp_path, monkeypatch):
    import json
    import sys

    import pyarrow.parquet as pq

    texts, prompts = rows_and_prompts()
    data = pa.table({"doc_id": pa.array(range(len(texts)), pa.int64()), "text": texts})
    pq.write_table(data, tmp_path / "data.parquet")
    pq.write_table(prompts, tmp_path / "prompts.parquet")
    settings = json.dumps({"prefix_words": 5, "reference_words": 10, "forbidden": "==", "seed": 2})
    argv = ["controls", "--eval-set", "set", "--prompts", str(tmp_path / "prompts.parquet")]
    argv += ["--data", str(tmp_path / "data.parquet"), "--settings", settings, "--output", str(tmp_path / "t.parquet")]
    monkeypatch.setattr(sys, "argv", argv)
    controls.main()
    assert pq.read_table(tmp_path / "t.parquet").equals(
        control_texts(prompts, texts, list(range(len(texts))), "set", 5, 10, "==", 2)
    )
    human, features = control_features(30, {"shuffled": 4.0, "loop": 4.0, "salad": 4.0})
    np.save(tmp_path / "human.npy", human)
    pq.write_table(features, tmp_path / "f.parquet")
    argv = ["scores", "--human", str(tmp_path / "human.npy"), "--features", str(tmp_path / "f.parquet")]
    argv += ["--settings", json.dumps(SETTINGS), "--output", str(tmp_path / "c.json")]
    monkeypatch.setattr(sys, "argv", argv)
    control_scores.main()
    assert json.loads((tmp_path / "c.json").read_text())["status"] is None
