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

from workflow_lib.report.contrasts import RESAMPLES, contrasts, paired_section, study_sentences
from workflow_lib.report.statistics import (
    bootstrap_indices,
    bootstrap_mean_difference,
    bootstrap_perplexity_difference,
    holm,
    paired_t,
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
    assert tuple(paired_t(x, x.copy())) == (0.0, 0.0, 0.0, 1.0, 4)
    same = bootstrap_mean_difference(x, x.copy(), bootstrap_indices(4, 200, "self"))
    assert (same.difference, same.low, same.high, same.p) == (0.0, 0.0, 0.0, 1.0)


def test_one_run_has_no_interval_and_no_p():
    est = paired_t([0.8], [0.7])
    assert est.low is None and est.high is None and est.p is None and est.n == 1
    assert est.difference == pytest.approx(0.1)


def test_bootstrap_intervals_cover_the_true_difference():
    """Over 40 synthetic studies, the 95% intervals of a mean difference and of a perplexity difference cover
    the truth about 95% of the time (at least 34 of 40)."""
    rng = np.random.default_rng(7)
    n, covered_mean, covered_ppl = 200, 0, 0
    for rep in range(40):
        b = rng.uniform(0.2, 0.6, n)
        a = b + 0.03 + rng.normal(0, 0.05, n)
        indices = bootstrap_indices(n, RESAMPLES, f"rep{rep}")
        est = bootstrap_mean_difference(a, b, indices)
        covered_mean += est.low <= 0.03 <= est.high
        tokens = rng.integers(20, 60, n).astype(np.float64)
        rate_a, rate_b = 3.0 + rng.normal(0, 0.3, n), 3.1 + rng.normal(0, 0.3, n)  # NLL per token of each prompt
        truth = np.exp(3.0) - np.exp(3.1)
        ppl = bootstrap_perplexity_difference(rate_a * tokens, tokens, rate_b * tokens, tokens, indices)
        covered_ppl += ppl.low <= truth <= ppl.high
    assert covered_mean >= 34 and covered_ppl >= 34


def test_bootstrap_p_is_floored_at_two_over_b_plus_one_and_indices_repeat():
    a, b = np.full(50, 0.9), np.full(50, 0.1)
    assert bootstrap_mean_difference(a, b, bootstrap_indices(50, 2000, "x")).p == 2 / 2001
    assert np.array_equal(bootstrap_indices(30, 10, "same identity"), bootstrap_indices(30, 10, "same identity"))
    assert not np.array_equal(bootstrap_indices(30, 10, "one"), bootstrap_indices(30, 10, "other"))


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
    assert rouge["method"][0] == "paired bootstrap over prompts"
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
            "correction; not testable (no p): 1 of the 3.") in sentences
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
                      "significant,favours,n,resamples,method")
