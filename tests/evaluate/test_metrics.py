"""MAUVE (with its clustering-seed variance), ROUGE, diversity and provenance as the evaluation computes them."""

from __future__ import annotations

import json
import logging
import re
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from workflow_lib.cli import StageError
from workflow_lib.evaluate import features as features_module
from workflow_lib.evaluate import metrics
from workflow_lib.evaluate.features import featurize, sample_features
from workflow_lib.evaluate.floor import mauve_status
from workflow_lib.evaluate.metrics import (
    evaluate,
    features_in_order,
    mauve_buckets,
    mauve_score,
    mean_2se,
    rouge_f,
    variance_split,
)
from workflow_lib.provenance import provenance

MAUVE = {"num_buckets": "auto", "kmeans_num_redo": 2, "kmeans_max_iter": 100, "discretization": 25, "scaling": 5}
FAST_MAUVE = {
    "num_buckets": "auto",
    "kmeans_num_redo": 1,
    "kmeans_max_iter": 20,
    "discretization": 25,
    "scaling": 5,
    "kmeans_seeds": 2,
}


def test_mauve_is_one_for_a_set_against_itself_and_low_for_unrelated_sets():
    rng = np.random.default_rng(0)
    p = rng.normal(size=(200, 16)).astype(np.float32)
    assert mauve_score(p, p.copy(), MAUVE, seed=1) > 0.99
    same_law = rng.normal(size=(200, 16)).astype(np.float32)
    assert mauve_score(p, same_law, MAUVE, seed=1) > 0.8
    far = (rng.normal(size=(200, 16)) + 6.0).astype(np.float32)
    assert mauve_score(p, far, MAUVE, seed=1) < 0.1


def test_num_buckets_auto_is_n_over_10_capped_and_an_explicit_value_is_kept(caplog):
    auto = {"num_buckets": "auto"}
    assert mauve_buckets(1000, 1000, auto) == 100
    assert mauve_buckets(1000, 350, auto) == 35  # the smaller side counts
    assert mauve_buckets(10, 10, auto) == 2
    assert mauve_buckets(10_000, 10_000, auto) == 500  # the default cap
    assert mauve_buckets(10_000, 10_000, auto | {"max_buckets": 300}) == 300
    with caplog.at_level(logging.WARNING, logger="workflow_lib.evaluate.metrics"):
        assert mauve_buckets(10_000, 10_000, {"num_buckets": 800}) == 800
    assert "above max_buckets" in caplog.text


def test_variance_split_is_the_one_way_random_effects_estimate():
    scores = np.array([[0.90, 0.92, 0.91], [0.80, 0.86, 0.83]])
    split = variance_split(scores)
    assert split["sampling"] + split["clustering"] == pytest.approx(split["total"], rel=1e-12)
    clustering = np.mean([np.var([0.90, 0.92, 0.91], ddof=1), np.var([0.80, 0.86, 0.83], ddof=1)])
    assert split["clustering"] == pytest.approx(clustering)
    assert split["sampling"] == pytest.approx(np.var([0.91, 0.83], ddof=1) - clustering / 3)  # the run means
    assert split["clustering_of_run_mean"] == pytest.approx(clustering / 3) and split["kmeans_seeds_needed"] == 1
    assert 0 <= split["clustering_share"] <= 1
    one_seed = variance_split(scores[:, :1])  # one seed cannot tell clustering from sampling
    assert one_seed["clustering"] is None and one_seed["sampling"] is None and one_seed["clustering_share"] is None
    assert variance_split(np.full((3, 2), 0.5))["clustering_share"] is None


def simulated_grids(
    sigma_s: float, sigma_c: float, reps: int, runs: int = 5, seeds: int = 5, seed: int = 0
) -> np.ndarray:
    """[reps, runs, seeds] MAUVE-like scores 0.8 + s_r + c_rk with known sampling and clustering spreads."""
    rng = np.random.default_rng(seed)
    return 0.8 + rng.normal(0, sigma_s, (reps, runs, 1)) + rng.normal(0, sigma_c, (reps, runs, seeds))


def test_variance_split_recovers_known_components_on_average():
    """Over 4000 simulated studies (5 runs x 5 seeds), the mean estimates are the true variances within 3
    standard errors, and a study whose runs do not differ at all shows a sampling share near 0 (the population
    variances of the law of total variance put it near 1/K, here 17%)."""
    sigma_s, sigma_c = 0.02, 0.03
    splits = [variance_split(grid) for grid in simulated_grids(sigma_s, sigma_c, 4000)]
    for name, truth in (("sampling", sigma_s**2), ("clustering", sigma_c**2)):
        estimates = np.array([split[name] for split in splits])
        assert abs(estimates.mean() - truth) < 3 * estimates.std() / np.sqrt(len(estimates)) + 0.02 * truth, name
    # sigma_c^2 / sigma_s^2 = 2.25: three seeds put the clustering part of a run's score under the sampling part
    assert variance_split(simulated_grids(sigma_s, sigma_c, 1, runs=2000)[0])["kmeans_seeds_needed"] == 3

    no_sampling = [variance_split(grid) for grid in simulated_grids(0.0, sigma_c, 4000, seed=1)]
    sampling_share = [1 - split["clustering_share"] for split in no_sampling]
    assert np.median(sampling_share) == 0 and np.mean(sampling_share) < 0.06  # the floor at 0 leaves a little
    assert all(split["kmeans_seeds_needed"] is None for split in no_sampling if split["sampling"] == 0)
    population = [grid.mean(axis=1).var() / grid.var() for grid in simulated_grids(0.0, sigma_c, 4000, seed=1)]
    assert np.mean(population) > 0.15  # what the population split reported


def test_rouge_on_known_strings_matches_rouge_score():
    from rouge_score import rouge_scorer

    predictions = ["the cat sat on the mat", "a b c", "the dog sat on a log"]
    references = ["the cat ran", "x y z", "a dog sat on the log"]
    f = rouge_f(predictions, references)
    # unigram overlap 2 ("the", "cat"): precision 2/6, recall 2/3 -> F = 2PR/(P+R) = 4/9
    assert f["rouge1"][0] == pytest.approx(4 / 9) and f["rouge1"][1] == 0.0
    # "dog sat on" + "log": bigrams "dog sat", "sat on" of 5 and 5; LCS "dog sat on log" 4 of 6 and 6
    assert f["rouge2"][2] == pytest.approx(2 / 5) and f["rougeL"][2] == pytest.approx(4 / 6)
    for name in ("rouge1", "rouge2", "rougeL"):
        scorer = rouge_scorer.RougeScorer([name])
        assert f[name].tolist() == [scorer.score(r, p)[name].fmeasure for p, r in zip(predictions, references)]


def random_texts(rng, n: int, vocabulary: list[str]) -> list[str]:
    """Texts rouge-score's tokenizer has to work for: mixed case, punctuation, digits, non-ASCII letters,
    newlines and tabs, repeated words, empty and punctuation-only texts, and a few of 400 words (400-bit LCS rows)."""
    separators = [" ", "  ", ", ", ". ", "\n", "\t", "-", "'", " (", ") ", " ! "]
    texts = []
    for _ in range(n):
        length = int(rng.choice([0, 1, 2, 5, 20, 90, 120, 400], p=[0.03, 0.03, 0.04, 0.1, 0.2, 0.3, 0.27, 0.03]))
        words = rng.choice(vocabulary, size=length)
        texts.append("".join(w + str(rng.choice(separators)) for w in words))
    return texts


def test_rouge_matches_rouge_score_bit_for_bit_on_many_pairs():
    """Our ROUGE-1/2/L F (own tokenizer, n-gram counts and bit-vector LCS) against rouge-score's on 1500 pairs:
    random word salads over small vocabularies (many repeats, long common subsequences) and the builtin grammar's
    sentences (the default study's text)."""
    from rouge_score import rouge_scorer

    from workflow_lib.data.builtin_corpus import build_grammar

    rng = np.random.default_rng(0)
    small = [
        "the",
        "The",
        "cat",
        "CAT",
        "sat",
        "on",
        "mat",
        "a",
        "dog",
        "42",
        "x1",
        "Über",
        "naïve",
        "...",
        "--",
        "İ",
        "é",
        "don't",
        "U.S.",
        "日本",
    ]
    predictions = random_texts(rng, 700, small) + random_texts(rng, 300, small[:4])
    references = random_texts(rng, 700, small) + random_texts(rng, 300, small[:4])
    grammar_text = build_grammar(seed=5).generate("test", 50, 20, 0)
    words = [w for text in grammar_text for w in text.split()]
    for _ in range(500):
        start, other = rng.integers(0, len(words) - 200, size=2)
        predictions.append(" ".join(words[start : start + rng.integers(0, 120)]))
        references.append(" ".join(words[other : other + rng.integers(0, 120)]))
    ours = rouge_f(predictions, references)
    scorer = rouge_scorer.RougeScorer(["rouge1", "rouge2", "rougeL"])
    theirs = [scorer.score(r, p) for p, r in zip(predictions, references)]
    for name in ("rouge1", "rouge2", "rougeL"):
        expected = np.array([t[name].fmeasure for t in theirs], dtype=np.float64)
        np.testing.assert_array_equal(ours[name], expected)  # the same float64s, not merely close
        assert 0.05 < (expected > 0).mean() < 1  # both zero and non-zero scores were compared


def test_mean_2se():
    mean, se = mean_2se([1.0, 2.0, 3.0])
    assert mean == 2.0 and se == pytest.approx(2 * 1.0 / np.sqrt(3))
    assert mean_2se([0.5]) == (0.5, None)


def test_provenance_names_the_commit_the_versions_and_the_settings():
    record = provenance({"seed": 1, "mauve": {"kmeans_seeds": 5}}, "minilm")
    if (Path(__file__).resolve().parents[2] / ".git").exists():
        assert re.fullmatch(r"[0-9a-f]{40}", record["git_commit"]) and isinstance(record["git_dirty"], bool)
    else:  # a copy without its history (an unpacked archive): nothing to name
        assert record["git_commit"] is None and record["git_dirty"] is None
    assert set(record["versions"]) == {"python", "torch", "transformers", "mauve-text", "rouge-score", "workflow"}
    assert record["versions"]["mauve-text"] and record["versions"]["workflow"] and record["featuriser"] == "minilm"
    assert record["settings_sha256"] == provenance({"mauve": {"kmeans_seeds": 5}, "seed": 1})["settings_sha256"]
    assert record["settings_sha256"] != provenance({"seed": 1, "mauve": {"kmeans_seeds": 4}})["settings_sha256"]


@pytest.fixture(scope="module")
def texts():
    rng = np.random.default_rng(0)
    animals, verbs = (
        ["cat", "dog", "bird", "horse", "fox", "cow", "goat", "duck"],
        ["saw", "chased", "heard", "met", "followed"],
    )
    places = ["river", "farm", "forest", "city", "lake", "market"]
    english = [
        f"the {rng.choice(animals)} {rng.choice(verbs)} the {rng.choice(animals)} near the {rng.choice(places)} "
        f"and then went to the {rng.choice(places)} for dinner"
        for _ in range(60)
    ]
    noise = ["".join(np.random.default_rng(i).choice(list("qxzjkv0123"), 40)) for i in range(60)]
    return english, noise


def test_minilm_features_separate_text_from_noise(texts):
    english, noise = texts
    fe, fn = featurize(english, "minilm"), featurize(noise, "minilm")
    assert fe.shape == (60, 384) and np.allclose(np.linalg.norm(fe, axis=1), 1, atol=1e-4)
    assert mauve_score(fe, fe, MAUVE, 1) > 0.99 and mauve_score(fe, fn, MAUVE, 1) < 0.2


def settings_for(mauve: dict) -> dict:
    return {
        "featuriser": "minilm",
        "featuriser_label": "minilm",
        "feature_text": "prompt_and_continuation",
        "max_text_length": 64,
        "feature_batch_size": 16,
        "rouge_include_prefix": True,
        "mauve": mauve,
        "seed": 3,
    }


def test_evaluate_reports_per_run_scores(texts):
    english, _ = texts
    prompts = pa.table({"prompt_id": list(range(60)), "prefix": [t[:12] for t in english], "reference": english})
    samples = pa.table(
        {"prompt_id": list(range(60)) * 2, "run": [0] * 60 + [1] * 60, "text": [t[12:] for t in english] * 2}
    )
    no_seeds_key = {k: v for k, v in FAST_MAUVE.items() if k != "kmeans_seeds"}  # an old settings dict
    settings = settings_for(no_seeds_key)
    model = sample_features(samples, prompts, settings)
    result, _, _ = evaluate(samples, prompts, featurize(english, "minilm", 64), model, settings, seed=3)
    assert result["runs"] == 2 and len(result["mauve"]) == 2 and result["prompts"] == 60
    assert result["mauve_mean"] > 0.99 and result["rouge1_mean"] == pytest.approx(1.0)
    assert result["rouge2_mean"] == pytest.approx(1.0) and result["rougeL_mean"] == pytest.approx(1.0)
    assert result["kmeans_seeds"] == [3, 4, 5, 6, 7] and np.shape(result["mauve_by_seed"]) == (2, 5)  # default 5 seeds


def test_mauve_below_the_floor_of_texts_is_flagged_and_at_it_is_not():
    assert mauve_status(49, {}) == "too few texts (49)" and mauve_status(50, {}) is None  # default min_texts 50
    assert mauve_status(20, {"min_texts": 10}) is None and mauve_status(20, {"min_texts": 21}) == "too few texts (20)"


def test_a_two_bucket_mauve_is_refused_and_a_resolvable_one_kept(texts):
    """The evaluation on the real path: 20 prompts per run (2 k-means buckets) is flagged "too few texts (20)" and not
    scored: no MAUVE number, no curve, null features, and its featuriser is never loaded, by either job (a name that
    cannot load passes); 60 prompts (6 buckets, above the default floor of 50) is scored, and there that name fails."""
    english, _ = texts

    def run(n, featuriser="minilm"):
        prompts = pa.table(
            {"prompt_id": list(range(n)), "prefix": [t[:12] for t in english[:n]], "reference": english[:n]}
        )
        samples = pa.table(
            {"prompt_id": list(range(n)) * 2, "run": [0] * n + [1] * n, "text": [t[12:] for t in english[:n]] * 2}
        )
        settings = settings_for(FAST_MAUVE) | {"featuriser": featuriser}
        features = sample_features(samples, prompts, settings)
        return (*evaluate(samples, prompts, featurize(english[:n], "minilm", 64), features, settings, seed=3), features)

    few, curves, per_prompt, features = run(20, featuriser="no/such-featuriser")
    assert few["mauve_texts"] == 20 and few["mauve_min_texts"] == 50 and few["mauve_status"] == "too few texts (20)"
    assert all(
        few[k] is None for k in ("mauve", "mauve_mean", "mauve_2se", "mauve_by_seed", "mauve_variance", "num_buckets")
    )
    assert curves.num_rows == 0 and features.num_rows == 40 and features["features"].null_count == 40
    assert few["rouge1"] == pytest.approx([1.0, 1.0]) and per_prompt.num_rows == 40  # ROUGE is computed either way
    enough = run(60)[0]
    assert enough["num_buckets"] == 6 and enough["mauve_texts"] == 60 and enough["mauve_status"] is None
    assert enough["mauve_mean"] > 0.99
    with pytest.raises((StageError, OSError, ValueError)):  # offline, transformers' own "not found"
        run(60, featuriser="no/such-featuriser")


@pytest.fixture(scope="module")
def cli_outputs(texts, tmp_path_factory):
    """The evaluate CLI on 40 prompts x 2 runs that differ: run 0 repeats one 4-gram loop, run 1 does not."""
    english, noise = texts
    n = 40
    folder = tmp_path_factory.mktemp("evaluate")
    prompts = pa.table(
        {
            "prompt_id": pa.array(range(100, 100 + n), pa.int64()),
            "prefix": [t[:12] for t in english[:n]],
            "reference": english[:n],
        }
    )
    loop, fresh = [1, 2, 3, 4] * 3, list(range(10, 22))
    order = [1, 0] * n  # runs interleaved: the outputs must not depend on the row order
    samples = pa.table(
        {
            "prompt_id": pa.array(np.repeat(np.arange(100, 100 + n), 2), pa.int64()),
            "run": pa.array(order, pa.int32()),
            "continuation_ids": pa.array([fresh if r else loop for r in order], pa.list_(pa.int32())),
            "text": [
                english[i // 2][12:] if r == 0 else english[i // 2][12:40] + noise[i // 2][:10]
                for i, r in enumerate(order)
            ],
        }
    )
    pq.write_table(prompts, folder / "prompts.parquet")
    pq.write_table(samples, folder / "samples.parquet")
    np.save(folder / "human.npy", featurize(english[:n], "minilm", 64))
    out = {name: folder / name for name in ("metrics.json", "curves.parquet", "per_prompt.parquet", "features.parquet")}
    settings = json.dumps(settings_for(FAST_MAUVE | {"min_texts": n}))
    (folder / "controls.json").write_text(json.dumps({"status": None}))  # the eval set's controls: MAUVE sees
    featurise = ["features", "samples", "--samples", str(folder / "samples.parquet"), "--prompts"]
    featurise += [str(folder / "prompts.parquet"), "--settings", settings, "--output", str(out["features.parquet"])]
    argv = [
        "metrics",
        "--samples",
        str(folder / "samples.parquet"),
        "--prompts",
        str(folder / "prompts.parquet"),
        "--human-features",
        str(folder / "human.npy"),
        "--features",
        str(out["features.parquet"]),
        "--controls",
        str(folder / "controls.json"),
        "--settings",
        settings,
        "--output",
        str(out["metrics.json"]),
        "--curves",
        str(out["curves.parquet"]),
        "--per-prompt",
        str(out["per_prompt.parquet"]),
    ]
    saved = sys.argv
    try:
        sys.argv = featurise  # the sample_features job, then the evaluate job reading its file
        features_module.main()
        sys.argv = argv
        metrics.main()
    finally:
        sys.argv = saved
    return (
        json.loads(out["metrics.json"].read_text()),
        pq.read_table(out["curves.parquet"]),
        pq.read_table(out["per_prompt.parquet"]),
        pq.read_table(out["features.parquet"]),
    )


def test_evaluate_splits_mauve_variance_over_runs_and_clustering_seeds(cli_outputs):
    result, _, _, _ = cli_outputs
    by_seed = np.array(result["mauve_by_seed"])
    assert by_seed.shape == (2, 2) and result["kmeans_seeds"] == [3, 4] and result["run_ids"] == [0, 1]
    assert result["mauve"] == pytest.approx(by_seed.mean(axis=1).tolist(), abs=1e-15)
    assert result["mauve_mean"] == pytest.approx(by_seed.mean()) and result["mauve_2se"] is not None
    split = result["mauve_variance"]
    assert split["sampling"] + split["clustering"] == pytest.approx(split["total"], rel=1e-9, abs=1e-15)
    clustering = by_seed.var(axis=1, ddof=1).mean()
    assert split["clustering"] == pytest.approx(clustering) and 0 <= split["clustering_share"] <= 1
    assert split["sampling"] == pytest.approx(max(0.0, by_seed.mean(axis=1).var(ddof=1) - clustering / 2), abs=1e-15)
    assert result["num_buckets"] == 4  # 40 per side / 10
    assert result["mauve"][0] > result["mauve"][1]  # run 0 is the human text itself


def test_evaluate_writes_every_divergence_curve(cli_outputs):
    _result, curves, _, _ = cli_outputs
    points = FAST_MAUVE["discretization"] + 2  # mauve-text adds the two extreme points
    assert curves.num_rows == 2 * 2 * points
    assert {f.name: str(f.type) for f in curves.schema} == {
        "run": "int64",
        "kmeans_seed": "int64",
        "point": "int64",
        "x": "double",
        "y": "double",
    }
    assert sorted(set(zip(curves["run"].to_pylist(), curves["kmeans_seed"].to_pylist()))) == [
        (0, 3),
        (0, 4),
        (1, 3),
        (1, 4),
    ]


def test_evaluate_per_prompt_rouge_matches_the_run_means(cli_outputs):
    result, _, per_prompt, _ = cli_outputs
    assert per_prompt.column_names == ["prompt_id", "run", "rouge1", "rouge2", "rougeL"]
    assert (
        str(per_prompt.schema.field("prompt_id").type) == "int64"
        and str(per_prompt.schema.field("run").type) == "int64"
    )
    keys = list(zip(per_prompt["prompt_id"].to_pylist(), per_prompt["run"].to_pylist()))
    assert keys == sorted(keys) and len(keys) == 80
    run = per_prompt["run"].to_numpy()
    for name in ("rouge1", "rouge2", "rougeL"):
        assert [per_prompt[name].to_numpy()[run == r].mean() for r in (0, 1)] == pytest.approx(result[name], abs=1e-12)
        assert result[f"{name}_mean"] == pytest.approx(np.mean(result[name]))
    assert result["rouge1"][0] == pytest.approx(1.0) and result["rouge1"][1] < 1


def test_sample_features_writes_every_samples_features_by_prompt_and_run(cli_outputs, texts):
    """The MAUVE contrasts cluster these jointly with another condition's: each row must be its own sample's features."""
    _, _, per_prompt, features = cli_outputs
    assert features.column_names == ["prompt_id", "run", "features"]
    assert features.select(["prompt_id", "run"]).equals(per_prompt.select(["prompt_id", "run"]))
    english, noise = texts
    row = features.slice(3, 1).to_pylist()[0]  # prompt 101, run 1: the prefix and its noisy continuation
    i = row["prompt_id"] - 100
    text = english[i] if row["run"] == 0 else english[i][:40] + noise[i][:10]
    np.testing.assert_allclose(row["features"], featurize([text], "minilm", 64)[0], rtol=1e-5, atol=1e-6)


def test_evaluate_reports_diversity_from_token_ids_and_provenance(cli_outputs):
    result, _, _, _ = cli_outputs
    assert result["repetition"] == [1.0, 0.0] and result["rep_4"] == pytest.approx([1 - 4 / 9, 0.0])
    assert result["distinct_1"] == pytest.approx(
        [4 / 480, 12 / 480]
    )  # run 0: ids 1-4; run 1: ids 10-21, 40 x 12 tokens
    for name in ("distinct_1", "distinct_2", "distinct_3", "distinct_4", "repetition", "rep_4"):
        assert len(result[name]) == 2 and f"{name}_mean" in result and f"{name}_2se" in result
    assert result["provenance"]["featuriser"] == "minilm" and len(result["provenance"]["settings_sha256"]) == 64


def test_non_finite_mauve_stops_the_evaluation(texts, monkeypatch):
    english, _ = texts
    prompts = pa.table(
        {"prompt_id": list(range(20)), "prefix": [t[:12] for t in english[:20]], "reference": english[:20]}
    )
    samples = pa.table({"prompt_id": list(range(20)), "run": [0] * 20, "text": [t[12:] for t in english[:20]]})
    ones = pa.FixedSizeListArray.from_arrays(pa.array(np.ones(80, dtype=np.float32)), 4)
    model = pa.table(
        {"prompt_id": pa.array(range(20), pa.int64()), "run": pa.array([0] * 20, pa.int64()), "features": ones}
    )
    monkeypatch.setattr(
        metrics,
        "mauve_result",
        lambda *a, **k: SimpleNamespace(mauve=float("nan"), num_buckets=2, divergence_curve=np.zeros((27, 2))),
    )
    with pytest.raises(StageError, match="MAUVE is not finite"):
        evaluate(
            samples,
            prompts,
            np.ones((20, 4), dtype=np.float32),
            model,
            settings_for(FAST_MAUVE | {"min_texts": 20}),
            seed=1,
        )


def features_table(keys: list[tuple[int, int]], values) -> pa.Table:
    return pa.table(
        {
            "prompt_id": pa.array([p for p, _ in keys], pa.int64()),
            "run": pa.array([r for _, r in keys], pa.int64()),
            "features": values,
        }
    )


def test_features_are_read_in_the_samples_order_and_a_missing_repeated_or_null_sample_is_refused():
    """The evaluate job reads the sample_features job's file (sorted by prompt and run) back in the samples file's
    order, which MAUVE's k-means seeding sees; a file that does not hold each sample once, with features, is an
    error naming it, never a silent misalignment."""
    keys = [(3, 0), (3, 1), (5, 0), (5, 1)]
    values = pa.FixedSizeListArray.from_arrays(pa.array(np.arange(8, dtype=np.float32)), 2)
    table = features_table(keys, values)
    prompt_id, run = np.array([5, 3, 5, 3]), np.array([1, 0, 0, 1])
    got = features_in_order(table, prompt_id, run)
    assert got.dtype == np.float32 and got.tolist() == [[6, 7], [0, 1], [4, 5], [2, 3]]
    with pytest.raises(StageError, match=r"none for \(prompt_id, run\) \(7, 1\)"):
        features_in_order(table, np.array([5, 3, 5, 7]), run)
    with pytest.raises(StageError, match="does not hold each sample once"):
        features_in_order(
            features_table([*keys, (3, 0)], pa.concat_arrays([values, values.slice(0, 1)])), prompt_id, run
        )
    with pytest.raises(StageError, match="does not hold each sample once"):
        features_in_order(table.slice(0, 3), prompt_id[:3], run[:3])
    with pytest.raises(StageError, match="null features"):
        features_in_order(features_table(keys, pa.nulls(4, pa.list_(pa.float32()))), prompt_id, run)


def test_non_finite_features_stop_the_featurisation(texts, monkeypatch):
    english, _ = texts
    prompts = pa.table(
        {"prompt_id": list(range(20)), "prefix": [t[:12] for t in english[:20]], "reference": english[:20]}
    )
    samples = pa.table({"prompt_id": list(range(20)), "run": [0] * 20, "text": [t[12:] for t in english[:20]]})
    nan = np.ones((20, 4), dtype=np.float32)
    nan[7, 2] = np.nan
    monkeypatch.setattr(features_module, "featurize", lambda texts, *a, **k: nan[: len(texts)])
    with pytest.raises(StageError, match="features are not finite"):
        sample_features(samples, prompts, settings_for(FAST_MAUVE | {"min_texts": 20}))


def test_results_are_dirty_only_when_a_tracked_file_of_the_workflow_changed(tmp_path, monkeypatch):
    """Untracked data folders and edits outside the workflow's code (README) leave results clean; an uncommitted
    edit of a tracked workflow_lib or rules file makes them dirty."""
    import subprocess

    from workflow_lib import provenance as prov

    def git(*args):
        subprocess.run(
            ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=tmp_path, check=True, capture_output=True
        )

    (tmp_path / "workflow_lib").mkdir()
    (tmp_path / "rules").mkdir()
    for name in ("workflow_lib/stage.py", "rules/stage.smk", "README.md"):
        (tmp_path / name).write_text("one\n")
    git("init", "-q")
    git("add", ".")
    git("commit", "-q", "-m", "first")
    monkeypatch.setattr(prov, "CODE_ROOT", tmp_path / "workflow_lib")

    def dirty():
        prov.git_state.cache_clear()
        commit, flag = prov.git_state()
        assert re.fullmatch(r"[0-9a-f]{40}", commit)
        return flag

    try:
        assert dirty() is False
        (tmp_path / "data").mkdir()
        (tmp_path / "data/own.txt").write_text("untracked\n")
        (tmp_path / "workflow_lib/new_untracked.py").write_text("x = 1\n")
        (tmp_path / "README.md").write_text("edited\n")
        assert dirty() is False
        (tmp_path / "rules/stage.smk").write_text("edited\n")
        assert dirty() is True
        git("checkout", "--", "rules/stage.smk")
        assert dirty() is False
        (tmp_path / "workflow_lib/stage.py").write_text("edited\n")
        assert dirty() is True
    finally:
        prov.git_state.cache_clear()
