"""The experiment grid: which conditions a config asks for, and the target paths of the study.

The conditions and their paths are workflow_lib/layout.py's (the only code that writes or reads a result path);
this module says which of them a config asks for. It is used by rules/common.smk (targets, wildcard values), the
cost model (every job) and tests that recount the jobs a config plans. Standard library only: it runs at
Snakefile parse time.
"""

from __future__ import annotations

import itertools

from workflow_lib.constants import BUILTIN_SPLITS, SYNONYMS_FROM_TOKENS, UNTRAINED
from workflow_lib.featuriser import Featuriser
from workflow_lib.layout import (
    ABLATION_FIGURE,
    BASELINE,
    CONTROLS,
    DATA,
    EXTRAPOLATION_FIGURE,
    INTENSITY_FIGURE,
    LAB,
    LAB_SET,
    NO_STRATEGY,
    PLANTED,
    REPORT,
    REPORT_FIGURE,
    REPORT_TABLE,
    SCORED,
    SIMULATION,
    SIMULATION_FIT,
    SUMMARY,
    TRACKED,
    TRAINING_FIGURE,
    Evaluation,
    ModelRun,
    SamplingCondition,
    TrainCondition,
    fmt_intensity,
    lab_law_path,
    perturbed_path,
    prompts_path,
    scored_path,
    synonym_path,
    tokenizer_path,
    tokens_path,
)
from workflow_lib.perturb.strategies import get as get_strategy
from workflow_lib.sample.modes import DEFAULT as DEFAULT_MODE


def dataset_splits(dataset: dict) -> list[str]:
    """The split names a dataset offers, whatever its source."""
    source = dataset["source"]
    if source == "builtin":
        held = dataset.get("builtin", {}).get("context_fraction", 0) > 0  # data/builtin_corpus.py: the `reach` split
        return [s for s in BUILTIN_SPLITS if held or s != "reach"]
    if source == "hf":
        return list(dataset.get("splits", {}))
    return list(dataset.get("files", {}))


def train_conditions(experiment: dict) -> list[TrainCondition]:
    """An experiment's training conditions (of a validated config: the schema's defaults filled by `normalise`)."""
    grid = experiment["train_perturbation"]
    out = set()
    for strategy, intensity, synonyms, mode in itertools.product(
        grid["strategies"], grid["intensities"], grid["synonyms"], grid["modes"]
    ):
        if float(intensity) == 0.0:
            strategy, synonyms = NO_STRATEGY, NO_STRATEGY
        elif get_strategy(strategy).in_embeddings:  # no synonym table: one condition, whatever the grid's sources
            synonyms = NO_STRATEGY
        out.add(TrainCondition(synonyms, mode, grid["copies"], strategy, fmt_intensity(intensity)))
    return sorted(out)


def trained_objectives(experiment: dict) -> list[str]:
    return [o for o in experiment["objectives"] if o != UNTRAINED]


def model_runs(experiment: dict) -> list[ModelRun]:
    """Every model an experiment evaluates: each trained objective under every training condition, and an
    untrained model once, under the baseline condition's name."""
    out = []
    for model, objective, seed in itertools.product(
        experiment["models"], experiment["objectives"], experiment["seeds"]
    ):
        for cond in [BASELINE] if objective == UNTRAINED else train_conditions(experiment):
            out.append(ModelRun(model, experiment["train_dataset"], objective, cond, seed))
    return out


def perturbed_targets(config: dict) -> list[str]:
    out = set()
    for exp in config["experiments"].values():
        if not trained_objectives(exp):
            continue
        for model, cond, seed in itertools.product(exp["models"], train_conditions(exp), exp["seeds"]):
            out.add(perturbed_path(config["models"][model]["tokenizer"], exp["train_dataset"], cond, seed))
    return sorted(out)


def synonym_tables(config: dict) -> list[tuple[str, str, str]]:
    """The (tokenizer, dataset, source) of every synonym table the study's perturbations draw from."""
    out: set[tuple[str, str, str]] = set()
    for exp in config["experiments"].values():
        for model in exp["models"]:
            tokenizer = config["models"][model]["tokenizer"]
            # the conditions' own sources: none at intensity 0, nor for a strategy of the embedding space
            sources = {c.synonyms for c in train_conditions(exp)} | {c.synonyms for c in sampling_conditions(exp)}
            out.update((tokenizer, exp["train_dataset"], source) for source in sources - {NO_STRATEGY})
    return sorted(out)


def synonym_targets(config: dict) -> list[str]:
    return [synonym_path(*table) for table in synonym_tables(config)]


def synonym_audit_tables(config: dict) -> list[tuple[str, str, str | None]]:
    """Each synonym table with its tokenizer's folder and the training tokens its audit counts (the share of them
    that have a synonym): the train split's tokens where the study tokenizes them anyway (it trains on them, or the
    source learns from them), else None, so that the audit adds no tokenization (a zero-shot study's table)."""
    built = set(token_targets(config))
    out = []
    for tokenizer, dataset, source in synonym_tables(config):
        tokens = tokens_path(tokenizer, dataset, "train")
        counted = tokens if tokens in built or source in SYNONYMS_FROM_TOKENS else None
        out.append((synonym_path(tokenizer, dataset, source), tokenizer_path(tokenizer), counted))
    return out


def trained_runs(config: dict) -> list[ModelRun]:
    """The model runs training writes (an untrained model has none), once each."""
    runs = {run for exp in config["experiments"].values() for run in model_runs(exp) if run.objective != UNTRAINED}
    return sorted(runs, key=lambda run: run.folder())


def model_targets(config: dict) -> list[str]:
    """The model folders training writes."""
    return [run.folder() for run in trained_runs(config)]


def curve_inputs(config: dict, model: str, dataset: str) -> list[str]:
    """The trained model folders of one (model, dataset): one training-curves figure shows them all."""
    return [run.folder() for run in trained_runs(config) if (run.model, run.dataset) == (model, dataset)]


def curve_pairs(config: dict) -> list[tuple[str, str]]:
    """The (model, dataset) pairs that train: one training-curves figure each."""
    return sorted({(run.model, run.dataset) for run in trained_runs(config)})


def curve_targets(config: dict) -> list[str]:
    """One training-curves figure per (model, dataset) that trains."""
    return [TRAINING_FIGURE.format(model=model, dataset=dataset, ext="png") for model, dataset in curve_pairs(config)]


def sampling_conditions(experiment: dict) -> list[SamplingCondition]:
    """Every decoder with every test perturbation: the perturbation draws are keyed by (prompt, run, step), so
    two decoders of one (prompt, run) share them."""
    grid = experiment["test_perturbation"]
    out = set()
    for decoder, strategy, intensity, synonyms, mode in itertools.product(
        experiment["decoders"], grid["strategies"], grid["intensities"], grid["synonyms"], grid["modes"]
    ):
        if float(intensity) == 0.0:  # the unperturbed law: one condition, whatever the grid's strategy and mode
            strategy, synonyms, mode = NO_STRATEGY, NO_STRATEGY, DEFAULT_MODE
        elif get_strategy(strategy).in_embeddings:
            synonyms = NO_STRATEGY
        out.add(SamplingCondition(decoder, synonyms, strategy, fmt_intensity(intensity), mode))
    return sorted(out)


def evaluation_runs(config: dict) -> list[Evaluation]:
    """Every evaluation the config asks for, once each; an untrained model's folder is a name only (its samples
    come from the pretrained checkpoint)."""
    out = set()
    for exp in config["experiments"].values():
        for run in model_runs(exp):
            for eval_set, test in itertools.product(exp["eval_sets"], sampling_conditions(exp)):
                out.add(Evaluation(run, eval_set, test))
    return sorted(out, key=lambda ev: (ev.run.folder(), ev.eval_set, ev.test))


def perplexity_jobs(config: dict) -> dict[str, list[str]]:
    """{perplexity folder: its eval sets}: one job per evaluated model scores the human text of every eval set the
    model is evaluated on (loading the model once), into <folder>/<eval set>.json and .prompts.parquet."""
    jobs: dict[str, set[str]] = {}
    for ev in evaluation_runs(config):
        jobs.setdefault(ev.run.folder("perplexity"), set()).add(ev.eval_set)
    return {folder: sorted(sets) for folder, sets in sorted(jobs.items())}


def perplexity_targets(config: dict) -> list[str]:
    """Perplexity of every evaluated model on every eval set's human text (one per model, not per sampling): the
    JSON files inside the perplexity folders."""
    runs = {(ev.run, ev.eval_set) for ev in evaluation_runs(config)}
    return sorted(scored_path(run, eval_set) for run, eval_set in runs)


def lm_eval_eval_sets(config: dict) -> dict[str, list[str]]:
    """{lm_eval folder: the eval sets its job scores as tasks of their own} (evaluation.lm_eval.eval_sets: each
    eval set its model is evaluated on; none without it)."""
    if not config["evaluation"]["lm_eval"]["eval_sets"]:
        return {}
    jobs: dict[str, set[str]] = {}
    for ev in evaluation_runs(config):
        jobs.setdefault(ev.run.folder("lm_eval"), set()).add(ev.eval_set)
    return {folder: sorted(sets) for folder, sets in sorted(jobs.items())}


def lm_eval_jobs(config: dict) -> dict[str, list[str]]:
    """{lm_eval folder: its tasks}: the lm-evaluation-harness (evaluation.lm_eval) on every evaluated model, trained
    and untrained, one job per model: the config's tasks, then its eval sets' own; none when it names neither."""
    tasks = sorted(config["evaluation"]["lm_eval"]["tasks"])
    own = lm_eval_eval_sets(config)
    if not tasks and not own:
        return {}
    folders = sorted({ev.run.folder("lm_eval") for ev in evaluation_runs(config)})
    return {folder: tasks + own.get(folder, []) for folder in folders}


def lm_eval_targets(config: dict) -> list[str]:
    """Each lm_eval job's task JSON files (its folder's <task>.json)."""
    return sorted(
        SCORED.format(run=f, eval_set=t, suffix=".json") for f, ts in lm_eval_jobs(config).items() for t in ts
    )


def metric_targets(config: dict) -> list[str]:
    return sorted({ev.path("metrics") for ev in evaluation_runs(config)})


def planted_source(config: dict, eval_set: str) -> str | None:
    """The eval set whose words the planted control mixes into `eval_set`'s human text: the next evaluated eval set
    in name order (cyclic); None where the study evaluates one eval set, or planted_fraction is 0."""
    names = sorted({ev.eval_set for ev in evaluation_runs(config)})
    if len(names) < 2 or eval_set not in names or not config["evaluation"]["mauve"]["controls"]["planted_fraction"]:
        return None
    return names[(names.index(eval_set) + 1) % len(names)]


def planted_targets(config: dict) -> list[str]:
    """MAUVE's planted control (report/planted.py) of every evaluated eval set that has a source eval set for its
    mixture (`planted_source`: a study with one eval set, or planted_fraction 0, has none)."""
    featuriser = Featuriser.from_config(config).id
    names = sorted({ev.eval_set for ev in evaluation_runs(config)})
    return [PLANTED.format(featuriser=featuriser, eval_set=e) for e in names if planted_source(config, e)]


def control_targets(config: dict) -> list[str]:
    """MAUVE's controls (their scores and verdict) of every evaluated eval set, under the study's featuriser."""
    featuriser = Featuriser.from_config(config).id
    return sorted({CONTROLS.format(featuriser=featuriser, eval_set=ev.eval_set) for ev in evaluation_runs(config)})


def extrapolation_targets(config: dict) -> list[str]:
    """The exact TV evaluation, for eval sets of a builtin dataset."""
    out = set()
    for ev in evaluation_runs(config):
        if config["datasets"][config["eval_sets"][ev.eval_set]["dataset"]]["source"] == "builtin":
            out.add(ev.path("extrapolation"))
    return sorted(out)


def report_figures(config: dict) -> list[str]:
    """The figures this configuration has data for."""
    figures = set()
    same_at_training_and_sampling = set()  # positive intensities, over all experiments (a sweep may be several)
    for exp in config["experiments"].values():
        train = [float(x) for x in exp["train_perturbation"]["intensities"]]
        test = [float(x) for x in exp["test_perturbation"]["intensities"]]
        if 0 in train and 0 in test and any(train) and any(test):
            figures.add(ABLATION_FIGURE)
        same_at_training_and_sampling |= {x for x in train if x > 0} & {x for x in test if x > 0}
        if len(same_at_training_and_sampling) >= 2:
            figures.add(INTENSITY_FIGURE)
        if any(
            config["datasets"][config["eval_sets"][es]["dataset"]]["source"] == "builtin" for es in exp["eval_sets"]
        ):
            figures.add(EXTRAPOLATION_FIGURE)
    return sorted(figures)


def example_inputs(config: dict) -> tuple[str, list[str]]:
    """The eval set of the example-generations table (the first experiment's first) and its sample files."""
    eval_set = next(iter(config["experiments"].values()))["eval_sets"][0]
    samples = sorted({ev.path("samples") for ev in evaluation_runs(config) if ev.eval_set == eval_set})
    return eval_set, samples


def lab_models(experiment: dict) -> list[ModelRun]:
    """The theory lab's group: an experiment's trained models (every model, objective and seed)."""
    return [run for run in model_runs(experiment) if run.objective != UNTRAINED]


def lab_inputs(config: dict, experiment: str) -> dict:
    """The lab job of one experiment: its prefix sets and the laws of every model of its group."""
    exp = config["experiments"][experiment]
    laws = [lab_law_path(run) for run in lab_models(exp)]
    return {"prefixes": LAB_SET.format(dataset=exp["train_dataset"]), "laws": sorted(laws)}


def lab_targets(config: dict) -> list[str]:
    return [
        LAB.format(experiment=name, file=f)
        for name in config.get("lab", {}).get("experiments", [])
        for f in ("uncertainty.csv", "premise.csv", "uncertainty.md", "figure.png", "figure.pdf")
    ]


# ---- the study's targets (rules/common.smk: rule all) -------------------------------------------------------

REPORT_TABLES = ["table1", "metrics", "emo_brier", "strategies", "ablation", "controls"]
LM_EVAL_TABLE = "lm_eval"  # the lm-evaluation-harness's scores and contrasts (report/harness.py), when a study runs it


def token_targets(config: dict) -> list[str]:
    out = set()
    for exp in config["experiments"].values():
        if not trained_objectives(exp):  # untrained models only: nothing is trained on the train dataset
            continue
        splits = dataset_splits(config["datasets"][exp["train_dataset"]])
        for model in exp["models"]:
            tokenizer = config["models"][model]["tokenizer"]
            for split in config["tokenize"]["splits"]:
                if split in splits:
                    out.add(tokens_path(tokenizer, exp["train_dataset"], split))
    return sorted(out)


def data_records(config: dict) -> list[str]:
    """The records of every split the study reads (train data and eval sets): the summary lists their sources."""
    out: set[str] = set()
    eval_sets = config["eval_sets"]
    for exp in config["experiments"].values():
        dataset = exp["train_dataset"]
        splits = dataset_splits(config["datasets"][dataset]) if trained_objectives(exp) else []
        out.update(DATA.format(dataset=dataset, split=s) + ".json" for s in config["tokenize"]["splits"] if s in splits)
        out.update(DATA.format(**eval_sets[es]) + ".json" for es in exp["eval_sets"])
    return sorted(out)


def prompt_targets(config: dict) -> list[str]:
    return sorted({prompts_path(es) for exp in config["experiments"].values() for es in exp["eval_sets"]})


def simulation_fits(config: dict) -> list[str]:
    return [SIMULATION_FIT.format(vocab=v) for v in sorted(config["simulation"]["vocab_sizes"])]


def simulation_targets(config: dict) -> list[str]:
    if not config["simulation"]["enabled"]:
        return []
    files = ("summary.csv", "summary.md", "tests.csv", "conclusions.md", "figure.png", "figure.pdf")
    return [SIMULATION.format(file=f) for f in files]


def simulation_summary_input(config: dict) -> list[str]:
    """The tables rule's `simulation` input: the simulation summary, which results/summary.md includes."""
    return [SIMULATION.format(file="summary.md")] if config["simulation"]["enabled"] else []


def report_targets(config: dict) -> list[str]:
    tables = [REPORT_TABLE.format(table=t, ext="md") for t in [*REPORT_TABLES, "examples", "synonyms", "variance"]]
    figures = [REPORT_FIGURE.format(figure=f, ext="png") for f in report_figures(config)]
    contrasts = REPORT.format(file="contrasts.csv")
    tracked = [TRACKED] if config["report"]["report_to"] else []  # the results in the trackers (report.trackers)
    harness = [REPORT_TABLE.format(table=LM_EVAL_TABLE, ext="md")] if lm_eval_jobs(config) else []
    return [SUMMARY, contrasts, *tables, *figures, *curve_targets(config), *tracked, *harness]


def all_targets(config: dict) -> list[str]:
    """Every file `snakemake` (rule all) builds for a config."""
    return (
        token_targets(config)
        + prompt_targets(config)
        + synonym_targets(config)
        + perturbed_targets(config)
        + model_targets(config)
        + metric_targets(config)
        + extrapolation_targets(config)
        + list(perplexity_jobs(config))
        + list(lm_eval_jobs(config))
        + report_targets(config)
        + simulation_targets(config)
        + lab_targets(config)
    )
