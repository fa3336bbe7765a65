"""What each job reads: its input paths and the options that name them, from the config and the job's wildcards.

The rules' input functions (`rules/common.smk` makes one `Inputs(config)` and the rules call its methods), kept
here so that they are plain functions of the config, tested without Snakemake (tests/common/test_inputs.py). A
path comes from `layout.py` or from the stage that writes it, never spelled twice. `wildcards` is Snakemake's
object (or anything with the same attributes).
"""

from __future__ import annotations

import os
import shlex
from functools import cached_property
from pathlib import Path
from typing import Any

from workflow_lib.comparisons import designed_mauve
from workflow_lib.config_checks import embedding_model
from workflow_lib.config_datasets import local_files
from workflow_lib.constants import SYNONYMS_FROM_EMBEDDINGS, SYNONYMS_FROM_TOKENS, UNTRAINED
from workflow_lib.data.downloads import fetched, split_paths, unpacked_dir
from workflow_lib.data.settings import prompt_cap
from workflow_lib.evaluate.floor import mauve_never_resolves
from workflow_lib.featuriser import Featuriser
from workflow_lib.grid import (
    control_targets,
    curve_inputs,
    curve_pairs,
    data_records,
    dataset_splits,
    example_inputs,
    extrapolation_targets,
    lab_targets,
    lm_eval_eval_sets,
    lm_eval_jobs,
    lm_eval_targets,
    metric_targets,
    model_targets,
    perplexity_jobs,
    perplexity_targets,
    planted_targets,
)
from workflow_lib.layout import (
    ARGUMENT_FILE,
    CONTROL_TEXTS,
    CONTROLS,
    DATA,
    FEATURES,
    MAUVE_CONTRAST,
    NO_STRATEGY,
    evaluation_of,
    perturbed_path,
    prompts_path,
    run_of,
    sidecar,
    synonym_path,
    tokenizer_path,
    tokens_path,
    train_condition_of,
)
from workflow_lib.pretrained import gguf_file, written_folder
from workflow_lib.sample.settings import sampling_shards
from workflow_lib.train.settings import training_settings


def argument_file(name: str) -> str:
    return ARGUMENT_FILE.format(name=name)


def curves_argument(model: str, dataset: str) -> str:
    """The argument file's name of one training-curves job."""
    return f"curves-{model}-{dataset}"


class Inputs:
    """The input functions of one study's rules."""

    def __init__(self, config: dict, workdir: Path) -> None:
        self.config = config
        self.workdir = workdir
        self.models = config["models"]
        self.datasets = config["datasets"]

    # ---- data ----------------------------------------------------------------------------------------------

    def download(self, wildcards: Any) -> list[str]:
        """A split's files; under recipe mixce every split's, since a top-up reads one split to build another."""
        ds = self.datasets[wildcards.dataset]
        splits = dataset_splits(ds) if ds["recipe"] == "mixce" else [wildcards.split]
        if ds["source"] == "local":
            return sorted({f for split in splits for f in local_files(ds, split)})
        if ds["source"] == "url":
            if ds.get("archive"):
                return [unpacked_dir(wildcards.dataset)]
            return sorted({f for split in splits for f in split_paths(wildcards.dataset, ds, split)})
        return []

    def fetch_entry(self, wildcards: Any) -> dict:
        return fetched(self.datasets[wildcards.dataset])[wildcards.file]

    def fetch_options(self, wildcards: Any) -> str:
        """--sha256, --head-bytes and --max-bytes where the entry and the config have them, each word quoted for the
        shell."""
        entry = self.fetch_entry(wildcards)
        options = ["--sha256", entry["sha256"]] if entry.get("sha256") else []
        options += ["--head-bytes", str(entry["head_bytes"])] if entry.get("head_bytes") else []
        return shlex.join(options + self.max_bytes_option())

    def gguf_fetch_options(self, wildcards: Any) -> str:
        """The fetch_gguf job's options: the pinned sha256 and the size cap, as for a dataset's file."""
        gguf = self.models[wildcards.gguf_model]["gguf"]
        options = ["--sha256", gguf["sha256"]] if gguf.get("sha256") else []
        return shlex.join(options + self.max_bytes_option())

    def max_bytes_option(self) -> list[str]:
        """download.max_bytes where the config sets it; none where it is null, so that the fetch's own default
        applies and a study that leaves the key alone keeps its fetch jobs' params (and plans no new download)."""
        max_bytes = self.config.get("download", {}).get("max_bytes")
        return ["--max-bytes", str(max_bytes)] if max_bytes else []

    def pretrained(self, model: str) -> dict:
        """A GGUF model's dequantised folder or a pinned hub model's downloaded one, as the input of a job that loads
        the pretrained checkpoint (the dequantise or fetch_model rule writes it); nothing for a hub id or a folder
        that is already there."""
        return {"pretrained": self.models[model]["name"]} if written_folder(self.models[model]) else {}

    def hub_fetch_options(self, wildcards: Any) -> str:
        """The fetch_model job's options: the size cap, as for a dataset's file (its pins are a param of their own)."""
        return shlex.join(self.max_bytes_option())

    def gguf(self, wildcards: Any) -> dict:
        """The GGUF file the dequantise job reads: fetched, local or packaged (a hub repo's the job downloads)."""
        path = gguf_file(wildcards.gguf_model, self.models[wildcards.gguf_model]["gguf"], self.workdir)
        return {"gguf": path} if path else {}

    def tokenizer(self, wildcards: Any) -> dict:
        tok = self.config["tokenizers"][wildcards.tokenizer]
        if tok["source"] == "model":
            return self.pretrained(tok["model"])
        if tok["source"] == "train":
            return {"train": DATA.format(dataset=tok["dataset"], split="train") + ".parquet"}
        return {}

    def prompts(self, wildcards: Any) -> dict:
        """The split's rows and its provenance record (whose files and format an error about too few rows names)."""
        es = self.config["eval_sets"][wildcards.eval_set]
        split = DATA.format(dataset=es["dataset"], split=es["split"])
        return {"data": f"{split}.parquet", "source": f"{split}.json"}

    # ---- perturb and train ---------------------------------------------------------------------------------

    def synonyms(self, wildcards: Any) -> dict:
        inputs = {"tokenizer": tokenizer_path(wildcards.tokenizer)}
        if wildcards.synonyms in SYNONYMS_FROM_TOKENS:
            inputs["tokens"] = tokens_path(wildcards.tokenizer, wildcards.dataset, "train")
        if wildcards.synonyms in SYNONYMS_FROM_EMBEDDINGS:
            inputs.update(self.pretrained(embedding_model(self.config, wildcards.tokenizer)))
        if wildcards.synonyms == "file":
            inputs["pairs"] = self.config["synonyms"]["file"]
        return inputs

    def perturb(self, wildcards: Any) -> dict:
        inputs = {
            "tokens": tokens_path(wildcards.tokenizer, wildcards.dataset, "train"),
            "tokenizer": tokenizer_path(wildcards.tokenizer),
        }
        cond = train_condition_of(wildcards)
        if cond.synonyms != NO_STRATEGY:
            inputs["synonyms"] = synonym_path(wildcards.tokenizer, wildcards.dataset, cond.synonyms)
        return inputs

    def train(self, wildcards: Any) -> dict:
        tokenizer = self.models[wildcards.model]["tokenizer"]
        inputs = {
            "train": perturbed_path(tokenizer, wildcards.dataset, train_condition_of(wildcards), wildcards.seed),
            "tokenizer": tokenizer_path(tokenizer),
            **self.pretrained(wildcards.model),
        }
        settings = training_settings(self.config, wildcards.model, wildcards.seed)
        if settings["validation"] and "validation" in dataset_splits(self.datasets[wildcards.dataset]):
            inputs["validation"] = tokens_path(tokenizer, wildcards.dataset, "validation")
        return inputs

    # ---- sample and evaluate -------------------------------------------------------------------------------

    def model_source(self, wildcards: Any) -> str:
        """What a job loads: the trained model's folder, or for an untrained model its checkpoint (hub id or folder)."""
        if wildcards.objective == UNTRAINED:
            return self.models[wildcards.model]["name"]
        return run_of(wildcards).folder()

    def model(self, wildcards: Any) -> dict:
        """The model as a job input, when it is a file: a trained folder, or an untrained model's local folder."""
        source = self.model_source(wildcards)
        built = wildcards.objective != UNTRAINED or written_folder(self.models[wildcards.model])  # a rule writes it
        return {"model": source} if built or os.path.isdir(source) else {}

    def model_options(self, wildcards: Any) -> str:
        """--model, and --revision for an untrained hub model pinned to one, each word quoted for the shell (a local
        folder's name may hold any character; a hub id's are those `hub_names` allows)."""
        revision = self.models[wildcards.model].get("revision") if wildcards.objective == UNTRAINED else None
        return shlex.join(["--model", self.model_source(wildcards), *(["--revision", revision] if revision else [])])

    def sample(self, wildcards: Any) -> dict:
        inputs = {**self.model(wildcards), "prompts": prompts_path(wildcards.eval_set)}
        test = evaluation_of(wildcards).test
        if test.synonyms != NO_STRATEGY:
            tokenizer = self.models[wildcards.model]["tokenizer"]
            inputs["synonyms"] = synonym_path(tokenizer, wildcards.dataset, test.synonyms)
        return inputs

    def sample_shards(self, wildcards: Any) -> list[str]:
        """The shards of one evaluation's samples, in order (their number is the plan's: `sampling_shards`)."""
        ev = evaluation_of(wildcards)
        return ev.shards(sampling_shards(self.config, ev.eval_set, ev.run.model))

    def featuriser_id(self) -> str:
        """A path-safe name for the featuriser (a local folder is named by its last component)."""
        return Featuriser.from_config(self.config).id

    def control_texts(self, wildcards: Any) -> dict:
        """The eval set's prompts and the split they were cut from (the ceiling's following words, the salad's
        unigram law)."""
        from workflow_lib.grid import planted_source

        source = planted_source(self.config, wildcards.eval_set)
        other = {"other": prompts_path(source)} if source else {}
        return {"prompts": prompts_path(wildcards.eval_set), "data": self.prompts(wildcards)["data"], **other}

    def features(self, wildcards: Any) -> dict:
        """The human references and control texts to featurise, and the featuriser's folder when a rule writes it
        (a study model dequantised from GGUF)."""
        chosen = Featuriser.from_config(self.config)
        return {
            "prompts": prompts_path(wildcards.eval_set),
            "controls": CONTROL_TEXTS.format(eval_set=wildcards.eval_set),
            **(self.pretrained(chosen.model) if chosen.model is not None else {}),
        }

    def controls(self, wildcards: Any) -> str:
        """The eval set's controls verdict, which `evaluate` reads (a blind MAUVE is not scored)."""
        return CONTROLS.format(featuriser=self.featuriser_id(), eval_set=wildcards.eval_set)

    @cached_property
    def lm_eval_jobs(self) -> dict[str, list[str]]:
        return lm_eval_jobs(self.config)

    @cached_property
    def perplexity_jobs(self) -> dict[str, list[str]]:
        return perplexity_jobs(self.config)

    def perplexity_eval_sets(self, wildcards: Any) -> list[str]:
        """The eval sets one perplexity job scores: every one its model is evaluated on."""
        return self.perplexity_jobs[run_of(wildcards).folder("perplexity")]

    def lm_eval(self, wildcards: Any) -> dict:
        """The model, and every file of the study's own task folder (evaluation.lm_eval.include_path): an edited task
        reruns the harness."""
        include = self.config["evaluation"]["lm_eval"]["include_path"]
        files = (
            sorted(str(p) for p in Path(include).rglob("*") if p.is_file() and "__pycache__" not in p.parts)
            if include
            else []
        )
        prompts = [prompts_path(es) for es in self.lm_eval_eval_sets(wildcards)]
        return {
            **self.model(wildcards),
            **({"tasks": files} if files else {}),
            **({"prompts": prompts} if prompts else {}),
        }

    def lm_eval_eval_sets(self, wildcards: Any) -> list[str]:
        """The eval sets one lm_eval job scores as tasks of their own (evaluation.lm_eval.eval_sets)."""
        return lm_eval_eval_sets(self.config).get(run_of(wildcards).folder("lm_eval"), [])

    def perplexity(self, wildcards: Any) -> dict:
        eval_sets = self.perplexity_eval_sets(wildcards)
        return {**self.model(wildcards), "prompts": [prompts_path(es) for es in eval_sets]}

    # ---- report --------------------------------------------------------------------------------------------

    @cached_property
    def mauve_contrasts(self) -> dict[str, dict]:
        """The designed MAUVE contrasts (pair id -> the pair, its identity and B), one mauve_contrast job each: each
        clusters the human text and both conditions' samples jointly (workflow_lib.report.joint_mauve). None on an
        eval set whose prompt cap is under MAUVE's floor (its cells are all "too few texts")."""
        mauve = self.config["evaluation"]["mauve"]
        unresolvable = [e for e in self.config["eval_sets"] if mauve_never_resolves(prompt_cap(self.config, e), mauve)]
        report = self.config["report"]
        return designed_mauve(
            metric_targets(self.config), report["intensity"], unresolvable=unresolvable, null=report["aa_null"]
        )

    def metric_sidecars(self) -> list[str]:
        """The per-prompt sidecar of every metrics and extrapolation JSON (the contrasts read them beside each JSON)."""
        paths = metric_targets(self.config) + extrapolation_targets(self.config)
        return [sidecar(path, ".prompts.parquet") for path in paths]

    def mauve_contrast_targets(self) -> list[str]:
        return [MAUVE_CONTRAST.format(pair=p) for p in sorted(self.mauve_contrasts)]

    def mauve_contrast(self, wildcards: Any) -> dict:
        pair = self.mauve_contrasts[wildcards.pair]
        return {
            "a": pair["path_a"],
            "b": pair["path_b"],
            "features_a": sidecar(pair["path_a"], ".features.parquet"),
            "features_b": sidecar(pair["path_b"], ".features.parquet"),
            "prompts": prompts_path(pair["eval_set"]),
            "human": FEATURES.format(featuriser=self.featuriser_id(), eval_set=pair["eval_set"]),
        }

    @cached_property
    def argument_lists(self) -> dict[str, list[str]]:
        """The paths each gather job reads, in its order (written to its argument file)."""
        config = self.config
        return {
            "collect": metric_targets(config) + extrapolation_targets(config) + perplexity_targets(config),
            "contrasts": [
                *metric_targets(config),
                *extrapolation_targets(config),
                *perplexity_targets(config),
                "--mauve",
                *self.mauve_contrast_targets(),
            ],
            "variance": metric_targets(config) + extrapolation_targets(config),
            "lm_eval": lm_eval_targets(config),
            "tables": [
                *["--data", *data_records(config)],
                *["--lab", *[t for t in lab_targets(config) if t.endswith(".md")]],
                *["--controls", *control_targets(config)],
                *["--planted", *planted_targets(config)],
                *["--models", *model_targets(config)],
            ],
            "examples": example_inputs(config)[1],
            # one training-curves figure per (model, dataset): its model folders (a study with many seeds has many)
            **{
                curves_argument(model, dataset): curve_inputs(config, model, dataset)
                for model, dataset in curve_pairs(config)
            },
        }

    def training_curves(self, wildcards: Any) -> list[str]:
        return curve_inputs(self.config, wildcards.model, wildcards.dataset)
