"""Perturbed training data in both modes."""

from __future__ import annotations

import numpy as np
import pytest

from workflow_lib.grid import train_conditions
from workflow_lib.layout import TrainCondition, fmt_intensity
from workflow_lib.perturb.synonym_table import SynonymTable
from workflow_lib.perturb.training_data import perturb_blocks

V = 12
TABLE = SynonymTable.from_rows(V, list(range(1, 11)), [[(t % 10) + 1] for t in range(1, 11)], [[1.0]] * 10)


def blocks(n=300, width=16, seed=0):
    return np.random.default_rng(seed).integers(1, 11, size=(n, width))


@pytest.mark.parametrize("strategy", ["insertion", "replacement", "deletion"])
def test_augment_is_the_data_plus_m_perturbed_copies(strategy):
    b = blocks()
    table = perturb_blocks(b, "augment", strategy, 0.1, TABLE, copies=2, seed=1, key="k", special_ids=[0])
    rows = table.to_pylist()
    assert table.num_rows == 3 * len(b)
    originals = [r for r in rows if r["copy"] == 0]
    assert [r["input_ids"] for r in originals] == b.tolist()
    for r in rows:
        if r["copy"] > 0:
            orig = b[r["block_id"]].tolist()
            n_sel = len(r["source_positions"])
            expected = {"insertion": len(orig) + n_sel, "replacement": len(orig), "deletion": len(orig) - n_sel}[
                strategy
            ]
            assert len(r["input_ids"]) == expected
            if strategy == "replacement":
                assert sorted(r["perturbed_positions"]) == sorted(r["source_positions"])
            if strategy == "insertion":
                kept = [t for i, t in enumerate(r["input_ids"]) if i not in set(r["perturbed_positions"])]
                assert kept == orig
    rate = sum(len(r["source_positions"]) for r in rows) / (2 * b.size)
    assert abs(rate - 0.1) < 4 * np.sqrt(0.1 * 0.9 / (2 * b.size))


def test_intensity_zero_copy_equals_the_data():
    b = blocks(20)
    rows = perturb_blocks(b, "augment", "insertion", 0.0, TABLE, 1, 1, "k").to_pylist()
    assert [r["input_ids"] for r in rows if r["copy"] == 1] == b.tolist()


@pytest.mark.parametrize("strategy", ["insertion", "replacement", "deletion"])
def test_prefix_mode_scores_original_tokens_only(strategy):
    b = blocks(100)
    rows = perturb_blocks(b, "prefix", strategy, 0.2, TABLE, 1, 1, "k").to_pylist()
    assert len(rows) == len(b) and all(r["copy"] == 1 for r in rows)
    for r in rows:
        orig = b[r["block_id"]].tolist()
        assert len(r["target_positions"]) == len(r["target_ids"])
        if strategy != "deletion":
            assert r["target_ids"] == orig[1:]
            assert {p + 1 for p in r["target_positions"]}.isdisjoint(
                r["perturbed_positions"] if strategy == "insertion" else []
            )
        else:
            # deleted tokens stay targets; only tokens whose whole prefix was deleted are skipped (a prefix of
            # the block), so the targets are a suffix of the block's tokens after the first
            leading = next((i for i in range(len(orig)) if i not in set(r["source_positions"])), len(orig))
            assert r["target_ids"] == orig[max(1, leading + 1) :]
        assert all(0 <= p < len(r["input_ids"]) for p in r["target_positions"])


def test_same_key_same_bytes_other_key_other_draws(tmp_path):
    from workflow_lib.files import write_parquet

    b = blocks(50)
    for name, key in [("a", "k1"), ("b", "k1"), ("c", "k2")]:
        write_parquet(perturb_blocks(b, "augment", "insertion", 0.2, TABLE, 1, 7, key), tmp_path / f"{name}.parquet")
    assert (tmp_path / "a.parquet").read_bytes() == (tmp_path / "b.parquet").read_bytes()
    assert (tmp_path / "a.parquet").read_bytes() != (tmp_path / "c.parquet").read_bytes()


def test_conditions_share_one_baseline():
    exp = {
        "train_perturbation": {
            "strategies": ["insertion", "deletion"],
            "intensities": [0, 0.025],
            "synonyms": ["distributional"],
            "modes": ["augment"],
            "copies": 1,
        }
    }
    conds = train_conditions(exp)
    assert len(conds) == 3
    assert TrainCondition("none", "augment", 1, "none", "0") in conds
    assert fmt_intensity(0.00625) == "0.00625" and fmt_intensity(1e-5) == "0.00001" and fmt_intensity(0.4) == "0.4"
