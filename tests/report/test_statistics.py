"""What a significance mark can rest on: enough random swaps for a table's Holm correction, swaps drawn in bounded
chunks with the same bytes, no p without spread or with too few prompts, and ROUGE paired on the runs both sides
have."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from workflow_lib.comparisons import resamples_for
from workflow_lib.report.contrasts import ALPHA, RESAMPLES, contrasts
from workflow_lib.report.paired_tables import paired_section
from workflow_lib.report.statistics import (
    Permutations,
    holm,
    paired_t,
    permutation_mean_difference,
    permutation_mean_differences,
    swap_masks,
)

PAPER_TABLE = 96  # configs/paper.yaml's largest table: each objective against MLE


def write_condition(
    root: Path, objective: str, rouge: np.ndarray, mauve: list[float], test_intensity: str = "0"
) -> str:
    """A metrics JSON and its sidecar for `objective` trained without perturbation; rouge: [prompts, runs] ROUGE-1
    (ROUGE-2 and ROUGE-L are it scaled)."""
    tsyn, tst = ("none", "none") if test_intensity == "0" else ("distributional", "insertion")
    stem = root / (
        f"results/metrics/tiny/syn/{objective}/none/augment-m1/none-0/seed1/test/unbiased/"
        f"{tsyn}/{tst}-{test_intensity}-exact"
    )
    stem.parent.mkdir(parents=True, exist_ok=True)
    Path(f"{stem}.json").write_text(
        json.dumps({"mauve": mauve, "run_ids": list(range(len(mauve))), "runs": len(mauve)})
    )
    prompts, runs = np.meshgrid(np.arange(rouge.shape[0]), np.arange(rouge.shape[1]), indexing="ij")
    pl.DataFrame(
        {
            "prompt_id": prompts.ravel().astype(np.int64),
            "run": runs.ravel().astype(np.int64),
            "rouge1": rouge.ravel(),
            "rouge2": 0.5 * rouge.ravel(),
            "rougeL": 0.8 * rouge.ravel(),
        }
    ).write_parquet(f"{stem}.prompts.parquet")
    return str(Path(f"{stem}.json").relative_to(root))


def shifted(rng, n: int, z: float, sd: float = 0.05) -> np.ndarray:
    """n per-prompt differences with standard deviation `sd` whose mean is exactly z standard errors."""
    noise = rng.normal(size=n)
    return sd * (noise - noise.mean()) / noise.std(ddof=1) + z * sd / np.sqrt(n)


# ---- swaps ---------------------------------------------------------------------------------------------


def test_swaps_grow_with_the_table_so_holm_can_reach_one_percent():
    assert resamples_for(10, RESAMPLES) == 2000 and resamples_for(16, RESAMPLES) == 3200
    b = resamples_for(PAPER_TABLE, RESAMPLES)
    assert b == 19200
    # the smallest p B random swaps give, in the table's first place, after Holm
    assert holm([Permutations(5000, b, "x").smallest_p] + [1.0] * (PAPER_TABLE - 1))[0] <= 0.01
    # 2000 swaps would leave such a table's best row at 96/2001, a hair under the level
    assert holm([Permutations(5000, RESAMPLES, "x").smallest_p] + [1.0] * (PAPER_TABLE - 1))[0] > 0.01


def test_no_p_is_finer_than_the_swaps_resolve_and_too_few_prompts_are_not_testable():
    """A difference every swap moves away from: p is 1/(B + 1) by Monte Carlo, 2/2^n when all 2^n swaps are
    enumerated; with 5 prompts 2/32 > 0.05, so the row is not testable ("5 prompts"), not "no difference"."""
    far = permutation_mean_difference(np.full(40, 0.9), np.full(40, 0.1), Permutations(40, 2000, "x"))
    assert far.p == pytest.approx(1 / 2001) and far.untested is None
    exact = permutation_mean_difference(np.arange(1, 11) / 10, np.zeros(10), Permutations(10, 2000, "x"))
    assert exact.p == pytest.approx(2 / 1024) and Permutations(10, 2000, "x").exact
    few = permutation_mean_difference(np.full(5, 0.9), np.full(5, 0.1), Permutations(5, 2000, "x"))
    assert (few.p, few.untested, few.difference) == (None, "5 prompts", pytest.approx(0.8))
    assert few.low is not None  # the interval stays: it describes, it marks nothing
    assert permutation_mean_difference(np.full(6, 0.9), np.full(6, 0.1), Permutations(6, 2000, "x")).p == pytest.approx(
        2 / 64
    )
    with pytest.raises(ValueError, match=r"^permutation test: a non-finite per-prompt value; no estimate is made$"):
        permutation_mean_difference(np.array([np.nan, 0.1]), np.zeros(2), Permutations(2, 2000, "x"))


def test_chunks_draw_the_same_swaps_whatever_their_size():
    whole = swap_masks(137, 300, "identity")
    assert np.array_equal(whole[120:170], swap_masks(137, 50, "identity", start=120))
    assert set(np.unique(whole)) == {0.0, 1.0} and abs(whole.mean() - 0.5) < 0.01
    assert not np.array_equal(whole, swap_masks(137, 300, "other"))
    rng = np.random.default_rng(0)
    a, b = rng.uniform(0, 1, (3, 137)), rng.uniform(0, 1, (3, 137)) + 0.05
    one_go = permutation_mean_differences(a, b, Permutations(137, 3000, "identity"))
    assert permutation_mean_differences(a, b, Permutations(137, 3000, "identity", chunk_elements=137 * 7)) == one_go
    assert permutation_mean_differences(a, b, Permutations(137, 3000, "other identity")) != one_go


def test_a_null_study_the_size_of_the_papers_tables_has_no_false_marks_and_a_real_effect_is_found():
    """95 comparisons with no effect and one shifted by 6 standard errors, one Holm table: only the shift is
    marked (tests/report/test_calibration.py checks the error rate over many such studies)."""
    rng = np.random.default_rng(11)
    n, b = 60, resamples_for(PAPER_TABLE, RESAMPLES)
    differences = [rng.normal(0, 0.05, n) for _ in range(PAPER_TABLE - 1)] + [shifted(rng, n, 6.0)]
    estimates = [
        permutation_mean_difference(d, np.zeros(n), Permutations(n, b, f"null{k}")) for k, d in enumerate(differences)
    ]
    marked = [p < ALPHA for p in holm([e.p for e in estimates])]
    assert marked == [False] * (PAPER_TABLE - 1) + [True]


def test_a_null_row_is_not_marked_by_the_resampling_floor(tmp_path, monkeypatch):
    """96 objective-vs-MLE comparisons: 94 with no effect, one real (10 standard errors), and one null row whose
    sample happens to lie 3.4 standard errors out (t-test p x 96 = 0.093: no mark). 19200 swaps resolve its p
    (about 0.0007, Holm about 0.07), and only the real effect is marked. (The earlier bootstrap's p, floored at
    1/2000, made Holm's 96 x 0.0005 = 0.048 a mark.)"""
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
    assert borderline["p"] > 1 / 19201 and borderline["p_holm"] > ALPHA
    mauve = frame.filter(pl.col("metric") == "mauve")
    assert mauve["p"].null_count() == PAPER_TABLE and set(mauve["not_testable"]) == {"1 run"}  # one run: no p
    section = paired_section(frame)
    assert "(paired permutation test over prompts, B = 19200)" in section
    assert "| not testable (1 run) |" in section


# ---- no spread, no p -----------------------------------------------------------------------------------


def test_runs_that_all_moved_by_the_same_amount_have_no_p_and_no_mark(tmp_path, monkeypatch):
    est = paired_t([0.8, 0.7, 0.9], [0.7, 0.6, 0.8])
    assert est.p is None and est.low is None and est.high is None and est.difference == pytest.approx(0.1)
    assert est.untested == "no spread"
    runs = np.array([0.61, 0.74, 0.69])
    assert paired_t(runs - 0.25, runs - 0.3).p is None  # rounding makes the differences unequal in the last bit
    assert holm([None, 0.01, 0.04]) == [None, pytest.approx(0.02), pytest.approx(0.04)]

    monkeypatch.chdir(tmp_path)
    rouge = np.random.default_rng(2).uniform(0.2, 0.5, (20, 3))
    paths = [
        write_condition(tmp_path, "mle", rouge, list(runs - 0.3)),
        write_condition(tmp_path, "mle", rouge + 0.01, list(runs - 0.25), test_intensity="0.025"),
    ]
    frame = contrasts(paths, 0.025)
    mauve = frame.filter(pl.col("metric") == "mauve").row(0, named=True)
    assert (mauve["a"], mauve["p"], mauve["p_holm"], mauve["low"], mauve["significant"]) == (
        "TestPerturb",
        None,
        None,
        None,
        False,
    )
    assert mauve["favours"] == "perturbation" and mauve["resamples"] is None and mauve["not_testable"] == "no spread"
    assert "| TestPerturb vs NoPerturb | +0.050 | not testable (no spread) |  |" in paired_section(frame)


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


def test_a_comparison_of_too_few_prompts_is_not_testable_and_leaves_holms_table(tmp_path, monkeypatch):
    """5 prompts: even all 32 swaps cannot give p < 0.05 (2/32), so ROUGE is "not testable (5 prompts)" and counts
    in no Holm table; 6 prompts that all moved the same way reach 2/64 and are marked."""
    monkeypatch.chdir(tmp_path)
    rng = np.random.default_rng(8)
    base5, base6 = rng.uniform(0.2, 0.5, (5, 3)), rng.uniform(0.2, 0.5, (6, 3))
    five = [
        write_condition(tmp_path, "mle", base5, [0.6, 0.7, 0.65]),
        write_condition(tmp_path, "mle", base5 + 0.1, [0.61, 0.72, 0.64], test_intensity="0.025"),
    ]
    rouge = contrasts(five, 0.025).filter(pl.col("metric") == "rouge1").row(0, named=True)
    assert (rouge["p"], rouge["p_holm"], rouge["significant"], rouge["not_testable"]) == (
        None,
        None,
        False,
        "5 prompts",
    )
    assert rouge["difference"] == pytest.approx(0.1) and rouge["resamples"] == 32
    section = paired_section(contrasts(five, 0.025))
    assert "| not testable (5 prompts) |" in section and "all 32 swaps (exact)" in section
    (tmp_path / "results").rename(tmp_path / "five")
    six = [
        write_condition(tmp_path, "mle", base6, [0.6, 0.7, 0.65]),
        write_condition(tmp_path, "mle", base6 + 0.1, [0.61, 0.72, 0.64], test_intensity="0.025"),
    ]
    rouge = contrasts(six, 0.025).filter(pl.col("metric") == "rouge1").row(0, named=True)
    assert rouge["p"] == pytest.approx(2 / 64) and rouge["significant"] and rouge["not_testable"] is None
