"""The pairing of a study's conditions: the labels of the arms, which arms make a pair, a pair's identity, the
MAUVE contrasts designed as jobs of their own, and what a difference favours."""

from __future__ import annotations

import polars as pl

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
            _metrics_path(tsyn="oracle", tm="cached", **sampled),
        ]
    ) == [
        ("ablation", "TestPerturb (sample distributional, exact)", "NoPerturb"),
        ("ablation", "TestPerturb (sample oracle, cached, persistent perturbation)", "NoPerturb"),
    ]


def test_conditions_of_no_file_is_an_empty_typed_frame():
    from workflow_lib.report.conditions import KEYS
    from workflow_lib.report.contrasts import conditions

    empty = conditions([])
    assert empty.height == 0 and empty.columns == ["kind", *KEYS, "path"]
    assert empty.schema["train_intensity"] == pl.Float64 and empty.schema["seed"] == pl.Int64


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


def test_what_a_difference_favours():
    from workflow_lib.report.contrasts import _favours

    assert _favours({"metric": "mauve", "family": "perturbation", "difference": 0.0}) == "neither"
    assert _favours({"metric": "mauve", "family": "ablation", "difference": 0.1}) == "perturbation"
    assert _favours({"metric": "mauve", "family": "perturbation", "difference": -0.1}) == "no perturbation"
    assert _favours({"metric": "perplexity", "family": "perturbation", "difference": 0.1}) == "no perturbation"
    assert _favours({"metric": "mauve", "family": "objective", "objective": "emo", "difference": 0.0}) == "neither"
    assert _favours({"metric": "mauve", "family": "objective", "objective": "emo", "difference": 0.1}) == "emo"
    assert _favours({"metric": "perplexity", "family": "objective", "objective": "emo", "difference": 0.1}) == "mle"


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
