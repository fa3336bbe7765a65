"""The result-path layout: every condition the schema allows maps to one path and back, and the rules' templates,
the grid, the report and the cost model all read the same layout."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from support.workflow_runs import REPO
from workflow_lib import grid, layout
from workflow_lib.config import SCHEMA_PATH
from workflow_lib.layout import (
    EVALUATION_KINDS,
    EVALUATION_SUFFIXES,
    RUN_KINDS,
    SCORED_SUFFIXES,
    Evaluation,
    Located,
    ModelRun,
    SamplingCondition,
    TrainCondition,
    fmt_intensity,
    parse,
)
from workflow_lib.sample.modes import MODES

SCHEMA = yaml.safe_load(SCHEMA_PATH.read_text())

# Names as the schema allows them (its $defs.name pattern: a letter or digit, then letters, digits, '_', '.', '-'),
# strategy names among them: with '-' or digits, which the layout must not confuse with the intensity after them.
assert SCHEMA["$defs"]["name"]["pattern"] == "^[A-Za-z0-9][A-Za-z0-9_.-]*$"
names = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,11}", fullmatch=True)
intensities = st.floats(min_value=0, max_value=1, allow_nan=False).map(fmt_intensity)
train_modes = st.sampled_from(SCHEMA["$defs"]["perturbation_grid"]["properties"]["modes"]["items"]["enum"])
test_modes = st.sampled_from(list(MODES))
train_conditions = st.builds(TrainCondition, names, train_modes, st.integers(1, 64), names, intensities)
runs = st.builds(ModelRun, names, names, names, train_conditions, st.integers(0, 10**6))
tests_ = st.builds(SamplingCondition, names, names, names, intensities, test_modes)
evaluations = st.builds(Evaluation, runs, names, tests_)


@settings(max_examples=300, deadline=None)
@given(evaluations, st.sampled_from(sorted(EVALUATION_KINDS)), st.sampled_from(EVALUATION_SUFFIXES))
def test_an_evaluation_path_reads_back_as_its_conditions(evaluation, kind, suffix):
    path = evaluation.path(kind, suffix)
    located = parse(path)
    assert (located.kind, located.run, located.eval_set, located.test, located.suffix) == (
        kind,
        evaluation.run,
        evaluation.eval_set,
        evaluation.test,
        suffix,
    )
    assert located.path == path and parse(f"studies/x/{path}") == located  # also below a study's folder
    assert parse(located.moved("samples")).test == evaluation.test


@settings(max_examples=200, deadline=None)
@given(evaluations, st.integers(1, 500).flatmap(lambda n: st.tuples(st.integers(0, n - 1), st.just(n))))
def test_a_sampling_shard_reads_back_as_its_evaluation_and_shard(evaluation, shard):
    path = evaluation.shard_path(layout.Shard(*shard))
    located = parse(path)
    assert (located.kind, located.run, located.eval_set, located.test, located.shard) == (
        "samples",
        evaluation.run,
        evaluation.eval_set,
        evaluation.test,
        layout.Shard(*shard),
    )
    assert located.path == path and located.moved("samples") == evaluation.path("samples")
    assert evaluation.shards(shard[1])[shard[0]] == path
    with pytest.raises(ValueError, match="index runs from 0"):
        layout.Shard(shard[1], shard[1])


@settings(max_examples=200, deadline=None)
@given(runs, st.sampled_from(sorted(RUN_KINDS)), names, st.sampled_from(SCORED_SUFFIXES))
def test_a_run_folder_and_a_score_read_back(run, kind, eval_set, suffix):
    folder = run.folder(kind) + RUN_KINDS[kind]
    assert parse(folder) == Located(kind, run, suffix=RUN_KINDS[kind])
    scored = layout.scored_path(run, eval_set, suffix)
    assert parse(scored) == Located("perplexity", run, eval_set, suffix=suffix)


@settings(max_examples=100, deadline=None)
@given(evaluations)
def test_the_rules_templates_and_wildcards_are_the_same_layout(evaluation):
    """A job's wildcards (as snakemake would match them) give back its conditions, and its output template
    filled with them is the path the grid asks for."""
    run, test = evaluation.run, evaluation.test
    wildcards = {"model": run.model, "dataset": run.dataset, "objective": run.objective, "seed": str(run.seed)}
    wildcards |= {w: str(getattr(run.train, f)) for f, w in layout.TRAIN_NAMES.items()}
    wildcards |= {w: str(getattr(test, f)) for f, w in layout.TEST_NAMES.items()}
    wildcards["eval_set"] = evaluation.eval_set
    assert layout.evaluation_of(wildcards) == evaluation and layout.run_of(wildcards) == run
    assert layout.evaluation_template("samples").format(**wildcards) == evaluation.path("samples")
    assert layout.run_template("models").format(**wildcards) == run.folder()
    shard = {"shard": "2", "shards": "5"}  # a sampling shard: one more axis, its own wildcards
    assert layout.shard_template().format(**wildcards, **shard) == evaluation.shard_path(layout.Shard(2, 5))
    assert layout.shard_of(shard) == layout.Shard(2, 5)
    assert layout.perturbed_template(".json").format(tokenizer="t", **wildcards) == layout.perturbed_path(
        "t", run.dataset, run.train, run.seed, ".json"
    )


@pytest.mark.parametrize(
    "path",
    [
        "results/metrics/m/d/mle/none/augment-m1/none-0/seed1/e/unbiased/none/none-0.json",  # no sampling mode
        "results/metrics/m/d/mle/none/augment-m1/none-0/seed1/e/unbiased/none/none-0-exact.csv",  # unknown suffix
        "results/samples/m/d/mle/none/augment-mX/none-0/seed1/e/unbiased/none/none-0-exact.parquet",  # copies
        "results/models/m/d/mle/none/augment-m1/none-0/seedX",
        "results/other/m/d/mle/none/augment-m1/none-0/seed1",  # not a kind of result
        "results/models/m/d/mle/none/augment-m1/none-0/seed1/extra",
    ],
)
def test_a_path_the_layout_did_not_write_is_refused(path):
    with pytest.raises(ValueError, match="not a result path of this workflow's layout"):
        parse(path)


def test_the_grid_plans_only_paths_of_the_layout():
    """Every target the default and the paper's configs plan reads back as the conditions the grid built it from."""
    from workflow_lib.config import validate_config

    for name in ("config.yaml", "configs/paper.yaml"):
        config = validate_config(yaml.safe_load((REPO / name).read_text()), workdir=REPO)
        for evaluation in grid.evaluation_runs(config):
            located = parse(evaluation.path("metrics"))
            assert Evaluation(located.run, located.eval_set, located.test) == evaluation
        for folder in grid.model_targets(config) + list(grid.perplexity_jobs(config)):
            assert parse(folder).run.folder() == parse(folder).moved("models")


def test_the_cost_model_refuses_an_output_it_did_not_plan():
    """A rule's output the plan lacks is an error naming it, not a guessed SLURM time (it was unknown_minutes)."""
    from support.workflow_runs import tiny_config
    from workflow_lib.config import validate_config
    from workflow_lib.cost import slurm

    config = validate_config(tiny_config())
    planned = next(key for key in slurm.planned(config) if key.startswith("results/models/"))
    assert slurm.runtime_minutes(config, planned) >= config["cost"]["min_minutes"]
    run = parse(planned).run
    unplanned = dataclasses.replace(run, seed=run.seed + 1000).folder()
    with pytest.raises(KeyError, match="the cost model plans no job that writes it"):
        slurm.runtime_minutes(config, unplanned)
    with pytest.raises(KeyError, match="the cost model plans no job that writes it"):
        slurm.mem_mb(config, unplanned)


def test_a_sidecar_is_the_same_result_with_another_suffix_of_its_layout():
    """The metrics JSON's features and per-prompt files, the rules' templates included; a suffix the layout has not
    (or a path that is not a result JSON) raises instead of naming a file nothing writes."""
    metrics = layout.evaluation_template("metrics")
    assert layout.sidecar(metrics, ".features.parquet") == layout.evaluation_template("metrics", ".features.parquet")
    run = ModelRun("tiny", "synthetic", "mle", layout.BASELINE, 42)
    scored = layout.scored_path(run, "webtext")
    assert parse(layout.sidecar(scored, ".prompts.parquet")) == Located(
        "perplexity", run, "webtext", None, ".prompts.parquet"
    )
    with pytest.raises(ValueError, match="no .npz sidecar"):
        layout.sidecar(metrics, ".npz")
    with pytest.raises(ValueError, match="no .prompts.parquet sidecar"):
        layout.sidecar(run.folder(), ".prompts.parquet")


def test_the_rules_and_the_plan_spell_no_result_path():
    """Every result path the rules and the plan name is built in layout.py (or, for downloads and GGUF files, in the
    modules beside the jobs that read them): no `"results/...` literal in the Snakefile, the rules, the grid, the
    input functions or the report's settings (issue 53). A rule's shell command names its files through {input},
    {output} and {params}, so nothing but the layout decides where a result lives."""
    import re

    repo = Path(__file__).resolve().parents[2]
    files = [repo / "Snakefile", *sorted((repo / "rules").glob("*.smk"))]
    files += [repo / "workflow_lib" / name for name in ("grid.py", "inputs.py", "comparisons.py", "report/settings.py")]
    found = [
        f"{path.relative_to(repo)}:{number}"
        for path in files
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if re.search(r"""["'](results/|\S*\s--\S+ results/)""", line)
    ]
    assert not found, found
