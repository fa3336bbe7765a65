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

from workflow_lib.comparisons import resamples_for
from workflow_lib.report.contrasts import _untestable_table, contrasts
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
    json_path.write_text(
        json.dumps(
            {"mauve": list(mauve), "run_ids": list(range(len(mauve))), "runs": len(mauve), "prompts": rouge.shape[0]}
        )
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
    return str(json_path.relative_to(root))


def write_perplexity(root: Path, obj, ti, nll, tokens, es="test") -> str:
    stem = root / _condition("perplexity", obj, ti, es=es)
    stem.parent.mkdir(parents=True, exist_ok=True)
    json_path = Path(f"{stem}.json")
    json_path.write_text(json.dumps({"perplexity": float(np.exp(nll.sum() / tokens.sum()))}))
    pl.DataFrame(
        {"prompt_id": np.arange(len(nll), dtype=np.int64), "nll": nll, "tokens": tokens.astype(np.int64)}
    ).write_parquet(f"{stem}.prompts.parquet")
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


def test_a_non_finite_run_stops_the_paired_t_saying_why():
    """A wrong result must not look like a result: NaN or inf in one run raises, with the reason."""
    for bad in (np.nan, np.inf):  # a wrong result must not look like a result: the job stops, saying why
        with pytest.raises(ValueError, match=r"^paired t: a non-finite per-run value; no estimate is made$"):
            paired_t(np.array([0.5, bad, 0.4]), np.array([0.4, 0.4, 0.4]))


def test_a_perplexity_that_overflows_stops_the_test_saying_why():
    """Finite per-prompt NLL whose perplexity overflows (exp(1000)): no difference of infinities is reported."""
    tokens = np.full(12, 10.0)
    with (
        np.errstate(over="ignore", invalid="ignore"),
        pytest.raises(
            ValueError, match=r"^permutation test: a non-finite perplexity difference \(inf\); no estimate is made$"
        ),
    ):
        permutation_perplexity_difference(1000 * tokens, tokens, 3 * tokens, tokens, Permutations(12, 200, "x"))


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
        ppl = permutation_perplexity_difference(
            rate_a * tokens, tokens, rate_b * tokens, tokens, Permutations(n, 200, f"rep{study}")
        )
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
        theirs = stats.permutation_test(
            (a, b),
            lambda x, y, axis: np.mean(x - y, axis=axis),
            permutation_type="samples",
            n_resamples=np.inf,
            vectorized=True,
        )
        assert ours.p == pytest.approx(theirs.pvalue, rel=1e-12)
        tokens_a, tokens_b = rng.integers(20, 60, n).astype(float), rng.integers(20, 60, n).astype(float)
        nll_a, nll_b = tokens_a * rng.normal(3.0, 0.2, n), tokens_b * rng.normal(3.1, 0.2, n)

        def ppl_difference(na, ta, nb, tb, axis):
            return np.exp(na.sum(axis) / ta.sum(axis)) - np.exp(nb.sum(axis) / tb.sum(axis))

        # scipy's "samples" permutations swap one pair of samples; a prompt's (NLL, tokens) move together, so the
        # 2^n swaps are enumerated here by hand
        ours = permutation_perplexity_difference(nll_a, tokens_a, nll_b, tokens_b, Permutations(n, 4000, "x"))
        swaps = ((np.arange(2**n)[:, None] >> np.arange(n)) & 1).astype(bool)
        null = ppl_difference(
            np.where(swaps, nll_b, nll_a),
            np.where(swaps, tokens_b, tokens_a),
            np.where(swaps, nll_a, nll_b),
            np.where(swaps, tokens_a, tokens_b),
            axis=1,
        )
        observed = ppl_difference(nll_a, tokens_a, nll_b, tokens_b, axis=0)
        assert ours.p == pytest.approx(np.mean(np.abs(null) >= abs(observed) * (1 - 1e-9)), rel=1e-12)
    a, b = rng.normal(0.3, 0.1, 50), rng.normal(0.25, 0.1, 50)
    assert permutation_mean_difference(a, b, Permutations(50, 2000, "same")) == permutation_mean_difference(
        a, b, Permutations(50, 2000, "same")
    )


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


def test_the_studys_pairs_and_what_they_favour(study):
    frame = contrasts(study, 0.025)
    perturbation = frame.filter((pl.col("family") == "perturbation") & (pl.col("metric") == "mauve"))
    # mle on two decoders and emo on one; untrained never (it has no perturbed training)
    assert perturbation.select("objective", "decoder").rows() == [
        ("emo", "unbiased"),
        ("mle", "top-p-0.9"),
        ("mle", "unbiased"),
    ]
    assert set(perturbation["a"]) == {"insertion 0.025"} and set(perturbation["b"]) == {"no perturbation"}
    assert perturbation["significant"].all() and set(perturbation["favours"]) == {"perturbation"}
    assert (
        (perturbation["low"] > 0).all()
        and perturbation["method"][0] == "paired t over runs"
        and perturbation["n"][0] == 5
    )
    rouge = frame.filter((pl.col("family") == "perturbation") & (pl.col("metric") == "rouge1"))
    assert rouge.height == 3 and (rouge["difference"] - 0.02).abs().max() < 0.01 and rouge["n"][0] == 60
    assert rouge["method"][0] == "paired permutation test over prompts" and rouge["resamples"][0] == 2000
    ppl = frame.filter((pl.col("family") == "perturbation") & (pl.col("metric") == "perplexity"))
    assert ppl.select("objective", "decoder").rows() == [("emo", ""), ("mle", "")]  # one per model pair, no decoder
    assert (ppl["difference"] < 0).all() and set(ppl["favours"]) == {"perturbation"}  # lower perplexity is better

    ablation = frame.filter((pl.col("family") == "ablation") & (pl.col("metric") == "mauve"))
    arms = {(r["objective"], r["decoder"], r["a"]): r for r in ablation.to_dicts()}
    # Both against NoPerturb is the perturbation family's contrast, counted there only (issue 52)
    assert set(arms) == {("mle", d, a) for d in ("unbiased", "top-p-0.9") for a in ("TrainPerturb", "TestPerturb")} | {
        ("untrained", "unbiased", "TestPerturb")
    }
    assert arms[("mle", "unbiased", "TestPerturb")]["favours"] == "no perturbation"

    objective = frame.filter(pl.col("family") == "objective")
    assert set(objective["objective"]) == {"emo"} and set(objective["b"]) == {
        "mle, no perturbation",
        "mle, insertion 0.025",
    }
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
    assert (
        sentences[0]
        == "3 of 3 perturbation contrasts (MAUVE) favour perturbation; 3 of them are significant after Holm correction."
    )
    # sampling-time perturbation alone hurts the trained mle (two decoders) and helps the untrained model, by the
    # same 0.05 in every run; the untrained one with no spread at all: no p, no mark, and counted as not testable
    assert (
        "1 of 3 TestPerturb-vs-NoPerturb contrasts (MAUVE) favour perturbation; 0 of them are significant after Holm "
        "correction; not testable: 1 of the 3 (no spread)."
    ) in sentences
    assert (
        "2 of 2 emo-vs-MLE contrasts (MAUVE) favour emo; 0 of them are significant after Holm correction." in sentences
    )
    section = paired_section(frame)
    heading = "### With vs without perturbation: MAUVE, each pair of checkpoints (paired t over runs)"
    assert heading in section and "✱" in section
    assert "untrained (zero-shot)" in section and "| decoder |" in section


def test_the_csv_is_byte_identical_on_a_rerun(study, tmp_path):
    outputs = []
    for hash_seed in ("1", "2"):
        out = tmp_path / f"contrasts{hash_seed}.csv"
        env = {**os.environ, "PYTHONHASHSEED": hash_seed, "PYTHONPATH": str(REPO)}
        subprocess.run(
            [
                sys.executable,
                "-m",
                "workflow_lib.report.contrasts",
                "--intensity",
                "0.025",
                "--output",
                str(out),
                *study,
            ],
            check=True,
            env=env,
            cwd=tmp_path,
            capture_output=True,
        )
        outputs.append(out.read_bytes())
    assert outputs[0] == outputs[1]
    header = outputs[0].decode().splitlines()[0]
    assert header == (
        "family,metric,model,dataset,objective,eval_set,decoder,seed,a,b,difference,low,high,p,p_holm,"
        "significant,favours,n,resamples,method,not_testable,unit,spread,detectable,detectable_low,detectable_high"
    )


def test_the_command_reads_its_paths_from_an_argument_file_as_the_workflow_gives_them(study, tmp_path, monkeypatch):
    """The contrasts job's paths come in results/report/args/contrasts.txt (@FILE, one a line), and --resamples is
    a number: the command's CSV is the function's. In-process, so that mutation testing runs it too."""
    from workflow_lib.files import write_argument_file
    from workflow_lib.report import contrasts as module

    arguments = tmp_path / "args.txt"
    write_argument_file(list(study), str(arguments))
    out = tmp_path / "cli.csv"
    argv = ["contrasts", "--intensity", "0.025", "--resamples", "400", "--output", str(out), f"@{arguments}"]
    monkeypatch.setattr(sys, "argv", argv)
    module.main()
    direct = module.contrasts(list(study), 0.025, 400, [])
    assert pl.read_csv(out).height == direct.height > 0
    assert out.read_text() == direct.write_csv()
    assert set(pl.read_csv(out)["resamples"].to_list()) == set(direct["resamples"].to_list())


# ---- labels, designed MAUVE jobs, the command line ------------------------------------------------------------

METRICS_PATH = (
    "results/metrics/tiny/syn/{obj}/{syn}/{mode}-m{c}/{st}-{ti}/seed1/test/unbiased/{tsyn}/{tst}-{tti}-{tm}.json"
)


def _metrics_path(
    obj="mle", syn="none", mode="augment", c=1, st="none", ti="0", tsyn="none", tst="none", tti="0", tm="exact"
):
    return METRICS_PATH.format(obj=obj, syn=syn, mode=mode, c=c, st=st, ti=ti, tsyn=tsyn, tst=tst, tti=tti, tm=tm)


def _labels(paths, intensity=0.5):
    from workflow_lib.comparisons import pairs
    from workflow_lib.report.contrasts import conditions

    return [(p["family"], p["a"], p["b"]) for p in pairs(conditions(paths), intensity)]


def test_labels_name_the_fields_that_vary_among_the_arms_they_concern():
    both = {"st": "insertion", "ti": "0.5", "tsyn": "distributional", "tst": "insertion", "tti": "0.5"}
    # the training synonyms vary among the perturbed models (the unperturbed one's "none" does not count)
    assert _labels(
        [_metrics_path(), _metrics_path(syn="distributional", **both), _metrics_path(syn="oracle", **both)]
    ) == [
        ("perturbation", "insertion 0.5 (train distributional)", "no perturbation"),
        ("perturbation", "insertion 0.5 (train oracle)", "no perturbation"),
    ]
    # one model at intensity 0.5 with one set of synonyms: nothing varies, no label part
    assert _labels([_metrics_path(), _metrics_path(syn="distributional", **both)])[0] == (
        "perturbation",
        "insertion 0.5",
        "no perturbation",
    )
    # the copies vary: every arm, perturbed or not, names its mode and copies
    b = dict(both, syn="distributional")
    assert _labels([_metrics_path(), _metrics_path(c=2), _metrics_path(**b), _metrics_path(c=2, **b)])[:2] == [
        ("perturbation", "insertion 0.5 (augment-m1)", "no perturbation (augment-m1)"),
        ("perturbation", "insertion 0.5 (augment-m2)", "no perturbation (augment-m2)"),
    ]
    # the training mode varies
    assert _labels(
        [_metrics_path(), _metrics_path(mode="replace"), _metrics_path(**b), _metrics_path(mode="replace", **b)]
    )[:2] == [
        ("perturbation", "insertion 0.5 (augment-m1)", "no perturbation (augment-m1)"),
        ("perturbation", "insertion 0.5 (replace-m1)", "no perturbation (replace-m1)"),
    ]
    # the sampling synonyms and mode vary among the perturbed samplings
    sampled = {"tst": "insertion", "tti": "0.5"}
    assert _labels(
        [
            _metrics_path(),
            _metrics_path(tsyn="distributional", **sampled),
            _metrics_path(tsyn="oracle", tm="soft", **sampled),
        ]
    ) == [
        ("ablation", "TestPerturb (sample distributional, exact)", "NoPerturb"),
        ("ablation", "TestPerturb (sample oracle, soft)", "NoPerturb"),
    ]


def test_conditions_of_no_file_is_an_empty_typed_frame():
    from workflow_lib.report.conditions import KEYS
    from workflow_lib.report.contrasts import conditions

    empty = conditions([])
    assert empty.height == 0 and empty.columns == ["kind", *KEYS, "path"]
    assert empty.schema["train_intensity"] == pl.Float64 and empty.schema["seed"] == pl.Int64


def test_a_joint_mauve_result_keeps_why_it_was_not_tested(tmp_path, monkeypatch):
    from workflow_lib.report.contrasts import JOINT, compare

    monkeypatch.chdir(tmp_path)  # no sidecars here: the MAUVE row alone
    pair = {
        "family": "perturbation",
        "model": "tiny",
        "dataset": "syn",
        "objective": "mle",
        "eval_set": "test",
        "decoder": "unbiased",
        "seed": 1,
        "a": "insertion 0.5",
        "b": "no perturbation",
        "kind": "metrics",
        "path_a": "joint_a.json",
        "path_b": "joint_b.json",
    }
    joint = {"difference": 0.01, "low": None, "high": None, "p": None, "n": 4, "untested": "4 prompts", "resamples": 16}
    [row] = compare(pair, joint=joint)
    assert (row["metric"], row["method"], row["not_testable"], row["resamples"], row["n"]) == (
        "mauve",
        JOINT,
        "4 prompts",
        16,
        4,
    )
    assert compare(pair, joint={**joint, "untested": None, "p": 0.5})[0]["not_testable"] is None
    assert compare(pair, joint={**joint, "status": "too few texts (20)"}) == []


def test_read_contrasts_keeps_the_columns_types_when_a_column_is_empty(tmp_path):
    from workflow_lib.report.contrasts import COLUMNS, read_contrasts

    row = {k: None for k in COLUMNS} | {
        "family": "perturbation",
        "metric": "mauve",
        "seed": 1,
        "difference": 0.5,
        "n": 3,
    }
    path = tmp_path / "contrasts.csv"
    pl.DataFrame([row], schema=COLUMNS, orient="row").write_csv(path)
    assert read_contrasts(str(path)).schema == pl.Schema(COLUMNS)


def test_designed_mauve_lists_each_sampled_pair_with_its_identity_and_its_tables_swaps(study):
    from workflow_lib.comparisons import designed_mauve, pair_id, pair_identity, pairs
    from workflow_lib.report.contrasts import conditions

    designed = designed_mauve(study, 0.025, resamples=10)
    sampled = [p for p in pairs(conditions(study), 0.025) if p["kind"] == "metrics"]
    assert len(sampled) == 10 and sorted(designed) == sorted(pair_id(p) for p in sampled)
    for p in sampled:
        assert designed[pair_id(p)] == {
            **p,
            "identity": pair_identity(p),
            "resamples": {"perturbation": 600, "ablation": 1000, "objective": 400}[p["family"]],
        }
    assert {d["resamples"] for d in designed_mauve(study, 0.025).values()} == {2000}  # RESAMPLES is the least B


def test_no_mauve_contrast_is_designed_on_an_eval_set_whose_cap_is_under_the_floor(study):
    """An eval set capped below evaluation.mauve.min_texts gets no mauve_contrast job (every cell of it is "too few
    texts"); the other eval sets' pairs keep their identity and their whole table's B."""
    from workflow_lib.comparisons import designed_mauve
    from workflow_lib.evaluate.floor import MIN_TEXTS, mauve_never_resolves

    assert mauve_never_resolves(MIN_TEXTS - 1, {}) and not mauve_never_resolves(MIN_TEXTS, {})
    assert not mauve_never_resolves(None, {}) and mauve_never_resolves(60, {"min_texts": 61})
    every = designed_mauve(study, 0.025, resamples=10)
    eval_sets = sorted({p["eval_set"] for p in every.values()})
    assert len(every) == 10 and designed_mauve(study, 0.025, resamples=10, unresolvable=["another set"]) == every
    assert designed_mauve(study, 0.025, resamples=10, unresolvable=eval_sets) == {}


def test_each_call_reads_the_files_afresh(study):
    """The same relative paths read twice in one process, the files rewritten in between (another study in the same
    folder): the second call's contrasts are the new files' (no module-level cache keeps the first one's)."""
    first = contrasts(study, 0.025)
    for path in study:  # every arm sampled with perturbation: its MAUVE lowered by 0.2
        if "/metrics/" in path and path.endswith("insertion-0.025-exact.json"):
            data = json.loads(Path(path).read_text())
            Path(path).write_text(json.dumps({**data, "mauve": [m - 0.2 for m in data["mauve"]]}))
    second = contrasts(study, 0.025)
    mauve = (pl.col("family") == "perturbation") & (pl.col("metric") == "mauve")
    assert first.filter(mauve).height == second.filter(mauve).height > 0
    np.testing.assert_allclose(
        second.filter(mauve)["difference"].to_numpy(), first.filter(mauve)["difference"].to_numpy() - 0.2, atol=1e-9
    )


def test_the_command_line_writes_the_studys_contrasts(study, tmp_path, monkeypatch):
    from workflow_lib.report import contrasts as module

    out = tmp_path / "out" / "contrasts.csv"
    out.parent.mkdir()
    monkeypatch.setattr(sys, "argv", ["contrasts", "--intensity", "0.025", "--output", str(out), *study])
    module.main()
    written = module.read_contrasts(str(out))
    assert written.equals(contrasts(study, 0.025)) and written.height == 44
    assert written.filter(pl.col("method") == module.PERMUTATION)["resamples"].min() == 2000
    smaller = tmp_path / "out" / "fewer.csv"
    monkeypatch.setattr(
        sys, "argv", ["contrasts", "--intensity", "0.025", "--output", str(smaller), "--resamples", "10", *study]
    )
    module.main()
    assert module.read_contrasts(str(smaller)).equals(contrasts(study, 0.025, resamples=10))
    for missing in (["--output", str(out)], ["--intensity", "0.025"]):
        monkeypatch.setattr(sys, "argv", ["contrasts", *missing, *study])
        with pytest.raises(SystemExit):
            module.main()


def test_what_a_difference_favours():
    from workflow_lib.report.contrasts import _favours

    assert _favours({"metric": "mauve", "family": "perturbation", "difference": 0.0}) == "neither"
    assert _favours({"metric": "mauve", "family": "ablation", "difference": 0.1}) == "perturbation"
    assert _favours({"metric": "mauve", "family": "perturbation", "difference": -0.1}) == "no perturbation"
    assert _favours({"metric": "perplexity", "family": "perturbation", "difference": 0.1}) == "no perturbation"
    assert _favours({"metric": "mauve", "family": "objective", "objective": "emo", "difference": 0.0}) == "neither"
    assert _favours({"metric": "mauve", "family": "objective", "objective": "emo", "difference": 0.1}) == "emo"
    assert _favours({"metric": "perplexity", "family": "objective", "objective": "emo", "difference": 0.1}) == "mle"


def test_mauve_by_run_reads_the_run_ids_or_numbers_the_runs(tmp_path):
    from workflow_lib.report.study_files import mauve_by_run as _mauve_by_run

    assert _mauve_by_run({"mauve": [0.5, 0.6]}) == {0: 0.5, 1: 0.6}
    assert _mauve_by_run({"mauve": [0.5, 0.6], "run_ids": [3, 7]}) == {3: 0.5, 7: 0.6}
    assert _mauve_by_run({"mauve": None, "mauve_status": "too few texts (8)"}) == {}


def test_an_arm_without_its_baseline_and_another_intensity_make_no_pair():
    arm = {
        "syn": "distributional",
        "st": "insertion",
        "ti": "0.5",
        "tsyn": "distributional",
        "tst": "insertion",
        "tti": "0.5",
    }
    assert _labels([_metrics_path(**arm)]) == []
    other = dict(arm, ti="0.25", tti="0.25")  # insertion, but not at the headline intensity
    assert _labels([_metrics_path(), _metrics_path(**other)]) == []


def test_the_pair_identity_names_every_field():
    from workflow_lib.comparisons import pair_identity

    pair = {
        "family": "objective",
        "model": "tiny",
        "dataset": "syn",
        "objective": "emo",
        "eval_set": "test",
        "decoder": "unbiased",
        "seed": 1,
        "a": "emo",
        "b": "mle",
        "kind": "metrics",
        "path_a": "x",
        "path_b": "y",
    }
    assert pair_identity(pair) == "objective|tiny|syn|emo|test|unbiased|1|emo|mle|metrics"


def test_shared_prompts_average_each_sides_rouge_over_the_runs_both_have():
    from workflow_lib.report.study_files import shared_prompts as _shared_prompts

    a = pl.DataFrame({"prompt_id": [0, 0, 1, 1, 2], "run": [0, 1, 0, 1, 0], "rouge1": [0.1, 0.3, 0.5, 0.7, 0.9]})
    b = pl.DataFrame({"prompt_id": [0, 1, 1, 3], "run": [1, 0, 1, 0], "rouge1": [0.2, 0.4, 0.6, 0.8]})
    both = _shared_prompts(a, b, {"path_a": "a", "path_b": "b"})
    assert both.columns == ["prompt_id", "rouge1", "rouge1_b"]
    assert both["prompt_id"].to_list() == [0, 1]
    assert both["rouge1"].to_list() == pytest.approx([0.3, 0.6]) and both["rouge1_b"].to_list() == pytest.approx(
        [0.2, 0.5]
    )


def _sidecar(path: Path, prompts: list[int]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pl.DataFrame(
        {
            "prompt_id": prompts,
            "run": [0] * len(prompts),
            "rouge1": [0.5] * len(prompts),
            "rouge2": [0.5] * len(prompts),
            "rougeL": [0.5] * len(prompts),
        }
    ).write_parquet(path.with_name(path.name.removesuffix(".json") + ".prompts.parquet"))


def test_compare_needs_both_sidecars_and_a_shared_prompt(tmp_path, monkeypatch):
    from workflow_lib.report.contrasts import compare

    monkeypatch.chdir(tmp_path)
    pair = {
        "family": "perturbation",
        "model": "tiny",
        "dataset": "syn",
        "objective": "mle",
        "eval_set": "test",
        "decoder": "unbiased",
        "seed": 1,
        "a": "insertion 0.5",
        "b": "no perturbation",
        "kind": "metrics",
        "path_a": "a.json",
        "path_b": "b.json",
    }
    for name in ("a.json", "b.json"):
        Path(name).write_text(json.dumps({"mauve": [0.5, 0.6, 0.7], "run_ids": [0, 1, 2]}))

    def rows():  # each call reads the files afresh
        return [(r["metric"], r["n"], r["not_testable"]) for r in compare(pair)]

    _sidecar(Path("a.json"), [0, 1])
    assert rows() == [("mauve", 3, None)]  # b has no sidecar
    _sidecar(Path("b.json"), [5, 6])
    assert rows() == [("mauve", 3, None)]  # no shared prompt
    _sidecar(Path("b.json"), [1, 6])
    assert rows() == [
        ("mauve", 3, None),
        ("rouge1", 1, "1 prompt"),
        ("rouge2", 1, "1 prompt"),
        ("rougeL", 1, "1 prompt"),
    ]


def test_a_non_finite_per_prompt_score_stops_the_comparison_naming_both_files(tmp_path, monkeypatch):
    """A NaN in a per-prompt sidecar is no estimate: the job stops with an error that names the two metrics files
    compared (a wrong result never looks like a result)."""
    from workflow_lib.cli import StageError
    from workflow_lib.report.contrasts import compare

    monkeypatch.chdir(tmp_path)
    keys = ("family", "model", "dataset", "objective", "eval_set", "decoder", "seed")
    pair = {**dict.fromkeys(keys, "x"), "kind": "metrics", "path_a": "runs/a.json", "path_b": "runs/b.json"}
    pair |= {"a": "insertion 0.5", "b": "no perturbation"}
    for name in (pair["path_a"], pair["path_b"]):
        _sidecar(Path(name), [0, 1, 2, 3, 4, 5])
        Path(name).write_text(json.dumps({"mauve": None, "run_ids": [0]}))
    frame = pl.read_parquet("runs/b.prompts.parquet")
    frame.with_columns(pl.Series("rouge2", [0.5, float("nan"), 0.5, 0.5, 0.5, 0.5])).write_parquet(
        "runs/b.prompts.parquet"
    )
    with pytest.raises(StageError) as error:
        compare(pair)
    assert str(error.value) == (
        "runs/a.json vs runs/b.json: permutation test: a non-finite per-prompt value; no estimate is made"
    )


def test_joint_mauve_results_replace_the_paired_t_and_enter_holm(study, tmp_path, monkeypatch):
    """One perturbation pair tested on the shared quantisation at p = 0.05 exactly, the other two not testable: Holm's
    m is 1, so its adjusted p is 0.05, which is not below the level. Pairs without a result keep the paired t."""
    from workflow_lib.comparisons import designed_mauve, pair_id
    from workflow_lib.report import contrasts as module

    designed = designed_mauve(study, 0.025)
    perturbation = sorted(k for k, p in designed.items() if p["family"] == "perturbation")
    results = []
    for i, key in enumerate(perturbation):
        result = {
            "difference": 0.04,
            "low": 0.01,
            "high": 0.07,
            "p": 0.05 if i == 0 else None,
            "n": 15,
            "untested": None if i == 0 else "5 prompts",
            "resamples": 2000,
        }
        path = tmp_path / "joint" / f"{key}.json"
        path.parent.mkdir(exist_ok=True)
        path.write_text(json.dumps(result))
        results.append(str(path))
    frame = contrasts(study, 0.025, mauve=results)
    mauve = frame.filter(pl.col("metric") == "mauve")
    joint = mauve.filter(pl.col("method") == module.JOINT)
    assert (
        sorted(
            pair_id(p)
            for p in module.pairs(module.conditions(study), 0.025)
            if p["kind"] == "metrics" and p["family"] == "perturbation"
        )
        == perturbation
    )
    assert joint.height == 3 and set(joint["family"]) == {"perturbation"}
    tested = joint.filter(pl.col("p").is_not_null())
    assert tested.height == 1 and tested["p_holm"].to_list() == [0.05] and tested["significant"].to_list() == [False]
    assert sorted(joint["not_testable"].drop_nulls().to_list()) == ["5 prompts", "5 prompts"]
    assert (joint["resamples"] == 2000).all() and (joint["n"] == 15).all()
    assert set(mauve.filter(pl.col("family") != "perturbation")["method"]) == {module.PAIRED_T}
    assert frame.filter(pl.col("metric") == "perplexity").equals(
        contrasts(study, 0.025).filter(pl.col("metric") == "perplexity")
    )
    # the same through the command line
    out = tmp_path / "cli.csv"
    monkeypatch.setattr(
        sys, "argv", ["contrasts", "--intensity", "0.025", "--output", str(out), "--mauve", *results, "--", *study]
    )
    module.main()
    assert module.read_contrasts(str(out)).equals(frame)


def test_no_file_gives_an_empty_table_with_every_column():
    from workflow_lib.report.contrasts import COLUMNS

    empty = contrasts([], 0.025)
    assert empty.height == 0 and empty.schema == pl.Schema(COLUMNS)


def _tested_row(n: int, resamples: int, p: float) -> dict:
    return {"p": p, "n": n, "not_testable": None, "smallest_p": Permutations(n, resamples, "x").smallest_p}


@pytest.mark.parametrize(
    "prompts, m, testable",
    [
        (8, 6, True),  # 2/2^8 = 0.0078 < 0.05 / 6 = 0.0083: Holm's first step is reachable
        (8, 7, False),  # 0.0078 >= 0.05 / 7 = 0.0071: no row of the table can be marked, whatever the data
        (6, 1, True),  # 2/64 = 0.031 < 0.05
        (12, 96, True),  # all 4,096 swaps (B = 19,200): 2/4096 = 0.00049 < 0.05 / 96 = 0.00052
        (11, 96, False),  # 2/2048 = 0.00098 >= 0.00052
        (50, 96, True),  # Monte Carlo: 1/(B + 1) with B = 200 m always passes
    ],
)
def test_a_table_whose_swap_tests_cannot_reach_holms_first_step_is_not_testable(prompts, m, testable):
    """With every swap enumerated, n prompts give no p below 2 / 2^n, and Holm marks nothing unless the table's
    smallest p is below 0.05 / m: such a table's rows are "not testable", never "no detectable difference"."""
    resamples = resamples_for(m, 2000)
    table = [_tested_row(prompts, resamples, 0.5) for _ in range(m)]
    _untestable_table(table)
    reasons = {r["not_testable"] for r in table}
    assert reasons == ({None} if testable else {f"{prompts} prompts for a table of {m}"})
    assert all(r["p"] == 0.5 for r in table)  # the p is kept; Holm leaves the row out


def test_the_table_check_counts_only_tested_rows_and_any_row_that_can_reach_keeps_the_table():
    few = [_tested_row(8, 2000, 0.5) for _ in range(7)]
    _untestable_table([*few, {"p": None, "n": 3, "not_testable": "3 prompts", "smallest_p": 0.25}])
    assert {r["not_testable"] for r in few} == {"8 prompts for a table of 7"}
    mixed = [_tested_row(8, 2000, 0.5) for _ in range(7)] + [_tested_row(20, 2000, 0.5)]
    _untestable_table(mixed)
    assert {r["not_testable"] for r in mixed} == {None}  # the 20-prompt row can reach 0.05 / 8
    joint = [_tested_row(8, 2000, 0.5) for _ in range(7)] + [
        {"p": 0.5, "n": 8, "not_testable": None, "smallest_p": None}
    ]
    _untestable_table(joint)
    assert {r["not_testable"] for r in joint} == {None}  # a row of another test: no least p known, left tested


def test_a_table_whose_least_p_is_exactly_the_level_is_not_testable_and_a_row_without_p_is_not_counted():
    """Holm marks an adjusted p below 0.05, so a least attainable p of exactly 0.05 (1/(B + 1) at B = 19, one row)
    can mark nothing. A row with no p (no test ran) is neither tested nor a reason to keep the table tested."""
    edge = [{"p": 0.5, "n": 50, "not_testable": None, "smallest_p": Permutations(50, 19, "x").smallest_p}]
    assert edge[0]["smallest_p"] * 1 == 0.05
    _untestable_table(edge)
    assert edge[0]["not_testable"] == "50 prompts for a table of 1"
    no_p = {"p": None, "n": 8, "not_testable": None, "smallest_p": None}
    few = [_tested_row(8, 2000, 0.5) for _ in range(7)]
    _untestable_table([*few, no_p])
    assert {r["not_testable"] for r in few} == {"8 prompts for a table of 7"} and no_p["not_testable"] is None


@pytest.mark.parametrize("prompts, testable", [(6, False), (7, True)])
def test_a_rouge_table_too_small_for_holms_first_step_is_not_testable_end_to_end(
    tmp_path, monkeypatch, prompts, testable
):
    """Two perturbation contrasts of 6 prompts each: all 64 swaps give no p below 2/64 = 0.031, and Holm's first
    step asks for 0.05 / 2 = 0.025: no data could mark either, so both are "not testable", keep their p and take
    no Holm p. At 7 prompts (2/128 = 0.016) the table is tested."""
    monkeypatch.chdir(tmp_path)
    rng = np.random.default_rng(5)
    paths = [
        write_metrics(
            tmp_path, obj, ti, ti, rng.uniform(0.6, 0.8, 3), rng.uniform(0.2, 0.5, (prompts, 3)) + float(ti) * 4
        )
        for obj in ("mle", "emo")
        for ti in ("0", "0.025")
    ]
    frame = contrasts(paths, 0.025).filter((pl.col("family") == "perturbation") & (pl.col("metric") == "rouge1"))
    assert frame.height == 2 and frame["p"].null_count() == 0
    if testable:
        assert frame["not_testable"].null_count() == 2 and frame["p_holm"].null_count() == 0
    else:
        assert frame["not_testable"].to_list() == [f"{prompts} prompts for a table of 2"] * 2
        assert frame["p_holm"].null_count() == 2 and not frame["significant"].any()
