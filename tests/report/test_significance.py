"""What a significance mark can rest on: enough bootstrap resamples for a table's Holm correction, resamples
drawn in bounded chunks with the same bytes, no p without spread, and ROUGE paired on the runs both sides have."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from workflow_lib.report.contrasts import ALPHA, RESAMPLES, contrasts, paired_section
from workflow_lib.report.statistics import (
    Resampling,
    bootstrap_indices,
    bootstrap_mean_difference,
    holm,
    paired_t,
    percentile_estimate,
    resamples_for,
)

PAPER_TABLE = 96  # configs/paper.yaml's largest table: each objective against MLE


def write_condition(root: Path, objective: str, rouge: np.ndarray, mauve: list[float], test_intensity: str = "0") -> str:
    """A metrics JSON and its sidecar for `objective` trained without perturbation; rouge: [prompts, runs] ROUGE-1
    (ROUGE-2 and ROUGE-L are it scaled)."""
    tsyn, tst = ("none", "none") if test_intensity == "0" else ("distributional", "insertion")
    stem = root / (f"results/metrics/tiny/syn/{objective}/none/augment-m1/none-0/seed1/test/unbiased/"
                   f"{tsyn}/{tst}-{test_intensity}-exact")
    stem.parent.mkdir(parents=True, exist_ok=True)
    Path(f"{stem}.json").write_text(json.dumps({"mauve": mauve, "run_ids": list(range(len(mauve))), "runs": len(mauve)}))
    prompts, runs = np.meshgrid(np.arange(rouge.shape[0]), np.arange(rouge.shape[1]), indexing="ij")
    pl.DataFrame({"prompt_id": prompts.ravel().astype(np.int64), "run": runs.ravel().astype(np.int64),
                  "rouge1": rouge.ravel(), "rouge2": 0.5 * rouge.ravel(), "rougeL": 0.8 * rouge.ravel()}).write_parquet(
        f"{stem}.prompts.parquet")
    return str(Path(f"{stem}.json").relative_to(root))


def shifted(rng, n: int, z: float, sd: float = 0.05) -> np.ndarray:
    """n per-prompt differences with standard deviation `sd` whose mean is exactly z standard errors."""
    noise = rng.normal(size=n)
    return sd * (noise - noise.mean()) / noise.std(ddof=1) + z * sd / np.sqrt(n)


# ---- resamples -----------------------------------------------------------------------------------------


def test_resamples_grow_with_the_table_so_holm_can_reach_one_percent():
    assert resamples_for(10, RESAMPLES) == 2000 and resamples_for(16, RESAMPLES) == 3200
    b = resamples_for(PAPER_TABLE, RESAMPLES)
    assert b == 19200
    # the smallest p B resolves, in the table's first place, after Holm
    assert holm([2 / (b + 1)] + [1.0] * (PAPER_TABLE - 1))[0] <= 0.01
    # the old default could not mark any row of such a table once its p is honest
    assert holm([2 / (RESAMPLES + 1)] + [1.0] * (PAPER_TABLE - 1))[0] > ALPHA


def test_no_p_is_finer_than_the_resamples_resolve():
    for replicates in (np.full(500, 0.3), np.linspace(0.01, 1, 500), np.r_[-0.1, np.full(499, 0.2)]):
        assert percentile_estimate(0.3, replicates, 10).p >= 2 / 501
    assert percentile_estimate(0.3, np.r_[-0.1, np.full(499, 0.2)], 10).p == pytest.approx(4 / 501)
    with pytest.raises(ValueError, match="non-finite"):
        percentile_estimate(float("nan"), np.zeros(10), 10)


def test_chunks_draw_the_same_resamples_whatever_their_size():
    whole = bootstrap_indices(37, 300, "identity")
    assert np.array_equal(whole[120:170], bootstrap_indices(37, 50, "identity", start=120))
    assert whole.min() >= 0 and whole.max() == 36
    def statistic(rows):
        return rows.sum(axis=-1).astype(np.float64)

    small = Resampling(37, 300, "identity", chunk_elements=37 * 7).replicates(statistic)
    assert small.shape == (300,) and np.array_equal(small, statistic(whole))
    assert np.array_equal(small, Resampling(37, 300, "identity").replicates(statistic))
    a, b = np.linspace(0, 1, 37), np.zeros(37)
    assert bootstrap_mean_difference(a, b, Resampling(37, 300, "identity", 50)) == bootstrap_mean_difference(a, b, whole)


def test_a_null_study_the_size_of_the_papers_tables_has_no_false_marks_and_a_real_effect_is_found():
    """95 comparisons with no effect and one shifted by 6 standard errors, one Holm table: only the shift is
    marked. With the old 2000 resamples and an honest p, the shift could not have been marked."""
    rng = np.random.default_rng(11)
    n, b = 60, resamples_for(PAPER_TABLE, RESAMPLES)
    differences = [rng.normal(0, 0.05, n) for _ in range(PAPER_TABLE - 1)] + [shifted(rng, n, 6.0)]
    estimates = [bootstrap_mean_difference(d, np.zeros(n), Resampling(n, b, f"null{k}")) for k, d in enumerate(differences)]
    marked = [p < ALPHA for p in holm([e.p for e in estimates])]
    assert marked == [False] * (PAPER_TABLE - 1) + [True]
    old_b = [bootstrap_mean_difference(d, np.zeros(n), Resampling(n, RESAMPLES, f"null{k}")).p for k, d in enumerate(differences)]
    assert not any(p < ALPHA for p in holm(old_b))


def test_a_null_row_is_not_marked_by_the_resampling_floor(tmp_path, monkeypatch):
    """96 objective-vs-MLE comparisons: 94 with no effect, one real (10 standard errors), and one null row whose
    sample happens to lie 3.4 standard errors out (t-test p x 96 = 0.093: no mark). None of the old 2000
    resamples of that row fell beyond 0, and the old p, floored at 1/2000, made Holm's 96 x 0.0005 = 0.048 a
    mark; 19200 resamples resolve its p (0.00135, Holm 0.13), and only the real effect is marked."""
    from scipy import stats

    monkeypatch.chdir(tmp_path)
    rng = np.random.default_rng(5)
    n = 100
    base = rng.uniform(0.2, 0.5, (n, 1))
    paths = [write_condition(tmp_path, "mle", base, [0.7])]
    for k in range(PAPER_TABLE):
        d = {94: shifted(np.random.default_rng(6), n, 3.4), 95: shifted(rng, n, 10.0)}.get(k, rng.normal(0, 0.05, n))
        paths.append(write_condition(tmp_path, f"obj{k:02d}", base + d[:, None], [0.7]))
    assert 2 * stats.t.sf(3.4, n - 1) * PAPER_TABLE > ALPHA
    frame = contrasts(paths, 0.025).filter(pl.col("family") == "objective")
    rouge = frame.filter(pl.col("metric") == "rouge1")
    assert rouge.height == PAPER_TABLE and set(rouge["resamples"]) == {19200}
    assert rouge.filter(pl.col("significant"))["objective"].to_list() == ["obj95"]
    borderline = rouge.filter(pl.col("objective") == "obj94").row(0, named=True)
    assert borderline["p"] > 2 / 19201 and borderline["p_holm"] > ALPHA
    assert frame.filter(pl.col("metric") == "mauve")["p"].null_count() == PAPER_TABLE  # one run: no p
    assert "(paired bootstrap over prompts, B = 19200)" in paired_section(frame)


# ---- no spread, no p -----------------------------------------------------------------------------------


def test_runs_that_all_moved_by_the_same_amount_have_no_p_and_no_mark(tmp_path, monkeypatch):
    est = paired_t([0.8, 0.7, 0.9], [0.7, 0.6, 0.8])
    assert est.p is None and est.low is None and est.high is None and est.difference == pytest.approx(0.1)
    runs = np.array([0.61, 0.74, 0.69])
    assert paired_t(runs - 0.25, runs - 0.3).p is None  # rounding makes the differences unequal in the last bit
    assert holm([None, 0.01, 0.04]) == [None, pytest.approx(0.02), pytest.approx(0.04)]

    monkeypatch.chdir(tmp_path)
    rouge = np.random.default_rng(2).uniform(0.2, 0.5, (20, 3))
    paths = [write_condition(tmp_path, "mle", rouge, list(runs - 0.3)),
             write_condition(tmp_path, "mle", rouge + 0.01, list(runs - 0.25), test_intensity="0.025")]
    frame = contrasts(paths, 0.025)
    mauve = frame.filter(pl.col("metric") == "mauve").row(0, named=True)
    assert (mauve["a"], mauve["p"], mauve["p_holm"], mauve["low"], mauve["significant"]) == ("TestPerturb", None, None, None, False)
    assert mauve["favours"] == "perturbation" and mauve["resamples"] is None
    assert "| TestPerturb vs NoPerturb | +0.050 | — |  |" in paired_section(frame)


# ---- ROUGE on the runs both sides have -----------------------------------------------------------------


def test_rouge_pairs_only_the_runs_both_conditions_have(tmp_path, monkeypatch):
    """A has runs 0, 1 and 2, B only 0 and 1; A's run 2 is far off. The difference is over runs 0 and 1."""
    monkeypatch.chdir(tmp_path)
    rng = np.random.default_rng(4)
    b = rng.uniform(0.2, 0.5, (30, 2))
    a = np.c_[b + 0.02, b[:, :1] + 0.4]
    paths = [write_condition(tmp_path, "mle", b, [0.6, 0.7]), write_condition(tmp_path, "emo", a, [0.62, 0.72, 0.9])]
    frame = contrasts(paths, 0.025)
    rouge = frame.filter(pl.col("metric") == "rouge1").row(0, named=True)
    assert rouge["difference"] == pytest.approx(0.02, abs=1e-12) and rouge["n"] == 30
    mauve = frame.filter(pl.col("metric") == "mauve").row(0, named=True)
    assert mauve["n"] == 2 and mauve["difference"] == pytest.approx(0.02)
