"""lm-eval's contrasts across training seeds (report/harness.py): a checkpoint row per seed speaks of its two
checkpoints; the methods are tested across seeds by the paired t over the seeds' differences (report.seeds), in
Holm tables of their own, with what each test could see. Built on lm_eval outputs written here (the files the
lm_eval job writes, evaluate/harness.py), so the expected numbers are computed independently."""

from __future__ import annotations

import json

import numpy as np
import polars as pl
import pytest
from scipy import stats

MAIN = "results/lm_eval/tiny/synthetic/mle/{train}/augment-m1/{perturbation}/seed{seed}"
ARMS = {"plain": ("none", "none-0"), "perturbed": ("oracle", "insertion-0.2")}
DOCS = 40


def write_result(root, arm: str, seed: int, acc: np.ndarray, loglikelihood: np.ndarray) -> list[str]:
    """One model's two task files as the lm_eval job writes them: accuracy (a mean) and word perplexity with its
    bits_per_byte (an aggregation with no paired test)."""
    train, perturbation = ARMS[arm]
    folder = root / MAIN.format(train=train, perturbation=perturbation, seed=seed)
    folder.mkdir(parents=True)
    weight = np.full(DOCS, 10.0)
    metrics = {
        "acc": {"value": float(acc.mean()), "stderr": None, "higher_is_better": True, "aggregation": "mean"},
        "word_perplexity": {
            "value": float(np.exp(-loglikelihood.sum() / weight.sum())),
            "stderr": None,
            "higher_is_better": False,
            "aggregation": "weighted_perplexity",
        },
        "bits_per_byte": {
            "value": float(-loglikelihood.sum() / weight.sum() / np.log(2)),
            "stderr": None,
            "higher_is_better": False,
            "aggregation": "bits_per_byte",
        },
    }
    pairing = {"mean": "mean", "weighted_perplexity": "perplexity", "bits_per_byte": None}
    for info in metrics.values():
        info["pairing"] = pairing[info["aggregation"]]
    result = {"task": "toy", "documents": DOCS, "of": DOCS, "metrics": metrics}
    (folder / "toy.json").write_text(json.dumps(result))
    pl.DataFrame(
        {
            "doc_id": np.arange(DOCS),
            "acc": acc,
            "word_perplexity.loglikelihood": loglikelihood,
            "word_perplexity.weight": weight,
        }
    ).write_parquet(folder / "toy.prompts.parquet")
    return [str(folder / "toy.json")]


def study(root, seeds: list[int], shift: float) -> tuple[list[str], dict[int, float]]:
    """Both arms at every seed; the perturbed arm's accuracy moved by `shift` plus a seed's own offset. Returns the
    paths and each seed's true accuracy difference over the documents."""
    rng = np.random.default_rng(7)
    paths, differences = [], {}
    for seed in seeds:
        base = rng.uniform(0.3, 0.7, DOCS)
        moved = np.clip(base + shift + rng.normal(0, 0.05) + rng.normal(0, 0.02, DOCS), 0, 1)
        ll = -rng.uniform(20, 40, DOCS)
        paths += write_result(root, "plain", seed, base, ll)
        paths += write_result(root, "perturbed", seed, moved, ll - rng.uniform(0, 2, DOCS))
        differences[seed] = float((moved - base).mean())
    return paths, differences


def test_the_methods_are_tested_across_seeds_as_the_main_contrasts_are(tmp_path):
    from workflow_lib.report.harness import contrasts, markdown, scores

    paths, differences = study(tmp_path, [1, 2, 3, 4], shift=0.05)
    compared = contrasts(paths, intensity=0.2)
    acc = compared.filter(pl.col("metric") == "acc")
    checkpoints, methods = acc.filter(pl.col("unit") == "checkpoint"), acc.filter(pl.col("unit") == "seeds")
    assert checkpoints.height == 4 and methods.height == 1
    for row in checkpoints.iter_rows(named=True):  # each seed's own pair, over its documents
        assert row["difference"] == pytest.approx(differences[row["seed"]]) and row["documents"] == DOCS
    method = methods.row(0, named=True)
    d = np.array([differences[s] for s in sorted(differences)])
    assert method["seed"] is None and method["seeds"] == 4
    assert method["difference"] == pytest.approx(d.mean())
    assert method["p"] == pytest.approx(stats.ttest_1samp(d, 0).pvalue)
    half = stats.t.ppf(0.975, 3) * d.std(ddof=1) / 2
    assert (method["low"], method["high"]) == pytest.approx((d.mean() - half, d.mean() + half))
    # its own Holm table (one row): p_holm is p; and what it could see, with that figure's interval over 3 df
    assert method["p_holm"] == pytest.approx(method["p"])
    assert method["detectable_low"] < method["detectable"] < method["detectable_high"]
    assert method["detectable"] > (method["high"] - method["low"]) / 2
    assert method["favours"] == (method["a"] if method["p_holm"] < 0.05 else None)
    # the checkpoint rows' Holm table holds the 4 seeds' rows: their p_holm is Holm's over their 4 ps
    ps = checkpoints["p"].to_numpy()
    order = np.argsort(ps)
    expected = np.empty(4)
    expected[order] = np.minimum(1, np.maximum.accumulate(ps[order] * np.array([4, 3, 2, 1])))
    assert checkpoints["p_holm"].to_list() == pytest.approx(expected.tolist())
    # word perplexity across seeds: the seeds' perplexity differences; bits_per_byte keeps its reason
    ppl = compared.filter((pl.col("metric") == "word_perplexity") & (pl.col("unit") == "seeds")).row(0, named=True)
    per_seed = compared.filter((pl.col("metric") == "word_perplexity") & (pl.col("unit") == "checkpoint"))
    assert ppl["difference"] == pytest.approx(per_seed["difference"].mean()) and ppl["p"] is not None
    bits = compared.filter((pl.col("metric") == "bits_per_byte") & (pl.col("unit") == "seeds")).row(0, named=True)
    assert bits["p"] is None and bits["detectable"] is None
    assert bits["not_testable"] == "log2 of byte_perplexity: its row is the test"
    text = markdown(scores(paths), compared)
    assert "| all 4 seeds |" in text and "across training seeds" in text


def test_two_seeds_are_not_testable_and_one_seed_has_no_method_row(tmp_path):
    from workflow_lib.report.harness import contrasts

    two, _ = study(tmp_path / "two", [1, 2], shift=0.05)
    methods = contrasts(two, intensity=0.2).filter(pl.col("unit") == "seeds")
    assert methods.height == 3 and methods["p"].is_null().all()
    assert methods.filter(pl.col("metric") == "acc")["not_testable"].to_list() == ["2 seeds"]
    one, _ = study(tmp_path / "one", [1], shift=0.05)
    assert contrasts(one, intensity=0.2).filter(pl.col("unit") == "seeds").height == 0


def test_a_null_across_seeds_is_not_significant_where_checkpoints_differ(tmp_path):
    """Seeds whose differences cancel: every checkpoint pair differs (each seed's offset is large against its
    documents' noise), yet the methods do not: a claim about the method needs the seeds as its unit."""
    from workflow_lib.report.harness import contrasts

    rng = np.random.default_rng(3)
    paths = []
    for seed, offset in zip([1, 2, 3, 4], [0.15, -0.15, 0.14, -0.16]):
        base = rng.uniform(0.3, 0.7, DOCS)
        ll = -rng.uniform(20, 40, DOCS)
        paths += write_result(tmp_path, "plain", seed, base, ll)
        paths += write_result(tmp_path, "perturbed", seed, base + offset + rng.normal(0, 0.01, DOCS), ll)
    acc = contrasts(paths, intensity=0.2).filter(pl.col("metric") == "acc")
    assert acc.filter(pl.col("unit") == "checkpoint")["p_holm"].max() < 0.05
    assert acc.filter(pl.col("unit") == "seeds")["p_holm"][0] > 0.5
