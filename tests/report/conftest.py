"""The report's tests' shared study of paired comparisons (tests/report/test_contrasts.py, test_contrast_pairs.py,
test_contrast_rows.py)."""

from __future__ import annotations

import numpy as np
import pytest

from support.metric_files import write_metrics, write_perplexity


@pytest.fixture
def study(tmp_path, monkeypatch):
    """mle and emo with and without perturbation at 0.025 (and the ablation's one-sided arms for mle), an
    untrained model, two decoders for mle; perturbation raises MAUVE and ROUGE by a known amount."""
    monkeypatch.chdir(tmp_path)
    rng = np.random.default_rng(3)
    runs_shared = rng.uniform(0.6, 0.8, 5)  # what one run's prompts and seeds do to every condition
    rouge_shared = rng.uniform(0.2, 0.5, (60, 5))
    gain = {("0", "0"): 0.0, ("0.025", "0.025"): 0.08, ("0.025", "0"): 0.04, ("0", "0.025"): -0.02}
    paths = []
    for obj, shift in (("mle", 0.0), ("emo", 0.01)):
        for (ti, tti), g in gain.items():
            if obj == "emo" and ti != tti:
                continue
            for decoder in ("unbiased", "top-p-0.9") if obj == "mle" else ("unbiased",):
                mauve = runs_shared + shift + g + rng.normal(0, 0.005, 5)
                rouge = rouge_shared + shift + g / 4 + rng.normal(0, 0.01, rouge_shared.shape)
                paths.append(write_metrics(tmp_path, obj, ti, tti, mauve, rouge, decoder=decoder))
    paths.append(write_metrics(tmp_path, "untrained", "0", "0", runs_shared - 0.3, rouge_shared - 0.1))
    paths.append(write_metrics(tmp_path, "untrained", "0", "0.025", runs_shared - 0.25, rouge_shared - 0.1))
    tokens = rng.integers(20, 60, 60).astype(np.float64)
    for obj, ti, rate in (
        ("mle", "0", 3.2),
        ("mle", "0.025", 3.0),
        ("emo", "0", 3.25),
        ("emo", "0.025", 3.05),
        ("untrained", "0", 4.0),
    ):
        paths.append(write_perplexity(tmp_path, obj, ti, (rate + rng.normal(0, 0.2, 60)) * tokens, tokens))
    return paths
