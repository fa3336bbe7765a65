"""The summary's first screen (report.glance): at most ten sentences under the reader's three questions, each number a
contrast row's, each metric's direction said where it is first named, and all of it on one screen."""

from __future__ import annotations

import json
import re

import polars as pl
import pytest

from workflow_lib.metric_registry import BY_NAME
from workflow_lib.report.collect import collect
from workflow_lib.report.contrasts import COLUMNS, PERMUTATION
from workflow_lib.report.glance import MOST, QUESTIONS, glance_lines
from workflow_lib.report.summary import StudyResults, summary

DISTRIBUTIONAL = "insertion 0.025 (train distributional, sample distributional)"
ORACLE = "insertion 0.025 (train oracle, sample oracle)"
SHARES = {"reach": (0.69, 0.69), "ood": (0.23, 0.0), "test": (0.0, 0.0)}  # (off the support, reachable)
BLIND = "MAUVE cannot see shuffled words, word salad at n = 50 with minilm"


def row(family, metric, eval_set, a, difference, p_holm, favours, objective="mle", b="no perturbation", seen=0.006):
    return {
        "family": family,
        "metric": metric,
        "model": "tiny",
        "dataset": "syn",
        "objective": objective,
        "eval_set": eval_set,
        "decoder": "unbiased",
        "seed": 42,
        "a": a,
        "b": b,
        "difference": difference,
        "low": difference - 0.003,
        "high": difference + 0.003,
        "p": p_holm,
        "p_holm": p_holm,
        "significant": p_holm < 0.05,
        "favours": favours,
        "n": 50,
        "method": PERMUTATION,
        "unit": "checkpoint",
        "detectable": seen,
    }


@pytest.fixture
def contrasts():
    """The default study's shape: the recipe raises the TV on `reach` with both synonym tables and on `ood`, changes
    nothing detectable on `test`; MixCE's arm lowers it; Brier beats MLE, TVD loses to it; ROUGE-1 sees nothing."""
    worse, better = "no perturbation", "perturbation"
    rows = [
        row("perturbation", "tv", "reach", DISTRIBUTIONAL, 0.013, 0.005, worse),
        row("perturbation", "tv", "reach", ORACLE, 0.011, 0.005, worse),
        row("perturbation", "tv", "ood", DISTRIBUTIONAL, 0.006, 0.005, worse),
        row("perturbation", "tv", "test", DISTRIBUTIONAL, 0.002, 0.4, worse, seen=0.007),
        row("perturbation", "tv", "ood", DISTRIBUTIONAL, -0.022, 0.005, better, objective="mixce"),
        row("ablation", "tv", "reach", "TrainPerturb (train oracle)", 0.002, 0.011, worse, b="NoPerturb"),
        row("objective", "tv", "ood", "brier, no perturbation", -0.055, 0.005, "brier", "brier", "mle, none"),
        row("objective", "tv", "test", "brier, no perturbation", -0.036, 0.005, "brier", "brier", "mle, none"),
        row("objective", "tv", "ood", "tvd, no perturbation", 0.057, 0.005, "mle", "tvd", "mle, none"),
        row("perturbation", "rouge1", "reach", DISTRIBUTIONAL, -0.001, 1.0, worse, seen=0.018),
        row("perturbation", "rouge1", "ood", DISTRIBUTIONAL, 0.009, 0.86, better, objective="tvd", seen=0.014),
    ]
    return pl.DataFrame(rows, schema=COLUMNS, orient="row")


@pytest.fixture
def frame(tmp_path, monkeypatch):
    """One extrapolation file per eval set, with where its prefixes lie against the training support."""
    monkeypatch.chdir(tmp_path)
    paths = []
    for eval_set, (off, reachable) in SHARES.items():
        path = f"results/extrapolation/tiny/syn/mle/none/augment-m1/none-0/seed42/{eval_set}/unbiased/none/none-0-exact.json"
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        data = {
            "tv_mean": 0.4,
            "tv_2se": 0.01,
            "law": "ood",
            "off_support_share": off,
            "reachable_share": reachable,
            "prompts": 50,
        }
        (tmp_path / path).write_text(json.dumps(data | {"runs": 3}))
        paths.append(path)
    return collect(paths)


CONTROLS = [
    {
        "eval_set": e,
        "featuriser": "minilm",
        "feature_text": "continuation",
        "texts": 50,
        "status": BLIND,
        "floor": None,
        "planted": {"can_see": see, "target": 0.03, "sees_target": False, "fraction": 0.1, "gap": 0.02, "low": -0.01},
    }
    for e, see in (("ood", 0.058), ("reach", 0.086), ("test", 0.046))
]
for record in CONTROLS:
    record["planted"] |= {"high": 0.05, "p": 0.06, "seen": False, "windows": 2}


def first_screen(text: str) -> str:
    """What the summary shows before its next heading: the opening of "What this study found"."""
    return re.split(r"\n#{2,3} ", text.split("## What this study found\n", 1)[1], maxsplit=1)[0]


def effect(r: dict) -> str:
    return f"{r['difference']:+.3f} [{r['low']:+.3f}, {r['high']:+.3f}]"


def test_the_summary_opens_with_at_most_ten_sentences_on_one_screen(contrasts, frame):
    config = {"models": {"tiny": {"source": "scratch"}}, "eval_sets": {}, "datasets": {}}
    text = summary(StudyResults(frame, {}, contrasts=contrasts, controls=CONTROLS), config, 0.025)
    assert text.startswith("# Summary of the study\n\n## What this study found\n")
    screen = first_screen(text)
    assert "\n### In detail\n" in text and text.index("### In detail") > text.index(screen)
    assert len(screen.strip().splitlines()) <= 25
    sentences = [line for line in screen.strip().splitlines() if line and not line.startswith("**")]
    assert 5 <= len(sentences) <= MOST
    assert all(len(s) < 300 for s in sentences), [s for s in sentences if len(s) >= 300]
    questions = [q for q in QUESTIONS if f"**{q}**" in screen]
    assert questions == list(QUESTIONS)  # in the reader's order
    # each metric's direction where it is first named, and not again
    for metric in ("tv", "mauve", "rouge1"):
        label, lower = BY_NAME[metric].label, BY_NAME[metric].lower_is_better
        first = screen.index(label)
        assert screen[first + len(label) :].startswith(f" ({'lower' if lower else 'higher'} is better)"), label
        assert screen.count(f"{label} (") == 1, label
    # the old detail is still there, below
    assert "### In detail\n" in text and "Perturbation against none, about these checkpoints" in text


def test_each_sentence_quotes_the_rows_it_summarises(contrasts, frame):
    lines = glance_lines(contrasts, frame, CONTROLS)
    assert len(lines) <= MOST
    assert lines[0].text.startswith("One training seed per arm: each finding is about these checkpoints")
    for line in lines:
        if not line.rows.height:
            continue
        signed = set(re.findall(r"[+-]\d+\.\d{3}", line.text))
        quoted = {f"{v:+.3f}" for c in ("difference", "low", "high") for v in line.rows[c].to_list()}
        assert signed <= quoted, (line.text, signed - quoted)
        # a range spans its rows: the smallest and largest effect are quoted
        assert {f"{line.rows['difference'].min():+.3f}", f"{line.rows['difference'].max():+.3f}"} <= signed
        sizes = set(re.findall(r"(?<![+\-\d.])\d\.\d{3}\b", line.text))
        assert sizes <= {f"{v:.3f}" for v in line.rows["detectable"].drop_nulls().to_list()}, line.text
    by_text = {line.text.split(":")[0]: line for line in lines}
    # where the theory predicts a gain: both recipe rows, each effect with its interval and its synonym table
    gain = by_text["Where the theory predicts a gain (reach)"]
    reach = contrasts.filter((pl.col("eval_set") == "reach") & (pl.col("metric") == "tv"))
    reach = reach.filter((pl.col("family") == "perturbation") & (pl.col("objective") == "mle")).to_dicts()
    assert gain.text == (
        "Where the theory predicts a gain (reach): TV to the true law (lower is better) worse in both rows "
        f"({effect(reach[0])} distributional synonyms, {effect(reach[1])} oracle synonyms)."
    )
    # where it predicts none: one worse, one not detected, with what its test could have seen
    none = by_text["Where it predicts none (ood, test)"]
    assert none.rows.height == 2 and "worse in 1 (+0.006 [+0.003, +0.009] ood)" in none.text
    assert (
        "no detectable difference in 1 (+0.002 [-0.001, +0.005] test; it could have seen 0.007) of 2 rows" in none.text
    )
    # every arm against none: MixCE's lower TV counted, the ablation's arm with them
    every = next(line for line in lines if line.text.startswith("Every arm against none"))
    assert every.rows.height == 6 and "better in 1 (-0.022 [-0.025, -0.019] mixce)" in every.text
    assert "worse in 4 (+0.002 to +0.013)" in every.text and "of 6 rows" in every.text
    # the objectives against MLE, each its own sentence
    objectives = [line.text for line in lines if line.question == "Which objective?"]
    assert objectives == [
        "brier against MLE, TV to the true law: better in both rows (-0.055 to -0.036).",
        "tvd against MLE, TV to the true law: worse in 1 row (+0.057 [+0.054, +0.060]).",
    ]
    # the instruments: MAUVE's controls and planted control, ROUGE-1's reach against the paper's gain
    mauve, rouge = (line.text for line in lines if line.question == "Can the instruments see?")
    assert mauve.startswith("MAUVE (higher is better) sees its controls on 0 of 3 eval sets; it is not read on 3")
    assert "could see gaps of 0.046 to 0.086 or more, the paper's gain (0.03) is below that" in mauve
    assert rouge == (
        "ROUGE-1 (higher is better), every objective's perturbation against none: no detectable difference in both rows "
        "(-0.001 to +0.009); its tests could see 0.014 to 0.018, the paper's gain (0.01) is below that."
    )


def test_across_seeds_the_first_screen_speaks_of_the_training_methods(contrasts, frame):
    seeds = contrasts.with_columns(
        unit=pl.lit("seeds"), n=pl.lit(3, dtype=pl.Int64), method=pl.lit("paired t over training seeds")
    )
    lines = glance_lines(pl.concat([contrasts, seeds]), frame, [])
    assert lines[0].text.startswith("Across 3 training seeds per arm: each finding tests the training methods")
    assert all((line.rows["unit"] == "seeds").all() for line in lines if line.rows.height)


def test_a_study_without_contrasts_says_so_in_one_line(frame):
    assert [line.text for line in glance_lines(None, frame)] == [
        "No paired comparison was possible in this study, so nothing is said about what helped."
    ]
