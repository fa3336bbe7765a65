"""Evaluation axes through the workflow: a checkpoint evaluated as it is (no training job), decoders as
conditions paired with the test perturbation, paired comparisons, provenance and training curves in the report.

The checkpoint is a tiny GPT-2 saved as the hub saves it (studies/families.py), loaded by folder as a hub id would be.
"""

from __future__ import annotations

import json

import numpy as np
import polars as pl
import pyarrow.parquet as pq
import pytest

from support.workflow_runs import planned_rules, snakemake, tiny_config, write_config

pytestmark = pytest.mark.workflow


def zero_shot_config(folder) -> dict:
    config = tiny_config()
    config["tokenizers"]["gpt2"] = {"source": "hf", "name": str(folder)}
    config["models"]["released"] = {"source": "hf", "name": str(folder), "tokenizer": "gpt2"}
    config["decoders"] = {"neutral": {"temperature": 1.0, "top_p": 1.0, "top_k": 0}, "top-k-3": {"top_k": 3}}
    config["evaluation"]["mauve"]["kmeans_seeds"] = 2
    # Its 10 prompts a run are MAUVE's floor here, so MAUVE is scored and contrasted: the one workflow test where it is
    # (the others' small studies are under the default floor of 50: flagged, not scored). MiniLM over prompt +
    # continuation is the blind instrument of docs/method.md §4: its controls fail, so nothing of MAUVE is reported
    # until must_detect is emptied (the test's second run).
    config["evaluation"]["mauve"]["min_texts"] = config["prompts"]["max_prompts"]
    config["evaluation"]["featuriser"] = "minilm"
    config["evaluation"]["feature_text"] = "prompt_and_continuation"
    config.setdefault("report", {})["intensity"] = (
        0.3  # so that sampling at 0.3 against none is a designed (ablation) MAUVE contrast
    )
    config["experiments"] = {
        "zero-shot": {
            "models": ["released"],
            "train_dataset": "synthetic",
            "eval_sets": ["syn-test"],
            "objectives": ["untrained"],
            "decoders": ["unbiased", "neutral", "top-k-3"],
            "test_perturbation": {"intensities": [0, 0.3], "synonyms": ["uniform"]},
        }
    }
    return config


def test_an_untrained_checkpoint_is_evaluated_under_every_decoder_without_training(workdir):
    from studies.families import make_checkpoint
    from workflow_lib.data.builtin_corpus import build_grammar

    texts = build_grammar(seed=7, words_per_class=4).generate("train", n_docs=40, sentences_per_doc=16, seed=7)
    folder = make_checkpoint(workdir / "hub", "gpt2", texts)
    write_config(workdir, zero_shot_config(folder))
    plan = snakemake(workdir, "-n")
    assert plan.returncode == 0, plan.stdout[-3000:] + plan.stderr[-3000:]
    planned = planned_rules(plan.stdout + plan.stderr)
    assert not planned & {"train", "perturb", "tokenize", "training_curves"}, planned
    assert {"sample", "evaluate", "perplexity", "extrapolation", "contrasts", "tables"} <= planned

    result = snakemake(workdir, timeout=1200)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert not (workdir / "results/models").exists()
    # The blind instrument: its controls fail, every MAUVE cell says so, nothing is scored, contrasted or marked.
    controls = json.loads((workdir / "results/controls/minilm/syn-test.json").read_text())
    assert controls["texts"] == 10 and controls["status"].startswith("MAUVE cannot see shuffled words")
    assert controls["status"].endswith("at n = 10 with minilm") and not controls["controls"]["shuffled"]["seen"]
    blind = [json.loads(p.read_text()) for p in (workdir / "results/metrics").rglob("*-exact.json")]
    assert len(blind) == 6 and all(m["mauve_status"] == controls["status"] and m["mauve_mean"] is None for m in blind)
    assert all(json.loads(p.read_text())["status"] for p in (workdir / "results/report/mauve").glob("*.json"))
    contrasts = pl.read_csv(workdir / "results/report/contrasts.csv")
    assert contrasts.filter(pl.col("metric") == "mauve").height == 0
    summary = (workdir / "results/summary.md").read_text()
    assert "## What MAUVE can see here" in summary and f"on syn-test, {controls['status']}" in summary
    assert controls["status"] in (workdir / "results/report/tables/table1.md").read_text()
    # must_detect: [] reports MAUVE unchecked: the controls' verdict, MAUVE and the report rerun; no sampling or
    # featurisation job does.
    config = zero_shot_config(folder)
    config["evaluation"]["mauve"]["controls"] = {"must_detect": []}
    write_config(workdir, config)
    plan = planned_rules((p := snakemake(workdir, "-n")).stdout + p.stderr)
    assert {"mauve_controls", "evaluate", "tables"} <= plan and not plan & {"sample", "features", "sample_features"}
    result = snakemake(workdir, timeout=1200)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    run = workdir / "results/samples/released/synthetic/untrained/none/augment-m1/none-0/seed1/syn-test"
    for condition in ("none/none-0-exact", "uniform/insertion-0.3-exact"):
        ids = {
            d: np.stack(
                pq.read_table(run / d / f"{condition}.parquet")
                .column("continuation_ids")
                .to_numpy(zero_copy_only=False)
            )
            for d in ("unbiased", "neutral", "top-k-3")
        }
        # Neutral settings are the law itself, and the perturbation draws are shared: the very same samples.
        np.testing.assert_array_equal(ids["unbiased"], ids["neutral"])
        assert not np.array_equal(ids["unbiased"], ids["top-k-3"])

    metrics = json.loads(
        (
            workdir / "results/metrics/released/synthetic/untrained/none/augment-m1/none-0/seed1/"
            "syn-test/top-k-3/none/none-0-exact.json"
        ).read_text()
    )
    provenance = metrics["provenance"]
    assert len(provenance["git_commit"] or "x" * 40) == 40 and provenance["featuriser"] == "minilm"
    unchecked = json.loads((workdir / "results/controls/minilm/syn-test.json").read_text())
    assert unchecked["status"] is None and unchecked["controls"] == controls["controls"]  # the same scores
    assert {"torch", "transformers", "mauve-text"} <= set(provenance["versions"]) and provenance["settings_sha256"]
    split = metrics["mauve_variance"]
    assert split["sampling"] + split["clustering"] == pytest.approx(split["total"])
    assert np.array(metrics["mauve_by_seed"]).shape == (2, 2) and metrics["mauve_status"] is None
    assert metrics["num_buckets"] == 2 and 0 < metrics["mauve_mean"] <= 1 + 1e-9
    joint = [json.loads(p.read_text()) for p in (workdir / "results/report/mauve").glob("*.json")]  # mauve_contrast
    assert len(joint) == 3 and all(j["status"] is None and 0 <= j["p"] <= 1 for j in joint), joint  # one per decoder
    for name in ("rouge2_mean", "rougeL_mean", "distinct_2_mean", "repetition_mean"):
        assert metrics[name] is not None and np.isfinite(metrics[name]), name
    perplexity = json.loads(
        (
            workdir / "results/perplexity/released/synthetic/untrained/none/augment-m1/none-0/seed1/syn-test.json"
        ).read_text()
    )
    assert perplexity["perplexity"] > 1 and perplexity["tokens"] > 0

    table = pl.read_csv(workdir / "results/report/metrics.csv")
    assert set(table["decoder"].to_list()) == {"unbiased", "neutral", "top-k-3"}
    assert set(table["objective"].to_list()) == {"untrained"}
    table1 = (workdir / "results/report/tables/table1.md").read_text()
    assert "untrained" in table1 and "top-k-3" in table1
    summary = (workdir / "results/summary.md").read_text()
    assert summary.index(provenance["git_commit"] or "commit") < summary.index("## Headline table")
