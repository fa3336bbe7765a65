"""`check`, `config.validate_config`'s last step: what a schema cannot say, on the normalised config, changing
nothing: names that refer to other sections, splits a dataset has, local files and folders, whether a scratch
model's architecture can be built, the lab's and the report's settings (keys: docs/config.md). The datasets' own
checks are config_datasets.py's. Each error is a `ConfigError` naming its key.
"""

from __future__ import annotations

from pathlib import Path

from workflow_lib.config_datasets import check_datasets
from workflow_lib.config_schema import ConfigError, _describe, load_schema
from workflow_lib.constants import (
    FEATURISERS,
    NO_TRAIN_DATASET,
    PAPER_STRATEGY,
    SYNONYMS_FROM_EMBEDDINGS,
    SYNONYMS_FROM_TOKENS,
    UNTRAINED,
)
from workflow_lib.data.pinning import unpinned_http_refusal
from workflow_lib.featuriser import Featuriser
from workflow_lib.grid import dataset_splits
from workflow_lib.hub_names import looks_like_path

# GPT2Config is a strict dataclass: it refuses an int where it declares a float (and a float where it declares
# an int), which JSON schema cannot tell apart (1 and 1.0 are both integers to it).
GPT2_FLOAT_KEYS = ("layer_norm_epsilon", "initializer_range")
GPT2_DEFAULTS = {"n_embd": 768, "n_head": 12}  # GPT2Config's (GPT-2 small's), for unset keys


def _need(name: str, section: dict, key: str, what: str) -> None:
    if name not in section:
        allowed = ", ".join(sorted(section)) or "(none defined)"
        raise ConfigError(f"config key {key}: unknown {what} {name!r}; allowed: {allowed}")


def check_architecture(name: str, model: dict, schema: dict) -> None:
    """A scratch model's GPT2Config arguments build a model; the schema has checked each key's type and range,
    this checks what relates keys (or tells Python's int from float, as GPT2Config does)."""
    key = f"config key models.{name}.architecture"
    arch = model.get("architecture") or {}
    if model["source"] != "scratch":
        if arch:
            raise ConfigError(
                f"{key}: a pretrained (source: {model['source']}) model has its checkpoint's architecture; "
                "remove `architecture`, or use source: scratch"
            )
        return
    properties = schema["$defs"]["model"]["properties"]["architecture"]["properties"]
    integer_keys = [k for k, spec in properties.items() if "integer" in spec.get("type", [])]
    for k, value in arch.items():
        if k in integer_keys and isinstance(value, float):
            raise ConfigError(f"{key}.{k}: GPT2Config takes an integer here, not {value!r}; write {int(value)}")
        if k in GPT2_FLOAT_KEYS and not isinstance(value, float):
            raise ConfigError(
                f"{key}.{k}: GPT2Config takes a float here, not the integer {value!r}; write {float(value)}"
            )
    size = {k: arch.get(k, default) for k, default in GPT2_DEFAULTS.items()}
    said = {k: f"{k} = {v}" + ("" if k in arch else " (unset: GPT2Config's default)") for k, v in size.items()}
    if size["n_embd"] % size["n_head"]:
        raise ConfigError(
            f"{key}: {said['n_embd']} is not divisible by {said['n_head']} (each head gets n_embd / n_head dimensions)"
        )


def check_featuriser(featuriser: Featuriser, config: dict, workdir: Path) -> None:
    if featuriser.model is not None:
        key = featuriser.model
        _need(key, config["models"], "evaluation.featuriser.model", "model")
        if config["models"][key]["source"] != "hf":
            raise ConfigError(
                f"config key evaluation.featuriser.model: model {key!r} is source: "
                f"{config['models'][key]['source']} (randomly initialised, then trained per condition); a featuriser "
                "is one pretrained checkpoint for every condition: name a source: hf model"
            )
        return
    name = str(featuriser.name)
    if name not in FEATURISERS and not (workdir / name / "config.json").is_file():
        raise ConfigError(
            f"config key evaluation.featuriser: {name!r} is not a local model folder (a folder "
            f"with a config.json; relative paths are read from {workdir.resolve()}); allowed: "
            f"{', '.join(map(repr, FEATURISERS))}, auto, {{model: <a models key>}} or such a folder"
        )


def check_local_names(config: dict, workdir: Path) -> None:
    """A hub name that is a filesystem path must exist when the study is planned: otherwise the job would try the
    hub with it and fail at run time, far from the key."""
    for section in ("models", "tokenizers"):
        for name, entry in config[section].items():
            path = entry.get("name")
            if entry["source"] == "hf" and path and looks_like_path(path):
                folder = workdir / Path(path).expanduser()  # an absolute path replaces workdir
                if not folder.is_dir():
                    raise ConfigError(
                        f"config key {section}.{name}.name: {path!r} is a path, and no such folder exists "
                        f"(relative paths are read from {workdir.resolve()})"
                    )


def check_synonym_file(config: dict, used_by: str, workdir: Path) -> None:
    """The `file` source's pairs (synonyms.file) must be named and exist when the study is planned; their content is
    checked by the job that reads them (perturb/synonym_file.py), with errors naming the key and the file."""
    path = config.get("synonyms", {}).get("file")
    if path is None:
        raise ConfigError(
            f"config key synonyms.file: required by {used_by} ('file' synonyms are read from it: a TSV of "
            "word<TAB>synonym[<TAB>weight] lines, docs/usage.md 'Synonym sources')"
        )
    if not (workdir / Path(path).expanduser()).is_file():
        raise ConfigError(
            f"config key synonyms.file: {path!r}: no such file (relative paths are read from {workdir.resolve()})"
        )


def table_intensities(config: dict) -> list[float]:
    """The intensities Table 1's perturbed rows can use: insertion at x > 0 both at training and at sampling in
    some experiment."""
    found = set()
    for exp in config["experiments"].values():
        train, test = exp.get("train_perturbation", {}), exp.get("test_perturbation", {})
        if PAPER_STRATEGY in train.get("strategies", [PAPER_STRATEGY]) and PAPER_STRATEGY in test.get(
            "strategies", [PAPER_STRATEGY]
        ):
            found |= {float(x) for x in train.get("intensities", [0])} & {
                float(x) for x in test.get("intensities", [0])
            }
    return sorted(x for x in found if x > 0)


def check_report_intensity(config: dict) -> None:
    """report.intensity must be one the study runs (`normalise` has made it the study's one where it has one);
    where it has several and report.intensity is none of them, the config is refused, naming them."""
    candidates = table_intensities(config)
    chosen = float(config["report"]["intensity"])
    if not candidates or chosen in candidates:
        return
    raise ConfigError(
        f"config key report.intensity: {chosen:g} is not an intensity of this study, so Table 1 would have "
        "no perturbed rows; it has insertion at the same intensity at training and sampling at "
        f"{', '.join(f'{x:g}' for x in candidates)}: set report.intensity to one of them"
    )


def check(config: dict, workdir: Path | None = None) -> None:
    """Cross-section checks of a normalised config, which they do not change: every referenced name exists,
    splits exist, local files and folders are there, scratch architectures can be built."""
    workdir = Path(workdir or ".")
    datasets = config["datasets"]
    check_datasets(datasets, workdir)
    for name, tok in config["tokenizers"].items():
        if tok["source"] == "train":
            _need(tok["dataset"], datasets, f"tokenizers.{name}.dataset", "dataset")
            if "train" not in dataset_splits(datasets[tok["dataset"]]):
                raise ConfigError(
                    f"config key tokenizers.{name}.dataset: dataset {tok['dataset']!r} has no 'train' split to learn from"
                )
    schema = load_schema()
    training_schema = {**schema["properties"]["training"], "$defs": schema["$defs"]}  # training.lora is a $ref
    for name, model in config["models"].items():
        _need(model["tokenizer"], config["tokenizers"], f"models.{name}.tokenizer", "tokenizer")
        gguf_url = (model.get("gguf") or {}).get("url")
        refusal = gguf_url and unpinned_http_refusal(
            gguf_url, model["gguf"].get("sha256"), f"config key models.{name}.gguf"
        )
        if refusal:
            raise ConfigError(refusal)
        if model.get("training"):
            import jsonschema
            from jsonschema.exceptions import best_match

            merged = {**config.get("training", {}), **model["training"]}
            error = best_match(jsonschema.Draft202012Validator(training_schema).iter_errors(merged))
            if error is not None:
                raise ConfigError(
                    _describe(error, training_schema)
                    .replace("config key ", f"config key models.{name}.training.", 1)
                    .replace("config: ", f"config key models.{name}.training: ", 1)
                )
        check_architecture(name, model, schema)
    check_featuriser(Featuriser.from_config(config), config, workdir)
    mauve = config["evaluation"]["mauve"]
    if mauve["controls"]["must_detect"] and mauve["kmeans_seeds"] < 2:
        raise ConfigError(
            "config key evaluation.mauve.kmeans_seeds: MAUVE's controls (evaluation.mauve.controls.must_detect) "
            "compare a control's gap below the human ceiling with the spread of k-means seeds, which 1 seed does "
            "not have: use 2 or more, or must_detect: [] to report MAUVE unchecked"
        )
    for name, es in config.get("eval_sets", {}).items():
        _need(es["dataset"], datasets, f"eval_sets.{name}.dataset", "dataset")
        splits = dataset_splits(datasets[es["dataset"]])
        if es["split"] not in splits:
            raise ConfigError(
                f"config key eval_sets.{name}.split: dataset {es['dataset']!r} has no split {es['split']!r}; allowed: {', '.join(splits)}"
            )
    for name, exp in config["experiments"].items():
        for i, model in enumerate(exp["models"]):
            _need(model, config["models"], f"experiments.{name}.models[{i}]", "model")
        check_train_dataset(name, exp, datasets)
        for i, es in enumerate(exp["eval_sets"]):
            _need(es, config.get("eval_sets", {}), f"experiments.{name}.eval_sets[{i}]", "eval set")
        for i, objective in enumerate(exp.get("objectives", [])):
            if objective == UNTRAINED:
                for model in exp["models"]:
                    if config["models"][model]["source"] != "hf":
                        raise ConfigError(
                            f"config key experiments.{name}.objectives[{i}]: 'untrained' evaluates a "
                            f"pretrained model as it is, but model {model!r} is source: "
                            f"{config['models'][model]['source']} (randomly initialised)"
                        )
                continue
            _need(objective, config["objectives"], f"experiments.{name}.objectives[{i}]", "objective")
        for i, decoder in enumerate(exp.get("decoders", [])):
            _need(decoder, config["decoders"], f"experiments.{name}.decoders[{i}]", "decoder")
        for axis in ("train_perturbation", "test_perturbation"):
            sources = exp.get(axis, {}).get("synonyms", [])
            if "oracle" in sources and datasets.get(exp["train_dataset"], {}).get("source") != "builtin":
                raise ConfigError(
                    f"config key experiments.{name}.{axis}.synonyms: 'oracle' synonyms exist only for a "
                    f"builtin train_dataset, not {exp['train_dataset']!r}"
                )
            if set(sources) & set(SYNONYMS_FROM_EMBEDDINGS):
                for model in exp["models"]:
                    embedding_model(config, config["models"][model]["tokenizer"], f"experiments.{name}.{axis}.synonyms")
            if "file" in sources:
                check_synonym_file(config, f"experiments.{name}.{axis}.synonyms", workdir)
        check_embedding_strategies(name, exp)
    check_lab(config)
    check_local_names(config, workdir)
    check_report_intensity(config)
    from workflow_lib.train.tracking import missing

    for key in ("training", "report"):
        if absent := missing(config[key]["report_to"]):
            raise ConfigError(f"config key {key}.report_to: not installed: {', '.join(absent)}")


def check_embedding_strategies(name: str, exp: dict) -> None:
    """What the schema cannot say of a strategy (perturb/strategies.py): one for training only (NEFTune) in a
    test_perturbation, and one that perturbs every position at an intensity other than 0 or 1."""
    from workflow_lib.perturb.strategies import get as get_strategy

    for axis in ("train_perturbation", "test_perturbation"):
        grid = exp.get(axis, {})
        for strategy in grid.get("strategies", []):
            rule = get_strategy(strategy)
            if axis == "test_perturbation" and not rule.at_sampling:
                raise ConfigError(
                    f"config key experiments.{name}.test_perturbation.strategies: {strategy} perturbs at training "
                    "only (its authors define no sampling-time perturbation); list it under train_perturbation"
                )
            odd = [x for x in grid.get("intensities", [0]) if float(x) not in (0.0, 1.0)]
            if rule.every_position and odd:
                raise ConfigError(
                    f"config key experiments.{name}.{axis}.intensities: {strategy} perturbs every position, so its "
                    f"intensity is 1 (or 0, the baseline), not {', '.join(f'{float(x):g}' for x in odd)}; give it an "
                    "experiment of its own"
                )


def check_train_dataset(name: str, exp: dict, datasets: dict) -> None:
    """The train dataset must exist and have a train split when the experiment trains, or when its sampling-time
    perturbation learns synonyms from it (distributional). A zero-shot experiment (every objective `untrained`) may
    name none: its paths then say `none` in the dataset's place."""
    key = f"config key experiments.{name}.train_dataset"
    from workflow_lib.grid import trained_objectives

    trains = trained_objectives(exp)
    test = exp.get("test_perturbation", {})
    learned = [s for s in test.get("synonyms", ["distributional"]) if s in SYNONYMS_FROM_TOKENS]
    learns = bool(learned) and any(float(x) > 0 for x in test.get("intensities", [0]))
    needs = (
        f"objectives {', '.join(trains)} train on its train split"
        if trains
        else f"test_perturbation's {', '.join(learned)} synonyms are learned from its train split"
        if learns
        else None
    )
    if exp["train_dataset"] == NO_TRAIN_DATASET:
        if needs:
            raise ConfigError(
                f"{key}: required here ({needs}); only a zero-shot experiment (every objective "
                f"'{UNTRAINED}') sampling without synonyms learned from it may leave it out"
            )
        return
    _need(exp["train_dataset"], datasets, f"experiments.{name}.train_dataset", "dataset")
    if needs and "train" not in dataset_splits(datasets[exp["train_dataset"]]):
        raise ConfigError(f"{key}: dataset {exp['train_dataset']!r} has no 'train' split, and {needs}")


def check_lab(config: dict) -> None:
    """The theory lab needs a group of models trained on the same data: a builtin train_dataset (its true law is
    the yardstick), one training condition and at least two trained models."""
    from workflow_lib.grid import lab_models, train_conditions

    lab = config.get("lab", {})
    for i, name in enumerate(lab.get("experiments", [])):
        key = f"lab.experiments[{i}]"
        _need(name, config["experiments"], key, "experiment")
        exp = config["experiments"][name]
        if config["datasets"][exp["train_dataset"]]["source"] != "builtin":
            raise ConfigError(
                f"config key {key}: experiment {name!r} trains on {exp['train_dataset']!r}, not a builtin "
                "dataset; the lab needs the grammar's true law"
            )
        if len(train_conditions(exp)) != 1:
            raise ConfigError(
                f"config key {key}: experiment {name!r} has {len(train_conditions(exp))} training "
                "conditions; the lab compares models trained on the same data (one condition)"
            )
        if len(lab_models(exp)) < 2:
            raise ConfigError(
                f"config key {key}: experiment {name!r} trains {len(lab_models(exp))} model(s); the lab "
                "needs at least 2 (objectives x seeds x models) to measure their disagreement"
            )
    if any(d > lab["last"] for d in lab["deltas"]):
        raise ConfigError(
            f"config key lab.deltas: every delta must be at most lab.last ({lab['last']}): the "
            "changed positions lie among the last l words, where T acts"
        )


def embedding_model(config: dict, tokenizer: str, key: str = "synonyms.embedding_model") -> str:
    """The model whose input embeddings define `embedding` synonyms for `tokenizer` (`perturb.settings.synonym_model`),
    or a ConfigError naming the key."""
    from workflow_lib.perturb.settings import synonym_model

    chosen = config.get("synonyms", {}).get("embedding_model")
    if chosen is not None:
        _need(chosen, config["models"], "synonyms.embedding_model", "model")
    found = synonym_model(config, tokenizer)
    if found is not None:
        return found
    raise ConfigError(
        f"config key {key}: 'embedding' synonyms need a pretrained (source: hf) model with tokenizer "
        f"{tokenizer!r}; set synonyms.embedding_model or use 'distributional'"
    )
