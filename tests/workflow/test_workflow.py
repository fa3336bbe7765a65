"""The workflow itself, run by snakemake on tiny configs in a temporary folder."""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq
import pytest
import torch

from support.workflow_runs import (
    REPO,
    dry_run_of_tiny_study_with,
    planned_rules,
    run_snakemake,
    snakemake,
    tiny_config,
    tiny_study_config,
    write_config,
)

pytestmark = pytest.mark.workflow


def long_row(i: int, words: int = 130) -> str:
    return " " + " ".join(f"w{i}x{j}" for j in range(words)) + " .\n"


def data_config(workdir) -> dict:
    """The tiny study plus a local WikiText file and a WebText-style JSON-lines file as eval sets."""
    (workdir / "wiki.test.raw").write_text(" = Heading = \n \n" + long_row(1) + " \n" + long_row(2, 40) + long_row(3))
    (workdir / "web.jsonl").write_text("".join(json.dumps({"text": long_row(i)}) + "\n" for i in range(5)))
    config = tiny_config()
    config["datasets"]["wiki"] = {
        "source": "local",
        "format": "wikitext",
        "files": {"test": "wiki.test.raw"},
        "cleaning": "wikitext",
    }
    config["datasets"]["web"] = {
        "source": "local",
        "format": "jsonl",
        "files": {"test": "web.jsonl"},
        "cleaning": "webtext",
    }
    config["eval_sets"]["wiki-test"] = {"dataset": "wiki", "split": "test"}
    config["eval_sets"]["web-test"] = {"dataset": "web", "split": "test", "max_prompts": 3}
    config["experiments"]["main"]["eval_sets"] += ["wiki-test", "web-test"]
    config["prompts"]["min_prompts"] = 2  # the WikiText file's two long rows
    return config


def test_default_config_dry_run_and_lint(workdir):
    shutil.copy(REPO / "config.yaml", workdir / "config.yaml")
    dry = snakemake(workdir, "-n")
    assert dry.returncode == 0, dry.stderr
    assert "download" in dry.stdout + dry.stderr
    # The default study is the whole report: every figure its arms give data for, the simulation study included.
    # MAUVE against intensity needs a second dose: the more-arms overlay has it (tests/workflow/test_cookbook.py).
    for figure in ("ablation", "extrapolation"):
        assert f"results/report/figures/{figure}.png" in dry.stdout, figure
    assert "results/report/figures/intensity.png" not in dry.stdout
    assert "results/simulation/figure.png" in dry.stdout
    assert "results/lab/baseline/figure.png" in dry.stdout  # the theory lab, with its table in the summary
    lint = snakemake(workdir, "--lint")
    assert lint.returncode == 0, lint.stdout + lint.stderr


def test_data_stage_runs_and_is_reproducible(workdir):
    write_config(workdir, data_config(workdir))
    first = snakemake(workdir, "--until", "tokenize", "prompts")
    assert first.returncode == 0, first.stderr
    results = workdir / "results"

    blocks = pq.read_table(results / "tokens/bpe/synthetic/train.parquet")
    assert blocks.num_rows > 0 and all(len(b) == 32 for b in blocks.column("input_ids").to_pylist())
    assert (results / "tokens/bpe/synthetic/validation.parquet").exists()
    assert (results / "tokenizers/bpe/tokenizer.json").exists()

    wiki = pq.read_table(results / "prompts/wiki-test.parquet").to_pylist()
    assert [p["doc_id"] for p in wiki] == [2, 5]  # the heading, the blank rows and the 40-word row are filtered
    assert wiki[0]["prefix"] == " ".join(f"w1x{j}" for j in range(20))
    assert wiki[0]["reference"] == " ".join(f"w1x{j}" for j in range(100))
    assert pq.read_table(results / "prompts/web-test.parquet").num_rows == 3
    meta = json.loads((results / "prompts/wiki-test.json").read_text())
    assert meta["prompts"] == 2
    ood = pq.read_table(results / "prompts/syn-ood.parquet")
    assert 0 < ood.num_rows <= 10
    provenance = json.loads((results / "data/wiki/test.json").read_text())
    assert provenance["provenance"]["files"][0]["sha256"] and provenance["rows_loaded"] == 6
    for log in ["data/download/synthetic/train.log", "tokenizers/bpe.log", "tokens/bpe/synthetic/train.log"]:
        assert (results / "logs" / log).exists()

    again = snakemake(workdir, "--until", "tokenize", "prompts")
    assert re.search(r"total\s+0\b", again.stdout + again.stderr) or "Nothing to be done" in again.stdout + again.stderr

    produced = {p.relative_to(results): p.read_bytes() for p in results.rglob("*.parquet")}
    shutil.rmtree(results)
    second = snakemake(workdir, "--until", "tokenize", "prompts")
    assert second.returncode == 0, second.stderr
    assert {p.relative_to(results): p.read_bytes() for p in results.rglob("*.parquet")} == produced


def test_changed_param_reruns_only_what_depends_on_it(workdir):
    config = tiny_config()
    write_config(workdir, config)
    assert snakemake(workdir, "--until", "perturb", "prompts").returncode == 0
    config["tokenize"]["block_size"] = 16
    write_config(workdir, config)
    plan = snakemake(workdir, "-n", "--until", "perturb", "prompts")
    assert plan.returncode == 0, plan.stderr
    assert planned_rules(plan.stdout + plan.stderr) == {"tokenize", "perturb"}


def test_failing_job_leaves_no_finished_looking_output(workdir):
    config = tiny_config()
    config["datasets"]["synthetic"]["builtin"]["docs"]["train"] = 1
    config["tokenize"]["block_size"] = 100000  # within the model's context and max_length: the config check passes
    config["models"]["tiny"]["architecture"]["n_positions"] = 100000
    config["training"]["max_length"] = 100000
    write_config(workdir, config)
    result = snakemake(workdir, "--keep-going")
    assert result.returncode != 0
    log = (workdir / "results/logs/tokens/bpe/synthetic/train.log").read_text()
    assert "fewer than tokenize.block_size = 100000" in log.strip().splitlines()[-1]
    assert not list((workdir / "results").rglob("tokens/**/*.parquet"))
    assert not list((workdir / "results").rglob(".*tmp-*"))


def test_perturbation_stage_builds_synonyms_and_every_condition(workdir):
    config = tiny_config()
    config["experiments"]["main"]["train_perturbation"] = {
        "strategies": ["insertion", "deletion"],
        "intensities": [0, 0.1],
        "synonyms": ["distributional", "oracle"],
        "modes": ["augment", "prefix"],
    }
    config["synonyms"] = {"min_count": 2}
    write_config(workdir, config)
    result = snakemake(workdir, "--until", "perturb")
    assert result.returncode == 0, result.stderr
    base = workdir / "results/perturbed/bpe/synthetic"
    conditions = sorted(str(p.relative_to(base)) for p in base.rglob("*.parquet"))
    expected = sorted(
        [f"none/{m}-m1/none-0/seed1.parquet" for m in ("augment", "prefix")]
        + [
            f"{s}/{m}-m1/{st}-0.1/seed1.parquet"
            for s in ("distributional", "oracle")
            for m in ("augment", "prefix")
            for st in ("insertion", "deletion")
        ]
    )
    assert conditions == expected
    for source in ("distributional", "oracle"):
        assert pq.read_table(workdir / f"results/synonyms/bpe/synthetic/{source}.parquet").num_rows > 0
    meta = json.loads((base / "oracle/prefix-m1/insertion-0.1/seed1.json").read_text())
    n, k = meta["eligible_tokens"], meta["selected_tokens"]
    assert n > 500 and abs(k / n - 0.1) < 4 * (0.1 * 0.9 / n) ** 0.5  # alpha among tokens that have synonyms
    prefix = pq.read_table(base / "oracle/prefix-m1/insertion-0.1/seed1.parquet")
    assert {"target_positions", "target_ids"} <= set(prefix.column_names)

    config["experiments"]["main"]["train_perturbation"]["intensities"] = [0, 0.1, 0.2]
    write_config(workdir, config)
    plan = snakemake(workdir, "-n", "--until", "perturb")
    assert plan.returncode == 0, plan.stdout + plan.stderr
    assert planned_rules(plan.stdout + plan.stderr) == {"perturb"}


def test_training_writes_every_model_its_log_and_no_leftover_checkpoint(tiny_study):
    """(`accelerate launch` itself, for two processes, is tests/train/test_parallel.py's.)"""
    workdir = tiny_study
    models = sorted(
        p.parent.relative_to(workdir / "results/models")
        for p in (workdir / "results/models").rglob("model.safetensors")
        if "brier" not in p.parts
    )  # Brier: the lab's group (tests/lab/test_lab_workflow.py)
    plain = "none/augment-m1/none-0"
    assert models == sorted(
        Path(path)
        for path in [
            f"tiny/synthetic/{o}/{c}/seed1" for o in ("emo", "mle") for c in (plain, "oracle/augment-m1/insertion-0.2")
        ]
        # experiment "same": 3 training seeds; "null": 3 more (the A/A null)
        + [f"tiny/synthetic/mle/{plain}/seed{s}" for s in (2, 3, 4, 5, 6)]
    )
    for seed in (1, 2, 3):
        assert (workdir / f"results/models/tiny/synthetic/brier/{plain}/seed{seed}/model.safetensors").exists()
    log = (workdir / "results/models" / models[0] / "train_log.csv").read_text().splitlines()
    assert log[0] == "step,epoch,loss,lr,grad_norm,tokens_per_s,validation_loss,validation_objective" and len(log) > 5
    assert (workdir / "results/logs/train" / f"{models[0]}.log").exists()
    assert not (workdir / "results/checkpoints").exists() or not any((workdir / "results/checkpoints").rglob("*.json"))


def test_sampling_and_evaluation_chain_reuses_human_features(tiny_study):
    workdir = tiny_study
    mle = workdir / "results/metrics/tiny/synthetic/mle/none/augment-m1/none-0/seed1"
    metrics = sorted(mle.rglob("*.json"))
    names = sorted("/".join(m.parts[-4:]) for m in metrics)
    assert names == sorted(
        f"{es}/unbiased/{c}"
        for es in ("syn-ood", "syn-test")
        for c in ("none/none-0-exact.json", "oracle/insertion-0.2-exact.json", "oracle/insertion-0.2-cached.json")
    )
    report = json.loads(metrics[0].read_text())
    # 10 prompts per run is under MAUVE's floor of 50 texts per side: flagged and not scored (docs/method.md §4)
    assert report["runs"] == 2 and report["mauve"] is None and report["mauve_mean"] is None
    assert report["mauve_status"] == "too few texts (10)" and report["num_buckets"] is None
    assert 0 < report["rouge1_mean"] <= 1 and report["featuriser"] == "minilm"
    samples = pq.read_table(next((workdir / "results/samples").rglob("insertion-0.2-cached.parquet"))).to_pylist()
    assert len(samples) == 2 * 10 and all(len(s["continuation_ids"]) == 8 for s in samples)
    tv = json.loads(
        next((workdir / "results/extrapolation").rglob("syn-ood/unbiased/oracle/insertion-0.2-exact.json")).read_text()
    )
    assert tv["law"] == "ood" and 0 < tv["tv_mean"] <= 1 and tv["prefixes"] > 0 and tv["draws"] == 8
    features = sorted((workdir / "results/features/minilm").glob("*.npy"))
    assert [f.name for f in features] == ["syn-ood.npy", "syn-test.npy"]

    # More runs: new samples and metrics, but the human features are cached and no model is retrained.
    config = tiny_study_config()
    config["sampling"]["runs"] = 3
    plan = dry_run_of_tiny_study_with(workdir, config)
    assert plan.returncode == 0, plan.stdout + plan.stderr
    planned = planned_rules(plan.stdout + plan.stderr)
    assert {"sample", "evaluate"} <= planned and not planned & {"features", "train", "extrapolation", "perplexity"}


def test_report_builds_on_a_tiny_config(tiny_study):
    workdir = tiny_study
    report = workdir / "results/report"
    for table in ("table1", "emo_brier", "strategies", "ablation", "examples"):
        for ext in ("csv", "md", "tex"):
            assert (report / "tables" / f"{table}.{ext}").stat().st_size > 0
    for figure in ("ablation", "extrapolation"):
        assert (report / "figures" / f"{figure}.png").stat().st_size > 5000
    assert not (report / "figures/intensity.png").exists()  # one perturbed intensity: no sensitivity figure
    table1 = (report / "tables/table1.md").read_text()
    assert "insertion 0.2" in table1 and "syn-test MAUVE" in table1 and "**" in table1
    assert "too few texts (10)" in table1  # 10 prompts per run: MAUVE is not reported (docs/method.md §4)
    summary = (workdir / "results/summary.md").read_text()
    assert "## Headline table" in summary and "No model and eval set of this study is one of the paper's" in summary
    assert "## Simulation study" in summary and "| 6 | oracle | 0.5 | 2 |" in summary
    contrasts = pl.read_csv(workdir / "results/report/contrasts.csv")
    # Built to differ: training on 20% inserted oracle synonyms changes the model's perplexity on human text.
    ppl = contrasts.filter(
        (pl.col("family") == "perturbation") & (pl.col("metric") == "perplexity") & (pl.col("objective") == "mle")
    )
    assert ppl.height == 2 and ppl["significant"].all() and ((ppl["high"] < 0) | (ppl["low"] > 0)).all()
    assert (
        "## Paired comparisons" in summary
        and "✱" in summary
        and summary.startswith("# Summary of the study\n\n## What this study found\n")
    )
    # The findings' three parts, from this study's numbers: the verdicts, the size and limits, MAUVE against the TV.
    # With 10 prompts per run MAUVE cannot resolve (under the floor of 50): the findings say so instead of comparing it.
    found = summary.split("## What this study found\n", 1)[1].split("\n## ", 1)[0]
    assert "| syn-test | perplexity (lower is better) of the base model: training perturbation only | " in found
    # Training seeds as the unit: MLE and Brier from 3 seeds each; the training effect (Brier's perplexity) is found.
    across = contrasts.filter((pl.col("unit") == "seeds") & (pl.col("family") == "objective"))
    assert set(across["objective"]) == {"brier"} and set(across["n"]) == {3}
    brier = across.filter((pl.col("objective") == "brier") & (pl.col("metric") == "perplexity"))
    assert brier.height == 1 and brier["significant"][0] and brier["method"][0] == "paired t over training seeds"
    assert (
        "**Each objective against MLE, across 3 training seeds (the training method: paired t over training seeds, "
        "df = seeds - 1), Holm-corrected (every eval set and condition)**" in found
    )
    assert "| brier against MLE | perplexity (lower is better) | 1: syn-test no perturbation " in found
    # The A/A null (report.aa_null): MLE's seeds 4-6 against its seeds 1-3, one method, independent training
    # randomness (every checkpoint pair differs), tested across the 3 seed pairs as two methods are.
    null = contrasts.filter(pl.col("family") == "null")
    null_across = null.filter((pl.col("unit") == "seeds") & (pl.col("objective") == "mle"))
    assert set(null_across["metric"]) >= {"rouge1", "tv", "perplexity"} and set(null_across["n"]) == {3}
    assert null_across["p"].is_not_null().all() and null_across["not_testable"].is_null().all()
    assert set(null_across["a"]) == {"training none, sampling none, seeds 4, 5, 6", "training none, seeds 4, 5, 6"}
    pairs = null.filter((pl.col("unit") == "checkpoint") & (pl.col("objective") == "mle"))
    assert sorted(set(pairs["seed"])) == [4, 5, 6] and (pairs["difference"] != 0).all()
    assert "## The A/A null" in summary and "over 3 seed pairs" in summary
    assert "### A/A null: one method's later seeds vs its earlier seeds: perplexity, across training seeds" in summary
    assert "A/A" not in found  # a check of the test, not a finding
    assert "about each seed's pair of checkpoints" in found
    assert re.search(r"\| ROUGE-1 \(higher is better\) \| 0 \| 0 \| (\d+) of \1; it could have seen ", found)
    assert "- Size: 2 sampling runs of 10 prompts per eval set; 1-6 training seeds per trained arm" in found
    assert re.search(r"- Training: \d+(-\d+)? optimizer steps per model \(12 models\)\.", found)
    assert (
        "- MAUVE is not resolvable in this study: its runs have 10 texts per side, under the floor "
        "evaluation.mauve.min_texts = 50"
    ) in found
    assert (
        "- **syn-ood**: MAUVE is not set against the exact TV to the true law: its runs had too few texts to "
        "resolve it."
    ) in found
    assert not contrasts.filter(pl.col("metric") == "mauve").height  # and no MAUVE contrast, so no MAUVE mark
    assert (workdir / "results/report/figures/training/tiny/synthetic.png").stat().st_size > 5000
    data = summary.split("## Data\n", 1)[1]  # every split the study read, with its source
    for split in ("train", "validation", "test", "ood"):
        assert f"**synthetic/{split}** (recipe raw, cleaning none)" in data
    assert "builtin language, grammar seed 7" in data
    html = snakemake(workdir, "--report", "results/report.html")
    assert html.returncode == 0, html.stderr
    assert "ERROR/" not in html.stderr, html.stderr  # docutils errors in a caption
    page = (workdir / "results/report.html").read_text()
    assert len(page) > 10000
    # The report opens on the study's findings (report.build.landing_page, the Snakefile's `report:`).
    assert "What this study found" in page and "across 3 training seeds" in page
    for caption in (
        "Summary",
        "Tables",
        "Figures",
        "Simulation",
        "figure.png",
        "simulation study (paper Section 4)",
        "Training curves",
        "Theory lab",
    ):
        assert caption in page, caption
    check_in_browser(workdir, workdir / "results/report.html")


def check_in_browser(workdir, html):
    """The report in headless Chromium: no JavaScript error, every category rendered, every caption well-formed,
    every figure decoded. Then the same check fails on a report whose caption is broken reStructuredText (built
    by a copy of the workflow), on an injected script error, on a figure that does not decode and on a missing
    category."""
    from studies.browser import check_report, chromium

    if chromium() is None:
        if os.environ.get("PERTURBED_LM_REQUIRE_BROWSER") == "1":
            pytest.fail("no chromium on PATH, and PERTURBED_LM_REQUIRE_BROWSER=1")
        pytest.skip("no chromium on PATH (Debian: apt-get install chromium); CI installs it")
    from studies.browser import CATEGORIES

    assert check_report(html, (*CATEGORIES, "Theory lab"), screenshot=workdir / "report.png") == []
    from PIL import Image

    with Image.open(workdir / "report.png") as shot:  # the report's first page, as a reader sees it
        assert shot.size[0] >= 640 and shot.size[1] >= 400 and sum(1 for n in shot.convert("L").histogram() if n) > 10
    copy = workdir / "workflow-copy"
    copy.mkdir()
    shutil.copy(REPO / "Snakefile", copy / "Snakefile")
    for part in ("rules", "report", "workflow_lib", "profiles"):
        shutil.copytree(REPO / part, copy / part, ignore=shutil.ignore_patterns("__pycache__"))
    (copy / "report/table.rst").write_text("A table.\n\n.. no-such-directive::\n\n   body\n")
    broken = workdir / "broken.html"
    built = run_snakemake(workdir, "--report", str(broken), snakefile=copy / "Snakefile")
    assert built.returncode == 0, built.stderr  # snakemake builds it regardless: only a look at the page tells
    problems = check_report(broken)
    assert problems and all("results/report/tables/" in p and "system message" in p for p in problems), problems
    page = html.read_text()
    doctored = workdir / "doctored.html"
    doctored.write_text(page.replace("<head>", "<head><script>null.x;</script>", 1))
    assert any(p.startswith("uncaught: TypeError") for p in check_report(doctored))
    first = re.search(r'"data_uri": "data:image/png;charset=utf8;filename=[^;]+;base64,', page)
    doctored.write_text(page[: first.end()] + "AAAA" + page[first.end() + 4 :])
    assert any(p.startswith("image ") and p.endswith("does not decode") for p in check_report(doctored))
    assert any("'No such category' is missing" in p for p in check_report(html, ("Tables", "No such category")))


def test_hub_families_train_sample_and_evaluate(workdir):
    """Every family through `source: hf` (local folders saved as the hub originals): its tokenizer, embedding
    synonyms, MLE and EMO training under insertion, perturbed sampling, and MAUVE with a causal LM as featuriser.
    (The extrapolation stage runs the same forward as exact sampling; it is left out to keep the test short.)"""
    import numpy as np
    from safetensors.torch import load_file

    from studies.families import FAMILIES, make_checkpoint
    from workflow_lib.data.builtin_corpus import build_grammar

    texts = build_grammar(seed=7, words_per_class=4).generate("train", n_docs=40, sentences_per_doc=16, seed=7)
    folders = {family: make_checkpoint(workdir / "hub", family, texts) for family in FAMILIES}
    config = tiny_config()
    config["datasets"]["synthetic"]["builtin"]["docs"]["train"] = 20
    config["tokenizers"] = {f: {"source": "hf", "name": str(folders[f])} for f in FAMILIES}
    config["models"] = {f: {"source": "hf", "name": str(folders[f]), "tokenizer": f} for f in FAMILIES}
    config["training"] = {
        "batch_size": 8,
        "learning_rate": 3e-3,
        "lr_scheduler": "constant",
        "max_length": 64,
        "checkpoint_every": 1000,
        "log_every": 5,
    }
    config["evaluation"]["featuriser"] = str(folders["llama"])  # a causal LM folder as MAUVE featuriser
    config["eval_sets"] = {"syn-test": {"dataset": "synthetic", "split": "test"}}
    perturbation = {"strategies": ["insertion"], "intensities": [0.1], "synonyms": ["embedding"]}
    config["experiments"] = {
        "families": {
            "models": list(FAMILIES),
            "train_dataset": "synthetic",
            "eval_sets": ["syn-test"],
            "objectives": ["mle", "emo"],
            "train_perturbation": perturbation,
            "test_perturbation": perturbation,
        }
    }
    write_config(workdir, config)
    result = snakemake(workdir, "--until", "evaluate", timeout=1200)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]

    condition = "embedding/augment-m1/insertion-0.1/seed1"
    for family in FAMILIES:
        for objective in ("mle", "emo"):
            model = workdir / "results/models" / family / "synthetic" / objective / condition
            weights = load_file(model / "model.safetensors")
            assert all(w.dtype == torch.float32 and torch.isfinite(w).all() for w in weights.values()), (
                family,
                objective,
            )
            summary = json.loads((model / "train_summary.json").read_text())
            assert summary["ran"]["master_weights"] == "float32", (family, objective)
            with open(model / "train_log.csv") as handle:
                losses = np.array([float(r["loss"]) for r in csv.DictReader(handle)])
            assert np.isfinite(losses).all() and losses[-3:].mean() < losses[:3].mean() - 0.1, (
                family,
                objective,
                losses,
            )
            run = f"{family}/synthetic/{objective}/{condition}/syn-test/unbiased/embedding/insertion-0.1-exact"
            metrics = json.loads((workdir / "results/metrics" / f"{run}.json").read_text())
            # under MAUVE's floor of texts: flagged, not scored (tests/evaluate/test_evaluation.py scores a small study)
            assert metrics["mauve_status"].startswith("too few texts") and metrics["mauve"] is None, (family, objective)
            assert 0 < metrics["rouge1_mean"] <= 1
        assert (workdir / "results/synonyms" / family / "synthetic/embedding.parquet").exists()
