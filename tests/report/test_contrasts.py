"""A study's contrasts table: its pairs and what they favour, Holm within each family and metric, its sentences, a
byte-stable CSV and the command line; and a Holm table too small to mark anything is "not testable"."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from support.metric_files import write_metrics
from workflow_lib.comparisons import resamples_for
from workflow_lib.report.contrasts import _untestable_table, contrasts
from workflow_lib.report.paired_tables import paired_section, study_sentences
from workflow_lib.report.statistics import Permutations, holm

REPO = Path(__file__).resolve().parents[2]


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
