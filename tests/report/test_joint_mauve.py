"""MAUVE contrasts on a shared quantisation: the score equals mauve-text's, the permutation test holds its level
and finds a planted difference, and the same inputs give the same bytes."""

import numpy as np
import pytest

from workflow_lib.report.joint_mauve import _counts, content_order, joint_contrast, mauve_from_counts, quantise

SETTINGS = {"kmeans_num_redo": 1, "kmeans_max_iter": 50, "discretization": 25, "scaling": 5}


def library_mauve(p: np.ndarray, q: np.ndarray, discretization: int = 25, scaling: float = 5) -> float:
    """mauve-text's own computation from two histograms (compute_mauve after its clustering)."""
    from mauve.compute_mauve import get_divergence_curve_for_multinomials
    from sklearn.metrics import auc

    p, q = p / p.sum(), q / q.sum()
    curve = get_divergence_curve_for_multinomials(p, q, np.linspace(1e-6, 1 - 1e-6, discretization), scaling)
    x, y = curve.T
    i, j = np.argsort(x), np.argsort(y)
    return 0.5 * (auc(x[i], y[i]) + auc(y[j], x[j]))


def test_mauve_from_counts_is_mauve_texts_score_batched():
    rng = np.random.default_rng(0)
    p = rng.integers(0, 6, size=(7, 12)).astype(float)
    q = rng.integers(0, 6, size=(7, 12)).astype(float)
    p[:, 0] += 1
    q[:, 1] += 1
    q[3] = p[3]  # identical histograms: MAUVE 1
    p[5, :6], q[5, 6:] = 0, 0  # disjoint supports: MAUVE near 0
    got = mauve_from_counts(p, q, 25, 5)
    want = [library_mauve(p[k], q[k]) for k in range(7)]
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)
    assert got[3] == pytest.approx(1.0) and got[5] < 0.05


def test_counts_count_each_leading_row_apart():
    labels = np.array([[[0, 2, 2], [1, 1, 1]]])
    np.testing.assert_array_equal(_counts(labels, 3), [[[1, 0, 2], [0, 3, 0]]])


def test_quantise_labels_every_block_from_one_fit():
    rng = np.random.default_rng(1)
    blocks = [0.3 * rng.normal(size=(40, 8)) + 10 * np.eye(8)[k] for k in range(3)]
    # 10 restarts: one start puts its 3 centroids in 3 different clouds only about a quarter of the time
    labels = quantise(blocks, 3, SETTINGS | {"kmeans_num_redo": 10}, seed=0)
    assert [len(x) for x in labels] == [40, 40, 40]
    # three well-separated clouds, three buckets: each block is one bucket, all different
    assert [len(set(x)) for x in labels] == [1, 1, 1] and len({int(x[0]) for x in labels}) == 3


def test_a_swap_between_blocks_moves_two_labels_and_leaves_the_quantisation_unchanged():
    """The permutation test's premise: swapping rows between the arms (as a permutation does) must not change the fit.
    On overlapping clouds, where k-means' start decides the buckets, swap half the rows of A and B: each row keeps its
    label. (Fitted in the stacked order, as before this test, 96-138 of the 180 rows got another label, per seed.)"""
    rng = np.random.default_rng(3)
    human, a, b = (rng.normal(size=(60, 8)) for _ in range(3))
    swap = rng.random(60) < 0.5
    a2, b2 = np.where(swap[:, None], b, a), np.where(swap[:, None], a, b)
    for seed in (0, 1, 2):
        h, la, lb = quantise([human, a, b], 6, SETTINGS, seed)
        h2, la2, lb2 = quantise([human, a2, b2], 6, SETTINGS, seed)
        np.testing.assert_array_equal(h2, h)
        np.testing.assert_array_equal(la2, np.where(swap, lb, la))
        np.testing.assert_array_equal(lb2, np.where(swap, la, lb))


def test_content_order_sorts_the_same_rows_the_same_way_whatever_their_order():
    rng = np.random.default_rng(4)
    rows = rng.normal(size=(50, 5))
    rows[7] = rows[3]  # equal rows are interchangeable
    shuffled = rows[rng.permutation(50)]
    np.testing.assert_array_equal(rows[content_order(rows)], shuffled[content_order(shuffled)])


def _study(rng, n: int, runs: int, shift: float, d: int = 16):
    centres = rng.normal(size=(6, d)) * 3

    def draw(size, tilt):
        weights = np.full(6, 1 / 6) + tilt * np.array([1, 1, 1, -1, -1, -1]) / 6
        return centres[rng.choice(6, size=size, p=weights)] + rng.normal(size=(*size, d))

    return draw((n,), 0.0), draw((runs, n), 0.0), draw((runs, n), shift)


def test_a_planted_difference_is_found_and_its_sign_is_right():
    rng = np.random.default_rng(2)
    human, a, b = _study(rng, n=200, runs=3, shift=0.9)
    result = joint_contrast(human, a, b, SETTINGS, seeds=[0], resamples=400, identity="planted", buckets=12)
    assert result.estimate.difference > 0 and result.estimate.p < 0.01  # A is the human law, B is tilted
    assert result.estimate.low < result.estimate.difference < result.estimate.high
    assert (result.a > result.b).all()


def test_the_permutation_test_holds_its_level_on_null_studies():
    """40 null studies (A and B from one law), B = 199: the share with p <= 0.1 stays within its binomial range."""
    rng = np.random.default_rng(3)
    p = []
    for k in range(40):
        human, a, b = _study(rng, n=60, runs=2, shift=0.0)
        p.append(
            joint_contrast(human, a, b, SETTINGS, seeds=[k], resamples=199, identity=f"null{k}", buckets=6).estimate.p
        )
    p = np.asarray(p)
    assert (p <= 0.1).mean() <= 0.1 + 3 * np.sqrt(0.1 * 0.9 / 40)
    assert p.min() >= 1 / 200 and 0.2 < np.median(p) < 0.8  # valid p-values, spread over (0, 1]


def test_without_the_interval_the_estimate_and_p_are_the_same():
    """interval=False (the null simulations' mode) skips only the bootstrap: the same difference, p and scores."""
    rng = np.random.default_rng(6)
    human, a, b = _study(rng, n=40, runs=2, shift=0.4)
    full = joint_contrast(human, a, b, SETTINGS, seeds=[2, 3], resamples=300, identity="i", buckets=4)
    bare = joint_contrast(human, a, b, SETTINGS, seeds=[2, 3], resamples=300, identity="i", buckets=4, interval=False)
    assert bare.estimate == full.estimate._replace(low=None, high=None) and full.estimate.low is not None
    np.testing.assert_array_equal(bare.a, full.a)
    np.testing.assert_array_equal(bare.b, full.b)


def test_same_inputs_same_bytes_and_chunking_changes_nothing(monkeypatch):
    from workflow_lib.report import joint_mauve

    rng = np.random.default_rng(4)
    human, a, b = _study(rng, n=50, runs=3, shift=0.3)
    first = joint_contrast(human, a, b, SETTINGS, seeds=[1], resamples=300, identity="x", buckets=5)
    monkeypatch.setattr(joint_mauve, "CHUNK_ELEMENTS", 150 * 7)  # 7 rows a chunk
    second = joint_contrast(human, a, b, SETTINGS, seeds=[1], resamples=300, identity="x", buckets=5)
    assert first.estimate == second.estimate
    np.testing.assert_array_equal(first.a, second.a)


def test_seeds_average_their_quantisations_and_one_swap_moves_all_of_them():
    rng = np.random.default_rng(8)
    human, a, b = _study(rng, n=40, runs=2, shift=0.5)
    one, two = (
        joint_contrast(human, a, b, SETTINGS, seeds=[s], resamples=100, identity="s", buckets=4) for s in (0, 1)
    )
    both = joint_contrast(human, a, b, SETTINGS, seeds=[0, 1], resamples=100, identity="s", buckets=4)
    np.testing.assert_allclose(both.a, (one.a + two.a) / 2)
    assert both.estimate.difference == pytest.approx((one.estimate.difference + two.estimate.difference) / 2)
    assert 0 < both.estimate.p <= 1


def test_mismatched_shapes_are_refused():
    rng = np.random.default_rng(5)
    human, a, b = _study(rng, n=20, runs=2, shift=0.0)
    with pytest.raises(ValueError, match="differ"):
        joint_contrast(human[:10], a, b, SETTINGS, seeds=[0], resamples=10, identity="x", buckets=3)


def _write_condition(folder, name, prompt_ids, runs, features, status=None):
    import json

    import pyarrow as pa
    import pyarrow.parquet as pq

    path = folder / f"{name}.json"
    path.write_text(json.dumps({"mauve_status": status}))
    pid, run = np.meshgrid(prompt_ids, runs)
    flat = features.reshape(-1, features.shape[-1]).astype(np.float32)
    table = pa.table(
        {
            "prompt_id": pid.ravel().astype(np.int64),
            "run": run.ravel().astype(np.int64),
            "features": pa.FixedSizeListArray.from_arrays(pa.array(flat.ravel()), flat.shape[1]),
        }
    )
    order = np.random.default_rng(0).permutation(len(table))  # the job must align by (prompt_id, run), not row order
    pq.write_table(table.take(order), folder / f"{name}.features.parquet")
    return str(path)


def _run_job(folder, a, b, human, prompt_ids, resamples=300):
    import json
    import sys

    import pyarrow as pa
    import pyarrow.parquet as pq

    from workflow_lib.layout import sidecar
    from workflow_lib.report import joint_mauve

    np.save(folder / "human.npy", human)
    pq.write_table(pa.table({"prompt_id": pa.array(prompt_ids, pa.int64())}), folder / "prompts.parquet")
    settings = {"seed": 7, "mauve": {**SETTINGS, "num_buckets": "auto", "max_buckets": 500, "kmeans_seeds": 2}}
    argv = [
        "joint_mauve",
        "--a",
        a,
        "--b",
        b,
        "--features-a",
        sidecar(a, ".features.parquet"),
        "--features-b",
        sidecar(b, ".features.parquet"),
        "--human",
        str(folder / "human.npy"),
        "--prompts",
        str(folder / "prompts.parquet"),
        "--settings",
        json.dumps(settings),
        "--resamples",
        str(resamples),
        "--identity",
        "job",
        "--output",
        str(folder / "out.json"),
    ]
    saved, sys.argv = sys.argv, argv
    try:
        joint_mauve.main()
    finally:
        sys.argv = saved
    return json.loads((folder / "out.json").read_text())


def test_the_job_aligns_samples_by_prompt_and_run_and_contrasts_reads_it(tmp_path):
    """The job on files as evaluate writes them (rows shuffled), and `contrasts.compare` taking its row from it."""
    from workflow_lib.report.contrasts import JOINT, compare

    rng = np.random.default_rng(6)
    human, a, b = _study(rng, n=80, runs=3, shift=0.9)
    ids = np.arange(500, 580)
    result = _run_job(
        tmp_path,
        _write_condition(tmp_path, "a", ids, [0, 1, 2], a),
        _write_condition(tmp_path, "b", ids, [0, 1, 2], b),
        human[::-1],
        ids[::-1],
    )
    direct = joint_contrast(human, a, b, SETTINGS, seeds=[7, 8], resamples=300, identity="job", buckets=8)
    assert (
        result["buckets"] == 8
        and result["runs"] == [0, 1, 2]
        and result["n"] == 80
        and result["kmeans_seeds"] == [7, 8]
    )
    assert result["difference"] == pytest.approx(direct.estimate.difference) and result["p"] == direct.estimate.p
    assert result["difference"] > 0 and result["p"] < 0.05
    pair = {
        "family": "perturbation",
        "model": "m",
        "dataset": "d",
        "objective": "mle",
        "eval_set": "e",
        "decoder": "u",
        "seed": 1,
        "a": "A",
        "b": "B",
        "kind": "metrics",
        "path_a": str(tmp_path / "a.json"),
        "path_b": str(tmp_path / "b.json"),
    }
    rows = compare(pair, 300, result)
    assert [(r["metric"], r["method"], r["p"], r["resamples"]) for r in rows] == [("mauve", JOINT, result["p"], 300)]
    # the row is the job's estimate, interval included (the CSV's low and high)
    assert (rows[0]["difference"], rows[0]["low"], rows[0]["high"], rows[0]["n"]) == (
        result["difference"],
        result["low"],
        result["high"],
        result["n"],
    )
    assert rows[0]["low"] < rows[0]["difference"] < rows[0]["high"]


def test_a_side_with_too_few_texts_gives_no_mauve_contrast(tmp_path):
    from workflow_lib.report.contrasts import compare

    rng = np.random.default_rng(7)
    human, a, b = _study(rng, n=20, runs=2, shift=0.0)
    ids = np.arange(20)
    result = _run_job(
        tmp_path,
        _write_condition(tmp_path, "a", ids, [0, 1], a, status="too few texts (20)"),
        _write_condition(tmp_path, "b", ids, [0, 1], b),
        human,
        ids,
    )
    assert result["status"] == "A: too few texts (20)" and "p" not in result
    pair = {
        "family": "perturbation",
        "model": "m",
        "dataset": "d",
        "objective": "mle",
        "eval_set": "e",
        "decoder": "u",
        "seed": 1,
        "a": "A",
        "b": "B",
        "kind": "metrics",
        "path_a": str(tmp_path / "a.json"),
        "path_b": str(tmp_path / "b.json"),
    }
    assert compare(pair, 300, result) == []
