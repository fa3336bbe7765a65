"""The simulation study's controls: the shrinkage regulariser and its held-out tuning, the paired tests with Holm's
correction (their level on null studies, their power on a planted difference), the sentences, the outputs."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from scipy import stats

from workflow_lib.simulation import regulariser
from workflow_lib.simulation.conclusions import conclusions, evidence
from workflow_lib.simulation.regulariser import heldout_nll, heldout_pairs, shrink, tune_shrinkage
from workflow_lib.simulation.statistics import (
    LEVEL,
    holm,
    minimum_detectable,
    paired_t,
    paired_tests,
    tuning_summary,
)
from workflow_lib.simulation.study import HELDOUT, TRUTH, fit_vocabulary, sample_sequences, sample_truth, stream
from workflow_lib.simulation.summary import conclusions_markdown, markdown, summarize

# --- the regulariser -----------------------------------------------------------------------------------------------


def mixture_pairs(Q: np.ndarray, lam: float, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """n (a, b) pairs with a uniform and b ~ (1 - lam) Q[a] + lam / V: data whose best shrinkage of Q is lam."""
    rng = np.random.default_rng(seed)
    V = len(Q)
    cond = rng.integers(V, size=n)
    cumulative = np.cumsum(shrink(Q, lam), axis=1)
    target = np.minimum((cumulative[cond] < rng.random(n)[:, None]).sum(1), V - 1)
    return cond, target


@pytest.mark.parametrize("planted", [0.0, 0.3, 0.7])
def test_tuning_recovers_a_planted_lambda(planted):
    """Held-out pairs drawn from (1 - lam) Q + lam/V: maximising their likelihood over lambda finds lam (the
    mixture weight's maximum likelihood estimate, within its sampling error at 200,000 pairs)."""
    Q = np.random.default_rng(1).dirichlet(np.full(20, 0.5), size=20)
    cond, target = mixture_pairs(Q, planted, 200_000, seed=2)
    assert tune_shrinkage(Q, cond, target) == pytest.approx(planted, abs=0.02)


def test_tuning_is_the_exact_maximiser_and_reaches_both_ends():
    Q = np.random.default_rng(3).dirichlet(np.full(12, 0.5), size=12)
    cond, target = mixture_pairs(Q, 0.4, 300, seed=4)
    lam = tune_shrinkage(Q, cond, target)

    def loglik(x):
        return -heldout_nll(shrink(Q, x), cond, target)

    grid = np.linspace(0, 1, 2001)
    assert loglik(lam) >= max(loglik(x) for x in grid) - 1e-12
    # The estimate is right on every held-out pair: no shrinkage helps.
    exact = np.eye(12)[[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 0]]
    a = np.arange(12).repeat(5)
    assert tune_shrinkage(exact * 0.99 + 0.01 / 12, a, (a + 1) % 12) == 0.0
    # The estimate puts less than 1/|V| on every held-out pair: the uniform predictor (lambda = 1) is best.
    assert tune_shrinkage(exact, a, (a + 2) % 12) == 1.0
    # A pair of probability 0 (a float32 softmax can underflow) is no error: any lambda > 0 gives it mass.
    assert 0 < tune_shrinkage(exact, np.array([0, 0]), np.array([1, 5])) < 1


def test_shrinkage_keeps_rows_distributions_and_lambda_one_is_uniform():
    Q = np.random.default_rng(5).dirichlet(np.full(7, 0.5), size=7)
    assert np.allclose(shrink(Q, 0.3).sum(1), 1.0)
    assert np.allclose(shrink(Q, 1.0), 1 / 7) and np.array_equal(shrink(Q, 0.0), Q)


SMALL = {
    "seed": 7,
    "replications": 2,
    "intensities": [0, 0.5],
    "synonyms": ["oracle", "empirical"],
    "shrinkage": True,
    "heldout_sequences": 40,
    "n_sequences": 30,
    "seq_len": 6,
    "dirichlet": 0.5,
    "threshold_factor": 2,
    "batch_unit": "pairs",
    "embedding_dim": 6,
    "hidden_dim": 6,
    "epochs": 2,
    "batch_size": 40,
}


def test_the_control_is_tuned_on_held_out_sequences_only(monkeypatch):
    """The tuning is handed the intensity-0 fit and the pairs of held-out sequences drawn from the replication's
    truth on their own stream (seed, V, r, HELDOUT): never M, never the training data. The control's row is that
    fit shrunk by what the tuning returned, and nothing else in the fits changes when the held-out set does."""
    V, seen = 9, []

    def spy(M_hat, cond, target):
        lam = tune_shrinkage(M_hat, cond, target)
        seen.append((M_hat.copy(), cond.copy(), target.copy(), lam))
        return lam

    monkeypatch.setattr(regulariser, "tune_shrinkage", spy)
    rows = fit_vocabulary(V, SMALL)
    control = [r for r in rows if r["arm"] == "shrinkage"]
    assert [r["replication"] for r in control] == [0, 1] and len(seen) == 2
    for rep, (M_hat, cond, target, lam) in enumerate(seen):
        M, _x = sample_truth(V, 30, 6, 0.5, np.random.default_rng(stream(7, V, rep, TRUTH)))
        held = sample_sequences(M, 40, 6, np.random.default_rng(stream(7, V, rep, HELDOUT)))
        expected = heldout_pairs(held)
        assert np.array_equal(cond, expected[0]) and np.array_equal(target, expected[1])
        assert control[rep]["shrinkage"] == lam
        assert control[rep]["heldout_nll"] == pytest.approx(heldout_nll(shrink(M_hat, lam), cond, target))
        base = next(r for r in rows if r["arm"] == "oracle" and r["intensity"] == 0 and r["replication"] == rep)
        assert base["heldout_nll"] == pytest.approx(heldout_nll(M_hat, cond, target))  # M_hat: the alpha = 0 fit
    monkeypatch.undo()
    more = fit_vocabulary(V, {**SMALL, "heldout_sequences": 80})
    fits = ["mae_unseen_pairs", "mae_all", "n_replaced"]
    assert [[r[k] for k in fits] for r in more if r["arm"] != "shrinkage"] == [
        [r[k] for k in fits] for r in rows if r["arm"] != "shrinkage"
    ]
    assert fit_vocabulary(V, SMALL) == rows  # same settings, same seed: the same rows


# --- the paired tests ----------------------------------------------------------------------------------------------


def test_paired_t_is_scipys_with_a_t_interval_and_holm_steps_down():
    rng = np.random.default_rng(0)
    a, b = rng.normal(1.0, 1.0, 12), rng.normal(0.5, 1.0, 12)
    out = paired_t(a, b)
    d = a - b
    assert out["p"] == pytest.approx(stats.ttest_rel(a, b).pvalue)
    half = stats.t.ppf(0.975, 11) * d.std(ddof=1) / np.sqrt(12)
    assert (out["low"], out["high"]) == pytest.approx((d.mean() - half, d.mean() + half))
    assert paired_t(a, a)["p"] is None  # the same estimate: nothing to test
    assert paired_t(a[:1], b[:1])["p"] is None
    assert holm([0.01, None, 0.04, 0.03]) == pytest.approx([0.03, None, 0.06, 0.06])
    # The MDE is the difference such a test detects with 80% power (checked by simulation).
    mde = minimum_detectable(1.0, 20, 0.05)
    hits = np.mean([stats.ttest_1samp(rng.normal(mde, 1.0, 20), 0).pvalue < 0.05 for _ in range(4000)])
    assert hits == pytest.approx(0.8, abs=0.03)


ALPHAS = (0.1, 0.3, 0.5, 1.0)
VOCABS = (50, 100, 200, 400, 800)


def synthetic_results(
    rng: np.random.Generator,
    reps: int,
    shifts: dict | None = None,
    vocabs=VOCABS,
    sd: float = 1e-4,
    tuned_pick_zero: bool = False,
) -> pl.DataFrame:
    """A study's fit rows at `make simulation`'s shape (5 |V| x reps x (1 + 2 rules x 4 alphas) + the control)
    where every arm's MAE on unseen pairs is the replication's level plus independent noise: no arm differs from
    any other, nor from the uniform predictor, unless `shifts[(vocab, arm, alpha)]` adds a difference. Held-out
    NLLs are noise, so the tuned arms pick at random; with `tuned_pick_zero` they pick alpha = 0 throughout."""
    shifts = shifts or {}
    cols: dict[str, list] = {k: [] for k in ("vocab_size", "replication", "arm", "intensity", "shrinkage")}
    cols |= {"heldout_nll": [], "mae_unseen_pairs": [], "uniform_unseen_pairs": []}
    for vocab in vocabs:
        level = rng.normal(0.005, 0.0005, reps)
        uniform = level + rng.normal(0, sd, reps)
        base = level + rng.normal(0, sd, reps)
        base_nll = rng.normal(2.9 if tuned_pick_zero else 3.0, 0.01, reps)
        arms = [(rule, alpha) for rule in ("oracle", "empirical") for alpha in (0.0, *ALPHAS)] + [("shrinkage", None)]
        for arm, alpha in arms:
            if alpha == 0:
                mae, nll = base, base_nll
            else:
                mae = level + rng.normal(0, sd, reps) + shifts.get((vocab, arm, alpha), 0.0)
                nll = rng.normal(3.0, 0.01, reps)
            cols["vocab_size"] += [vocab] * reps
            cols["replication"] += list(range(reps))
            cols["arm"] += [arm] * reps
            cols["intensity"] += [alpha] * reps
            cols["shrinkage"] += [0.2 if alpha is None else None] * reps
            cols["heldout_nll"] += list(nll)
            cols["mae_unseen_pairs"] += list(mae)
            cols["uniform_unseen_pairs"] += list(uniform)
    return pl.DataFrame(cols, schema_overrides={"intensity": pl.Float64, "shrinkage": pl.Float64})


@pytest.mark.parametrize("reps", [3, 100])
def test_null_studies_mark_nothing_at_the_level(reps):
    """200 studies in which no arm differs (at the default study's 3 replications and at `make simulation`'s
    100): Holm's family-wise error, the share of studies with any mark, stays at or below 5% (within its
    binomial error), and the unadjusted tests reject at about their 5% level."""
    rng = np.random.default_rng(11)
    any_mark, raw = [], []
    for _ in range(200):
        tests = paired_tests(synthetic_results(rng, reps))
        any_mark.append(bool((tests["verdict"].is_in(["a lower", "a higher"])).any()))
        raw += (tests["p"].drop_nulls() < LEVEL).to_list()
    assert tests.height == 5 * (8 + 3 + 4 + 6)  # the family: every |V| x (panels, vs alpha 0, vs uniform, contrasts)
    # Holm controls the family-wise error at 5%: over 200 studies P(18 or more | 5%) < 0.01.
    assert sum(any_mark) < 18
    assert np.mean(raw) == pytest.approx(LEVEL, abs=0.015)


def test_a_planted_difference_is_found_and_said_in_words():
    """Empirical synonyms at alpha = 1 lower the MAE at |V| = 400 by 4 noise SDs; nothing else differs (and the
    held-out data pick alpha = 0, so the tuned arms are the unperturbed model). The tests mark that panel and its
    contrasts against the uniform predictor, the regulariser and the oracle, and the sentences say the gain
    survives without the oracle at 400 and not elsewhere."""
    rng = np.random.default_rng(12)
    results = synthetic_results(rng, 100, shifts={(400, "empirical", 1.0): -4e-4}, tuned_pick_zero=True)
    tests = paired_tests(results)
    marked = tests.filter(pl.col("verdict").is_in(["a lower", "a higher"]))
    assert set(zip(marked["vocab_size"], marked["kind"], marked["a"], marked["b"])) == {
        (400, "panel", "empirical, α = 1", "unperturbed"),
        (400, "vs uniform", "empirical, α = 1", "uniform"),
        (400, "contrast", "empirical, α = 1", "shrinkage"),
        (400, "contrast", "oracle, α = 1", "empirical, α = 1"),
    }
    assert set(marked.filter(pl.col("a") == "empirical, α = 1")["verdict"]) == {"a lower"}
    planted = tests.filter(
        (pl.col("vocab_size") == 400) & (pl.col("a") == "empirical, α = 1") & (pl.col("kind") == "panel")
    )
    assert planted["low"][0] < -4e-4 < planted["high"][0] < 0  # the interval holds the planted difference, not 0
    sentences = conclusions(tests, tuning_summary(results))
    survives = [s for s in sentences if s.startswith("Perturbation's gain on unseen pairs survives without the oracle")]
    assert len(survives) == 1 and "|V| = 400" in survives[0]
    against = [s for s in sentences if s.startswith("Against the regulariser at |V| = 400: empirical synonyms")]
    assert len(against) == 1 and "beat shrinkage toward uniform" in against[0]


def test_sentences_give_no_direction_to_a_difference_not_detected():
    rng = np.random.default_rng(13)
    results = synthetic_results(rng, 3, vocabs=(200,))
    tests = paired_tests(results)
    sentences = conclusions(tests, tuning_summary(results))
    assert all(v in ("not detected", "identical") for v in tests["verdict"])  # 3 replications: nothing is marked
    directions = ("beat", "is worse", "are worse", "is better", " lower the", " raise", "lowers", "raises", "survives")
    for sentence in sentences[:-1]:  # the last one reports the tuning
        assert not any(word in sentence for word in directions), sentence
    uniform = [s for s in sentences if "the trained model without perturbation" in s]
    assert len(uniform) == 1 and "cannot be told apart from the uniform predictor" in uniform[0]
    assert "the smallest difference it could detect at 80% power: ±" in uniform[0]
    row = tests.row(0, named=True)
    assert evidence(row).startswith("difference ") and "p_holm = " in evidence(row)
    assert any("is not detected without the oracle at |V| = 200" in s for s in sentences)
    assert sentences[-1].startswith("|V| = 200: the held-out sequences chose λ = 0.200 on average")


def test_summary_markdown_carries_the_conclusions_tests_and_intervals():
    rng = np.random.default_rng(14)
    results = synthetic_results(rng, 5, vocabs=(50, 400), shifts={(400, "oracle", 1.0): -5e-4})
    full = results.with_columns(
        **{c: pl.lit(None, pl.Float64) for c in ("mae_unseen_rows", "uniform_unseen_rows")},
        mae_all=pl.col("mae_unseen_pairs"),
        uniform_all=pl.col("uniform_unseen_pairs"),
        **{c: pl.lit(0, pl.Int32) for c in ("n_unseen_rows", "n_eligible", "n_replaced", "n_unseen_rows_perturbed")},
        n_unseen_pairs=pl.lit(100, pl.Int32),
    )
    tests = paired_tests(full)
    sentences = conclusions(tests, tuning_summary(full))
    summary = summarize(full, tests)
    shrinkage = summary.filter(pl.col("arm") == "shrinkage")
    assert shrinkage.height == 2 and shrinkage["intensity"].is_null().all()
    assert shrinkage["shrinkage_mean"].to_list() == pytest.approx([0.2, 0.2])
    panel = summary.filter((pl.col("arm") == "oracle") & (pl.col("intensity") == 1.0) & (pl.col("vocab_size") == 400))
    assert panel["diff_unseen_pairs_low"][0] < panel["diff_unseen_pairs_mean"][0] < panel["diff_unseen_pairs_high"][0]
    assert panel["p_holm"][0] is not None
    text = markdown(summary, tests, sentences)
    assert "### Conclusions" in text and f"family of all {tests['p_holm'].drop_nulls().len()} tests" in text
    assert "| 400 | contrast | oracle, α = 1 | empirical, α = 1 |" in text
    assert "λ tuned (mean 0.200)" in text
    assert conclusions_markdown(sentences).count("\n- ") == len(sentences) - 1
