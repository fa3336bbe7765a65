"""lm-evaluation-harness on a study's checkpoints (evaluation.lm_eval; evaluate/harness.py, report/harness.py):
tasks of the study's own folder, offline, on the shared tiny study's trained models."""

from __future__ import annotations

import json
import math

import numpy as np
import polars as pl
import pytest
import yaml

from support.config_errors import error_of
from support.workflow_runs import run_snakemake, snakemake_environment, tiny_config, tiny_study_config

# Two tasks over a task folder of the study: a multiple choice (accuracy, a mean over documents) and a rolling
# log-likelihood (word and byte perplexity, and bits per byte, which has no paired test).
WORDS = ["lene", "goso", "pene", "sole", "vusa", "tesi", "dudi", "nifi"]
CHOICE = """task: toy_choice
dataset_path: json
dataset_kwargs:
  data_files:
    test: {folder}/choice.jsonl
test_split: test
output_type: multiple_choice
doc_to_text: "{{{{query}}}}"
doc_to_choice: "{{{{choices}}}}"
doc_to_target: "{{{{gold}}}}"
metric_list:
  - metric: acc
    aggregation: mean
    higher_is_better: true
"""
ROLLING = """task: toy_rolling
dataset_path: json
dataset_kwargs:
  data_files:
    test: {folder}/rolling.jsonl
test_split: test
output_type: loglikelihood_rolling
doc_to_text: ""
doc_to_target: "{{{{text}}}}"
metric_list:
  - metric: word_perplexity
  - metric: byte_perplexity
  - metric: bits_per_byte
"""
MAIN = "results/lm_eval/tiny/synthetic/mle/{train}/augment-m1/{perturbation}/seed1"
PLAIN = MAIN.format(train="none", perturbation="none-0")
PERTURBED = MAIN.format(train="oracle", perturbation="insertion-0.2")


def write_tasks(workdir) -> None:
    folder = workdir / "tasks"
    folder.mkdir(exist_ok=True)
    rng = np.random.default_rng(0)
    choice = [
        {"query": " ".join(rng.choice(WORDS, 6)), "choices": [str(w) for w in rng.choice(WORDS, 3, replace=False)]}
        | {"gold": int(i % 3)}
        for i in range(16)
    ]
    rolling = [{"text": " ".join(rng.choice(WORDS, 24))} for _ in range(8)]
    (folder / "choice.jsonl").write_text("".join(json.dumps(d) + "\n" for d in choice))
    (folder / "rolling.jsonl").write_text("".join(json.dumps(d) + "\n" for d in rolling))
    (folder / "toy_choice.yaml").write_text(CHOICE.format(folder=folder))
    (folder / "toy_rolling.yaml").write_text(ROLLING.format(folder=folder))


def harness_config(**lm_eval) -> dict:
    config = tiny_study_config()
    config["evaluation"]["lm_eval"] = {
        "tasks": ["toy_choice", "toy_rolling"],
        "include_path": "tasks",
        "local_only": True,
    } | lm_eval
    return config


def run(workdir, config: dict, *args: str):
    path = workdir / "harness.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return run_snakemake(workdir, *args, configfiles=[path], cores=2, env=snakemake_environment(), timeout=600)


@pytest.fixture(scope="module")
def harnessed(tiny_study):
    """Two of the tiny study's models (MLE without and with oracle insertion 0.2) through the lm_eval rule."""
    write_tasks(tiny_study)
    result = run(tiny_study, harness_config(), PLAIN, PERTURBED)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return tiny_study


def choice_logprobs(model_dir, docs: list[dict]) -> np.ndarray:
    """Each choice's summed log-probability given the query, from the checkpoint itself (transformers); lm-eval
    puts its target delimiter, a space, between the two."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    out = np.zeros((len(docs), 3))
    with torch.no_grad():
        for i, doc in enumerate(docs):
            context = tokenizer(doc["query"])["input_ids"]
            for j, choice in enumerate(doc["choices"]):
                whole = tokenizer(doc["query"] + " " + choice)["input_ids"]
                logits = model(torch.tensor([whole])).logits[0].log_softmax(-1)
                out[i, j] = sum(float(logits[k - 1, whole[k]]) for k in range(len(context), len(whole)))
    return out


def rule_counts(stdout: str) -> dict[str, int]:
    """{rule: jobs} from `snakemake -n --quiet rules`."""
    rows = [line.split() for line in stdout.splitlines()]
    return {r[0]: int(r[1]) for r in rows if len(r) == 2 and r[1].isdigit() and r[0] != "total"}


def test_the_harness_scores_the_checkpoint_the_study_trained(harnessed):
    docs = [json.loads(line) for line in (harnessed / "tasks/choice.jsonl").read_text().splitlines()]
    for folder in (PLAIN, PERTURBED):
        scores = json.loads((harnessed / folder / "toy_choice.json").read_text())
        per_doc = pl.read_parquet(harnessed / folder / "toy_choice.prompts.parquet").sort("doc_id")
        assert scores["documents"] == per_doc.height == 16
        # lm-eval's accuracy is the mean of its per-document values, and those are what the checkpoint says:
        # the gold choice has the highest log-probability.
        assert scores["metrics"]["acc"]["value"] == pytest.approx(per_doc["acc"].mean())
        model = folder.replace("results/lm_eval", "results/models")
        picked = choice_logprobs(harnessed / model, docs).argmax(1)
        assert per_doc["acc"].to_list() == [float(p == d["gold"]) for p, d in zip(picked, docs)]
        rolling = json.loads((harnessed / folder / "toy_rolling.json").read_text())
        words = pl.read_parquet(harnessed / folder / "toy_rolling.prompts.parquet")
        expected = math.exp(-words["word_perplexity.loglikelihood"].sum() / words["word_perplexity.weight"].sum())
        assert rolling["metrics"]["word_perplexity"]["value"] == pytest.approx(expected)
        assert words["word_perplexity.weight"].to_list() == [24.0] * 8  # the words of each document
        assert "bits_per_byte" in rolling["metrics"] and "bits_per_byte" not in words.columns


def test_the_report_pairs_the_models_over_documents(harnessed, tmp_path):
    from workflow_lib.report.harness import contrasts, markdown, scores

    paths = [str(harnessed / f / f"{t}.json") for f in (PLAIN, PERTURBED) for t in ("toy_choice", "toy_rolling")]
    table = scores(paths)
    assert table.height == 2 * 4  # two models x (acc, word_perplexity, byte_perplexity, bits_per_byte)
    compared = contrasts(paths, intensity=0.2)
    assert set(compared["family"]) == {"perturbation"} and compared.height == 4
    row = compared.filter(pl.col("metric") == "acc").row(0, named=True)
    a = pl.read_parquet(harnessed / PERTURBED / "toy_choice.prompts.parquet").sort("doc_id")["acc"].to_numpy()
    b = pl.read_parquet(harnessed / PLAIN / "toy_choice.prompts.parquet").sort("doc_id")["acc"].to_numpy()
    assert row["a"].startswith("insertion 0.2") and row["b"] == "no perturbation"
    assert row["difference"] == pytest.approx((a - b).mean()) and row["documents"] == 16
    assert row["low"] <= row["difference"] <= row["high"] and 0 < row["p"] <= 1
    ppl = compared.filter(pl.col("metric") == "word_perplexity").row(0, named=True)
    # what a row's test could have seen: more than its interval's half-width (80% power at Holm's first step)
    assert ppl["detectable"] > (ppl["high"] - ppl["low"]) / 2 > 0
    values = table.filter(pl.col("metric") == "word_perplexity").sort("train_intensity")["value"].to_list()
    assert ppl["difference"] == pytest.approx(values[1] - values[0])  # a: the perturbed model
    bits = compared.filter(pl.col("metric") == "bits_per_byte").row(0, named=True)
    assert (
        bits["p"] is None
        and bits["detectable"] is None
        and bits["not_testable"] == "log2 of byte_perplexity: its row is the test"
    )
    text = markdown(table, compared)
    assert "**toy_choice**" in text and "| model | acc ↑ |" in text and "not testable: log2 of byte_perplexity" in text


def test_the_plan_runs_it_on_every_evaluated_model_and_reports_it(harnessed):
    """Every evaluated model (trained and untrained) gets one lm_eval job, and the report's table reads them all; a
    edited task file reruns the harness and nothing else; a changed limit is no param of any other job."""
    plan = run(harnessed, harness_config(), "results/report/tables/lm_eval.md", "-n", "--quiet", "rules")
    assert plan.returncode == 0, plan.stderr[-2000:]
    jobs = rule_counts(plan.stdout)
    models = len({p.parent for p in (harnessed / "results/perplexity").glob("**/*.json")})
    assert jobs["lm_eval"] == models - 2  # the two the fixture ran are done
    assert jobs["lm_eval_report"] == 1 and set(jobs) == {"lm_eval", "lm_eval_report", "argument_file"}
    # Every job of the finished study keeps its params: only the harness and its table would run.
    full = rule_counts(run(harnessed, harness_config(limit=4), "-n", "--quiet", "rules").stdout)
    assert set(full) == {"lm_eval", "lm_eval_report", "argument_file", "all"}, full
    assert full["lm_eval"] == models  # the limit is the harness's param: the two done rerun
    task = harnessed / "tasks/toy_rolling.yaml"
    task.write_text(task.read_text().replace("bits_per_byte", "bits_per_byte\n    higher_is_better: false"))
    touched = rule_counts(run(harnessed, harness_config(), PLAIN, "-n", "--quiet", "rules").stdout)
    assert touched == {"lm_eval": 1}, touched


def test_a_task_folder_that_is_not_there_is_refused(tmp_path):
    config = tiny_config()
    config["evaluation"]["lm_eval"] = {"tasks": ["toy"], "include_path": "no/such/tasks"}
    assert "evaluation.lm_eval.include_path" in error_of(config, tmp_path)
    config["evaluation"]["lm_eval"] = {"tasks": ["rm -rf /"]}
    assert "evaluation.lm_eval.tasks" in error_of(config, tmp_path)
