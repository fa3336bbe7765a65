"""Every GPU-capable job of a study, with its FLOPs, memory and predicted time on a device.

The arithmetic, per job (N: the parameters every token multiplies, `Shape.matmul_params`; L layers of width d):
- train: 6N + 12 L d T FLOPs per token of a row of T tokens (PaLM appendix B, as nanoGPT's `estimate_mfu`), over
  every row of every epoch, at the device's training MFU; validation: 2N + 4 L d T per token at each evaluation.
  The objectives' extra work is left out: in the default study EMO, the costliest, trained 7% longer than MLE
  (23.7 s against 22.2 s per job), most of it the fixed cost.
- sample: the prompts' forward pass, then one step per new token. `exact` mode at intensity > 0 recomputes the
  whole (perturbed) prefix at every step, so its work grows with the square of the new tokens; `cached` mode and
  intensity 0 feed one token per step (two for cached insertion) through a key/value cache, a step bounded below
  by reading the weights and the cache once. The decoders' work (a softmax and a search per row) is left out:
  V operations per row per step against the model's 2N.
- features, evaluate, perplexity, extrapolation: forward passes over the tokens they read; evaluate adds MAUVE's
  k-means on the CPU (`mauve_s` per point per bucket per clustering, measured by --calibrate).
Every forward call adds the device's per-layer overhead, and every job its fixed cost plus loading its checkpoint.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from workflow_lib.constants import UNTRAINED
from workflow_lib.cost import sizes
from workflow_lib.cost.devices import Device
from workflow_lib.cost.shapes import Shape, featuriser_shape, model_shape
from workflow_lib.layout import FEATURES, parse
from workflow_lib.perturb.strategies import get as get_strategy
from workflow_lib.train.settings import training_settings

GPU_RULES = ("train", "sample", "evaluate", "perplexity", "features", "extrapolation")
BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}
ADAM_BYTES_PER_PARAM = 16  # fp32 weights, gradients and AdamW's two moments (mixed precision keeps fp32 masters)


@dataclass
class Job:
    rule: str
    key: str  # the output path, as the rule's benchmark file names it (results/benchmarks/<rule>/<key>.tsv)
    model: str
    devices: int  # GPUs held (0: one CPU core)
    params: int = 0
    flops: float = 0.0
    parts: dict = field(default_factory=dict)  # seconds: compute, overhead, fixed, load, mauve
    memory_gb: float = 0.0
    memory_what: str = ""
    unknown: str = ""  # why a size is unknown (then no prediction)

    @property
    def seconds(self) -> float:
        return sum(self.parts.values())

    @property
    def device_seconds(self) -> float:
        return self.seconds * max(self.devices, 1)


def forward_flops(shape: Shape, tokens: float, length: float) -> float:
    return tokens * (2 * shape.matmul_params + 4 * shape.n_layer * shape.d_model * length)


def decode_step(dev: Device, shape: Shape, rows: int, context: float, precision: str, fed: int = 1) -> float:
    """Seconds of one cached step of `rows` sequences: compute or reading the weights and the cache, whichever is
    longer, plus the dispatch overhead."""
    flops = rows * fed * (2 * shape.matmul_params + 4 * shape.n_layer * shape.d_model * context)
    read = (shape.params + 2 * shape.n_layer * shape.d_model * context * rows) * BYTES[precision]
    return (
        max(flops / dev.rate("forward", precision, shape.key), read / (dev.bandwidth * dev.bandwidth_use))
        + shape.n_layer * dev.layer_overhead_s
    )


def load_seconds(dev: Device, shape: Shape, job: Job) -> float:
    job.params = shape.params
    return shape.params * 4 / dev.load_bytes_per_s  # checkpoints are saved in float32


def train_job(
    config: dict, key: str, model: str, dataset: str, cond, seed: int, dev: Device, workdir: Path | None
) -> Job:
    settings = training_settings(config, model, seed)  # what the training job reads
    gpus = settings["gpus"]
    job = Job("train", key, model, gpus)
    shape = model_shape(config, model, workdir)
    data = sizes.training_rows(config, model, dataset, cond, seed, workdir)
    if shape is None or data is None:
        job.unknown = "model shape" if shape is None else f"size of {dataset}'s train split"
        return job
    precision = (
        "bf16"
        if settings["mixed_precision"] == "auto" and gpus and dev.has_bf16
        else {"bf16": "bf16", "fp16": "fp16"}.get(settings["mixed_precision"], "fp32")
    )
    length = data["tokens"] / max(data["rows"], 1)
    per_token = 6 * shape.matmul_params + 12 * shape.n_layer * shape.d_model * length
    epochs = settings["epochs"]
    train_flops = data["tokens"] * epochs * per_token
    micro = math.ceil(data["rows"] / (settings["batch_size"] * max(gpus, 1))) * epochs
    steps = math.ceil(micro / settings["gradient_accumulation_steps"])
    evals = epochs + 1 if not settings["eval_every"] else steps // settings["eval_every"] + 1
    val_tokens = sizes.validation_tokens(config, model, dataset, workdir) if settings["validation"] else 0.0
    val_flops = forward_flops(shape, val_tokens, config["tokenize"]["block_size"]) * evals
    val_calls = math.ceil(val_tokens / config["tokenize"]["block_size"] / settings["batch_size"]) * evals
    processes = max(gpus, 1)
    job.flops = train_flops + val_flops
    job.parts = {
        "compute": (
            train_flops / dev.rate("train", precision, shape.key)
            + val_flops / dev.rate("forward", precision, shape.key)
        )
        / processes,
        "overhead": (3 * micro + val_calls) * shape.n_layer * dev.layer_overhead_s,
        "fixed": dev.fixed_s["train"] + (dev.launch_s if gpus > 1 else 0.0),
        "load": load_seconds(dev, shape, job),
    }
    job.memory_gb = shape.params * ADAM_BYTES_PER_PARAM / 1e9
    job.memory_what = "weights, gradients and AdamW states (16 bytes per parameter, on every GPU)"
    return job


def sample_job(config: dict, key: str, model: str, eval_set: str, test, dev: Device, workdir: Path | None) -> Job:
    s = config["sampling"]
    job = Job("sample", key, model, s["gpus"])
    shape = model_shape(config, model, workdir)
    if shape is None:
        job.unknown = "model shape"
        return job
    prompts = sizes.eval_set_prompts(config, eval_set, workdir)
    tpw = sizes.tokens_per_word(config, config["models"][model]["tokenizer"])
    prefix = prompts["prefix_words"] * tpw
    rows, new, batch, precision = prompts["prompts"] * s["runs"], s["new_tokens"], s["batch_size"], s["precision"]
    alpha = float(test.intensity)
    batches = {batch: rows // batch, rows % batch: 1} if rows % batch else {batch: rows // batch}
    compute = overhead = flops = 0.0
    for b, count in batches.items():  # every full batch costs the same: computed once
        b_flops = forward_flops(shape, b * prefix, prefix)
        b_compute = b_flops / dev.rate("forward", precision, shape.key)
        b_overhead = shape.n_layer * dev.layer_overhead_s
        if alpha > 0 and test.mode == "exact":  # the whole perturbed prefix at every step
            stretch = get_strategy(test.strategy).length_factor(alpha)
            step_flops = sum(
                forward_flops(shape, b * n, n) for n in ((prefix + step) * stretch for step in range(1, new))
            )
            b_flops += step_flops
            b_compute += step_flops / dev.rate("forward", precision, shape.key)
            b_overhead += (new - 1) * shape.n_layer * dev.layer_overhead_s
        else:
            fed = get_strategy(test.strategy).fed_per_token if alpha > 0 else 1
            b_flops += b * fed * (new - 1) * 2 * shape.matmul_params
            b_compute += sum(decode_step(dev, shape, b, prefix + step, precision, fed) for step in range(1, new))
        flops, compute, overhead = flops + count * b_flops, compute + count * b_compute, overhead + count * b_overhead
    job.flops = flops
    job.parts = {
        "compute": compute,
        "overhead": overhead,
        "fixed": dev.fixed_s["sample"],
        "load": load_seconds(dev, shape, job),
    }
    kv = 2 * shape.n_layer * shape.d_model * (prefix + new) * (1 + alpha) * batch * BYTES[precision]
    job.memory_gb = (shape.params * BYTES[precision] + kv) / 1e9
    job.memory_what = f"weights and the key/value cache of a batch of {batch} (sampling.batch_size)"
    return job


def scoring_job(
    rule: str,
    key: str,
    model: str,
    shape: Shape | None,
    texts: float,
    length: float,
    batch: int,
    dev: Device,
    precision: str,
    devices: int,
) -> Job:
    """A job of forward passes over `texts` texts of `length` tokens, in batches of `batch`."""
    job = Job(rule, key, model, devices)
    if shape is None:
        job.unknown = "model shape"
        return job
    length = min(length, shape.context)
    job.flops = forward_flops(shape, texts * length, length)
    job.parts = {
        "compute": job.flops / dev.rate("forward", precision, shape.key),
        "overhead": math.ceil(texts / batch) * shape.n_layer * dev.layer_overhead_s,
        "fixed": dev.fixed_s[rule],
        "load": load_seconds(dev, shape, job),
    }
    job.memory_gb = shape.params * BYTES[precision] / 1e9
    job.memory_what = "weights"
    return job


def featuriser(config: dict, workdir: Path | None) -> Shape | None:
    return featuriser_shape(config["evaluation"]["featuriser"], workdir)


def mauve_seconds(config: dict, prompts: int, runs: int, mauve_s: float) -> float:
    m = config["evaluation"]["mauve"]
    buckets = m["num_buckets"] if m["num_buckets"] != "auto" else min(m["max_buckets"], max(2, round(prompts / 10)))
    return runs * m["kmeans_seeds"] * m["kmeans_num_redo"] * 2 * prompts * buckets * mauve_s


def evaluate_job(config: dict, key: str, model: str, eval_set: str, dev: Device, workdir: Path | None) -> Job:
    from workflow_lib.evaluate.metrics import mauve_status

    e, s = config["evaluation"], config["sampling"]
    prompts = sizes.eval_set_prompts(config, eval_set, workdir)
    if mauve_status(int(prompts["prompts"]), e["mauve"]):  # MAUVE not scored: no featuriser, no k-means, only ROUGE
        job = Job("evaluate", key, model, e["gpus"])
        job.parts = {"fixed": dev.fixed_s["evaluate"]}
        return job
    length = min(e["max_text_length"], prompts["prefix_words"] * 1.3 + s["new_tokens"])
    job = scoring_job(
        "evaluate",
        key,
        model,
        featuriser(config, workdir),
        prompts["prompts"] * s["runs"],
        length,
        e["feature_batch_size"],
        dev,
        "fp32",
        e["gpus"],
    )
    if not job.unknown:
        job.parts["mauve"] = mauve_seconds(config, prompts["prompts"], s["runs"], dev.mauve_s)
    return job


def plan_jobs(config: dict, gpu: Device, cpu: Device, workdir: Path | None = Path(".")) -> list[Job]:
    """Every train, sample, evaluate, perplexity, features and extrapolation job of a validated config."""
    from workflow_lib import grid

    def on(gpus: int) -> Device:
        return gpu if gpus else cpu

    jobs = []
    for exp in config["experiments"].values():
        for run in grid.model_runs(exp):
            if run.objective != UNTRAINED:
                device = on(training_settings(config, run.model, run.seed)["gpus"])
                jobs.append(
                    train_job(config, run.folder(), run.model, run.dataset, run.train, run.seed, device, workdir)
                )
    jobs = list({j.key: j for j in jobs}.values())
    s, e = config["sampling"], config["evaluation"]
    for ev in grid.evaluation_runs(config):
        model, eval_set = ev.run.model, ev.eval_set
        jobs.append(sample_job(config, ev.path("samples"), model, eval_set, ev.test, on(s["gpus"]), workdir))
        jobs.append(evaluate_job(config, ev.path("metrics"), model, eval_set, on(e["gpus"]), workdir))
    for folder, eval_sets in grid.perplexity_jobs(config).items():
        model = parse(folder).run.model
        shape, tpw = (
            model_shape(config, model, workdir),
            sizes.tokens_per_word(config, config["models"][model]["tokenizer"]),
        )
        prompts = [sizes.eval_set_prompts(config, es, workdir) for es in eval_sets]
        texts = sum(p["prompts"] for p in prompts)
        length = sum(p["prompts"] * p["reference_words"] for p in prompts) / max(texts, 1) * tpw
        jobs.append(
            scoring_job(
                "perplexity",
                folder,
                model,
                shape,
                texts,
                length,
                s["batch_size"],
                on(e["gpus"]),
                s["precision"],
                e["gpus"],
            )
        )
    for eval_set in sorted({ev.eval_set for ev in grid.evaluation_runs(config)}):
        p = sizes.eval_set_prompts(config, eval_set, workdir)
        jobs.append(
            scoring_job(
                "features",
                FEATURES.format(featuriser=grid.featuriser_id(e["featuriser"]), eval_set=eval_set),
                "featuriser",
                featuriser(config, workdir),
                p["prompts"],
                min(e["max_text_length"], p["reference_words"] * 1.3),
                e["feature_batch_size"],
                on(e["gpus"]),
                "fp32",
                e["gpus"],
            )
        )
    x = e["extrapolation"]
    for path in grid.extrapolation_targets(config):
        located = parse(path)
        assert located.test is not None and located.eval_set is not None  # an evaluation's path
        model, eval_set, intensity = located.run.model, located.eval_set, float(located.test.intensity)
        p = sizes.eval_set_prompts(config, eval_set, workdir)
        prefixes = (p["reference_words"] - p["prefix_words"]) // x["stride"] + 1
        draws = x["draws"] if intensity > 0 else 1
        jobs.append(
            scoring_job(
                "extrapolation",
                path,
                model,
                model_shape(config, model, workdir),
                p["prompts"] * prefixes * draws,
                p["reference_words"],
                s["batch_size"],
                on(e["gpus"]),
                s["precision"],
                e["gpus"],
            )
        )
    return jobs
