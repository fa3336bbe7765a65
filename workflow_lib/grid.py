"""The experiment grid: which conditions a config asks for, and the output paths that name them.

Experiment identity lives in output paths, so this module is where a condition becomes a path. It is
used by rules/common.smk (targets, wildcard values) and by tests that recount the jobs a config plans.
Standard library only: it runs at Snakefile parse time.
"""

from __future__ import annotations

import itertools
import os
from dataclasses import dataclass


def featuriser_id(name: str) -> str:
    """A path-safe name for the featuriser `evaluation.featuriser` (a local folder is named by its last component):
    the `featuriser` wildcard of results/features/."""
    return name if name in ("minilm", "gpt2-large") else f"local-{os.path.basename(os.path.normpath(name))}"


def fmt_intensity(x: float) -> str:
    """Plain decimal, shortest exact form: 0.025 -> '0.025', 0 -> '0', 1e-05 -> '0.00001'."""
    text = f"{x:.12f}".rstrip("0").rstrip(".")
    return text or "0"


@dataclass(frozen=True, order=True)
class TrainCondition:
    """One training-data perturbation. Intensity 0 is the baseline, one condition whatever the strategy."""

    synonyms: str
    mode: str
    copies: int
    strategy: str
    intensity: str

    @property
    def path(self) -> str:
        return f"{self.synonyms}/{self.mode}-m{self.copies}/{self.strategy}-{self.intensity}"

    @property
    def is_baseline(self) -> bool:
        return float(self.intensity) == 0.0


def train_conditions(experiment: dict) -> list[TrainCondition]:
    grid = experiment.get("train_perturbation", {})
    out = set()
    for strategy, intensity, synonyms, mode in itertools.product(
        grid.get("strategies", ["insertion"]),
        grid.get("intensities", [0]),
        grid.get("synonyms", ["distributional"]),
        grid.get("modes", ["augment"]),
    ):
        if float(intensity) == 0.0:
            strategy, synonyms = "none", "none"
        out.add(TrainCondition(synonyms, mode, grid.get("copies", 1), strategy, fmt_intensity(intensity)))
    return sorted(out)


def perturbed_path(tokenizer: str, dataset: str, cond: TrainCondition, seed: int) -> str:
    return f"results/perturbed/{tokenizer}/{dataset}/{cond.path}/seed{seed}.parquet"


def synonym_path(tokenizer: str, dataset: str, source: str) -> str:
    return f"results/synonyms/{tokenizer}/{dataset}/{source}.parquet"


UNTRAINED = "untrained"  # config.UNTRAINED: evaluated as it is, with the baseline condition's path and no training


def trained_objectives(experiment: dict) -> list[str]:
    return [o for o in experiment.get("objectives", ["mle"]) if o != UNTRAINED]


def model_runs(experiment: dict) -> list[tuple[str, str, TrainCondition, int]]:
    """(model, objective, train condition, seed) of every model an experiment evaluates: each trained objective
    under every training condition, and an untrained model once, under the baseline condition's name."""
    baseline = TrainCondition("none", "augment", 1, "none", "0")
    out = []
    for model, objective, seed in itertools.product(
        experiment["models"], experiment.get("objectives", ["mle"]), experiment["seeds"]
    ):
        for cond in [baseline] if objective == UNTRAINED else train_conditions(experiment):
            out.append((model, objective, cond, seed))
    return out


def perturbed_targets(config: dict) -> list[str]:
    out = set()
    for exp in config["experiments"].values():
        if not trained_objectives(exp):
            continue
        for model, cond, seed in itertools.product(exp["models"], train_conditions(exp), exp["seeds"]):
            out.add(perturbed_path(config["models"][model]["tokenizer"], exp["train_dataset"], cond, seed))
    return sorted(out)


def synonym_targets(config: dict) -> list[str]:
    out = set()
    for exp in config["experiments"].values():
        for model in exp["models"]:
            tokenizer = config["models"][model]["tokenizer"]
            for axis in ("train_perturbation", "test_perturbation"):
                grid = exp.get(axis, {})
                if any(float(i) > 0 for i in grid.get("intensities", [0])):
                    for source in grid.get("synonyms", ["distributional"]):
                        out.add(synonym_path(tokenizer, exp["train_dataset"], source))
    return sorted(out)


def model_path(model: str, dataset: str, objective: str, cond: TrainCondition, seed: int) -> str:
    return f"results/models/{model}/{dataset}/{objective}/{cond.path}/seed{seed}"


def model_targets(config: dict) -> list[str]:
    """The model folders training writes (an untrained model has none)."""
    out = set()
    for exp in config["experiments"].values():
        for model, objective, cond, seed in model_runs(exp):
            if objective != UNTRAINED:
                out.add(model_path(model, exp["train_dataset"], objective, cond, seed))
    return sorted(out)


def curve_inputs(config: dict, model: str, dataset: str) -> list[str]:
    """The trained model folders of one (model, dataset): one training-curves figure shows them all."""
    return [m for m in model_targets(config) if m.split("/")[2:4] == [model, dataset]]


def curve_targets(config: dict) -> list[str]:
    """One training-curves figure per (model, dataset) that trains."""
    pairs = {tuple(m.split("/")[2:4]) for m in model_targets(config)}
    return sorted(f"results/report/figures/training/{model}/{dataset}.png" for model, dataset in pairs)


@dataclass(frozen=True, order=True)
class SamplingCondition:
    """One way of sampling: a decoder and a sampling-time perturbation (intensity 0 is the decoder alone)."""

    decoder: str
    synonyms: str
    strategy: str
    intensity: str
    mode: str

    @property
    def path(self) -> str:
        return f"{self.decoder}/{self.synonyms}/{self.strategy}-{self.intensity}-{self.mode}"


def sampling_conditions(experiment: dict) -> list[SamplingCondition]:
    """Every decoder with every test perturbation: the perturbation draws are keyed by (prompt, run, step), so
    two decoders of one (prompt, run) share them."""
    grid = experiment.get("test_perturbation", {})
    out = set()
    for decoder, strategy, intensity, synonyms, mode in itertools.product(
        experiment.get("decoders", ["unbiased"]),
        grid.get("strategies", ["insertion"]),
        grid.get("intensities", [0]),
        grid.get("synonyms", ["distributional"]),
        grid.get("modes", ["exact"]),
    ):
        if float(intensity) == 0.0:
            strategy, synonyms, mode = "none", "none", "exact"
        out.add(SamplingCondition(decoder, synonyms, strategy, fmt_intensity(intensity), mode))
    return sorted(out)


def evaluation_runs(config: dict) -> list[tuple[str, str, SamplingCondition]]:
    """(model folder, eval set, sampling condition) for every evaluation the config asks for; an untrained
    model's folder is a name only (its samples come from the pretrained checkpoint)."""
    out = set()
    for exp in config["experiments"].values():
        for model, objective, cond, seed in model_runs(exp):
            for eval_set, test in itertools.product(exp["eval_sets"], sampling_conditions(exp)):
                out.add((model_path(model, exp["train_dataset"], objective, cond, seed), eval_set, test))
    return sorted(out)


def perplexity_jobs(config: dict) -> dict[str, list[str]]:
    """{perplexity folder: its eval sets}: one job per evaluated model scores the human text of every eval set the
    model is evaluated on (loading the model once), into <folder>/<eval set>.json and .prompts.parquet."""
    jobs: dict[str, set[str]] = {}
    for model_dir, eval_set, _ in evaluation_runs(config):
        jobs.setdefault(model_dir.replace("results/models/", "results/perplexity/", 1), set()).add(eval_set)
    return {folder: sorted(sets) for folder, sets in sorted(jobs.items())}


def perplexity_targets(config: dict) -> list[str]:
    """Perplexity of every evaluated model on every eval set's human text (one per model, not per sampling): the
    JSON files inside the perplexity folders."""
    return sorted(f"{folder}/{es}.json" for folder, sets in perplexity_jobs(config).items() for es in sets)


def sample_path(model_dir: str, eval_set: str, test: SamplingCondition) -> str:
    return f"{model_dir.replace('results/models/', 'results/samples/', 1)}/{eval_set}/{test.path}.parquet"


def metrics_path(model_dir: str, eval_set: str, test: SamplingCondition) -> str:
    return f"{model_dir.replace('results/models/', 'results/metrics/', 1)}/{eval_set}/{test.path}.json"


def metric_targets(config: dict) -> list[str]:
    return sorted({metrics_path(*run) for run in evaluation_runs(config)})


def extrapolation_targets(config: dict) -> list[str]:
    """The exact TV evaluation, for eval sets of a builtin dataset."""
    out = set()
    for model_dir, eval_set, test in evaluation_runs(config):
        if config["datasets"][config["eval_sets"][eval_set]["dataset"]]["source"] == "builtin":
            out.add(f"{model_dir.replace('results/models/', 'results/extrapolation/', 1)}/{eval_set}/{test.path}.json")
    return sorted(out)


def report_figures(config: dict) -> list[str]:
    """The figures this configuration has data for."""
    figures = set()
    same_at_training_and_sampling = set()  # positive intensities, over all experiments (a sweep may be several)
    for exp in config["experiments"].values():
        train = [float(x) for x in exp.get("train_perturbation", {}).get("intensities", [0])]
        test = [float(x) for x in exp.get("test_perturbation", {}).get("intensities", [0])]
        if 0 in train and 0 in test and any(train) and any(test):
            figures.add("ablation")
        same_at_training_and_sampling |= {x for x in train if x > 0} & {x for x in test if x > 0}
        if len(same_at_training_and_sampling) >= 2:
            figures.add("intensity")
        if any(
            config["datasets"][config["eval_sets"][es]["dataset"]]["source"] == "builtin" for es in exp["eval_sets"]
        ):
            figures.add("extrapolation")
    return sorted(figures)


def example_inputs(config: dict) -> tuple[str, list[str]]:
    """The eval set of the example-generations table (the first experiment's first) and its sample files."""
    eval_set = next(iter(config["experiments"].values()))["eval_sets"][0]
    samples = sorted({sample_path(m, es, t) for m, es, t in evaluation_runs(config) if es == eval_set})
    return eval_set, samples


def lab_models(experiment: dict) -> list[tuple[str, str, TrainCondition, int]]:
    """The theory lab's group: an experiment's trained models (every model, objective and seed)."""
    return [run for run in model_runs(experiment) if run[1] != UNTRAINED]


def lab_law_path(model_dir: str) -> str:
    """Where the lab writes one model's next-word laws: results/lab/laws/<model>/<dataset>/<objective>/...npz."""
    return model_dir.replace("results/models/", "results/lab/laws/", 1) + ".npz"


def lab_inputs(config: dict, experiment: str) -> dict:
    """The lab job of one experiment: its prefix sets and the laws of every model of its group."""
    exp = config["experiments"][experiment]
    laws = [lab_law_path(model_path(m, exp["train_dataset"], o, c, s)) for m, o, c, s in lab_models(exp)]
    return {"prefixes": f"results/lab/sets/{exp['train_dataset']}.parquet", "laws": sorted(laws)}


def lab_targets(config: dict) -> list[str]:
    return [
        f"results/lab/{name}/{f}"
        for name in config.get("lab", {}).get("experiments", [])
        for f in ("uncertainty.csv", "premise.csv", "uncertainty.md", "figure.png", "figure.pdf")
    ]
