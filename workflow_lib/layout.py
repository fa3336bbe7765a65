"""Where each result lives: the condition types, and the one map from a condition to its path and back.

A model run is (model, dataset, objective, training condition, seed); an evaluation is a model run on an eval set
under a sampling condition. Experiment identity lives in output paths, so this module is the only code that
writes a result path and the only code that reads one back:
- `ModelRun.folder(kind)`, `Evaluation.path(kind)`, `scored_path`, `perturbed_path` build paths from conditions;
- `run_template(kind)`, `evaluation_template(kind)`, ... are the rules' output templates (rules/common.smk), the
  same layouts with the rules' wildcards in place of values, and `run_of(wildcards)`, `evaluation_of(wildcards)`
  turn a job's wildcards back into its conditions;
- `parse(path)` reads a path back into a `Located` (kind, run, eval set, sampling condition, suffix), and refuses,
  with ValueError, a path it did not write. `Located.columns()` names each field as the report's tables do.
Every layout is one string below (`TRAIN`, `TEST`, `RUN`, ...): builders, templates and the parser's regular
expressions are all made from it, so a new field is added in one place. Standard library only: it runs at
Snakefile parse time.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from workflow_lib.constants import NAME, PAPER_STRATEGY

# The layouts. {kind} is the results folder of a kind of result (models, samples, metrics, ...).
TRAIN = "{synonyms}/{mode}-m{copies}/{strategy}-{intensity}"
TEST = "{decoder}/{synonyms}/{strategy}-{intensity}-{mode}"
RUN = "results/{kind}/{model}/{dataset}/{objective}/{train}/seed{seed}"
EVALUATION = "{run}/{eval_set}/{test}{suffix}"
SHARD = "{evaluation}.shards/{index}-of-{count}.parquet"  # one shard of a sampling job: {evaluation} is its samples
SCORED = "{run}/{eval_set}{suffix}"  # one model run on one eval set's human text (perplexity)
PERTURBED = "results/{kind}/{tokenizer}/{dataset}/{train}/seed{seed}{suffix}"  # kind: perturbed (logs/...)
SYNONYMS = "results/synonyms/{tokenizer}/{dataset}/{synonyms}.parquet"  # a synonym table: also the rule's template
# The data stages' layouts (also their rules' templates).
DATA = "results/data/{dataset}/{split}"  # .parquet, and its provenance record .json
TOKENIZER = "results/tokenizers/{tokenizer}"
TOKENS = "results/tokens/{tokenizer}/{dataset}/{split}.parquet"
PROMPTS = "results/prompts/{eval_set}.parquet"
FEATURES = "results/features/{featuriser}/{eval_set}.npy"  # an eval set's human text, featurised (MAUVE)
FEATURES_JOB = "features/{featuriser}/{eval_set}"  # the features job's log and benchmark (`log_path`, ...)
# MAUVE's controls (evaluate/controls.py): an eval set's control texts, their features, and their scores and verdict.
CONTROL_TEXTS = "results/controls/{eval_set}.texts.parquet"
CONTROL_FEATURES = "results/features/{featuriser}/{eval_set}.controls.parquet"
CONTROLS = "results/controls/{featuriser}/{eval_set}.json"
# MAUVE's planted control (report/planted.py): what size of gap an eval set's MAUVE contrasts can see.
PLANTED = "results/report/planted/{featuriser}/{eval_set}.json"
# The study's other products: the rules' outputs and the grid's targets are built from these strings (`filled` fills
# some fields and leaves the others as the rules' wildcards). A job's log and benchmark: `log_path`, `benchmark_path`.
# (A dataset's downloads live in data/downloads.py, beside the download job that reads them: a job that imported
# this module would rerun whenever the plan's layout changed.)
PROMPTS_RECORD = "results/prompts/{eval_set}.json"  # an eval set's prompts' provenance record, beside PROMPTS
SIMULATION_FIT = "results/simulation/V{vocab}.parquet"  # one vocabulary size's replications (Section 4)
SIMULATION = "results/simulation/{file}"  # the simulation's summary, tests, conclusions and figure
LAB_SET = "results/lab/sets/{dataset}.parquet"  # the theory lab's prefix sets of a builtin dataset
LAB = "results/lab/{experiment}/{file}"  # the theory lab's verdicts of an experiment
REPORT = "results/report/{file}"  # the report's tidy tables: metrics.csv, contrasts.csv
REPORT_TABLE = "results/report/tables/{table}.{ext}"
REPORT_FIGURE = "results/report/figures/{figure}.{ext}"
REPORT_FIGURES = ("ablation", "intensity", "extrapolation")  # the `figure` names: report/figures.py draws each
ABLATION_FIGURE, INTENSITY_FIGURE, EXTRAPOLATION_FIGURE = REPORT_FIGURES
TRAINING_FIGURE = "results/report/figures/training/{model}/{dataset}.{ext}"
SUMMARY = "results/summary.md"
REPORT_HTML = "results/report.html"  # `snakemake --report` writes it (make run does, after the study)
TRACKED = "results/report/tracked.json"  # the runs the report logged to the trackers (report.report_to)
REPORT_LANDING = "results/report/workflow.rst"  # the HTML report's first page, with the findings
ARGUMENT_FILE = "results/report/args/{name}.txt"  # a gather job's input paths, one a line (argparse's @file)
MAUVE_CONTRAST = "results/report/mauve/{pair}.json"  # one designed MAUVE contrast's result (report.joint_mauve)
LOG = "results/logs/{name}.log"
BENCHMARK = "results/benchmarks/{name}.tsv"
PRETRAINED_DIR = "results/pretrained/{model}"  # a GGUF model dequantised: the hub-style folder every later job loads
GGUF_DOWNLOAD = "results/downloads/gguf/{model}.gguf"  # a `url` GGUF file, as fetched (pretrained.py)
ESTIMATE = "results/estimate/{file}"  # `make estimate`'s tables (<device>.md, .csv) and calibration.json

# The results folders of each layout, and the suffix of the file each writes (a folder has none).
RUN_KINDS = {"models": "", "checkpoints": "", "perplexity": "", "lm_eval": "", "lab/laws": ".npz"}
EVALUATION_KINDS = {"samples": ".parquet", "metrics": ".json", "extrapolation": ".json"}
SCORED_KINDS = {"perplexity": ".json", "lm_eval": ".json"}
# The files of each layout: the main one, and those beside it (per-prompt and per-step sidecars, a sample's MAUVE
# features). A perplexity folder holds <eval set>.json and <eval set>.prompts.parquet; an lm_eval folder (the
# lm-evaluation-harness, evaluate/harness.py) <task>.json and <task>.prompts.parquet, its task in the eval set's place.
EVALUATION_SUFFIXES = (".parquet", ".json", ".prompts.parquet", ".curves.parquet", ".features.parquet")
SCORED_SUFFIXES = (".json", ".prompts.parquet")
RUN_SUFFIXES = ("", ".npz")

# Each field's one name: the rules' wildcard, the report's column and the parser's group. The training and the
# sampling condition share field names (synonyms, strategy, intensity, mode), not these.
TRAIN_NAMES = {"synonyms": "train_synonyms", "mode": "train_mode", "copies": "copies"}
TRAIN_NAMES |= {"strategy": "train_strategy", "intensity": "train_intensity"}
TEST_NAMES = {"decoder": "decoder", "synonyms": "test_synonyms", "strategy": "test_strategy"}
TEST_NAMES |= {"intensity": "test_intensity", "mode": "test_mode"}
SHARD_NAMES = {"index": "shard", "count": "shards"}
RUN_NAMES = ["model", "dataset", "objective", *TRAIN_NAMES.values(), "seed"]
EVALUATION_NAMES = [*RUN_NAMES, "eval_set", *TEST_NAMES.values()]

NUMBER = r"[0-9]+(?:\.[0-9]+)?"  # an intensity, as fmt_intensity writes it
INTEGER = r"[0-9]+"
MODE = r"[a-z]+"  # the schema's modes (augment, prefix; exact, cached): no '-', which ends a strategy's name


def fmt_intensity(x: float | str) -> str:
    """Plain decimal, shortest exact form: 0.025 -> '0.025', 0 -> '0', 1e-05 -> '0.00001'."""
    text = f"{float(x):.12f}".rstrip("0").rstrip(".")
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
        return TRAIN.format(**vars(self))

    @property
    def level(self) -> float:
        """The intensity as a number (the field is its text in the path)."""
        return float(self.intensity)

    @property
    def is_baseline(self) -> bool:
        return self.level == 0.0


BASELINE = TrainCondition("none", "augment", 1, "none", "0")  # an untrained model's condition
NO_STRATEGY = "none"  # the strategy (and synonyms) a condition of intensity 0 names


def applied_strategy(strategy: str) -> str:
    """The strategy a job is given: intensity 0 (`none`) perturbs nothing, whatever the strategy, so it runs the
    default one."""
    return PAPER_STRATEGY if strategy == NO_STRATEGY else strategy


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
        return TEST.format(**vars(self))

    @property
    def level(self) -> float:
        """The intensity as a number (the field is its text in the path)."""
        return float(self.intensity)

    @property
    def perturbed(self) -> bool:
        """Whether the prefix is perturbed at all (intensity 0 is the decoder alone, in every mode)."""
        return self.level > 0


@dataclass(frozen=True, order=True)
class Shard:
    """One of `count` sampling jobs of an evaluation, which together write its samples (index 0 .. count - 1).
    The rows of each come from `sample/shards.py` `shard_rows`: whole batches of the unsharded order."""

    index: int
    count: int

    def __post_init__(self):
        if not 0 <= self.index < self.count:
            raise ValueError(f"shard {self.index} of {self.count}: the index runs from 0 to count - 1")


@dataclass(frozen=True, order=True)
class ModelRun:
    """One model as a study trains (or, objective `untrained`, takes) it."""

    model: str
    dataset: str
    objective: str
    train: TrainCondition
    seed: int

    def folder(self, kind: str = "models") -> str:
        """The run's folder (or, for lab/laws, file stem) under results/<kind>/."""
        fields = {"model": self.model, "dataset": self.dataset, "objective": self.objective, "seed": self.seed}
        return RUN.format(kind=kind, train=self.train.path, **fields)


@dataclass(frozen=True, order=True)
class Evaluation:
    """One model run sampled on one eval set under one sampling condition."""

    run: ModelRun
    eval_set: str
    test: SamplingCondition

    def path(self, kind: str = "metrics", suffix: str | None = None) -> str:
        """The file of `kind` (samples, metrics, extrapolation); `suffix` names a file beside it."""
        return EVALUATION.format(
            run=self.run.folder(kind),
            eval_set=self.eval_set,
            test=self.test.path,
            suffix=EVALUATION_KINDS[kind] if suffix is None else suffix,
        )

    def shard_path(self, shard: Shard) -> str:
        """One shard of this evaluation's samples (the `sample` rule's output; `gather_samples` joins them)."""
        return shard_file(self.path("samples", ""), shard)

    def shards(self, count: int) -> list[str]:
        """The paths of this evaluation's samples in `count` shards, in order."""
        return [self.shard_path(Shard(index, count)) for index in range(count)]


def shard_file(evaluation: str, shard: Shard) -> str:
    return SHARD.format(evaluation=evaluation, index=shard.index, count=shard.count)


def scored_path(run: ModelRun, eval_set: str, suffix: str = ".json", kind: str = "perplexity") -> str:
    """One model run's perplexity on one eval set's human text, or (kind lm_eval) its scores on one
    lm-evaluation-harness task (each job writes a folder of these)."""
    return SCORED.format(run=run.folder(kind), eval_set=eval_set, suffix=suffix)


def synonym_path(tokenizer: str, dataset: str, source: str) -> str:
    return SYNONYMS.format(tokenizer=tokenizer, dataset=dataset, synonyms=source)


def perturbed_path(tokenizer: str, dataset: str, cond: TrainCondition, seed: int, suffix: str = ".parquet") -> str:
    names = {"tokenizer": tokenizer, "dataset": dataset, "seed": seed}
    return PERTURBED.format(kind="perturbed", train=cond.path, suffix=suffix, **names)


def sidecar(path: str, suffix: str) -> str:
    """The file beside a result's JSON that holds more of the same result: a metrics JSON's per-prompt scores
    (.prompts.parquet) or features (.features.parquet), a perplexity JSON's per-prompt NLL. Also on a template."""
    if suffix not in EVALUATION_SUFFIXES + SCORED_SUFFIXES or not path.endswith(".json"):
        raise ValueError(f"{path}: no {suffix} sidecar in this workflow's layout (workflow_lib/layout.py)")
    return path.removesuffix(".json") + suffix


class _Kept(dict):
    def __missing__(self, key: str) -> str:
        return "{" + key + "}"


def filled(layout: str, **fields: object) -> str:
    """`layout` with the given fields filled and the others left as `{field}`, the rules' wildcards. Not named
    `partial`: the rules' imports land in snakemake's own workflow globals, whose `onsuccess` calls functools'."""
    return layout.format_map(_Kept({k: str(v) for k, v in fields.items()}))


def log_path(name: str) -> str:
    """The log of the job that writes `name` (its path below results/, without extension; wildcards kept)."""
    return LOG.format(name=name)


def benchmark_path(name: str) -> str:
    return BENCHMARK.format(name=name)


def prompts_path(eval_set: str) -> str:
    return PROMPTS.format(eval_set=eval_set)


def tokenizer_path(tokenizer: str) -> str:
    return TOKENIZER.format(tokenizer=tokenizer)


def tokens_path(tokenizer: str, dataset: str, split: str) -> str:
    return TOKENS.format(tokenizer=tokenizer, dataset=dataset, split=split)


def lab_law_path(run: ModelRun) -> str:
    """Where the lab writes one model's next-word laws."""
    return run.folder("lab/laws") + RUN_KINDS["lab/laws"]


# ---- the rules' templates, and a job's wildcards back into conditions -------------------------------------


def _wildcards(names: Mapping[str, str]) -> dict[str, str]:
    return {field: "{" + wildcard + "}" for field, wildcard in names.items()}


TRAIN_TEMPLATE = TRAIN.format(**_wildcards(TRAIN_NAMES))
TEST_TEMPLATE = TEST.format(**_wildcards(TEST_NAMES))


def run_template(kind: str = "models", suffix: str = "") -> str:
    """A model run's folder (or file, with `suffix`) with the rules' wildcards: results/<kind>/{model}/..."""
    names = {"model": "{model}", "dataset": "{dataset}", "objective": "{objective}", "seed": "{seed}"}
    return RUN.format(kind=kind, train=TRAIN_TEMPLATE, **names) + suffix


def evaluation_template(kind: str, suffix: str | None = None) -> str:
    """An evaluation's file with the rules' wildcards."""
    suffix = EVALUATION_KINDS[kind] if suffix is None else suffix
    return EVALUATION.format(run=run_template(kind), eval_set="{eval_set}", test=TEST_TEMPLATE, suffix=suffix)


def shard_template(kind: str = "samples", suffix: str = ".parquet") -> str:
    """A sampling shard's file with the rules' wildcards (`kind` logs/sample, benchmarks/sample: their folders)."""
    path = SHARD.format(evaluation=evaluation_template(kind, ""), **_wildcards(SHARD_NAMES))
    return path.removesuffix(".parquet") + suffix


def perturbed_template(suffix: str = ".parquet", kind: str = "perturbed") -> str:
    names = {"tokenizer": "{tokenizer}", "dataset": "{dataset}", "seed": "{seed}"}
    return PERTURBED.format(kind=kind, train=TRAIN_TEMPLATE, suffix=suffix, **names)


def train_condition_of(wildcards: Mapping[str, str]) -> TrainCondition:
    fields = {field: wildcards[name] for field, name in TRAIN_NAMES.items() if field != "copies"}
    return TrainCondition(**fields, copies=int(wildcards[TRAIN_NAMES["copies"]]))


def run_of(wildcards: Mapping[str, str]) -> ModelRun:
    """The model run a job's wildcards name."""
    return ModelRun(
        wildcards["model"],
        wildcards["dataset"],
        wildcards["objective"],
        train_condition_of(wildcards),
        int(wildcards["seed"]),
    )


def evaluation_of(wildcards: Mapping[str, str]) -> Evaluation:
    """The evaluation a job's wildcards name."""
    test = SamplingCondition(**{field: wildcards[name] for field, name in TEST_NAMES.items()})
    return Evaluation(run_of(wildcards), wildcards["eval_set"], test)


def shard_of(wildcards: Mapping[str, str]) -> Shard:
    """The shard a sampling job's wildcards name."""
    return Shard(**{field: int(wildcards[name]) for field, name in SHARD_NAMES.items()})


# ---- reading a path back ----------------------------------------------------------------------------------


def _regex(layout: str, pieces: Mapping[str, str]) -> str:
    """`layout` as a regular expression: each {field} replaced by pieces[field], the text between escaped."""
    out, end = [], 0
    for field in re.finditer(r"\{(\w+)\}", layout):
        out += [re.escape(layout[end : field.start()]), pieces[field.group(1)]]
        end = field.end()
    return "".join([*out, re.escape(layout[end:])])


def _group(name: str, pattern: str) -> str:
    return f"(?P<{name}>{pattern})"


def _alternatives(names) -> str:
    return "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True))


_TRAIN_TYPES = {"mode": MODE, "copies": INTEGER, "intensity": NUMBER}
_TEST_TYPES = {"mode": MODE, "intensity": NUMBER}


def condition_constraints(names: Mapping[str, str]) -> dict[str, str]:
    """The rules' wildcard constraints of every condition field (by its one name) and the seed: the type the parser
    reads it with, or `names[name]` (the alternatives a config may use, e.g. the registered strategies). A new field
    of TRAIN or TEST gets its constraint here, with its type."""
    types = {TRAIN_NAMES[f]: _TRAIN_TYPES.get(f, NAME) for f in TRAIN_NAMES}
    types |= {TEST_NAMES[f]: _TEST_TYPES.get(f, NAME) for f in TEST_NAMES}
    types |= {name: INTEGER for name in SHARD_NAMES.values()}
    return {**types, "seed": INTEGER, **names}


def _run_regex(kinds) -> str:
    train = _regex(TRAIN, {f: _group(c, _TRAIN_TYPES.get(f, NAME)) for f, c in TRAIN_NAMES.items()})
    names = {n: _group(n, NAME) for n in ("model", "dataset", "objective")}
    return _regex(
        RUN, {"kind": _group("kind", _alternatives(kinds)), "train": train, "seed": _group("seed", INTEGER)} | names
    )


_TEST = _regex(TEST, {f: _group(c, _TEST_TYPES.get(f, NAME)) for f, c in TEST_NAMES.items()})
_EVAL_SET = _group("eval_set", NAME + "?")  # lazy: webtext.prompts.parquet is eval set webtext's sidecar
_EVALUATION_PIECES = {"run": _run_regex(EVALUATION_KINDS), "eval_set": _EVAL_SET, "test": _TEST}
_PATTERNS = tuple(
    re.compile("(?:^|/)" + pattern + "$")  # a path below a study's folder too
    for pattern in (
        _regex(
            SHARD,
            {
                "evaluation": _regex(EVALUATION, {**_EVALUATION_PIECES, "suffix": ""}),
                **{field: _group(name, INTEGER) for field, name in SHARD_NAMES.items()},
            },
        ),
        _regex(
            EVALUATION,
            {**_EVALUATION_PIECES, "suffix": _group("suffix", _alternatives(EVALUATION_SUFFIXES))},
        ),
        _regex(
            SCORED,
            {
                "run": _run_regex(SCORED_KINDS),
                "eval_set": _EVAL_SET,
                "suffix": _group("suffix", _alternatives(SCORED_SUFFIXES)),
            },
        ),
        _run_regex(RUN_KINDS) + _group("suffix", _alternatives(RUN_SUFFIXES)),
    )
)


@dataclass(frozen=True)
class Located:
    """What a result path names: its kind, model run and, for an evaluation or a score, eval set (and sampling
    condition), and the suffix of the file."""

    kind: str
    run: ModelRun
    eval_set: str | None = None
    test: SamplingCondition | None = None
    suffix: str = ""
    shard: Shard | None = None  # a sampling shard (kind samples, suffix "")

    @property
    def path(self) -> str:
        if self.shard is not None:
            assert self.eval_set is not None and self.test is not None
            return Evaluation(self.run, self.eval_set, self.test).shard_path(self.shard)
        if self.test is not None:
            assert self.eval_set is not None
            return Evaluation(self.run, self.eval_set, self.test).path(self.kind, self.suffix)
        if self.eval_set is not None:
            return scored_path(self.run, self.eval_set, self.suffix)
        return self.run.folder(self.kind) + self.suffix

    def moved(self, kind: str, suffix: str | None = None) -> str:
        """The path of the same condition under another kind: a sample's metrics, a model's perplexity folder."""
        if self.test is not None:
            assert self.eval_set is not None
            return Evaluation(self.run, self.eval_set, self.test).path(kind, suffix)
        return self.run.folder(kind) + (RUN_KINDS[kind] if suffix is None else suffix)

    def columns(self) -> dict[str, str]:
        """Every field as the report names it (train_synonyms, ..., test_mode), as written in the path."""
        run = self.run
        train = {TRAIN_NAMES[f]: str(v) for f, v in vars(run.train).items()}
        out = {"model": run.model, "dataset": run.dataset, "objective": run.objective, **train, "seed": str(run.seed)}
        if self.eval_set is not None:
            out["eval_set"] = self.eval_set
        if self.test is not None:
            out |= {TEST_NAMES[f]: str(v) for f, v in vars(self.test).items()}
        if self.shard is not None:
            out |= {SHARD_NAMES[f]: str(v) for f, v in vars(self.shard).items()}
        return out


def fields_of(layout: str, path: str) -> dict[str, str]:
    """The wildcards of a path written by a simple layout ({name} fields, none holding a '/'): CONTROLS, PLANTED, ...
    ValueError for a path it did not write."""
    import re

    pattern = re.sub(r"\\\{(\w+)\\\}", lambda m: f"(?P<{m.group(1)}>[^/]+)", re.escape(layout))
    match = re.search(pattern + "$", str(path))
    if not match:
        raise ValueError(f"{path}: not a path of the layout {layout} (workflow_lib/layout.py)")
    return match.groupdict()


def parse(path: str) -> Located:
    """The conditions a result path names. ValueError for a path this layout did not write."""
    for pattern in _PATTERNS:
        match = pattern.search(str(path).rstrip("/"))
        if match:
            return _located(match.groupdict())
    raise ValueError(f"{path}: not a result path of this workflow's layout (workflow_lib/layout.py)")


def _located(groups: dict[str, str | None]) -> Located:
    def field(name: str) -> str:
        value = groups[name]
        assert value is not None
        return value

    train = TrainCondition(
        **{f: field(c) for f, c in TRAIN_NAMES.items() if f != "copies"}, copies=int(field("copies"))
    )
    run = ModelRun(field("model"), field("dataset"), field("objective"), train, int(field("seed")))
    test = shard = None
    if groups.get("test_mode") is not None:
        test = SamplingCondition(**{f: field(c) for f, c in TEST_NAMES.items()})
    if groups.get("shard") is not None:
        shard = Shard(**{f: int(field(c)) for f, c in SHARD_NAMES.items()})
    return Located(field("kind"), run, groups.get("eval_set"), test, groups.get("suffix") or "", shard)
