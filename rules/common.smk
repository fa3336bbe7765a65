import json
import os
import re
import shlex
import sys
from pathlib import Path

from snakemake.utils import update_config

# Run as itself, the jobs' `python` is the interpreter that runs snakemake (`.venv/bin/snakemake` without activating
# the venv), unless a job's conda environment puts its own first (--sdm conda). Imported as a module, the run's
# environment is the importer's and is left as it is (docs/usage.md, "Using perturbed-LM inside your own workflow").
if MAIN_WORKFLOW:
    os.environ.update(PATH=os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")]))

from workflow_lib.install_source import deploy_environment

# Where the package came from, for the conda environments' post-deploy scripts (envs/*.post-deploy.sh), which
# Snakemake runs from a copy: they install the same package (workflow_lib/install_source.py). A user's own wins.
for key, value in deploy_environment().items():
    os.environ.setdefault(key, value)

from workflow_lib.config import ConfigError, typed_overrides, validate_config
from workflow_lib.config_semantics import check_semantics
from workflow_lib.constants import NO_TRAIN_DATASET, SYNONYM_SOURCES, UNTRAINED
from workflow_lib.cost.devices import check_cost
from workflow_lib.cost.slurm import mem_mb as predicted_mem_mb, planned, runtime_minutes as predicted_minutes
from workflow_lib.data.downloads import fetched
from workflow_lib.data.splits import split_spec
from workflow_lib.grid import all_targets, dataset_splits
from workflow_lib.inputs import Inputs, argument_file, curves_argument
from workflow_lib.layout import (
    NO_STRATEGY,
    REPORT_FIGURES,
    condition_constraints,
    evaluation_of,
    evaluation_template,
    run_template,
    shard_template,
)

# A rule's `code` param, code_digest("workflow_lib.<stage>.<module>"): the sha256 of the files `python -m <module>`
# runs (found by a static import scan), compared by value: an edit reruns the rule's jobs, a clone, move or touch does not.
from workflow_lib.module_deps import code_digest
from workflow_lib.perturb.strategies import wildcard_pattern as strategy_wildcards
from workflow_lib.pretrained import gguf_models, pinned_models
from workflow_lib.sample.modes import get as get_mode, wildcard_pattern as mode_wildcards

# Nested `--config` values arrive as strings (`--config 'sampling={runs: 5}'`): typed before validation.
update_config(config, typed_overrides(workflow.config_settings.config))
try:
    validate_config(config, workdir=Path.cwd())
    check_semantics(config, Path.cwd())  # what the schema cannot see (it reads models' contexts as the cost model does)
    check_cost(config["cost"])
    planned(config)  # the cost model's plan: a sampling shard predicted past cost.max_minutes is refused here
except ConfigError as error:
    print(f"Invalid configuration: {error}", file=sys.stderr)
    sys.exit(1)


DATASETS = config["datasets"]
TOKENIZERS = config["tokenizers"]
MODELS = config["models"]
EVAL_SETS = config["eval_sets"]
EXPERIMENTS = config["experiments"]


def _names(names):
    """A wildcard regex that matches exactly these names, so no two rules can claim one file."""
    return "|".join(re.escape(n) for n in sorted(names)) or "(?!)"


wildcard_constraints:
    **condition_constraints(
        {
            "decoder": _names(config["decoders"]),
            **{f"{s}_synonyms": _names([*SYNONYM_SOURCES, NO_STRATEGY]) for s in ("train", "test")},
            **{f"{s}_strategy": strategy_wildcards() for s in ("train", "test")},
            "train_mode": "augment|prefix",
            "test_mode": mode_wildcards(),
        }
    ),
    dataset=_names([*DATASETS, NO_TRAIN_DATASET]),  # none: a zero-shot experiment without a train dataset
    file=_names({name for d in DATASETS.values() if d["source"] == "url" for name in fetched(d)}),
    split=_names({s for d in DATASETS.values() for s in dataset_splits(d)}),
    tokenizer=_names(TOKENIZERS),
    eval_set=_names(EVAL_SETS),
    model=_names(MODELS),
    gguf_model=_names(gguf_models(config)),
    hub_model=_names(pinned_models(config)),
    objective=_names([*config["objectives"], UNTRAINED]),
    synonyms=_names(SYNONYM_SOURCES),
    # The condition's fields (workflow_lib/layout.py): their types, narrowed to the names this workflow knows.
    featuriser=r"[A-Za-z0-9_.-]+",
    pair=r"[0-9a-f]{16}",
    figure=_names(REPORT_FIGURES),


def predicted_runtime(output):
    """A modelled rule's `runtime` (minutes): workflow_lib.cost's predicted time of the job writing `output` (the rule's
    output pattern) on cost.device (cost.cpu without a GPU), times cost.safety and the attempt (docs/cluster.md, "What a
    study costs"). SLURM's --time, through the profile; ignored by local runs."""
    return lambda wildcards, attempt: predicted_minutes(config, output.format(**dict(wildcards.items())), attempt)


# Scheduling hints, no rerun follows them: on a machine of few cores, trainings first (everything waits on them),
# then perturbed sampling in the modes that ask for it (sample/modes.py, `priority`).
TRAIN_PRIORITY = 2


def sampling_priority(wildcards):
    test = evaluation_of(wildcards).test
    return get_mode(test.mode).priority if test.perturbed else 0


def predicted_mem(output):
    """A modelled rule's host `mem_mb`: a base plus three float32 copies of its checkpoint, times the attempt."""
    return lambda wildcards, attempt: predicted_mem_mb(config, output.format(**dict(wildcards.items())), attempt)


def as_json(obj):
    """Params are passed to the CLI as JSON; sorted keys keep the string (and the rerun trigger) stable."""
    return json.dumps(obj, sort_keys=True)


def shell_words(*words):
    """Several command-line words as one param, each quoted for the shell (shlex.join; a plain word stays as it
    is): `shell:` takes such a param unquoted, since `:q` would make the whole one word. No shell sees config text
    unquoted: a single value is `{...:q}` in the command, words are built here or in `inputs` (issue 64)."""
    return shlex.join(str(word) for word in words)


# Cheap rules carry `localrule: True`: they run where snakemake runs, also under a cluster executor (--profile
# profiles/slurm), since a job submission would cost more than they do. fetch, download and tokenizer reach the
# network (URLs, the hub), which compute nodes often cannot; so do fetch_gguf, dequantise (a GGUF file of a hub
# repo) and fetch_model. Per rule, not a `localrules:` list: a list keeps the names as written, which an importing
# workflow's `use rule * from perturbed_lm as plm_*` renames (snakemake --lint on tests/module/workflow says so).


# ---- input functions: workflow_lib/inputs.py (plain functions of the config, tested without Snakemake) -----
inputs = Inputs(config, Path.cwd())

# The outputs of the GPU rules (workflow_lib/layout.py's layouts with the rules' wildcards), which also key their
# predicted cost (predicted_runtime, predicted_mem).
MODEL_OUTPUT = run_template("models")
SAMPLES_OUTPUT = evaluation_template("samples")
SHARD_OUTPUT = shard_template("samples")
METRICS_OUTPUT = evaluation_template("metrics")
SAMPLE_FEATURES_OUTPUT = evaluation_template("metrics", ".features.parquet")
PERPLEXITY_OUTPUT = run_template("perplexity")
LM_EVAL_OUTPUT = run_template("lm_eval")


def harness_include(config):
    """The lm_eval job's --include-path (evaluation.lm_eval.include_path), as words; none without one. Its files
    are the job's inputs (inputs.lm_eval): an edited task reruns the harness."""
    folder = config["evaluation"]["lm_eval"]["include_path"]
    return ["--include-path", folder] if folder else []


EXTRAPOLATION_OUTPUT = evaluation_template("extrapolation")
