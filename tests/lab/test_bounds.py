"""The theory lab's trained-model table (bounds.uncertainty_table): descriptive U, TV to the truth, T's constants,
the half-draws and coupling columns, the internal coupling assertion, and every refusal of laws or prefixes it
cannot read, each with its message."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from workflow_lib.cli import StageError
from workflow_lib.lab import bounds

# Four rows of one family: two support prefixes (delta 0) and their delta-1 versions (same base).
ROWS = [(0, 0, 0), (1, 0, 1), (2, 1, 0), (3, 1, 1)]  # (row, delta, base)
ONE = [1.0, 0.0, 0.0]
# "none" laws of three models on cells (word 0, word 1, other). Pair TVs (A,B), (A,C), (B,C) per row:
# row 0: 0, 0, 0; row 1: 0, 0.1, 0.1; row 2: 0.5, 0.3, 0.2; row 3: 0.2, 0, 0.2.
LAWS = np.array(
    [
        [ONE, ONE, ONE, ONE],
        [ONE, ONE, [0.5, 0.5, 0.0], [0.8, 0.2, 0.0]],
        [ONE, [0.9, 0.1, 0.0], [0.7, 0.3, 0.0], ONE],
    ]
)
CONSTANTS = {
    ("syn", "synonym", d): {
        "alpha": 1.0,
        "alpha_proposition": 0.4,
        "C": float(d),
        "C_proposition": 0.1 * d,
        "C_rows": 0.05 * d,
    }
    for d in (0, 1)
}


def prefixes(family: str = "synonym", truth=(1.0, 0.0)) -> pl.DataFrame:
    return pl.DataFrame(
        {
            "row": [r for r, _, _ in ROWS],
            "family": [family] * 4,
            "delta": [d for _, d, _ in ROWS],
            "base": [b for _, _, b in ROWS],
            "text": ["a b"] * 4,
            "truth": [list(truth)] * 4,
        },
        schema={
            "row": pl.Int64,
            "family": pl.Utf8,
            "delta": pl.Int64,
            "base": pl.Int64,
            "text": pl.Utf8,
            "truth": pl.List(pl.Float64),
        },
    )


def models(perturbed: np.ndarray | None = None, single=(True, True)) -> list[dict]:
    """Three models with LAWS unperturbed and `perturbed` (default: LAWS again) under "syn"."""
    perturbed = LAWS if perturbed is None else perturbed
    return [
        {
            "laws": np.stack([LAWS[m], perturbed[m]]),
            "perturbations": np.array(["none", "syn"]),
            "single": np.array(single),
            "label": f"model {m}",
        }
        for m in range(3)
    ]


def table(perturbed: np.ndarray | None = None, group: list[dict] | None = None) -> pl.DataFrame:
    return bounds.uncertainty_table(prefixes(), group or models(perturbed), CONSTANTS, draws=8)


def row(frame: pl.DataFrame, perturbation: str, delta: int) -> dict:
    (hit,) = frame.filter((pl.col("perturbation") == perturbation) & (pl.col("delta") == delta)).iter_rows(named=True)
    return hit


def test_tv_of_a_model_with_itself_is_zero():
    laws = np.random.default_rng(0).dirichlet(np.ones(5), size=(2, 7))  # two different models, 7 rows
    tv = bounds.pairwise_tv(np.stack([laws[0], laws[0], laws[1]]))  # pairs (0,1), (0,2), (1,2)
    assert tv.shape == (3, 7)
    assert np.all(tv[0] == 0)
    assert np.all(tv[1] > 0) and np.allclose(tv[1], tv[2])


def test_pairwise_tv_matches_a_hand_computation():
    tv = bounds.pairwise_tv(np.array([[[0.5, 0.5, 0.0]], [[1.0, 0.0, 0.0]], [[0.2, 0.2, 0.6]]]))
    assert tv[:, 0] == pytest.approx([0.5, 0.6, 0.8])
    by_row = [[0, 0, 0], [0, 0.1, 0.1], [0.5, 0.3, 0.2], [0.2, 0, 0.2]]  # LAWS' pairs, as in its comment
    assert bounds.pairwise_tv(LAWS).T == pytest.approx(np.array(by_row))


def test_coarse_truth_and_fold_move_multi_token_mass_into_the_other_cell():
    single = np.array([True, False, True])
    assert bounds.coarse_truth(np.array([[0.2, 0.3, 0.5]]), single) == pytest.approx(np.array([[0.2, 0.0, 0.5, 0.3]]))
    assert bounds.fold(np.array([0.1, 0.2, 0.3, 0.4]), single) == pytest.approx([0.1, 0.0, 0.3, 0.6])


def test_table_describes_the_models_disagreement_and_attaches_ts_constants():
    frame = table(perturbed=np.stack([LAWS[0], LAWS[0], LAWS[1]]))
    assert frame.columns == bounds.COLUMNS
    none0, none1 = row(frame, "none", 0), row(frame, "none", 1)
    assert none0["U_max"] == pytest.approx(0.1) and none1["U_max"] == pytest.approx(0.5)
    assert none1["U_growth"] == pytest.approx(0.4) and none1["support_disagreement"] == pytest.approx(0.1)
    assert none1["U_mean"] == pytest.approx(np.mean([0.5, 0.3, 0.2, 0.2, 0, 0.2]))
    assert none1["tv_truth_mean"] == pytest.approx(np.mean([0, 0.5, 0.3, 0, 0.2, 0]))
    assert none1["draws"] == 1 and none1["alpha"] is None and none1["C"] is None
    syn1 = row(frame, "syn", 1)
    assert syn1["draws"] == 8 and syn1["C"] == 1.0 and syn1["C_proposition"] == pytest.approx(0.1)
    assert syn1["U_max"] == pytest.approx(0.5)  # models 0 and 1 equal, model 2 as before
    assert not {c for c in frame.columns if c.startswith(("respects", "bound", "violations"))}


def test_half_draws_column_reports_how_far_the_monte_carlo_average_moves():
    group = models()
    for m in group:
        m["laws_half"] = m["laws"].copy()
    group[0]["laws_half"][1, 2] = [0.0, 1.0, 0.0]  # model A's first-half average moves on row 2
    frame = table(group=group)
    assert row(frame, "syn", 1)["U_max"] == pytest.approx(0.5)
    assert row(frame, "syn", 1)["U_max_half_draws"] == pytest.approx(0.7)  # A vs C on row 2: (0,1,0) vs (.7,.3,0)
    assert row(frame, "none", 1)["U_max_half_draws"] is None


def test_the_coupling_assertion_passes_consistent_draws_and_stops_on_inconsistent_ones():
    group = models()
    for m in group:  # every row changed in half of the draws: 2 x 0.5 + support TV >= any TV
        m["differs"] = np.full((2, 4), 0.5)
    assert table(group=group).height == 4
    for m in group:  # no draw changed a delta-1 row: its TV must equal its support prefix's, and does not
        m["differs"] = np.zeros((2, 4))
    with pytest.raises(StageError, match="perturbation 'none': the coupling inequality fails at row 2.*which is a bug"):
        table(group=group)


def test_missing_constants_are_refused_by_name():
    with pytest.raises(StageError, match="no constants of T for perturbation 'syn', family 'synonym', delta 1"):
        bounds.uncertainty_table(prefixes(), models(), {k: v for k, v in CONSTANTS.items() if k[2] == 0}, draws=8)


def test_assert_coupling_names_the_row_and_pair():
    tv = np.array([[0.0, 0.3]])
    bounds.assert_coupling(tv, np.array([[0.0, 0.1]]), np.array([0.0, 0.1]), "syn")
    with pytest.raises(StageError) as error:
        bounds.assert_coupling(tv, np.array([[0.0, 0.0]]), np.array([0.0, 0.1]), "syn")
    assert str(error.value) == (
        "lab: perturbation 'syn': the coupling inequality fails at row 1, pair 0 (TV 0.300000 > 2 x 0.100000 + "
        "0.000000); the laws and their draws are inconsistent, which is a bug"
    )


def test_the_coupling_assertion_allows_round_off_up_to_its_tolerance_and_no_more():
    share, base = np.array([0.0]), np.array([[0.0]])
    bounds.assert_coupling(np.array([[bounds.TOLERANCE]]), base, share, "syn")  # exactly at the tolerance: passes
    with pytest.raises(StageError, match="coupling inequality fails at row 0, pair 0"):
        bounds.assert_coupling(np.array([[2 * bounds.TOLERANCE]]), base, share, "syn")


def test_laws_are_compared_on_the_words_every_model_spells_as_one_token():
    laws = models(single=(True, True))
    laws[1]["single"] = np.array([True, False])  # model B spells word 1 with several tokens
    laws[1]["laws"] = bounds.fold(laws[1]["laws"], laws[1]["single"])
    frame = bounds.uncertainty_table(prefixes(truth=(0.5, 0.5)), laws, CONSTANTS, draws=8)
    # Word 1 folds into "other" for every model and for the truth: TVs are unchanged (other cells were 0).
    assert row(frame, "none", 1)["U_max"] == pytest.approx(0.5)
    assert row(frame, "none", 0)["truth_other_mass"] == pytest.approx(0.5)


def refusal(call) -> str:
    with pytest.raises(StageError) as error:
        call()
    return str(error.value)


def test_two_models_make_one_pair_and_the_columns_keep_their_types():
    frame = bounds.uncertainty_table(prefixes(), models()[:2], CONSTANTS, draws=8)
    assert set(frame["n_pairs"]) == {1} and set(table()["n_pairs"]) == {3}
    assert frame["n_models"].to_list() == [2] * 4 and frame["n_prefixes"].to_list() == [2] * 4
    assert frame["draws"].to_list() == [1, 1, 8, 8]
    assert all(frame.schema[c] == pl.Int64 for c in ("n_prefixes", "n_models", "n_pairs", "draws"))
    assert row(frame, "none", 1)["U_max"] == pytest.approx(0.5)  # models A and B on row 2
    assert frame.schema["C_draws"] == frame.schema["U_max_half_draws"] == pl.Float64  # all null here, still floats
    assert frame.schema["delta"] == frame.schema["n_pairs"] == pl.Int64


def test_the_unperturbed_rows_come_first_then_the_ts_in_the_files_order():
    group = models()
    for m in group:
        m["laws"] = np.stack([m["laws"][1], m["laws"][0], m["laws"][1]])
        m["perturbations"] = np.array(["syn", "none", "del"])
    constants = CONSTANTS | {("del", k[1], k[2]): v for k, v in CONSTANTS.items()}
    frame = bounds.uncertainty_table(prefixes(), group, constants, draws=8)
    assert frame["perturbation"].to_list() == ["none", "none", "syn", "syn", "del", "del"]


def test_the_truths_2se_is_over_rows_of_the_models_mean_tv_and_none_for_one_row():
    frame = table()
    per_row = np.array([np.mean([0, 0.5, 0.3]), np.mean([0, 0.2, 0])])  # rows 2 and 3: each model's TV to (1, 0)
    assert row(frame, "none", 1)["tv_truth_2se"] == pytest.approx(2 * per_row.std(ddof=1) / np.sqrt(2))
    one = prefixes().filter(pl.col("row") == 0)
    group = [{**m, "laws": m["laws"][:, :1]} for m in models()]
    single = bounds.uncertainty_table(one, group, CONSTANTS, draws=8)
    assert single.height == 2 and single["tv_truth_2se"].to_list() == [None, None]


def test_c_draws_is_the_largest_share_of_changed_draws_and_a_missing_constant_stays_empty():
    group = models()
    for m in group:
        m["differs"] = np.array([[0.0, 0.0, 1.0, 1.0], [0.0, 0.0, 0.25, 0.5]])  # "none" changes every delta-1 row
    constants = {k: {**v, "C_proposition": None} for k, v in CONSTANTS.items()}
    frame = bounds.uncertainty_table(prefixes(), group, constants, draws=8)
    assert row(frame, "syn", 1)["C_draws"] == 0.5 and row(frame, "syn", 0)["C_draws"] == 0.0
    assert row(frame, "none", 1)["C_draws"] is None
    assert row(frame, "syn", 1)["C_proposition"] is None and row(frame, "syn", 1)["C"] == 1.0


def test_the_half_draws_are_folded_like_the_laws():
    """Word 1 is spelled with several tokens by one model: its mass joins "other" in the half-draw laws too."""
    group = models()
    group[1]["single"] = np.array([True, False])
    for m in group:
        m["laws_half"] = np.zeros_like(m["laws"])
        m["laws_half"][..., 2] = 1.0
    group[0]["laws_half"][1, 2] = [0.0, 0.5, 0.5]  # the same law as the others once word 1 is folded
    assert row(table(group=group), "syn", 1)["U_max_half_draws"] == 0.0


def test_too_few_models_and_inconsistent_laws_are_refused_with_what_is_wrong():
    assert refusal(lambda: table(group=models()[:1])) == (
        "laws of 1 model(s) (model 0): the pairwise TV needs at least 2 models"
    )
    group = models()
    group[1]["laws"] = group[1]["laws"].copy()
    group[1]["laws"][0, 0] = [-0.1, 1.1, 0.0]
    assert refusal(lambda: table(group=group)) == (
        "model 1: laws are not probability vectors (min -0.1, sums within [1.000000, 1.000000])"
    )
    group[1]["laws"][0, 0] = [0.5, 0.49, 0.0]
    assert refusal(lambda: table(group=group)) == (
        "model 1: laws are not probability vectors (min 0, sums within [0.990000, 1.000000])"
    )
    group = models()
    group[1]["perturbations"] = np.array(["none", "del"])
    assert refusal(lambda: table(group=group)) == (
        "model 1: perturbations ['none', 'del'] differ from model 0's ['none', 'syn']"
    )
    group = models()
    for m in group:
        m["perturbations"] = np.array(["syn", "syn"])
    assert refusal(lambda: table(group=group)) == "model 0: laws has 2 perturbations for the names ['syn', 'syn']"
    group = models()
    group[2]["laws"] = group[2]["laws"][..., :2]
    assert refusal(lambda: table(group=group)) == "model 2: laws has 2 cells, expected 2 words + 1 'other'"


def test_laws_for_other_rows_or_words_than_the_prefixes_are_refused():
    short = [{**m, "laws": m["laws"][:, :3]} for m in models()]  # the models agree with each other, not the prefixes
    assert refusal(lambda: table(group=short)) == (
        "model 0: laws for 3 rows and 2 words, expected 4 rows and 2 words (the prefixes and model 0)"
    )
    wide = [
        {**m, "laws": np.concatenate([m["laws"], np.zeros((2, 4, 1))], -1), "single": np.ones(3, bool)}
        for m in models()
    ]
    assert refusal(lambda: table(group=wide)) == (
        "model 0: laws for 4 rows and 3 words, expected 4 rows and 2 words (the prefixes and model 0)"
    )
    # Without the prefixes' sizes, the first model's are the reference: they pass, and another model's differ.
    names = ["model 0", "model 1", "model 2"]
    two = [{**m, "laws": m["laws"][:, :2]} for m in models()]  # 2 rows of 3 cells
    assert bounds.check_models(two, names) == ["none", "syn"]
    mixed = [two[0], *models()[1:]]
    assert refusal(lambda: bounds.check_models(mixed, names)) == (
        "model 1: laws for 4 rows and 2 words, expected 2 rows and 2 words (the prefixes and model 0)"
    )
    mixed = [models()[0], wide[1], models()[2]]
    assert refusal(lambda: bounds.check_models(mixed, names)) == (
        "model 1: laws for 4 rows and 3 words, expected 4 rows and 2 words (the prefixes and model 0)"
    )
    assert refusal(lambda: bounds.check_models([], [])) == (
        "laws of 0 model(s) (none): the pairwise TV needs at least 2 models"
    )
    flat = [{**m, "laws": m["laws"][0]} for m in models()]
    assert refusal(lambda: bounds.check_models(flat, names)) == (
        "model 0: laws has shape (4, 3), expected [perturbations, rows, words + 1]"
    )


def test_the_models_are_named_by_their_labels_in_refusals():
    group = models()[:1]
    group[0]["label"] = "gpt2 run 1"
    assert "(gpt2 run 1)" in refusal(lambda: table(group=group))
    del group[0]["label"]
    assert "(model 0)" in refusal(lambda: table(group=group))


def test_draws_that_differ_between_models_are_refused_naming_both():
    group = models()
    for m in group:
        m["differs"] = np.full((2, 4), 0.5)
    group[1]["differs"] = np.full((2, 4), 0.25)
    assert refusal(lambda: table(group=group)) == (
        "model 1: its perturbation draws differ from model 0's; the laws of a group must come from the same lab "
        "settings (seed, last, draws, perturbations)"
    )
    group[1]["differs"] = np.full((2, 3), 0.5)
    group[0]["differs"] = np.full((2, 3), 0.5)
    assert refusal(lambda: table(group=group)) == "model 0: differs has shape (2, 3), expected (2, 4)"


def test_prefixes_the_table_cannot_read_are_refused_with_what_is_wrong():
    ragged = prefixes().with_columns(
        pl.when(pl.col("row") == 3).then(pl.lit([1.0, 0.0, 0.0])).otherwise(pl.col("truth")).alias("truth")
    )
    assert refusal(lambda: bounds.uncertainty_table(ragged, models(), CONSTANTS, draws=8)) == (
        "prefixes: truth must be one list of W word probabilities per row, the same W in every row"
    )
    many = pl.concat([prefixes().with_columns(pl.col("row") + 4 * k, pl.col("base") + 2 * k) for k in range(3)])
    nan = many.with_columns(pl.lit([float("nan"), 1.0]).alias("truth"))
    assert refusal(lambda: bounds.uncertainty_table(nan, models(), CONSTANTS, draws=8)) == (
        "prefixes: truth has non-finite values (NaN, inf or null) in rows [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]"
    )
    orphans = pl.concat([prefixes().with_columns(pl.col("row") + 4 * k, pl.col("base") + 2 * k) for k in range(6)])
    orphans = orphans.filter((pl.col("delta") == 1) | (pl.col("base") % 2 == 0)).with_columns(
        pl.int_range(pl.len()).alias("row")
    )  # bases 1, 3, ..., 11 keep their delta-1 rows only
    message = refusal(lambda: bounds.uncertainty_table(orphans, models(), CONSTANTS, draws=8))
    assert message.startswith("prefixes: no delta-0 support prefix for (family, base) [('synonym', ")
    assert len(eval(message.split("base) ")[1])) == 5  # the first five of six


def test_prefix_rows_must_be_numbered_once_and_have_one_support_prefix_each():
    gap = prefixes().with_columns(pl.col("row") * 2)
    assert refusal(lambda: bounds.uncertainty_table(gap, models(), CONSTANTS, draws=8)) == (
        "prefixes: `row` must number the rows 0..R-1 once each"
    )
    twice = prefixes().with_columns(pl.lit(0).alias("delta"), pl.lit(0).alias("base"))
    assert refusal(lambda: bounds.uncertainty_table(twice, models(), CONSTANTS, draws=8)) == (
        "prefixes: a (family, base) has more than one delta-0 row"
    )
