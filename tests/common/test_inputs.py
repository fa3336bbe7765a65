"""The rules' input functions (workflow_lib/inputs.py) as plain functions of the config, on the default study and
the paper's: each job reads the file the rule upstream writes, under the condition its wildcards name."""

from __future__ import annotations

import pytest
import yaml

from support.workflow_runs import REPO
from workflow_lib import grid, layout
from workflow_lib.config import validate_config
from workflow_lib.inputs import Inputs


@pytest.fixture(scope="module", params=["config.yaml", "configs/paper.yaml"])
def study(request) -> tuple[dict, Inputs]:
    config = validate_config(yaml.safe_load((REPO / request.param).read_text()), workdir=REPO)
    return config, Inputs(config, REPO)


class Wildcards(dict):
    """Snakemake's wildcards: read by name or as attributes."""

    __getattr__ = dict.__getitem__


def wildcards_of(path: str) -> Wildcards:
    """The wildcards the rule writing `path` matches, as Snakemake would pass them."""
    return Wildcards(layout.parse(path).columns())


def test_a_sampling_job_reads_its_model_its_prompts_and_its_test_synonyms(study):
    config, inputs = study
    saw_synonyms = saw_none = False
    for evaluation in grid.evaluation_runs(config):
        w = wildcards_of(evaluation.path("samples"))
        got = inputs.sample(w)
        assert got["prompts"] == f"results/prompts/{evaluation.eval_set}.parquet"
        if evaluation.run.objective != grid.UNTRAINED:
            assert got["model"] == evaluation.run.folder("models")
        if evaluation.test.synonyms == layout.NO_STRATEGY:
            assert "synonyms" not in got
            saw_none = True
        else:
            tokenizer = config["models"][evaluation.run.model]["tokenizer"]
            assert got["synonyms"] == layout.synonym_path(tokenizer, evaluation.run.dataset, evaluation.test.synonyms)
            saw_synonyms = True
    assert saw_synonyms and saw_none


def test_a_gather_reads_every_shard_of_its_evaluation_in_order(study):
    config, inputs = study
    counts = set()
    for evaluation in grid.evaluation_runs(config):
        shards = inputs.sample_shards(wildcards_of(evaluation.path("samples")))
        located = [layout.parse(path) for path in shards]
        assert [(p.shard.index, p.shard.count) for p in located] == [(i, len(shards)) for i in range(len(shards))]
        assert {p.moved("samples") for p in located} == {evaluation.path("samples")}
        counts.add(len(shards))
    # the default study has no time limit (one shard each); the paper's 4 h limit splits the longest
    assert counts == {1} if config["cost"]["max_minutes"] is None else max(counts) > 1


def test_a_train_job_reads_the_perturbed_data_of_its_condition(study):
    config, inputs = study
    for folder in grid.model_targets(config):
        run = layout.parse(folder).run
        w = wildcards_of(folder)
        got = inputs.train(w)
        tokenizer = config["models"][run.model]["tokenizer"]
        assert got["train"] == layout.perturbed_path(tokenizer, run.dataset, run.train, run.seed)
        assert got["tokenizer"] == f"results/tokenizers/{tokenizer}"
        splits = grid.dataset_splits(config["datasets"][run.dataset])
        assert ("validation" in got) == ("validation" in splits and config["training"]["validation"])


def test_a_tokenizer_job_reads_what_its_source_needs(study):
    """A tokenizer trained on a dataset reads its train split; a model's or the hub's reads no data (the paper's
    gpt-neo tokenizer has no dataset: this raised a KeyError once)."""
    config, inputs = study
    for name, spec in config["tokenizers"].items():
        got = inputs.tokenizer(Wildcards(tokenizer=name))
        if spec["source"] == "train":
            assert got == {"train": f"results/data/{spec['dataset']}/train.parquet"}
        else:
            assert "train" not in got


def test_the_contrasts_read_each_metrics_sidecar_and_each_mauve_pair_reads_planned_samples(study):
    config, inputs = study
    metrics = grid.metric_targets(config) + grid.extrapolation_targets(config)  # the exact TV is paired too
    sidecars = inputs.metric_sidecars()
    assert [s.removesuffix(".prompts.parquet") for s in sidecars] == [m.removesuffix(".json") for m in metrics]
    assert all(layout.parse(s).columns() == layout.parse(m).columns() for s, m in zip(sidecars, metrics))
    planned = set(grid.metric_targets(config))
    for pair in inputs.mauve_contrasts:
        got = inputs.mauve_contrast(Wildcards(pair=pair))
        assert {got["a"], got["b"]} <= planned
        assert got["human"].endswith(f"/{inputs.mauve_contrasts[pair]['eval_set']}.npy")
    assert inputs.argument_lists["contrasts"][-len(inputs.mauve_contrasts) - 1] == "--mauve"


def test_a_perplexity_job_scores_every_eval_set_its_model_is_evaluated_on(study):
    config, inputs = study
    for folder, eval_sets in inputs.perplexity_jobs.items():
        w = wildcards_of(folder)
        assert inputs.perplexity(w)["prompts"] == [f"results/prompts/{es}.parquet" for es in eval_sets]
        expected = {e.eval_set for e in grid.evaluation_runs(config) if e.run == layout.parse(folder).run}
        assert set(eval_sets) == expected


def test_a_synonyms_job_reads_what_its_source_needs(tmp_path):
    config = yaml.safe_load((REPO / "configs/paper.yaml").read_text())
    (tmp_path / "pairs.tsv").write_text("happy\tglad\n")
    config.setdefault("synonyms", {})["file"] = "pairs.tsv"
    config = validate_config(config, workdir=REPO)
    inputs = Inputs(config, tmp_path)
    tokenizer = next(iter(config["tokenizers"]))
    model = next(m for m, entry in config["models"].items() if entry["tokenizer"] == tokenizer)
    tokens = layout.tokens_path(tokenizer, "webtext", "train")
    got = {
        source: inputs.synonyms(Wildcards(tokenizer=tokenizer, dataset="webtext", synonyms=source))
        for source in ("embedding", "embedding-words", "distributional", "distributional-words", "uniform", "file")
    }
    assert got["embedding"] == {"tokenizer": layout.tokenizer_path(tokenizer), **inputs.pretrained(model)}
    assert got["embedding-words"] == {**got["embedding"], "tokens": tokens}  # the words are read off the tokens
    assert (
        got["distributional"]
        == got["distributional-words"]
        == {"tokenizer": got["uniform"]["tokenizer"], "tokens": tokens}
    )
    assert got["file"] == {**got["uniform"], "pairs": "pairs.tsv"}


def test_the_synonym_audit_counts_training_tokens_only_where_the_study_makes_them(study):
    config, _inputs = study
    audited = grid.synonym_audit_tables(config)
    assert [table for table, _, _ in audited] == grid.synonym_targets(config) and audited
    built = set(grid.token_targets(config))
    for table, tokenizer, tokens in audited:
        located = table.removeprefix("results/synonyms/").removesuffix(".parquet").split("/")
        assert tokenizer == layout.tokenizer_path(located[0])
        assert tokens is None or tokens in built or located[2] in ("distributional", "distributional-words")
        assert tokens in (None, layout.tokens_path(located[0], located[1], "train"))


def test_a_zero_shot_studys_synonym_audit_tokenizes_nothing():
    config = validate_config(yaml.safe_load((REPO / "configs/paper.yaml").read_text()), workdir=REPO)
    name, exp = next(
        (n, e) for n, e in config["experiments"].items() if "embedding" in e["test_perturbation"]["synonyms"]
    )
    config["experiments"] = {name: {**exp, "objectives": [grid.UNTRAINED]}}
    audited = grid.synonym_audit_tables(config)
    assert audited and all(tokens is None for _, _, tokens in audited)
    assert not grid.token_targets(config)
