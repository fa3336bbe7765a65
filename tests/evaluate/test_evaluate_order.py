"""An evaluation keeps the samples file's row order: MAUVE's k-means seeding sees the features in that order, though
the sample_features job writes them sorted by prompt and run."""

from __future__ import annotations

import numpy as np
import polars as pl
import pyarrow as pa

from workflow_lib.evaluate import features, metrics


def test_evaluate_features_keep_the_samples_order_whatever_order_a_join_may_return(monkeypatch):
    """polars promises no row order from a join unless asked (maintain_order); a join that returns its rows
    reversed, as it may, must not change what MAUVE is given."""
    join = pl.DataFrame.join

    def unordered_join(self, *args, **kwargs):
        out = join(self, *args, **kwargs)
        return out if kwargs.get("maintain_order") in ("left", "left_right") else out.reverse()

    seen = []

    def fake_featurize(texts, *args, **kwargs):
        return np.array([[len(t), sum(map(ord, t)) % 97] for t in texts], dtype=np.float32)

    def fake_mauve(p_features, q_features, settings, seeds, run):
        seen.append((run, q_features.copy()))
        return [0.5] * len(seeds), pa.table({"run": [run]}), 2

    monkeypatch.setattr(pl.DataFrame, "join", unordered_join)
    monkeypatch.setattr(features, "featurize", fake_featurize)
    monkeypatch.setattr(metrics, "mauve_over_seeds", fake_mauve)
    prompts = pa.table(
        {
            "prompt_id": pa.array([5, 3, 9], pa.int64()),
            "prefix": ["a ", "b ", "c "],
            "reference": ["a x y", "b y z", "c z w"],
        }
    )
    texts = ["one", "three words", "two w", "four", "five five", "six"]
    samples = pa.table(
        {
            "prompt_id": pa.array([9, 5, 3, 3, 9, 5], pa.int64()),
            "run": pa.array([0, 0, 0, 1, 1, 1], pa.int32()),
            "continuation_ids": pa.array([[1, 2]] * 6, pa.list_(pa.int32())),
            "text": texts,
        }
    )
    settings = {
        "featuriser": "minilm",
        "featuriser_label": "minilm",
        "feature_text": "prompt_and_continuation",
        "max_text_length": 16,
        "feature_batch_size": 4,
        "rouge_include_prefix": True,
        "mauve": {"kmeans_seeds": 1, "min_texts": 3},
        "seed": 1,
    }  # 3 texts a run: scored
    model = features.sample_features(samples, prompts, settings)
    metrics.evaluate(samples, prompts, np.zeros((3, 2), np.float32), model, settings, 1)
    prefix = {5: "a ", 3: "b ", 9: "c "}
    model_text = [prefix[p] + t for p, t in zip(samples["prompt_id"].to_pylist(), texts)]
    expected = fake_featurize(model_text)
    assert [run for run, _ in seen] == [0, 1]
    assert np.array_equal(seen[0][1], expected[:3]) and np.array_equal(seen[1][1], expected[3:])
