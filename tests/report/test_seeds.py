"""Training seeds as the unit of a method comparison (report.seeds): a study whose arms were trained from k seeds gets,
beside each seed's per-checkpoint contrasts, one contrast across seeds per comparison, tested by the t-test over the
seeds' differences in Holm tables of its own; and the exact TV to the true law is compared like ROUGE, paired over
references (evaluate.extrapolation's per-reference sidecar)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from workflow_lib.report.contrasts import CHECKPOINT, SEEDS, contrasts
from workflow_lib.report.findings import contrast_findings, size_findings, verdict_tables
from workflow_lib.report.seeds import SEED_T, seed_rows

ARM = "results/{kind}/tiny/syn/mle/{syn}/augment-m1/{st}-{ti}/seed{seed}/{es}/unbiased/{syn}/{st}-{ti}-exact"
PROMPTS = 40


def _stem(root: Path, kind: str, perturbed: bool, seed: int, es: str = "test") -> Path:
    syn, st, ti = ("distributional", "insertion", "0.025") if perturbed else ("none", "none", "0")
    stem = root / ARM.format(kind=kind, syn=syn, st=st, ti=ti, seed=seed, es=es)
    stem.parent.mkdir(parents=True, exist_ok=True)
    return stem


def write_arm(root: Path, perturbed: bool, seed: int, rouge: np.ndarray, tv: np.ndarray | None = None) -> list[str]:
    """One arm's metrics (ROUGE per (prompt, run), no MAUVE) and, with `tv`, its exact TV per reference."""
    stem = _stem(root, "metrics", perturbed, seed)
    Path(f"{stem}.json").write_text(json.dumps({"runs": rouge.shape[1], "prompts": rouge.shape[0]}))
    prompts, runs = np.meshgrid(np.arange(rouge.shape[0]), np.arange(rouge.shape[1]), indexing="ij")
    pl.DataFrame(
        {"prompt_id": prompts.ravel(), "run": runs.ravel(), "rouge1": rouge.ravel(), "rouge2": rouge.ravel() / 2}
    ).write_parquet(f"{stem}.prompts.parquet")
    paths = [str(Path(f"{stem}.json").relative_to(root))]
    if tv is not None:
        stem = _stem(root, "extrapolation", perturbed, seed)
        Path(f"{stem}.json").write_text(json.dumps({"tv_mean": float(tv.mean()), "law": "in_support"}))
        pl.DataFrame({"prompt_id": np.arange(len(tv)), "tv": tv, "prefixes": np.full(len(tv), 3)}).write_parquet(
            f"{stem}.prompts.parquet"
        )
        paths.append(str(Path(f"{stem}.json").relative_to(root)))
    return paths


def study(root: Path, seeds: int, effect: float, rng: np.random.Generator) -> list[str]:
    """Two arms (perturbed or not) trained from `seeds` seeds: each seed's checkpoints shift every prompt's ROUGE by a
    training part of their own (sd 0.02, the same for both arms of the null), and the perturbed arm by `effect` too.
    TV per reference: the same design, lower is better, `effect` subtracted."""
    paths = []
    prompt_level = rng.uniform(0.2, 0.5, (PROMPTS, 1))
    for seed in range(1, seeds + 1):
        for perturbed in (False, True):
            shift = rng.normal(0, 0.02) + (effect if perturbed else 0.0)
            rouge = np.clip(prompt_level + shift + rng.normal(0, 0.05, (PROMPTS, 3)), 0, 1)
            tv = np.clip(0.3 - shift + rng.normal(0, 0.02, PROMPTS), 0, 1)
            paths += write_arm(root, perturbed, seed, rouge, tv)
    return paths


def test_a_null_across_seeds_marks_nothing_and_a_planted_training_effect_is_found(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # result paths are relative, as the workflow gives them
    rng = np.random.default_rng(5)
    paths = study(Path("."), 4, 0.0, rng)
    null = contrasts(paths, 0.025)
    across = null.filter(pl.col("unit") == SEEDS)
    # one row per metric (rouge1, rouge2, tv) of the one comparison, across the 4 seeds
    assert sorted(across["metric"].to_list()) == ["rouge1", "rouge2", "tv"]
    assert across["seed"].is_null().all() and set(across["n"]) == {4} and set(across["method"]) == {SEED_T}
    assert not across["significant"].any() and across["detectable"].is_not_null().all()
    assert (across["spread"] > 0).all()
    # each seed's checkpoints are compared too, in tables of their own
    checkpoints = null.filter(pl.col("unit") == CHECKPOINT)
    assert checkpoints.height == 4 * 3 and sorted(set(checkpoints["seed"])) == [1, 2, 3, 4]
    # the seeds' mean difference is the mean of the per-seed differences
    for metric in ("rouge1", "tv"):
        per_seed = checkpoints.filter(pl.col("metric") == metric)["difference"].mean()
        assert across.filter(pl.col("metric") == metric)["difference"][0] == pytest.approx(per_seed)

    planted_dir = tmp_path / "planted"
    planted_dir.mkdir()
    monkeypatch.chdir(planted_dir)
    every = contrasts(study(Path("."), 4, 0.1, rng), 0.025)
    planted = every.filter(pl.col("unit") == SEEDS)
    assert planted["significant"].all()
    assert set(planted.filter(pl.col("metric") == "tv")["favours"]) == {"perturbation"}  # lower TV is better
    tables = list(verdict_tables(every).items())
    (title, rows), (second, _) = tables[0], tables[1]
    assert title.startswith("Perturbation against none, across 4 training seeds (the training method")
    assert rows[0]["metric"].startswith("TV to the true law") and rows[0]["helped"].startswith("1: mle -0.0")
    assert [r["metric"] for r in rows].index(rows[0]["metric"]) < [r["metric"][:7] for r in rows].index("ROUGE-1")
    assert second.startswith("Perturbation against none, about each seed's pair of checkpoints")
    assert contrast_findings(every)[0].startswith(f"**{title}**")


def test_two_seeds_are_not_testable_and_one_seed_has_no_row_across_seeds():
    rows = [
        {"family": "perturbation", "metric": "rouge1", "eval_set": "e", "seed": s, "difference": d}
        for s, d in ((1, 0.1), (2, 0.12))
    ]
    [row] = seed_rows(rows, ["family", "metric", "eval_set"], SEEDS)
    assert row["p"] is None and row["not_testable"] == "2 seeds" and row["n"] == 2 and row["seed"] is None
    assert seed_rows(rows[:1], ["family", "metric", "eval_set"], SEEDS) == []


def test_the_size_line_says_how_many_seeds_and_what_the_contrasts_speak_of():
    frame = pl.DataFrame(
        {
            "model": ["tiny"] * 6,
            "objective": ["mle"] * 6,
            "eval_set": ["e"] * 6,
            "seed": [1, 2, 3, 1, 2, 3],
            "train_intensity": [0.0] * 3 + [0.025] * 3,
            "runs": [3] * 6,
            "prompts": [40] * 6,
            "mauve_clustering_share": [None] * 6,
        },
        schema_overrides={"mauve_clustering_share": pl.Float64},
    )
    assert (
        "3 training seeds per trained arm: the contrasts across seeds test the training methods"
        in size_findings(frame, {})[0]
    )
    one = frame.filter(pl.col("seed") == 1)
    assert "what it finds is about those checkpoints, not the training methods" in size_findings(one, {})[0]


def test_the_tables_pool_a_conditions_seeds_with_a_t_interval_and_keep_one_seeds_runs():
    """A condition trained from 3 seeds is one row of the tables: the mean over seeds, ± t(0.975, 2) times the
    between-seed standard error, and its seeds named; a condition of one seed keeps its runs' interval, t(0.975, 2)
    times its standard error at 3 runs (4.30, not 2)."""
    from scipy import stats

    from workflow_lib.report.seeds import pool_seeds
    from workflow_lib.report.tables import half_width

    base = {"model": "tiny", "dataset": "syn", "objective": "mle", "eval_set": "e", "decoder": "unbiased", "runs": 3}
    frame = pl.DataFrame(
        [
            base | {"train_intensity": 0.0, "seed": s, "rouge1_mean": m, "rouge1_2se": 0.01, "perplexity": p}
            for s, m, p in ((1, 0.40, 30.0), (2, 0.42, 31.0), (3, 0.47, 29.0))
        ]
        + [base | {"train_intensity": 0.025, "seed": 1, "rouge1_mean": 0.5, "rouge1_2se": 0.02, "perplexity": 28.0}]
    )
    pooled = pool_seeds(frame).sort("train_intensity")
    assert pooled.height == 2 and pooled["seeds"].to_list() == [3, 1]
    three = pooled.row(0, named=True)
    sd = np.std([0.40, 0.42, 0.47], ddof=1)
    assert three["seed"] is None and three["rouge1_mean"] == pytest.approx(0.43)
    assert three["rouge1_2se"] == pytest.approx(2 * sd / np.sqrt(3))
    assert half_width(three, "rouge1") == pytest.approx(stats.t.ppf(0.975, 2) * sd / np.sqrt(3))
    assert three["perplexity"] == pytest.approx(30.0) and three["perplexity_2se"] == pytest.approx(2 / np.sqrt(3))
    one = pooled.row(1, named=True)
    assert one["seed"] == 1 and one["rouge1_mean"] == 0.5
    assert half_width(one, "rouge1") == pytest.approx(stats.t.ppf(0.975, 2) * 0.01)
    assert half_width({"tv_2se": 0.02, "runs": 3}, "tv") == 0.02  # over hundreds of prefixes: 2 SE as it is


def test_a_check_of_algorithm_2_on_one_seed_is_its_own_row_never_in_cacheds_place():
    """A study that samples its perturbed arm in `cached` mode on 3 seeds and in `exact` on one (configs/real.yaml):
    Table 1 and the ablation show the two as rows or columns of their own, named by mode, the pooled `cached` row
    over its 3 seeds. `cached` is named for what it is (one persistent perturbation per sequence, not Algorithm 2's
    law) in a study of that mode alone too; a study of `exact` alone keeps the plain names. An untrained model's
    training mode (always augment-m1 in its path) does not make the labels of trained arms name their training
    mode."""
    from workflow_lib.comparisons import _label, _variants
    from workflow_lib.report.conditions import ablation_frame, method_frame
    from workflow_lib.report.seeds import pool_seeds

    base = {"model": "m", "dataset": "d", "eval_set": "e", "decoder": "unbiased", "runs": 2, "copies": 1}
    base |= {"train_strategy": "insertion", "test_strategy": "insertion", "train_mode": "prefix"}
    base |= {"train_synonyms": "embedding", "test_synonyms": "embedding", "objective": "mle"}
    rows = [base | {"train_intensity": 0.0, "test_intensity": 0.0, "test_mode": "exact", "seed": s} for s in (1, 2, 3)]
    rows += [
        base | {"train_intensity": 0.025, "test_intensity": 0.025, "test_mode": "cached", "seed": s} for s in (1, 2, 3)
    ]
    exact = base | {"train_intensity": 0.025, "test_intensity": 0.025, "test_mode": "exact", "seed": 1}
    frame = pl.DataFrame(
        [r | {"mauve_mean": 0.5 + 0.01 * r["seed"], "mauve_2se": 0.01, "perplexity": 30.0} for r in rows]
        + [exact | {"mauve_mean": 0.2, "mauve_2se": 0.01, "perplexity": 30.0}]
    )
    pooled = pool_seeds(frame)
    methods = method_frame(pooled, 0.025).sort("perturbation")
    assert methods.select("perturbation", "seeds").rows() == [
        ("insertion 0.025 (cached, persistent perturbation)", 3),
        ("insertion 0.025 (exact)", 1),
        ("no", 3),
    ]
    assert methods.filter(pl.col("perturbation") == "insertion 0.025 (exact)")["mauve_mean"].to_list() == [0.2]
    assert sorted(ablation_frame(pooled, 0.025)["condition"].to_list()) == [
        "Both (cached, persistent perturbation)",
        "Both (exact)",
        "NoPerturb",
    ]
    cached_alone = pool_seeds(frame.filter((pl.col("test_mode") != "exact") | (pl.col("test_intensity") == 0)))
    assert sorted(set(method_frame(cached_alone, 0.025)["perturbation"].to_list())) == [
        "insertion 0.025 (cached, persistent perturbation)",
        "no",
    ]
    exact_alone = pool_seeds(frame.filter(pl.col("test_mode") == "exact"))
    assert sorted(set(method_frame(exact_alone, 0.025)["perturbation"].to_list())) == ["insertion 0.025", "no"]
    untrained = base | {"objective": "untrained", "train_mode": "augment", "train_intensity": 0.0}
    contrast_rows = [*rows, exact, untrained | {"test_intensity": 0.0, "test_mode": "exact", "seed": 42}]
    varying = _variants(contrast_rows)
    assert varying == ["test_mode"]
    assert _label("insertion 0.025", exact, varying) == "insertion 0.025 (exact)"
    # a cached arm is named in a study of one mode as well; an exact one is not
    assert _label("Both", rows[-1], []) == "Both (cached, persistent perturbation)"
    assert _label("Both", exact, []) == "Both"


def test_the_detectable_figure_of_three_seeds_has_the_interval_its_standard_error_allows():
    """`detectable` is a multiple of the estimated standard error: the figure at the true sigma lies in
    detectable_interval's 95% interval for 95% of studies (3 seeds: 0.52 to 6.3 times the estimate)."""
    from scipy import stats

    from workflow_lib.report.statistics import across_seeds, detectable, detectable_interval

    rng = np.random.default_rng(8)
    k, sigma = 3, 0.02
    critical = float(stats.t.ppf(0.975, k - 1))
    truth = detectable(-critical * sigma / np.sqrt(k), critical * sigma / np.sqrt(k), k - 1, 1)
    d = rng.normal(0.0, sigma, k)
    estimate = across_seeds(d)
    seen = detectable(estimate.low, estimate.high, k - 1, 1)
    assert seen / truth == pytest.approx(d.std(ddof=1) / sigma)  # the same multiple of its own standard error
    ratios = rng.normal(0.0, sigma, (2000, k)).std(1, ddof=1) / sigma
    covered = [low <= 1 <= high for low, high in (detectable_interval(r, k - 1) for r in ratios)]
    assert abs(np.mean(covered) - 0.95) < 3 * np.sqrt(0.95 * 0.05 / 2000)
    low, high = detectable_interval(0.29, 2)
    assert (round(low, 2), round(high, 1)) == (0.15, 1.8)
