"""Paired comparisons: the statistics on arrays, the pairing of a study's conditions, and a byte-stable CSV."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from workflow_lib.report.contrasts import contrasts
from workflow_lib.report.paired_tables import paired_section, study_sentences
from workflow_lib.report.statistics import (
    Permutations,
    holm,
    paired_t,
    permutation_mean_difference,
    permutation_perplexity_difference,
)

REPO = Path(__file__).resolve().parents[2]
MODEL = "results/{kind}/tiny/syn/{obj}/{syn}/augment-m1/{st}-{ti}/seed1/"
SAMPLING = "{es}/{decoder}/{tsyn}/{tst}-{tti}-exact"


def _condition(kind, obj, ti, tti=None, es="test", decoder="unbiased"):
    syn, st = ("none", "none") if float(ti) == 0 else ("distributional", "insertion")
    path = MODEL.format(kind=kind, obj=obj, syn=syn, st=st, ti=ti)
    if tti is None:
        return path + es
    tsyn, tst = ("none", "none") if float(tti) == 0 else ("distributional", "insertion")
    return path + SAMPLING.format(es=es, decoder=decoder, tsyn=tsyn, tst=tst, tti=tti)


def write_metrics(root: Path, obj, ti, tti, mauve, rouge, es="test", decoder="unbiased") -> str:
    """A metrics JSON with per-run MAUVE and its per-prompt sidecar; rouge: [prompts, runs] ROUGE-1 (ROUGE-2/L
    are ROUGE-1 scaled)."""
    stem = root / _condition("metrics", obj, ti, tti, es, decoder)
    stem.parent.mkdir(parents=True, exist_ok=True)
    json_path = Path(f"{stem}.json")  # not with_suffix: "insertion-0.025-exact" has a dot of its own
    json_path.write_text(json.dumps({"mauve": list(mauve), "run_ids": list(range(len(mauve))),
                                                     "runs": len(mauve), "prompts": rouge.shape[0]}))
    prompts, runs = np.meshgrid(np.arange(rouge.shape[0]), np.arange(rouge.shape[1]), indexing="ij")
    pl.DataFrame({"prompt_id": prompts.ravel().astype(np.int64), "run": runs.ravel().astype(np.int64),
                  "rouge1": rouge.ravel(), "rouge2": 0.5 * rouge.ravel(), "rougeL": 0.8 * rouge.ravel()}).write_parquet(
        f"{stem}.prompts.parquet")
    return str(json_path.relative_to(root))


def write_perplexity(root: Path, obj, ti, nll, tokens, es="test") -> str:
    stem = root / _condition("perplexity", obj, ti, es=es)
    stem.parent.mkdir(parents=True, exist_ok=True)
    json_path = Path(f"{stem}.json")
    json_path.write_text(json.dumps({"perplexity": float(np.exp(nll.sum() / tokens.sum()))}))
    pl.DataFrame({"prompt_id": np.arange(len(nll), dtype=np.int64), "nll": nll, "tokens": tokens.astype(np.int64)}).write_parquet(
        f"{stem}.prompts.parquet")
    return str(json_path.relative_to(root))


# ---- statistics ----------------------------------------------------------------------------------------


def test_paired_t_interval_excludes_zero_for_conditions_built_to_differ():
    rng = np.random.default_rng(1)
    base = rng.uniform(0.6, 0.9, 10)  # run-to-run variation shared by both arms (same prompts, same seeds)
    better = base + 0.05 + rng.normal(0, 0.01, 10)
    est = paired_t(better, base)
    assert est.n == 10 and est.low > 0 and abs(est.difference - 0.05) < 0.01 and est.p < 1e-6
    # unpaired, the shared variation would swamp the difference; paired it does not
    assert est.high - est.low < 0.05


def test_a_condition_against_itself_is_no_difference():
    x = np.array([0.71, 0.74, 0.69, 0.80])
    assert tuple(paired_t(x, x.copy())) == (0.0, 0.0, 0.0, 1.0, 4, None)
    y = np.linspace(0.1, 0.9, 40)
    same = permutation_mean_difference(y, y.copy(), Permutations(40, 200, "self"))
    assert (same.difference, same.low, same.high, same.p, same.untested) == (0.0, 0.0, 0.0, 1.0, None)
    tokens = np.full(40, 30.0)
    ppl = permutation_perplexity_difference(y * tokens, tokens, y * tokens, tokens, Permutations(40, 200, "self"))
    assert (ppl.difference, ppl.low, ppl.high, ppl.p) == (0.0, 0.0, 0.0, 1.0)


def test_one_run_has_no_interval_and_no_p():
    est = paired_t([0.8], [0.7])
    assert est.low is None and est.high is None and est.p is None and est.n == 1
    assert est.difference == pytest.approx(0.1)


def test_t_intervals_cover_the_true_difference():
    """Over 400 synthetic studies of 30 prompts (the default study's size), the 95% t interval of a ROUGE-like
    mean difference (bounded, skewed, tied) and the linearised interval of a perplexity difference cover the truth
    about 95% of the time (at least 92%: 3 Monte Carlo standard errors under 95%)."""
    rng = np.random.default_rng(7)
    n, studies, covered_mean, covered_ppl = 30, 400, 0, 0
    for study in range(studies):
        level = rng.beta(2, 5, n)
        b = np.round(level * 30 + rng.normal(0, 2, n)).clip(0, 30) / 30
        a = np.round(level * 30 + rng.normal(0, 2, n)).clip(0, 30) / 30 + 0.03
        est = permutation_mean_difference(a, b, Permutations(n, 200, f"rep{study}"))
        covered_mean += est.low <= 0.03 <= est.high
        tokens = rng.integers(20, 60, n).astype(np.float64)
        rate = rng.gamma(9.0, 1 / 3.0, n)  # the prompt's own difficulty, shared by both models
        rate_a, rate_b = rate + rng.normal(0, 0.3, n), rate + 0.1 + rng.normal(0, 0.3, n)
        # the truth of a ratio of sums: exp(sum nll / sum tokens) under the expected rates
        truth = np.exp((tokens * rate).sum() / tokens.sum()) - np.exp((tokens * (rate + 0.1)).sum() / tokens.sum())
        ppl = permutation_perplexity_difference(rate_a * tokens, tokens, rate_b * tokens, tokens, Permutations(n, 200, f"rep{study}"))
        covered_ppl += ppl.low <= truth <= ppl.high
    assert covered_mean >= 0.92 * studies and covered_ppl >= 0.92 * studies


def test_the_permutation_p_is_scipys_exact_p_and_the_swaps_repeat():
    """With all 2^n swaps enumerated, p is scipy.stats.permutation_test's exact paired p, for a mean difference and
    for a perplexity difference (swap a prompt's NLL and tokens); the same identity draws the same swaps."""
    from scipy import stats

    rng = np.random.default_rng(5)
    for n in (6, 9, 11):
        a, b = rng.normal(0.3, 0.1, n), rng.normal(0.25, 0.1, n)
        ours = permutation_mean_difference(a, b, Permutations(n, 4000, "x"))
        theirs = stats.permutation_test((a, b), lambda x, y, axis: np.mean(x - y, axis=axis), permutation_type="samples",
                                        n_resamples=np.inf, vectorized=True)
        assert ours.p == pytest.approx(theirs.pvalue, rel=1e-12)
        tokens_a, tokens_b = rng.integers(20, 60, n).astype(float), rng.integers(20, 60, n).astype(float)
        nll_a, nll_b = tokens_a * rng.normal(3.0, 0.2, n), tokens_b * rng.normal(3.1, 0.2, n)

        def ppl_difference(na, ta, nb, tb, axis):
            return np.exp(na.sum(axis) / ta.sum(axis)) - np.exp(nb.sum(axis) / tb.sum(axis))

        # scipy's "samples" permutations swap one pair of samples; a prompt's (NLL, tokens) move together, so the
        # 2^n swaps are enumerated here by hand
        ours = permutation_perplexity_difference(nll_a, tokens_a, nll_b, tokens_b, Permutations(n, 4000, "x"))
        swaps = ((np.arange(2 ** n)[:, None] >> np.arange(n)) & 1).astype(bool)
        null = ppl_difference(np.where(swaps, nll_b, nll_a), np.where(swaps, tokens_b, tokens_a),
                              np.where(swaps, nll_a, nll_b), np.where(swaps, tokens_a, tokens_b), axis=1)
        observed = ppl_difference(nll_a, tokens_a, nll_b, tokens_b, axis=0)
        assert ours.p == pytest.approx(np.mean(np.abs(null) >= abs(observed) * (1 - 1e-9)), rel=1e-12)
    a, b = rng.normal(0.3, 0.1, 50), rng.normal(0.25, 0.1, 50)
    assert permutation_mean_difference(a, b, Permutations(50, 2000, "same")) == permutation_mean_difference(a, b, Permutations(50, 2000, "same"))


def test_holm_against_a_hand_computation():
    # sorted: 0.005, 0.01, 0.03, 0.04 (m = 4) -> 4*0.005 = 0.02, 3*0.01 = 0.03, 2*0.03 = 0.06, max(0.06, 1*0.04) = 0.06
    adjusted = holm([0.01, 0.04, 0.03, 0.005, None])
    assert adjusted[4] is None
    assert adjusted[:4] == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])


# ---- a study -------------------------------------------------------------------------------------------


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
            for decoder in (("unbiased", "top-p-0.9") if obj == "mle" else ("unbiased",)):
                mauve = runs_shared + shift + g + rng.normal(0, 0.005, 5)
                rouge = rouge_shared + shift + g / 4 + rng.normal(0, 0.01, rouge_shared.shape)
                paths.append(write_metrics(tmp_path, obj, ti, tti, mauve, rouge, decoder=decoder))
    paths.append(write_metrics(tmp_path, "untrained", "0", "0", runs_shared - 0.3, rouge_shared - 0.1))
    paths.append(write_metrics(tmp_path, "untrained", "0", "0.025", runs_shared - 0.25, rouge_shared - 0.1))
    tokens = rng.integers(20, 60, 60).astype(np.float64)
    for obj, ti, rate in (("mle", "0", 3.2), ("mle", "0.025", 3.0), ("emo", "0", 3.25), ("emo", "0.025", 3.05), ("untrained", "0", 4.0)):
        paths.append(write_perplexity(tmp_path, obj, ti, (rate + rng.normal(0, 0.2, 60)) * tokens, tokens))
    return paths


def test_the_studys_pairs_and_what_they_favour(study):
    frame = contrasts(study, 0.025)
    perturbation = frame.filter((pl.col("family") == "perturbation") & (pl.col("metric") == "mauve"))
    # mle on two decoders and emo on one; untrained never (it has no perturbed training)
    assert perturbation.select("objective", "decoder").rows() == [("emo", "unbiased"), ("mle", "top-p-0.9"), ("mle", "unbiased")]
    assert set(perturbation["a"]) == {"insertion 0.025"} and set(perturbation["b"]) == {"no perturbation"}
    assert perturbation["significant"].all() and set(perturbation["favours"]) == {"perturbation"}
    assert (perturbation["low"] > 0).all() and perturbation["method"][0] == "paired t over runs" and perturbation["n"][0] == 5
    rouge = frame.filter((pl.col("family") == "perturbation") & (pl.col("metric") == "rouge1"))
    assert rouge.height == 3 and (rouge["difference"] - 0.02).abs().max() < 0.01 and rouge["n"][0] == 60
    assert rouge["method"][0] == "paired permutation test over prompts" and rouge["resamples"][0] == 2000
    ppl = frame.filter((pl.col("family") == "perturbation") & (pl.col("metric") == "perplexity"))
    assert ppl.select("objective", "decoder").rows() == [("emo", ""), ("mle", "")]  # one per model pair, no decoder
    assert (ppl["difference"] < 0).all() and set(ppl["favours"]) == {"perturbation"}  # lower perplexity is better

    ablation = frame.filter((pl.col("family") == "ablation") & (pl.col("metric") == "mauve"))
    arms = {(r["objective"], r["decoder"], r["a"]): r for r in ablation.to_dicts()}
    assert set(arms) == {("mle", d, a) for d in ("unbiased", "top-p-0.9") for a in ("TrainPerturb", "TestPerturb", "Both")} | {
        ("emo", "unbiased", "Both"), ("untrained", "unbiased", "TestPerturb")}
    assert arms[("mle", "unbiased", "TestPerturb")]["favours"] == "no perturbation"

    objective = frame.filter(pl.col("family") == "objective")
    assert set(objective["objective"]) == {"emo"} and set(objective["b"]) == {"mle, no perturbation", "mle, insertion 0.025"}
    mauve = objective.filter(pl.col("metric") == "mauve")
    assert mauve.height == 2 and set(mauve["favours"]) == {"emo"}


def test_holm_runs_within_each_family_and_metric(study):
    frame = contrasts(study, 0.025)
    for (family, metric), part in frame.group_by(["family", "metric"]):
        assert part["p_holm"].to_list() == pytest.approx(holm(part["p"].to_list()))
        assert part["significant"].to_list() == [p is not None and p < 0.05 for p in part["p_holm"].to_list()]


def test_sentences_and_section(study):
    frame = contrasts(study, 0.025)
    sentences = study_sentences(frame)
    assert sentences[0] == "3 of 3 perturbation contrasts (MAUVE) favour perturbation; 3 of them are significant after Holm correction."
    # sampling-time perturbation alone hurts the trained mle (two decoders) and helps the untrained model, by the
    # same 0.05 in every run; the untrained one with no spread at all: no p, no mark, and counted as not testable
    assert ("1 of 3 TestPerturb-vs-NoPerturb contrasts (MAUVE) favour perturbation; 0 of them are significant after Holm "
            "correction; not testable: 1 of the 3 (no spread).") in sentences
    assert "2 of 2 emo-vs-MLE contrasts (MAUVE) favour emo; 0 of them are significant after Holm correction." in sentences
    section = paired_section(frame)
    assert "### With vs without perturbation: MAUVE (paired t over runs)" in section and "✱" in section
    assert "untrained (zero-shot)" in section and "| decoder |" in section


def test_the_csv_is_byte_identical_on_a_rerun(study, tmp_path):
    outputs = []
    for hash_seed in ("1", "2"):
        out = tmp_path / f"contrasts{hash_seed}.csv"
        env = {**os.environ, "PYTHONHASHSEED": hash_seed, "PYTHONPATH": str(REPO)}
        subprocess.run([sys.executable, "-m", "workflow_lib.report.contrasts", "--intensity", "0.025", "--output", str(out), *study],
                       check=True, env=env, cwd=tmp_path, capture_output=True)
        outputs.append(out.read_bytes())
    assert outputs[0] == outputs[1]
    header = outputs[0].decode().splitlines()[0]
    assert header == ("family,metric,model,dataset,objective,eval_set,decoder,seed,a,b,difference,low,high,p,p_holm,"
                      "significant,favours,n,resamples,method,not_testable")
