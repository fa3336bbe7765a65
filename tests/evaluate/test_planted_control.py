"""MAUVE's planted control (evaluate/controls.py `mixture`, report/planted.py, report/instrument.py): two
disjoint human windows against the same windows with a share of the prompts' texts replaced by another eval set's
words, scored by the contrasts' joint test, and the smallest gap that test can see at the study's n."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from test_controls import MAUVE, SETTINGS, by_control, rows_and_prompts

from workflow_lib.evaluate.control_names import CEILING, CONTROLS, MIXTURE, SECOND_WINDOW
from workflow_lib.evaluate.controls import control_texts
from workflow_lib.evaluate.features import features_table
from workflow_lib.grid import planted_source
from workflow_lib.report.instrument import planted_cell, planted_sentence
from workflow_lib.report.planted import planted, planted_from_features

OTHER = [" " + " ".join(f"o{d}_{i}" for i in range(12)) for d in range(7)]


def planted_table(fraction: float = 0.2, seed: int = 1, other=OTHER):
    texts, prompts = rows_and_prompts(n_rows=30, words=60)
    planted_settings = {"fraction": fraction, "source": "other"}
    table = control_texts(prompts, texts, list(range(len(texts))), "set", 5, 10, "==", seed, planted_settings, other)
    return prompts, by_control(table)


def test_the_planted_rows_are_a_second_window_and_a_mixture_of_the_same_prompts():
    prompts, got = planted_table(0.2)
    n = prompts.num_rows
    assert list(got) == [*CONTROLS, SECOND_WINDOW, *MIXTURE] and all(len(v) == n for v in got.values())
    for i in range(n):
        row = int(got[CEILING][i][0].split("_")[0][1:])
        assert got[SECOND_WINDOW][i] == [f"w{row}_{k}" for k in range(25, 35)]  # right after the ceiling's window
    replaced = [
        {i for i in range(n) if got[name][i] != got[window][i]}
        for name, window in zip(MIXTURE, (CEILING, SECOND_WINDOW), strict=True)
    ]
    assert replaced[0] == replaced[1] and len(replaced[0]) == round(0.2 * n)  # the same prompts in both windows
    other_words = {w for text in OTHER for w in text.split()}
    for name, window in zip(MIXTURE, (CEILING, SECOND_WINDOW), strict=True):
        for i in range(n):
            assert len(got[name][i]) == len(got[window][i])
            if i in replaced[0]:
                assert set(got[name][i]) <= other_words
    assert planted_table(0.2, seed=2)[1][MIXTURE[0]] != got[MIXTURE[0]]  # the study's seed chooses the prompts
    assert planted_table(0.2, seed=1)[1] == got


def test_no_planted_rows_without_a_source_or_a_share():
    assert list(planted_table(0.0)[1]) == list(CONTROLS)
    assert list(planted_table(0.2, other=None)[1]) == list(CONTROLS)


def test_the_source_is_the_next_evaluated_eval_set_and_none_alone():
    from pathlib import Path

    import yaml

    from workflow_lib.config import validate_config

    config = validate_config(yaml.safe_load((Path(__file__).parents[2] / "config.yaml").read_text()))
    names = sorted({e for x in config["experiments"].values() for e in x["eval_sets"]})
    assert len(names) >= 2
    assert [planted_source(config, name) for name in names] == names[1:] + names[:1]
    config["evaluation"]["mauve"]["controls"]["planted_fraction"] = 0
    assert planted_source(config, names[0]) is None


def planted_features(n: int, moved: int, shift: float = 6.0, seed: int = 0):
    """References, two human windows (one law) and the mixture: the windows with `moved` prompts' rows moved far."""
    rng = np.random.default_rng(seed)
    human = rng.normal(size=(n, 8)).astype(np.float32)
    windows = rng.normal(size=(2, n, 8)).astype(np.float32)
    mixed = windows.copy()
    mixed[:, :moved] += shift
    return human, windows, mixed


SCORING = {**SETTINGS, "mauve": {**MAUVE, "controls": {**MAUVE["controls"], "planted_fraction": 0.2}}}


def test_a_planted_gap_is_seen_and_sized_and_an_empty_one_is_not():
    human, windows, mixed = planted_features(80, 16)
    gap = planted(human, windows, mixed, SCORING, [5, 6, 7], "t")
    # the permutation p holds the quantisation fixed; the interval resamples prompts, so it is the wider view
    assert gap["gap"] > 0.05 and gap["seen"] and gap["p"] < 0.01 and gap["low"] < gap["gap"] < gap["high"]
    width = gap["high"] - gap["low"]
    assert 0.6 * width < gap["can_see"] < 0.8 * width  # 2.8 standard errors of a 3.92-error-wide interval
    assert gap["target"] == 0.03 and gap["sees_target"] == (gap["can_see"] <= 0.03) and gap["windows"] == 2
    same = planted(human, windows, windows.copy(), SCORING, [5, 6, 7], "t")
    assert same["gap"] == 0 and same["p"] == 1 and not same["seen"]
    # a tenth of the texts moved, at 80 prompts: MAUVE's 8 buckets put them with the human text (docs/method.md §4)
    tenth = planted(*planted_features(80, 8), SCORING, [5, 6, 7], "t")
    assert tenth["buckets"] == 8 and not tenth["seen"] and abs(tenth["gap"]) < 0.02
    # the instrument's reach grows with n: 4x the prompts, about half the smallest gap it can see
    human4, windows4, mixed4 = planted_features(320, 64)
    assert planted(human4, windows4, mixed4, SCORING, [5, 6, 7], "t")["can_see"] < 0.75 * gap["can_see"]


def test_the_job_scores_the_planted_rows_of_the_control_features_and_says_why_not_without_them():
    human, windows, mixed = planted_features(60, 12)
    rng = np.random.default_rng(3)
    blocks = [rng.normal(size=(60, 8)).astype(np.float32) for _ in CONTROLS]
    blocks[list(CONTROLS).index(CEILING)] = windows[0]
    names = [c for c in CONTROLS for _ in range(60)] + [SECOND_WINDOW] * 60 + [MIXTURE[0]] * 60 + [MIXTURE[1]] * 60
    order = np.random.default_rng(4).permutation(len(names))  # rows in any order: read back by prompt
    matrix = np.vstack([*blocks, windows[1], mixed[0], mixed[1]])[order]
    ids = np.asarray(list(range(60)) * (len(CONTROLS) + 3))[order]
    keys = {"control": pa.array(np.asarray(names)[order]), "prompt_id": pa.array(ids, pa.int64())}
    result = planted_from_features(human, features_table(keys, matrix, len(names)), SCORING, "planted/x/set")
    assert result["planted"] == planted(human, windows, mixed, SCORING, [5, 6, 7], "planted/x/set")
    assert result["planted"]["seen"]
    first = len(CONTROLS) * 60
    plain = {"control": pa.array(names[:first]), "prompt_id": pa.array(list(range(60)) * len(CONTROLS), pa.int64())}
    without = planted_from_features(human, features_table(plain, np.vstack(blocks), first), SCORING, "t")
    assert without["planted"] is None and "no planted rows" in without["why"]
    unscored = planted_from_features(human, features_table(keys, None, len(names)), SCORING, "t")
    assert unscored["planted"] is None and "floor" in unscored["why"]


def test_the_report_says_what_size_the_study_can_see():
    record = {"texts": 160, "floor": None}
    record["planted"] = {
        "fraction": 0.1, "windows": 2, "gap": 0.041, "low": 0.012, "high": 0.070, "p": 0.004, "seen": True,
        "can_see": 0.052, "target": 0.03, "sees_target": False, "buckets": 16,
    }  # fmt: skip
    assert planted_cell(record) == "0.041 [0.012, 0.070], p 0.004; sees 0.052+"
    sentence = planted_sentence(record)
    assert "Replacing 10% of the human texts" in sentence and "lowers MAUVE by 0.041" in sentence
    assert "can see MAUVE gaps of 0.052 or more" in sentence and "0.03 is below what this study's MAUVE" in sentence
    record["planted"] |= {"can_see": 0.025, "sees_target": True}
    assert "which includes the paper's gain of 0.03" in planted_sentence(record)
    assert planted_cell({"texts": 10, "floor": None}) == "not run" and planted_sentence({"planted": None}) == ""


def test_the_planted_share_reaches_only_the_jobs_that_use_it():
    """evaluation.mauve.controls.planted_fraction is in the control texts' and the planted_control job's settings,
    not in evaluate's, mauve_controls' or mauve_contrast's, so a change of it reruns none of those by its params."""
    import copy
    from pathlib import Path

    import yaml

    from workflow_lib.config import validate_config
    from workflow_lib.evaluate.settings import control_text_settings, evaluation_settings, planted_settings

    config = validate_config(yaml.safe_load((Path(__file__).parents[2] / "config.yaml").read_text()))
    other = copy.deepcopy(config)
    other["evaluation"]["mauve"]["controls"]["planted_fraction"] = 0.2
    assert evaluation_settings(other) == evaluation_settings(config)
    assert "planted_fraction" not in evaluation_settings(config)["mauve"]["controls"]
    assert planted_settings(other)["mauve"]["controls"]["planted_fraction"] == 0.2
    assert planted_settings(other) != planted_settings(config)
    assert control_text_settings(other, "synthetic-test") != control_text_settings(config, "synthetic-test")
    assert config["evaluation"]["mauve"]["controls"]["planted_fraction"] == 0.1  # nothing above edited the config
