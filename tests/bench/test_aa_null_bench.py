"""bench/aa_null.py: its null studies are a valid config of independent studies, each one model with 6 seeds of its
own and one A/A null comparison; its read-back counts the rows at p < 0.05 per unit and metric."""

import sys
from pathlib import Path

import polars as pl

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import aa_null

from workflow_lib.comparisons import condition_rows, null_pairs
from workflow_lib.config import validate_config
from workflow_lib.grid import metric_targets


def test_the_null_studies_are_independent_and_each_pairs_seeds_4_to_6_with_1_to_3():
    config = validate_config(aa_null.null_config(3))
    assert config["report"]["aa_null"]
    seeds = [config["experiments"][name]["seeds"] for name in sorted(config["experiments"])]
    assert seeds == [[1, 2, 3, 4, 5, 6], [7, 8, 9, 10, 11, 12], [13, 14, 15, 16, 17, 18]]  # disjoint: independent
    found = null_pairs(condition_rows(metric_targets(config)))
    assert len(found) == 9 and len({a["model"] for a, _, _, _ in found}) == 3
    assert {(a["seed"] - b["seed"]) for a, b, _, _ in found} == {3}
    assert all(a["train_intensity"] == a["test_intensity"] == 0.2 for a, _, _, _ in found)  # the paper's recipe


def test_rejection_rates_count_p_below_005_per_unit_and_metric():
    rows = [("null", "seeds", "rouge1", p) for p in (0.01, 0.2, 0.5, 0.7)] + [("null", "checkpoint", "rouge1", 0.001)]
    rows += [("perturbation", "seeds", "rouge1", 0.001), ("null", "seeds", "tv", None)]
    frame = pl.DataFrame(rows, schema=["family", "unit", "metric", "p"], orient="row")
    rates = {(r["unit"], r["metric"]): r for r in aa_null.rejection_rates(frame)}
    assert set(rates) == {("seeds", "rouge1"), ("checkpoint", "rouge1")}  # no other family, no untested row
    seeds = rates[("seeds", "rouge1")]
    assert (seeds["rows"], seeds["rejected"], seeds["rate"]) == (4, 1, 0.25)
    assert seeds["low"] < 0.05 < seeds["high"] and seeds["holds"]
    assert rates[("checkpoint", "rouge1")]["holds"] is None
    # a test that rejects a null in 4 of 4 studies does not hold its level
    broken = pl.DataFrame(
        [("null", "seeds", "rouge1", 0.01)] * 4, schema=["family", "unit", "metric", "p"], orient="row"
    )
    assert aa_null.rejection_rates(broken)[0]["holds"] is False
