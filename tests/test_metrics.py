"""MAUVE and ROUGE-1 as the evaluation computes them."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from workflow_lib.metrics import evaluate, featurize, mauve_score, mean_2se, rouge1_f

MAUVE = {"num_buckets": "auto", "kmeans_num_redo": 2, "kmeans_max_iter": 100, "discretization": 25, "scaling": 5}


def test_mauve_is_one_for_a_set_against_itself_and_low_for_unrelated_sets():
    rng = np.random.default_rng(0)
    p = rng.normal(size=(200, 16)).astype(np.float32)
    assert mauve_score(p, p.copy(), MAUVE, seed=1) > 0.99
    same_law = rng.normal(size=(200, 16)).astype(np.float32)
    assert mauve_score(p, same_law, MAUVE, seed=1) > 0.8
    far = (rng.normal(size=(200, 16)) + 6.0).astype(np.float32)
    assert mauve_score(p, far, MAUVE, seed=1) < 0.1


def test_rouge1_on_known_strings():
    f = rouge1_f(["the cat sat on the mat", "a b c"], ["the cat ran", "x y z"])
    # unigram overlap 2 ("the", "cat"): precision 2/6, recall 2/3 -> F = 2PR/(P+R) = 4/9
    assert f[0] == pytest.approx(4 / 9) and f[1] == 0.0


def test_mean_2se():
    mean, se = mean_2se([1.0, 2.0, 3.0])
    assert mean == 2.0 and se == pytest.approx(2 * 1.0 / np.sqrt(3))
    assert mean_2se([0.5]) == (0.5, None)


@pytest.fixture(scope="module")
def texts():
    rng = np.random.default_rng(0)
    animals, verbs = ["cat", "dog", "bird", "horse", "fox", "cow", "goat", "duck"], ["saw", "chased", "heard", "met", "followed"]
    places = ["river", "farm", "forest", "city", "lake", "market"]
    english = [f"the {rng.choice(animals)} {rng.choice(verbs)} the {rng.choice(animals)} near the {rng.choice(places)} "
               f"and then went to the {rng.choice(places)} for dinner" for _ in range(60)]
    noise = ["".join(np.random.default_rng(i).choice(list("qxzjkv0123"), 40)) for i in range(60)]
    return english, noise


def test_minilm_features_separate_text_from_noise(texts):
    english, noise = texts
    fe, fn = featurize(english, "minilm"), featurize(noise, "minilm")
    assert fe.shape == (60, 384) and np.allclose(np.linalg.norm(fe, axis=1), 1, atol=1e-4)
    assert mauve_score(fe, fe, MAUVE, 1) > 0.99 and mauve_score(fe, fn, MAUVE, 1) < 0.2


def test_evaluate_reports_per_run_scores(texts):
    english, _ = texts
    prompts = pa.table({"prompt_id": list(range(60)), "prefix": [t[:12] for t in english], "reference": english})
    samples = pa.table({"prompt_id": list(range(60)) * 2, "run": [0] * 60 + [1] * 60,
                        "text": [t[12:] for t in english] * 2})
    settings = {"featuriser": "minilm", "max_text_length": 64, "feature_batch_size": 16, "rouge_include_prefix": True, "mauve": MAUVE}
    result = evaluate(samples, prompts, featurize(english, "minilm", 64), settings, seed=3)
    assert result["runs"] == 2 and len(result["mauve"]) == 2 and result["prompts"] == 60
    assert result["mauve_mean"] > 0.99 and result["rouge1_mean"] == pytest.approx(1.0)
