"""The A/A null (`report.aa_null`, comparisons.null_pairs, report.aa_null): every trained condition compared with
itself over two disjoint halves of its training seeds, tested across seeds as two methods are. The whole workflow's
null study runs in tests/workflow/test_workflow.py (the shared tiny study); its level over many null studies is
bench/aa_null.py's."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
from test_seeds import PROMPTS, write_arm

from workflow_lib.comparisons import NULL, condition_rows, designed_mauve, null_pairs, pairs
from workflow_lib.report.aa_null import null_sentences
from workflow_lib.report.contrasts import SEEDS, contrasts
from workflow_lib.report.multiplicity import across_metrics


def null_study(root: Path, seeds: int, rng: np.random.Generator, later_shift: float = 0.0) -> list[str]:
    """Two conditions (perturbed or not) trained from `seeds` seeds, each seed's checkpoint shifted by a training
    part of its own (sd 0.02); `later_shift` moves the later half of the seeds of both conditions (a pipeline whose
    randomness is not exchangeable between seeds)."""
    paths = []
    prompt_level = rng.uniform(0.2, 0.5, (PROMPTS, 1))
    for seed in range(1, seeds + 1):
        for perturbed in (False, True):
            shift = rng.normal(0, 0.02) + (later_shift if seed > seeds // 2 else 0.0)
            rouge = np.clip(prompt_level + shift + rng.normal(0, 0.05, (PROMPTS, 3)), 0, 1)
            tv = np.clip(0.3 - shift + rng.normal(0, 0.02, PROMPTS), 0, 1)
            paths += write_arm(root, perturbed, seed, rouge, tv)
    return paths


def test_null_pairs_pair_each_conditions_later_seeds_with_its_earlier_ones(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    paths = null_study(Path("."), 7, np.random.default_rng(1))  # 7 seeds: 3 pairs, the 7th left out
    rows = condition_rows(paths)
    found = null_pairs(rows)
    # 2 conditions x 2 kinds (metrics, extrapolation), 3 pairs each
    assert len(found) == 12
    assert {(a["seed"], b["seed"]) for a, b, _, _ in found} == {(4, 1), (5, 2), (6, 3)}
    for a, b, a_label, b_label in found:
        assert {k: v for k, v in a.items() if k not in ("seed", "path")} == {
            k: v for k, v in b.items() if k not in ("seed", "path")
        }  # one condition against itself
        assert a_label.endswith("seeds 4, 5, 6") and b_label.endswith("seeds 1, 2, 3")
    labels = {(a["train_intensity"], a_label) for a, _, a_label, _ in found}
    assert {label.split(", seeds")[0] for _, label in labels} == {
        "training none, sampling none",
        "training insertion 0.025, sampling insertion 0.025",
    }
    # the family only where the config asks; its MAUVE pairs get jobs too
    assert not [p for p in pairs(rows, 0.025) if p["family"] == NULL]
    assert len([p for p in pairs(rows, 0.025, null=True) if p["family"] == NULL]) == 12
    assert len(designed_mauve(paths, 0.025, null=True)) == len(designed_mauve(paths, 0.025)) + 6
    # an untrained model is one model whatever its seed: no null pair
    untrained = [r | {"objective": "untrained"} for r in rows]
    assert null_pairs(untrained) == []


def test_the_null_is_tested_across_seeds_and_sees_a_seed_dependent_pipeline(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    paths = null_study(Path("."), 6, np.random.default_rng(2))
    frame = contrasts(paths, 0.025, null=True)
    null = frame.filter((pl.col("family") == NULL) & (pl.col("unit") == SEEDS))
    # per condition: rouge1, rouge2 and the TV, each over its 3 seed pairs
    assert null.height == 6 and set(null["n"]) == {3} and null["p"].is_not_null().all()
    assert not null["significant"].any()
    # the other families are what they were without the null
    assert frame.filter(pl.col("family") != NULL).equals(contrasts(paths, 0.025))
    # the null takes no part in the findings' correction across metrics
    assert NULL not in set(across_metrics(frame)["family"].to_list())
    sentences = null_sentences(frame)
    assert sentences[0].startswith("ROUGE-1: 0 of 2 tested rows at p < 0.05")
    assert "training none, sampling none" in sentences[0] and "over 3 seed pairs" in sentences[0]
    assert null_sentences(contrasts(paths, 0.025)) == []

    # A pipeline whose later seeds differ from its earlier ones (here by +0.2 ROUGE, 10 sd of training) fails the
    # null: with 3 seed pairs the t-test has 2 df, so it sees only a shift of several sd.
    (tmp_path / "shifted").mkdir()
    monkeypatch.chdir(tmp_path / "shifted")
    shifted = null_study(Path("."), 6, np.random.default_rng(2), later_shift=0.2)
    broken = contrasts(shifted, 0.025, null=True)
    rouge = broken.filter((pl.col("family") == NULL) & (pl.col("unit") == SEEDS) & (pl.col("metric") == "rouge1"))
    assert (rouge["p"] < 0.05).all() and (rouge["difference"] > 0.1).all()
    assert null_sentences(broken)[0].startswith("ROUGE-1: 2 of 2 tested rows at p < 0.05")
