"""configs/paper.yaml: the paper's whole study plans offline in seconds, with the jobs its grid implies.

The expected number of jobs per rule is recounted here from the config alone, without workflow_lib.grid, so a
mistake in the grid code or in the rules' input functions shows up as a count mismatch. Every dataset
of the paper config is fetched by the workflow, so the plan starts from an empty folder (no data/).
"""

from __future__ import annotations

import copy
import itertools

import pytest
import yaml

from support.plans import job_stats, planned_jobs
from support.workflow_runs import PAPER, REPO, paper_dry_run
from workflow_lib.config import validate_config
from workflow_lib.cost.slurm import planned as cost_plan

pytestmark = pytest.mark.workflow

PLAN_SECONDS = 40  # CPU seconds (measured: 8.7 for its 3,408 jobs, 2,434 of them sampling shards; 6 for 1,831 before;
# on 2026-11-28 17.2 on a slower machine for b29d381 and 17.9 for 3,449 jobs at issue 63, 22.4 under CI's load)
REPORT_RULES = {
    "argument_file",
    "collect_metrics",
    "mauve_contrast",
    "contrasts",
    "tables",
    "figure",
    "examples",
    "training_curves",
    "synonym_audit",
    "variance",
    "all",
}  # the report stage's: counted loosely
BUILTIN_SPLITS = ("train", "validation", "test", "ood")

# The strategies of the embedding space, which read no synonym table (docs/method.md §1).
EMBEDDING_SPACE = ("embedding-noise", "neftune")


@pytest.fixture(scope="module")
def paper() -> dict:
    return yaml.safe_load(PAPER.read_text())


@pytest.fixture(scope="module")
def paper_workdir(tmp_path_factory):
    """An empty working directory: a fresh checkout has no data/ folder, and the workflow fetches everything."""
    return tmp_path_factory.mktemp("paper")


def splits(dataset: dict) -> list[str]:
    if dataset["source"] == "builtin":
        return list(BUILTIN_SPLITS)
    return list(dataset["splits"] if dataset["source"] == "hf" else dataset["files"])


def expected_jobs(config: dict) -> dict[str, int]:
    """Jobs per rule, recounted from the config and the schema's defaults (the grid's rules, restated)."""
    seed = config.get("seed", 42)
    datasets, models, tokenizers, eval_sets = (config[k] for k in ("datasets", "models", "tokenizers", "eval_sets"))
    tokenize_splits = config.get("tokenize", {}).get("splits", ["train", "validation"])

    def train_conditions(exp):  # intensity 0 is one baseline whatever the strategy and synonyms
        grid = exp.get("train_perturbation", {})
        for strategy, alpha, source, mode in itertools.product(
            grid.get("strategies", ["insertion"]),
            grid.get("intensities", [0]),
            grid.get("synonyms", ["distributional"]),
            grid.get("modes", ["augment"]),
        ):
            source = "none" if strategy in EMBEDDING_SPACE else source  # no synonym table
            yield ("none", mode, "none", 0.0) if alpha == 0 else (source, mode, strategy, float(alpha))

    def test_conditions(exp):  # intensity 0 is plain sampling, one condition
        grid = exp.get("test_perturbation", {})
        for strategy, alpha, source, mode in itertools.product(
            grid.get("strategies", ["insertion"]),
            grid.get("intensities", [0]),
            grid.get("synonyms", ["distributional"]),
            grid.get("modes", ["exact"]),
        ):
            source = "none" if strategy in EMBEDDING_SPACE else source
            yield ("none", "none", 0.0, "exact") if alpha == 0 else (source, strategy, float(alpha), mode)

    downloads, tokenizer_jobs, tokenized, prompts, synonyms, perturbed, trained, sampled, perplexity = (
        set() for _ in range(9)
    )
    baseline = ("none", "augment", "none", 0.0)
    for exp in config["experiments"].values():
        data = exp["train_dataset"]
        trains = any(o != "untrained" for o in exp.get("objectives", ["mle"]))
        for model, objective, train, run_seed in itertools.product(
            exp["models"], exp.get("objectives", ["mle"]), train_conditions(exp), exp.get("seeds", [seed])
        ):
            untrained = objective == "untrained"  # evaluated as it is: one (baseline-named) condition, no training
            if untrained and train != baseline:
                continue
            tokenizer = models[model]["tokenizer"]
            if trains:
                tokenizer_jobs.add(tokenizer)
                if tokenizers[tokenizer]["source"] == "train":
                    downloads.add((tokenizers[tokenizer]["dataset"], "train"))
                for split in set(tokenize_splits) & set(splits(datasets[data])):
                    tokenized.add((tokenizer, data, split))
                    downloads.add((data, split))
            if not untrained:
                perturbed.add((tokenizer, data, train, run_seed))
                trained.add((model, data, objective, train, run_seed))
            sources = {c[0] for c in [*train_conditions(exp), *test_conditions(exp)]} - {"none"}
            synonyms.update((tokenizer, data, s) for s in sources)
            if sources:
                tokenizer_jobs.add(tokenizer)
            for eval_set, decoder, test in itertools.product(
                exp["eval_sets"], exp.get("decoders", ["unbiased"]), test_conditions(exp)
            ):
                sampled.add((model, data, objective, train, run_seed, eval_set, decoder, test))
                perplexity.add((model, data, objective, train, run_seed))  # one job per model, all its eval sets
                prompts.add(eval_set)
                downloads.add((eval_sets[eval_set]["dataset"], eval_sets[eval_set]["split"]))
    builtin = {es for es in prompts if datasets[eval_sets[es]["dataset"]]["source"] == "builtin"}
    fetches, unpacks = set(), set()  # a url dataset's files; under recipe mixce a split reads all of them
    for dataset, split in downloads:
        ds = datasets[dataset]
        if ds["source"] != "url":
            continue
        if "archive" in ds:
            fetches.add((dataset, ds["archive"]["url"]))
            unpacks.add(dataset)
            continue
        for files in ds["files"].values() if ds.get("recipe") == "mixce" else [ds["files"][split]]:
            fetches.update(
                (dataset, e["url"], e.get("head_bytes")) for e in (files if isinstance(files, list) else [files])
            )
    counts = {
        "fetch": len(fetches),
        "unpack": len(unpacks),
        "download": len(downloads),
        "tokenizer": len(tokenizer_jobs),
        "tokenize": len(tokenized),
        "prompts": len(prompts),
        "features": len(prompts),
        "control_texts": len(prompts),  # MAUVE's controls: one set of texts and one verdict per eval set
        "mauve_controls": len(prompts),
        "planted_control": len(prompts),  # MAUVE's planted control: four eval sets, each the next one's source
        "synonyms": len(synonyms),
        "perturb": len(perturbed),
        "train": len(trained),
        "sample": len(sampled),  # evaluations; a test replaces it with the plan's shards (sampling.shard_batches)
        "gather_samples": len(sampled),
        "sample_features": len(sampled),
        "evaluate": len(sampled),
        "perplexity": len(perplexity),
        "extrapolation": sum(1 for job in sampled if job[5] in builtin),
    }
    simulation = config.get("simulation", {})
    if simulation.get("enabled"):
        counts["simulation_fit"] = len(simulation.get("vocab_sizes", [50, 100, 200, 400, 800]))
        counts["simulation_summary"] = 1
    return {rule: n for rule, n in counts.items() if n}


def test_paper_config_holds_the_papers_study(paper):
    assert {m["name"] for m in paper["models"].values()} == {"facebook/opt-125m", "gpt2", "EleutherAI/gpt-neo-1.3B"}
    assert all(t["source"] == "hf" for t in paper["tokenizers"].values())
    assert {(d["path"], d["name"]) for d in paper["datasets"].values() if d["source"] == "hf"} == {
        ("Salesforce/wikitext", "wikitext-2-raw-v1"),
        ("Salesforce/wikitext", "wikitext-103-raw-v1"),
    }
    assert {es["dataset"] for es in paper["eval_sets"].values()} == set(paper["datasets"])
    # docs/method.md §4: MixCE's WebText and WritingPrompts, from MixCE's URLs; WikiText-103 as WikiText-2 is.
    ds = paper["datasets"]
    assert (ds["webtext"]["recipe"], ds["webtext"]["top_up"], ds["writingprompts"]["recipe"]) == (
        "mixce",
        "train",
        "mixce",
    )
    assert (ds["wikitext103"]["recipe"], ds["wikitext103"]["cleaning"]) == ("raw", "wikitext")
    webtext = "https://openaipublic.azureedge.net/gpt-2/output-dataset/v1/webtext.{}.jsonl"
    assert [ds["webtext"]["files"][s]["url"] for s in ("test", "train")] == [
        webtext.format("test"),
        webtext.format("train"),
    ]
    assert ds["webtext"]["files"]["train"]["head_bytes"] and not ds["webtext"]["files"]["test"].get("head_bytes")
    assert ds["writingprompts"]["archive"]["url"] == "https://dl.fbaipublicfiles.com/fairseq/data/writingPrompts.tar.gz"
    assert ds["writingprompts"]["files"] == {"test": ["writingPrompts/test.wp_source", "writingPrompts/test.wp_target"]}
    assert paper["sampling"]["runs"] == 20 and paper["evaluation"]["featuriser"] == "gpt2-large"
    assert paper["simulation"] == {"enabled": True, "replications": 100}
    experiments = paper["experiments"]
    assert set(experiments["table1-perturbed"]["objectives"]) == {"mle", "mixce", "tvd", "brier", "emo"}
    assert set(experiments["table1"]["objectives"]) == {
        "untrained",
        "mle",
        "mixce",
        "tvd",
        "brier",
        "emo",
    }  # + zero-shot
    assert paper["evaluation"]["mauve"]["kmeans_seeds"] == 5
    perturbed = experiments["table1-perturbed"]["train_perturbation"]
    assert (perturbed["strategies"], perturbed["intensities"], perturbed["modes"], perturbed["copies"]) == (
        ["insertion"],
        [0.025],
        ["augment"],
        1,
    )
    # Training seeds as the unit of the method's claim (report.seeds): MLE without and with Table 1's insertion, on
    # every model and eval set of Table 1, from 3 seeds (the fewest a test across seeds reports a p for), seed 42 among
    # them (Table 1's own checkpoints, one job each).
    for name in ("seeds", "seeds-perturbed"):
        seeds = experiments[name]
        assert (seeds["seeds"], seeds["objectives"]) == ([42, 43, 44], ["mle"]), name
        assert paper.get("seed", 42) in seeds["seeds"], name
        for key in ("models", "train_dataset", "eval_sets"):
            assert seeds[key] == experiments["table1"][key], (name, key)
    assert not {"train_perturbation", "test_perturbation"} & set(experiments["seeds"])
    for axis in ("train_perturbation", "test_perturbation"):
        assert experiments["seeds-perturbed"][axis] == experiments["table1-perturbed"][axis], axis
    assert set(experiments["ablation"]["objectives"]) == {"mle", "brier"}
    assert experiments["ablation"]["train_perturbation"]["intensities"] == [0, 0.025]
    # The sweep and the strategy table: one GPT-2 MLE experiment per condition, the same at training and sampling.
    paired = {
        (e["train_perturbation"]["strategies"][0], e["train_perturbation"]["intensities"][0])
        for e in experiments.values()
        if e["models"] == ["gpt2"]
        and e["objectives"] == ["mle"]
        and e["eval_sets"] == ["webtext"]
        and e["train_perturbation"] == e["test_perturbation"]
    }
    assert {alpha for strategy, alpha in paired if strategy == "insertion"} == {0.1 * 2**k for k in range(-4, 3)}
    assert {(s, a) for s in ("replacement", "deletion", "insertion") for a in (0.0125, 0.025, 0.05)} <= paired


def test_paper_config_trains_with_emos_protocol(paper_workdir, paper):
    """EMO's trainer (docs/method.md §3 and §4): no gradient clipping, validation once per epoch in the training
    objective's own loss, the best epoch kept; every model, its overrides applied, as the train rule gets them."""
    filled = validate_config(copy.deepcopy(paper), workdir=paper_workdir)
    for name, model in filled["models"].items():
        settings = {**filled["training"], **model["training"]}
        protocol = {k: settings[k] for k in ("max_grad_norm", "eval_every", "select_best", "select_by", "epochs")}
        assert protocol == {
            "max_grad_norm": 0,
            "eval_every": 0,
            "select_best": True,
            "select_by": "objective",
            "epochs": 1,
        }, name
        assert settings["checkpoint_every"] == 100 and model["load_dtype"] == "float32", name


def test_paper_config_plans_offline_in_seconds_with_the_expected_jobs(paper_plan, paper):
    """The session's plan of the paper's study from an empty folder (`paper_plan`, tests/conftest.py, which the
    rehearsal's test reads too)."""
    result, seconds = paper_plan.result, paper_plan.cpu_seconds
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-3000:]
    assert seconds < PLAN_SECONDS, f"planning took {seconds:.1f} CPU-s"
    assert not (paper_plan.workdir / "data").exists()
    planned = job_stats(output)
    expected = expected_jobs(paper)
    # the shards of at most sampling.shard_batches batches, as the cost model plans them (checked against the limit)
    shards = {j.samples: j.shards for j in cost_plan(validate_config(copy.deepcopy(paper))).values() if j.shards}
    assert len(shards) == expected["sample"] and set(shards.values()) != {1}
    expected["sample"] = sum(shards.values())
    assert {r: n for r, n in planned.items() if r not in REPORT_RULES} == expected
    # WebText test, the head of WebText train (its top-up), the WritingPrompts archive; one archive unpacked.
    assert (planned["fetch"], planned["unpack"]) == (3, 1)
    assert {"collect_metrics", "mauve_contrast", "tables", "all"} <= set(planned)
    print(f"paper config: {sum(planned.values())} jobs planned in {seconds:.1f} CPU-s: {planned}")
    # The figures the README and docs/studies.md quote are this plan's, not an older one's.
    total = sum(planned.values())  # snakemake's total, `all` included
    readme = (REPO / "README.md").read_text()
    assert f"and the simulation): {total} jobs." in readme, total
    assert f"{total} jobs in all" in (REPO / "docs/studies.md").read_text()


def test_no_job_of_the_paper_study_has_a_command_line_over_2000_characters(paper_plan):
    """A gather job's paths reach it in an argument file (rules/report.smk, argument_file), not on its command line,
    whose length would grow with the study (the kernel refuses one argument over 128 KiB; the contrasts job's
    command was 42,150 characters)."""
    result = paper_plan.result  # the session's plan, with every job's command (tests/conftest.py)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-3000:]
    commands = [job.text for job in planned_jobs(output) if "python -m workflow_lib" in job.text]
    longest = max(len(line) for text in commands for line in text.splitlines() if "python -m workflow_lib" in line)
    assert len(commands) > 600 and longest <= 2000, longest


def test_paper_config_requests_gpus_and_multi_gpu_training(paper_workdir):
    """GPT-Neo trains on 4 GPUs: the job's gpu resource and accelerate's --multi_gpu follow from one setting. An
    evaluation's featurisation holds a GPU (evaluation.gpus), its k-means and ROUGE none."""
    neo = "results/models/gpt-neo-1.3b/wikitext2/mle/none/augment-m1/none-0/seed42"
    gpt2 = "results/samples/gpt2/wikitext2/mle/none/augment-m1/none-0/seed42/webtext/unbiased/none/none-0-exact.parquet"
    metrics = gpt2.replace("results/samples/", "results/metrics/").replace(".parquet", ".json")
    result, _ = paper_dry_run(paper_workdir, "--printshellcmds", neo, metrics)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-3000:]
    planned = planned_jobs(output)
    evaluation = {job.rule: job.text for job in planned if job.rule in ("sample_features", "evaluate")}
    assert "gpu=1" in evaluation["sample_features"] and "gpu=" not in evaluation["evaluate"], evaluation
    jobs = {job.outputs[0]: job.text for job in planned if job.rule in ("train", "sample")}
    assert "gpu=4" in jobs[neo] and "accelerate launch --multi_gpu --num_processes 4 " in jobs[neo]
    shards = [path for path in jobs if path.startswith(gpt2.removesuffix(".parquet") + ".shards/")]
    assert shards and all("gpu=1" in jobs[path] for path in shards)  # each sampling shard holds a GPU
    gpt2_train = gpt2.replace("results/samples/", "results/models/").split("/webtext/")[0]
    # One process needs no launcher: the trainer's Accelerator is given the device and precision itself.
    assert "gpu=1" in jobs[gpt2_train] and "OMP_NUM_THREADS=1 python -m workflow_lib.train.trainer " in jobs[gpt2_train]
    assert "accelerate" not in jobs[gpt2_train]
