import json
import os
import re
import sys
from pathlib import Path

# Rules run `python -m workflow_lib...`: make it the interpreter (and package) that runs snakemake, unless a
# job's conda environment puts its own first (--sdm conda); PYTHONPATH finds this checkout's workflow_lib from
# any interpreter, installed (pip install -e) or not.
sys.path.insert(0, workflow.basedir)
os.environ.update(PATH=os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")]))
if workflow.basedir not in os.environ.get("PYTHONPATH", "").split(os.pathsep):
    os.environ.update(PYTHONPATH=os.pathsep.join(filter(None, [workflow.basedir, os.environ.get("PYTHONPATH")])))

from snakemake.utils import update_config

from workflow_lib.constants import NO_TRAIN_DATASET, UNTRAINED
from workflow_lib.cost.devices import check_cost
from workflow_lib.config import (
    ConfigError,
    embedding_model,
    local_files,
    typed_overrides,
    validate_config,
)
from workflow_lib.data.downloads import archive_path, fetched, split_paths, unpacked_dir
from workflow_lib.layout import (
    NO_STRATEGY,
    SYNONYMS,
    evaluation_of,
    evaluation_template,
    perturbed_path,
    perturbed_template,
    run_of,
    run_template,
    synonym_path,
    train_condition_of,
)
from workflow_lib.pretrained import GGUF_DOWNLOAD, PRETRAINED_DIR, gguf_file, gguf_models, gguf_settings
from workflow_lib.data.downloads import members as archive_members
from workflow_lib.grid import (
    REPORT_TABLES,
    all_targets,
    curve_inputs,
    data_records,
    dataset_splits,
    example_inputs,
    extrapolation_targets,
    featuriser_id as grid_featuriser_id,
    lab_inputs,
    lab_targets,
    metric_targets,
    model_targets,
    perplexity_jobs,
    perplexity_targets,
    simulation_fits,
    simulation_summary_input,
)

# A rule's `code` param, code_digest("workflow_lib.<stage>.<module>"): the sha256 of the files `python -m <module>`
# runs (found by a static import scan), compared by value: an edit reruns the rule's jobs, a clone, move or touch does not.
from workflow_lib.module_deps import code_digest
from workflow_lib.files import write_argument_file
from workflow_lib.report.contrasts import designed_mauve
from workflow_lib.evaluate.metrics import mauve_never_resolves
from workflow_lib.report.joint_mauve import features_sidecar
from workflow_lib.report.tables import report_view
from workflow_lib.cost.slurm import mem_mb as predicted_mem_mb, runtime_minutes as predicted_minutes
from workflow_lib.train.tracking import ENV as TRACKING_ENV
from workflow_lib.data.settings import prompt_cap, prompt_settings
from workflow_lib.perturb.settings import perturb_settings, synonym_settings
from workflow_lib.train.settings import launcher, tracking_settings, training_processes, training_settings
from workflow_lib.sample.settings import decoder_settings, sampling_settings, test_perturbation
from workflow_lib.evaluate.settings import evaluation_settings, extrapolation_settings, perplexity_settings
from workflow_lib.lab.settings import lab_settings
from workflow_lib.report.settings import report_settings
from workflow_lib.simulation.settings import simulation_settings
from workflow_lib.perturb.strategies import wildcard_pattern as strategy_wildcards

# Nested `--config` values arrive as strings (`--config 'sampling={runs: 5}'`): typed before validation.
update_config(config, typed_overrides(workflow.config_settings.config))
try:
    validate_config(config, workdir=Path.cwd())
    check_cost(config["cost"])
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
    dataset=_names([*DATASETS, NO_TRAIN_DATASET]),  # none: a zero-shot experiment without a train dataset
    file=_names({name for d in DATASETS.values() if d["source"] == "url" for name in fetched(d)}),
    split=_names({s for d in DATASETS.values() for s in dataset_splits(d)}),
    tokenizer=_names(TOKENIZERS),
    eval_set=_names(EVAL_SETS),
    model=_names(MODELS),
    gguf_model=_names(gguf_models(config)),
    objective=_names([*config["objectives"], UNTRAINED]),
    decoder=_names(config["decoders"]),
    synonyms="embedding|distributional|uniform|oracle",
    train_synonyms="embedding|distributional|uniform|oracle|none",
    train_mode="augment|prefix",
    train_strategy=strategy_wildcards(),
    train_intensity=r"[0-9]+(\.[0-9]+)?",
    copies=r"[0-9]+",
    seed=r"[0-9]+",
    test_synonyms="embedding|distributional|uniform|oracle|none",
    test_strategy=strategy_wildcards(),
    test_intensity=r"[0-9]+(\.[0-9]+)?",
    test_mode="exact|cached",
    featuriser=r"[A-Za-z0-9_.-]+",
    pair=r"[0-9a-f]{16}",
    figure="ablation|intensity|extrapolation",
    table="table1|emo_brier|strategies|ablation|examples",


def predicted_runtime(output):
    """A GPU rule's `runtime` (minutes): workflow_lib.cost's predicted time of the job writing `output` (the rule's
    output pattern) on cost.device (cost.cpu without a GPU), times cost.safety and the attempt (docs/cluster.md, "What a
    study costs"). SLURM's --time, through the profile; ignored by local runs."""
    return lambda wildcards, attempt: predicted_minutes(config, output.format(**dict(wildcards.items())), attempt)


def predicted_mem(output):
    """A GPU rule's host `mem_mb`: a base plus three float32 copies of its checkpoint, times the attempt."""
    return lambda wildcards, attempt: predicted_mem_mb(config, output.format(**dict(wildcards.items())), attempt)


def as_json(obj):
    """Params are passed to the CLI as JSON; sorted keys keep the string (and the rerun trigger) stable."""
    return json.dumps(obj, sort_keys=True)


# Cheap rules run where snakemake runs, also under a cluster executor (--profile profiles/slurm): a job
# submission would cost more than they do. fetch, download and tokenizer reach the network (URLs, the hub),
# which compute nodes often cannot; so do fetch_gguf and dequantise (a GGUF file of a hub repo).
localrules:
    all,
    fetch,
    fetch_gguf,
    dequantise,
    unpack,
    download,
    tokenizer,
    prompts,
    collect_metrics,
    contrasts,
    tables,
    figure,
    examples,
    training_curves,
    simulation_summary,
    lab_sets,
    lab,


# ---- input functions -------------------------------------------------------------------------------------


def download_inputs(wildcards):
    """A split's files; under recipe mixce every split's, since a top-up reads one split to build another."""
    ds = DATASETS[wildcards.dataset]
    splits = dataset_splits(ds) if ds["recipe"] == "mixce" else [wildcards.split]
    if ds["source"] == "local":
        return sorted({f for split in splits for f in local_files(ds, split)})
    if ds["source"] == "url":
        if ds.get("archive"):
            return [unpacked_dir(wildcards.dataset)]
        return sorted({f for split in splits for f in split_paths(wildcards.dataset, ds, split)})
    return []


def fetch_entry(wildcards):
    return fetched(DATASETS[wildcards.dataset])[wildcards.file]


def fetch_options(wildcards):
    entry = fetch_entry(wildcards)
    sha256 = f"--sha256 {entry['sha256']}" if entry.get("sha256") else ""
    return " ".join(filter(None, [sha256, f"--head-bytes {entry['head_bytes']}" if entry.get("head_bytes") else ""]))


def pretrained_input(model: str) -> dict:
    """A GGUF model's dequantised folder, as the input of a job that loads the pretrained checkpoint (the
    dequantise rule writes it); nothing for a hub id or a folder that is already there."""
    return {"pretrained": MODELS[model]["name"]} if MODELS[model].get("gguf") else {}


def gguf_inputs(wildcards):
    """The GGUF file the dequantise job reads: fetched, local or packaged (a hub repo's the job downloads)."""
    path = gguf_file(wildcards.gguf_model, MODELS[wildcards.gguf_model]["gguf"], Path.cwd())
    return {"gguf": path} if path else {}


def tokenizer_inputs(wildcards):
    tok = TOKENIZERS[wildcards.tokenizer]
    if tok["source"] == "model":
        return pretrained_input(tok["model"])
    return {"train": f"results/data/{tok['dataset']}/train.parquet"} if tok["source"] == "train" else {}


def prompts_inputs(wildcards):
    """The split's rows and its provenance record (whose files and format an error about too few rows names)."""
    es = EVAL_SETS[wildcards.eval_set]
    split = f"results/data/{es['dataset']}/{es['split']}"
    return {"data": f"{split}.parquet", "source": f"{split}.json"}


def synonym_inputs(wildcards):
    inputs = {"tokenizer": f"results/tokenizers/{wildcards.tokenizer}"}
    if wildcards.synonyms == "distributional":
        inputs["tokens"] = f"results/tokens/{wildcards.tokenizer}/{wildcards.dataset}/train.parquet"
    if wildcards.synonyms == "embedding":
        inputs.update(pretrained_input(embedding_model(config, wildcards.tokenizer)))
    return inputs


def perturb_inputs(wildcards):
    inputs = {
        "tokens": f"results/tokens/{wildcards.tokenizer}/{wildcards.dataset}/train.parquet",
        "tokenizer": f"results/tokenizers/{wildcards.tokenizer}",
    }
    cond = train_condition_of(wildcards)
    if cond.synonyms != NO_STRATEGY:
        inputs["synonyms"] = synonym_path(wildcards.tokenizer, wildcards.dataset, cond.synonyms)
    return inputs


def train_inputs(wildcards):
    tokenizer = MODELS[wildcards.model]["tokenizer"]
    inputs = {
        "train": perturbed_path(tokenizer, wildcards.dataset, train_condition_of(wildcards), wildcards.seed),
        "tokenizer": f"results/tokenizers/{tokenizer}",
        **pretrained_input(wildcards.model),
    }
    settings = training_settings(config, wildcards.model, wildcards.seed)
    if settings["validation"] and "validation" in dataset_splits(DATASETS[wildcards.dataset]):
        inputs["validation"] = f"results/tokens/{tokenizer}/{wildcards.dataset}/validation.parquet"
    return inputs


# The trackers reach the training jobs through the environment, not params: turning one on must not retrain a
# finished model (workflow_lib/train/tracking.py).
os.environ[TRACKING_ENV] = json.dumps(tracking_settings(config))


# The outputs of the GPU rules (workflow_lib/layout.py's layouts with the rules' wildcards), which also key their
# predicted cost (predicted_runtime, predicted_mem).
MODEL_OUTPUT = run_template("models")
SAMPLES_OUTPUT = evaluation_template("samples")
METRICS_OUTPUT = evaluation_template("metrics")
PERPLEXITY_OUTPUT = run_template("perplexity")
FEATURES_OUTPUT = "results/features/{featuriser}/{eval_set}.npy"
EXTRAPOLATION_OUTPUT = evaluation_template("extrapolation")


def featuriser_id():
    """A path-safe name for the featuriser (a local folder is named by its last component)."""
    return grid_featuriser_id(config["evaluation"]["featuriser"])


def model_source(wildcards):
    """What a job loads: the trained model's folder, or for an untrained model its checkpoint (hub id or folder)."""
    if wildcards.objective == UNTRAINED:
        return MODELS[wildcards.model]["name"]
    return run_of(wildcards).folder()


def model_input(wildcards):
    """The model as a job input, when it is a file: a trained folder, or an untrained model's local folder."""
    source = model_source(wildcards)
    built = wildcards.objective != UNTRAINED or MODELS[wildcards.model].get("gguf")  # a folder a rule writes
    return {"model": source} if built or os.path.isdir(source) else {}


def model_options(wildcards):
    """--model, and --revision for an untrained hub model pinned to one."""
    revision = MODELS[wildcards.model].get("revision") if wildcards.objective == UNTRAINED else None
    return f"--model {model_source(wildcards)}" + (f" --revision {revision}" if revision else "")


def sample_inputs(wildcards):
    inputs = {**model_input(wildcards), "prompts": f"results/prompts/{wildcards.eval_set}.parquet"}
    test = evaluation_of(wildcards).test
    if test.synonyms != NO_STRATEGY:
        inputs["synonyms"] = synonym_path(MODELS[wildcards.model]["tokenizer"], wildcards.dataset, test.synonyms)
    return inputs


PERPLEXITY_JOBS = perplexity_jobs(config)


def perplexity_eval_sets(wildcards) -> list[str]:
    """The eval sets one perplexity job scores: every one its model is evaluated on."""
    return PERPLEXITY_JOBS[run_of(wildcards).folder("perplexity")]


def perplexity_inputs(wildcards):
    return {
        **model_input(wildcards),
        "prompts": [f"results/prompts/{es}.parquet" for es in perplexity_eval_sets(wildcards)],
    }


# The designed MAUVE contrasts (pair id -> the pair, its identity and B), one mauve_contrast job each: each clusters
# the human text and both conditions' samples jointly (workflow_lib.report.joint_mauve). None on an eval set whose
# prompt cap is under MAUVE's floor (its cells are all "too few texts").
MAUVE_CONTRASTS = designed_mauve(
    metric_targets(config),
    config["report"]["intensity"],
    unresolvable=[e for e in EVAL_SETS if mauve_never_resolves(prompt_cap(config, e), config["evaluation"]["mauve"])],
)
MAUVE_CONTRAST_OUTPUT = "results/report/mauve/{pair}.json"


def mauve_contrast_targets():
    return [MAUVE_CONTRAST_OUTPUT.format(pair=p) for p in sorted(MAUVE_CONTRASTS)]


# The argument files of the gather jobs (rules/report.smk, argument_file): the paths each reads, in its order.
ARGUMENT_FILE = "results/report/args/{name}.txt"
ARGUMENT_LISTS = {
    "collect": metric_targets(config) + extrapolation_targets(config) + perplexity_targets(config),
    "contrasts": [*metric_targets(config), *perplexity_targets(config), "--mauve", *mauve_contrast_targets()],
    "tables": [
        *["--data", *data_records(config)],
        *["--lab", *[t for t in lab_targets(config) if t.endswith(".md")]],
        *["--models", *model_targets(config)],
    ],
    "examples": example_inputs(config)[1],
}


def argument_file(name):
    return ARGUMENT_FILE.format(name=name)


def mauve_contrast_inputs(wildcards):
    pair = MAUVE_CONTRASTS[wildcards.pair]
    return {
        "a": pair["path_a"],
        "b": pair["path_b"],
        "features_a": features_sidecar(pair["path_a"]),
        "features_b": features_sidecar(pair["path_b"]),
        "prompts": f"results/prompts/{pair['eval_set']}.parquet",
        "human": f"results/features/{featuriser_id()}/{pair['eval_set']}.npy",
    }


def training_curve_inputs(wildcards):
    return curve_inputs(config, wildcards.model, wildcards.dataset)
