"""`make rehearsal`: configs/paper.yaml with configs/paper-rehearsal.yaml is the paper's study, only smaller.

- The overlay changes only where things come from and how big they are (its keys, checked), and the rehearsal
  plans the same rules with the same job counts as the paper's study (1015 jobs: the synonym audit and the variance components are one each), but for its 190 MAUVE contrasts
  (at the rehearsal's 8 prompts, under MAUVE's floor, there is no MAUVE to contrast) and its sampling shards (the
  paper's time limit splits its sampling into more jobs than the rehearsal's tiny models need).
- The post-run checks (studies/rehearsal_checks.py, which `make rehearsal` runs on the finished study) are each
  shown failing on doctored input here, so none of them can pass vacuously.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
import yaml

from studies import rehearsal_checks as checks
from support.plans import job_stats
from support.workflow_runs import REPO, run_snakemake

pytestmark = pytest.mark.workflow

PAPER = REPO / "configs/paper.yaml"
OVERLAY = REPO / "configs/paper-rehearsal.yaml"
# Where things come from and how big they are: the only keys the overlay may set (a `*` matches any one key).
SOURCE_AND_SIZE_KEYS = {
    "datasets.*.path",
    "datasets.*.max_rows",
    "datasets.*.files.*.url",
    "datasets.*.files.*.head_bytes",
    "datasets.*.archive.url",
    "tokenizers.*.name",
    "models.*.name",
    "models.*.stand_in_for",
    "models.*.training.gpus",
    "models.*.training.batch_size",
    "tokenize.block_size",
    "training.batch_size",
    "training.max_length",
    "training.checkpoint_every",
    "sampling.runs",
    "sampling.new_tokens",
    "evaluation.featuriser",
    "evaluation.max_text_length",
    "prompts.max_prompts",
    "eval_sets.*.max_prompts",
    "simulation.replications",
    "simulation.n_sequences",
    "simulation.heldout_sequences",
}


def leaves(tree: dict, prefix: tuple = ()) -> list[tuple]:
    """Every leaf's key path (keys such as gpt-neo-1.3b hold dots, so paths are tuples)."""
    out = []
    for key, value in tree.items():
        out += leaves(value, (*prefix, key)) if isinstance(value, dict) else [(*prefix, key)]
    return out


def allowed(path: tuple) -> bool:
    return any(
        len(p) == len(path) and all(a in ("*", b) for a, b in zip(p, path))
        for p in (pattern.split(".") for pattern in SOURCE_AND_SIZE_KEYS)
    )


def test_overlay_changes_only_sources_and_sizes():
    overlay = yaml.safe_load(OVERLAY.read_text())
    assert [key for key in leaves(overlay) if not allowed(key)] == []
    paper = yaml.safe_load(PAPER.read_text())
    # Every key it names exists in the paper config (a typo would add a dataset or model, not resize one) ...
    for section in ("datasets", "tokenizers", "models", "eval_sets"):
        assert set(overlay.get(section, {})) <= set(paper[section]), section
    # ... and the check itself refuses a key that changes the study.
    assert not allowed(("experiments", "table1", "objectives")) and not allowed(("datasets", "webtext", "recipe"))


def plan(workdir: Path, *configs: Path) -> dict[str, int]:
    result = run_snakemake(workdir, "-n", "--quiet", "rules", configfiles=configs, timeout=150)
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    return job_stats(result.stdout + result.stderr)


def test_rehearsal_plans_the_papers_jobs(tmp_path, paper_plan):
    """The paper's plan is the session's (`paper_plan`, tests/conftest.py: `-n --printshellcmds` from an empty folder)."""
    from studies.standins import build

    build(tmp_path / "rehearsal/standins")  # planning checks that the featuriser folder holds a model
    assert paper_plan.result.returncode == 0, (paper_plan.result.stdout + paper_plan.result.stderr)[-3000:]
    paper = job_stats(paper_plan.result.stdout + paper_plan.result.stderr)
    rehearsal = plan(tmp_path / "rehearsal", PAPER, OVERLAY)
    # One mauve_contrast job per designed MAUVE contrast in the paper's study; none at the rehearsal's 8 prompts, under
    # MAUVE's floor of 50 texts (every MAUVE cell there is "too few texts": evaluate.floor.mauve_never_resolves).
    assert paper.pop("mauve_contrast") == 190 and "mauve_contrast" not in rehearsal
    # Sampling shards fit the paper's time limit (cost.max_minutes) at the paper's sizes; at the rehearsal's, one shard
    # an evaluation does. Either way one gather_samples job an evaluation joins them.
    assert paper.pop("sample") > paper["gather_samples"] == rehearsal.pop("sample")
    assert rehearsal == paper and sum(paper.values()) + paper["gather_samples"] == 1015  # the rehearsal's jobs


def test_served_stand_ins_repeat_byte_for_byte_and_are_shaped_as_the_originals():
    import io
    import json
    import tarfile

    import numpy as np

    from studies import standins

    def served(seed: int) -> dict[str, bytes]:
        return {
            **standins.webtext_files(np.random.default_rng(seed)),
            standins.WRITINGPROMPTS_PATH: standins.writingprompts_archive(np.random.default_rng(seed)),
        }

    first = served(1)
    assert first == served(1) and first != served(2)  # the same seed, the same bytes (the gzip header has no time)
    records = [json.loads(line) for line in first["gpt-2/output-dataset/v1/webtext.test.jsonl"].decode().splitlines()]
    assert set(records[0]) == {"id", "ended", "length", "text"} and len(records) == 14
    words = [len(r["text"].split()) for r in records]
    assert sum(50 < n < 1000 for n in words) == 12  # one too short and one too long: the top-up must run
    with tarfile.open(fileobj=io.BytesIO(first[standins.WRITINGPROMPTS_PATH]), mode="r:gz") as tar:
        assert sorted(tar.getnames()) == sorted(
            f"writingPrompts/{s}.wp_{k}" for s in ("train", "valid", "test") for k in ("source", "target")
        )


# The checks, each made to fail ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def paper() -> dict:
    return yaml.safe_load(PAPER.read_text())


KEYS = [
    "model",
    "objective",
    "eval_set",
    "decoder",
    "train_strategy",
    "train_intensity",
    "test_strategy",
    "test_intensity",
    "mauve_mean",
    "rouge1_mean",
]


def metric_rows(paper: dict) -> pl.DataFrame:
    """metrics.csv rows for every cell the checks ask for, all finite."""
    rows = []
    exps = paper["experiments"]
    for name in ("table1", "table1-perturbed"):
        exp = exps[name]
        alpha = exp.get("test_perturbation", {}).get("intensities", [0])[0]
        strategy = "insertion" if alpha else "none"
        rows += [
            (m, o, e, "unbiased", strategy, alpha, strategy, alpha, 0.9, 0.5)
            for m in exp["models"]
            for o in exp["objectives"]
            for e in exp["eval_sets"]
        ]
    for objective in ("mle", "brier"):
        rows += [
            (
                "gpt2",
                objective,
                "webtext",
                "unbiased",
                "insertion" if a else "none",
                a,
                "insertion" if b else "none",
                b,
                0.9,
                0.5,
            )
            for a in (0, 0.025)
            for b in (0, 0.025)
        ]
    for a in (0, 0.025):  # the embedding space's noise at training, sampling, both or neither; NEFTune at training
        for b in (0, 0.025):
            row = ("embedding-noise" if a else "none", a, "embedding-noise" if b else "none", b)
            rows.append(("gpt2", "mle", "webtext", "unbiased", *row, 0.9, 0.5))
    rows.append(("gpt2", "mle", "webtext", "unbiased", "neftune", 1.0, "none", 0, 0.9, 0.5))
    for alpha in checks.SWEEP:
        rows.append(("gpt2", "mle", "webtext", "unbiased", "insertion", alpha, "insertion", alpha, 0.9, 0.5))
    for strategy in ("replacement", "deletion"):
        for alpha in (0.0125, 0.025, 0.05):
            rows.append(("gpt2", "mle", "webtext", "unbiased", strategy, alpha, strategy, alpha, 0.9, 0.5))
    return pl.DataFrame(rows, schema=KEYS, orient="row").unique()


def table1_csv(paper: dict) -> pl.DataFrame:
    exp = paper["experiments"]["table1"]
    rows = [
        (m, checks.UNTRAINED_LABEL if o == "untrained" else o, "no") for m in exp["models"] for o in exp["objectives"]
    ]
    rows += [
        (m, o, "insertion 0.025") for m in exp["models"] for o in paper["experiments"]["table1-perturbed"]["objectives"]
    ]
    frame = pl.DataFrame(rows, schema=["model", "objective", "perturbation"], orient="row")
    return frame.with_columns(pl.lit("0.9 ± 0.1").alias(f"{e} MAUVE") for e in exp["eval_sets"])


def test_table1_check_fails_on_a_missing_or_non_finite_cell(paper):
    metrics, table1 = metric_rows(paper), table1_csv(paper)
    assert checks.table1_problems(metrics, table1, paper) == []
    zero_shot = (
        (pl.col("model") == "opt-125m") & (pl.col("objective") == "untrained") & (pl.col("eval_set") == "webtext")
    )
    assert checks.table1_problems(metrics.filter(~zero_shot), table1, paper) == [
        "Table 1 opt-125m untrained no webtext: no metrics row"
    ]
    nan = metrics.with_columns(
        pl.when(zero_shot).then(float("nan")).otherwise(pl.col("mauve_mean")).alias("mauve_mean")
    )
    assert checks.table1_problems(nan, table1, paper) == ["Table 1 opt-125m untrained no webtext: mauve_mean = nan"]
    # an unscored MAUVE passes only where the row says why ("too few texts (n)", as the rehearsal's 8 prompts are)
    unscored = metrics.with_columns(
        pl.lit(None, pl.Float64).alias("mauve_mean"),
        pl.when(zero_shot).then(pl.lit(None, pl.Utf8)).otherwise(pl.lit("too few texts (8)")).alias("mauve_status"),
    )
    assert checks.table1_problems(unscored, table1, paper) == [
        "Table 1 opt-125m untrained no webtext: mauve_mean = None"
    ]
    blank = table1.with_columns(
        pl.when(pl.col("objective") == "emo").then(pl.lit("")).otherwise(pl.col("webtext MAUVE")).alias("webtext MAUVE")
    )
    assert len(checks.table1_problems(metrics, blank, paper)) == 6  # emo: 3 models x 2 conditions


def test_ablation_sweep_and_strategy_checks_fail_on_a_missing_arm(paper, tmp_path):
    metrics = metric_rows(paper)
    ablation = pl.DataFrame(
        {
            "model": ["gpt2"] * 4,
            "objective": ["brier", "mle", "mle", "mle"],
            "eval_set": ["webtext"] * 4,
            "strategy": ["insertion", "insertion", "embedding-noise", "neftune"],
            **{f"{arm} MAUVE": ["0.9"] * 4 for arm in ("NoPerturb", "TrainPerturb", "TestPerturb", "Both")},
        }
    )
    assert checks.ablation_problems(metrics, ablation, paper) == []
    assert checks.ablation_problems(metrics.filter(pl.col("train_strategy") != "neftune"), ablation, paper) == [
        "neftune mle TrainPerturb webtext: no metrics row"
    ]
    assert checks.ablation_problems(metrics, ablation.filter(pl.col("strategy") != "embedding-noise"), paper) == [
        f"tables/ablation.csv: no {arm} cell for embedding-noise mle webtext"
        for arm in ("NoPerturb", "TrainPerturb", "TestPerturb", "Both")
    ]
    train_only = (pl.col("objective") == "brier") & (pl.col("train_intensity") > 0) & (pl.col("test_intensity") == 0)
    assert checks.ablation_problems(metrics.filter(~train_only), ablation, paper) == [
        "ablation brier TrainPerturb webtext: no metrics row"
    ]

    figure = tmp_path / "intensity.png"
    figure.write_bytes(b"png")
    assert checks.sweep_problems(metrics, figure) == []
    assert checks.sweep_problems(metrics.filter(pl.col("train_intensity") != 0.4), tmp_path / "none.png") == [
        f"{tmp_path / 'none.png'}: missing",
        "intensity sweep 0.4: no metrics row",
    ]

    strategies = pl.DataFrame(
        {
            "model": ["gpt2"] * 3,
            "objective": ["mle"] * 3,
            "eval_set": ["webtext"] * 3,
            "strategy": checks.STRATEGIES,
            **{f"{a:g} MAUVE": ["0.9"] * 3 for a in checks.STRATEGY_INTENSITIES},
        }
    )
    assert checks.strategy_problems(metrics, strategies) == []
    assert checks.strategy_problems(metrics.filter(pl.col("train_strategy") != "deletion"), strategies) == [
        f"strategy deletion {a:g}: no metrics row" for a in (0.0125, 0.025, 0.05)
    ]
    assert checks.strategy_problems(metrics, strategies.drop("0.05 MAUVE")) == [
        f"tables/strategies.csv: no 0.05 MAUVE cell for {s}" for s in checks.STRATEGIES
    ]


def test_simulation_check_fails_on_a_missing_point_or_replication():
    settings = {"vocab_sizes": [50, 100], "intensities": [0, 0.5], "replications": 2, "synonyms": ["oracle"]}
    summary = pl.DataFrame(
        {
            "vocab_size": [50, 50, 100, 100, 50, 100],
            "arm": ["oracle"] * 4 + ["shrinkage"] * 2,
            "intensity": [0.0, 0.5, 0.0, 0.5, None, None],
            "replications": [2, 2, 2, 2, 2, 2],
            "mae_unseen_pairs_mean": [0.1, 0.1, 0.1, 0.1, 0.1, 0.1],
        }
    )
    assert checks.simulation_problems(summary, settings) == []
    assert checks.simulation_problems(summary.head(3).vstack(summary.tail(2)), settings) == [
        "simulation: no row for V=100, alpha=0.5"
    ]
    short = summary.with_columns(pl.Series("replications", [2, 2, 1, 2, 2, 2]))
    assert checks.simulation_problems(short, settings) == ["simulation V=100, alpha=0: replications [1]"]
    # The control (issue 52): its row per |V|, over every replication.
    assert checks.simulation_problems(summary.head(5), settings) == [
        "simulation V=100: the shrinkage control over all replications is missing"
    ]
    assert checks.simulation_problems(summary.head(5), {**settings, "shrinkage": False}) == []
    # Both rules: a rule's missing row is a missing point.
    assert checks.simulation_problems(summary, {**settings, "synonyms": ["oracle", "empirical"]}) == [
        f"simulation: no row for V={v}, alpha={a:g}" for v in (50, 100) for a in (0, 0.5)
    ]


def test_report_check_fails_without_contrasts_examples_or_curves(tmp_path):
    contrasts = pl.DataFrame({"family": ["perturbation", "ablation", "objective"], "difference": [0.1, -0.1, 0.0]})
    (tmp_path / "report/tables").mkdir(parents=True)
    (tmp_path / "report/tables/examples.csv").write_text("method,continuation\nhuman,a b\ngpt2 mle,c d\n")
    (tmp_path / "report/figures/training/gpt2").mkdir(parents=True)
    (tmp_path / "report/figures/training/gpt2/curve.png").write_bytes(b"png")
    assert checks.report_problems(tmp_path, contrasts, ["gpt2"]) == []
    assert checks.report_problems(tmp_path, contrasts.head(2), ["gpt2", "opt-125m"]) == [
        "contrasts.csv: no objective contrast",
        f"{tmp_path / 'report/figures/training/opt-125m'}: no training curve",
    ]


def test_summary_check_fails_unless_marked_and_listing_the_fetched_files():
    digest = "ab" * 32
    summary = (
        "# Summary\n\n## What MAUVE can see here\n\n...\n\n## The synonyms the perturbation draws\n\n"
        "| token | id | in training | synonyms (weight) |\n\n## Paper comparison\n\n**Rehearsal: these numbers mean nothing.** ...\n\n| model | objective |"
        " perturbation |\n| gpt2 | mle | no | 0.9 ± 0.1 (paper 0.82) |\n\n## Data\n\n- **webtext/test**: ...\n"
        f"  - http://127.0.0.1:1/v1/webtext.test.jsonl: sha256 `{digest}` (not pinned: set this sha256 in the "
        "config to pin it)\n\n## Figures\n"
    )
    assert checks.summary_problems(summary, {"webtext.test.jsonl": digest}) == []
    assert checks.summary_problems(summary.replace("Rehearsal: these", "These"), {}) == [
        "summary.md: the paper comparison is not marked as a rehearsal"
    ]
    assert checks.summary_problems(summary.replace("## What MAUVE can see here", "## Other"), {}) == [
        "summary.md: no section on what MAUVE can see (its controls)"
    ]
    assert checks.summary_problems(summary.replace("| synonyms (weight) |", ""), {}) == [
        "summary.md: no synonym audit (the synonyms the perturbation draws, as text)"
    ]
    assert checks.summary_problems(summary, {"webtext.test.jsonl": "cd" * 32}) == [
        f"summary.md: the data section does not list webtext.test.jsonl with sha256 {'cd' * 32}, to pin"
    ]


def test_the_driver_runs_the_papers_config_and_serves_on_the_port_its_overlay_names():
    from studies import rehearsal

    assert rehearsal.CONFIGS == [PAPER, OVERLAY]
    overlay = yaml.safe_load(OVERLAY.read_text())
    urls = []
    for path in leaves(overlay):
        if path[-1] == "url":
            node = overlay
            for key in path:
                node = node[key]
            urls.append(node)
    assert urls and all(url.startswith(f"http://127.0.0.1:{rehearsal.PORT}/") for url in urls)
