"""Every GPU-capable job of a study, with its FLOPs, memory and predicted time on a device.

Per job: training (6N + 12 L d T FLOPs per token, LoRA's in cost/training.py), sampling (the prompts' forward
pass, then one step per new token: `exact` feeds each row its perturbed prefix from its first edit on,
`exact_fed_tokens`, beside a one-token step of the unperturbed cache; cached steps are bounded below by reading
the weights and the cache), the forward passes of features, sample_features, perplexity and extrapolation, and
MAUVE's k-means in a CPU evaluate job. Every forward call adds the device's per-layer overhead, and every job its
fixed cost plus loading its checkpoint. The arithmetic, what is left out and why: docs/cluster.md, "What a study
costs", "How a job is predicted".
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field
from pathlib import Path

from workflow_lib.constants import UNTRAINED
from workflow_lib.cost import sizes
from workflow_lib.cost.devices import Device
from workflow_lib.cost.shapes import Shape, featuriser_shape, model_shape
from workflow_lib.cost.training import flops_per_token
from workflow_lib.cost.training import memory as training_memory
from workflow_lib.featuriser import Featuriser
from workflow_lib.layout import FEATURES, parse
from workflow_lib.perturb.strategies import get as get_strategy
from workflow_lib.sample.modes import get as get_mode
from workflow_lib.sample.settings import sampling_shards
from workflow_lib.sample.shards import batches_that_fit, shard_rows
from workflow_lib.train.settings import training_settings

RULES = ("train", "sample", "sample_features", "evaluate", "perplexity", "features", "extrapolation")  # the modelled
BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}


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
    samples: str = ""  # a sampling shard's: the samples file its evaluation's shards are gathered into
    shards: int = 0  # ... and how many shards that evaluation has

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


REUSE_CALLS = 3  # forward calls a step of exact sampling feeds suffixes in (sample/reuse.py; 2.8 measured)


def exact_fed_tokens(n: float, p: float, strategy: str) -> float:
    """The tokens exact sampling is expected to feed a row at one step past its unperturbed key/value cache
    (sample/reuse.py): the perturbed prefix from its first edit on, none where no edit touched it. A prefix of n
    tokens has each selected with probability p (all eligible, as `length_factor` assumes), and an edit falls at a
    position with probability q = p per edit a selected token makes (in place: replacement and deletion; at a
    uniform gap: insertion, about p a gap), so P(first edit <= j) = 1 - (1 - q)^(j + 1). Summed over the n
    positions, plus the tokens the edits add (n (length_factor - 1), none where nothing was edited):
    n - (1 - q)(1 - (1 - q)^n) / q + n (length_factor(p) - 1). Within 2% of the perturber's for n >= 30 (Monte
    Carlo, tests/cost/test_cost.py); insertion's gaps make it up to 7% high at n = 10."""
    rule = get_strategy(strategy)
    q = p * (int(rule.keep != "token") + int(rule.inserts))
    if q <= 0:
        return 0.0
    return n - (1 - q) * (1 - (1 - q) ** n) / q + n * (rule.length_factor(p) - 1)


def exact_reuses_cache(shape: Shape, prefix: float, new_tokens: int) -> bool:
    """Whether exact sampling reuses the unperturbed key/value cache (sample/reuse.py `reuse_fits`): not for a model
    with local or sliding-window attention (GPT-Neo), nor where the prompt and the new tokens outgrow the context;
    those recompute the whole perturbed prefix at every step."""
    return shape.window is None and prefix + new_tokens - 1 <= shape.context


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
    per_token = flops_per_token(shape, length, settings.get("lora"))
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
    micro_tokens = settings["batch_size"] * min(length, settings["max_length"])
    held, job.memory_what = training_memory(shape, settings, config["models"][model], micro_tokens, BYTES[precision])
    job.memory_gb = held / 1e9
    return job


def sample_rows(config: dict, eval_set: str, workdir: Path | None) -> int:
    """The rows (prompt, run) an evaluation's sampling continues."""
    return int(sizes.eval_set_prompts(config, eval_set, workdir)["prompts"]) * config["sampling"]["runs"]


def sample_job(
    config: dict, key: str, model: str, eval_set: str, test, dev: Device, workdir: Path | None, rows: int | None = None
) -> Job:
    """A sampling job of `rows` rows (default: all of the evaluation's; a shard's are fewer)."""
    s = config["sampling"]
    job = Job("sample", key, model, s["gpus"])
    shape = model_shape(config, model, workdir)
    if shape is None:
        job.unknown = "model shape"
        return job
    prompts = sizes.eval_set_prompts(config, eval_set, workdir)
    tpw = sizes.tokens_per_word(config, config["models"][model]["tokenizer"])
    prefix = prompts["prefix_words"] * tpw
    rows = sample_rows(config, eval_set, workdir) if rows is None else rows
    new, batch, precision = s["new_tokens"], s["batch_size"], s["precision"]
    alpha = test.level
    batches = {batch: rows // batch, rows % batch: 1} if rows % batch else {batch: rows // batch}
    batches.pop(0, None)
    compute = overhead = flops = 0.0
    for b, count in batches.items():  # every full batch costs the same: computed once
        b_flops = forward_flops(shape, b * prefix, prefix)
        b_compute = b_flops / dev.rate("forward", precision, shape.key)
        b_overhead = shape.n_layer * dev.layer_overhead_s
        if alpha > 0 and get_mode(test.mode).algorithm2:  # each row from its first edit on, or (no reuse) all of it
            stretch = get_strategy(test.strategy).length_factor(alpha)
            # the embedding space's exact mode recomputes the whole noised prefix (sample/embedded.py)
            reuse = exact_reuses_cache(shape, prefix, new) and not get_strategy(test.strategy).in_embeddings
            lengths = [prefix + step for step in range(1, new)]
            suffix = [exact_fed_tokens(n, alpha, test.strategy) if reuse else n * stretch for n in lengths]
            step_flops = sum(forward_flops(shape, b * m, n * stretch) for m, n in zip(suffix, lengths, strict=True))
            b_flops += step_flops
            b_compute += step_flops / dev.rate("forward", precision, shape.key)
            b_overhead += (new - 1) * (REUSE_CALLS if reuse else 1) * shape.n_layer * dev.layer_overhead_s
            if reuse:  # and the unperturbed cache's one-token step
                b_flops += b * (new - 1) * 2 * shape.matmul_params
                b_compute += sum(decode_step(dev, shape, b, n, precision) for n in lengths)
        elif alpha > 0 and get_strategy(test.strategy).fed_per_token == 2:
            # cached insertion: every row's token, then the rows that insert (about b x alpha, in a step where
            # any does) in a pass of their own (sample/loops.py, Cached.insert; on a CPU and a GPU alike)
            inserting, any_inserts = max(1, math.ceil(b * alpha)), 1 - (1 - alpha) ** b
            b_flops += b * (1 + alpha) * (new - 1) * 2 * shape.matmul_params
            b_compute += sum(
                decode_step(dev, shape, b, prefix + step, precision)
                + any_inserts * decode_step(dev, shape, inserting, prefix + step, precision)
                for step in range(1, new)
            )
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


class ShardTooLong(Exception):
    """A sampling shard of `samples` predicted past `cost.max_minutes` (`seconds`); `fits` batches per shard would fit
    at `cost.safety` (0: not even one batch)."""

    def __init__(self, samples: str, seconds: float, fits: int, model: str):
        super().__init__(samples, seconds, fits, model)
        self.samples, self.seconds, self.fits, self.model = samples, seconds, fits, model


def check_shards(config: dict, ev, dev: Device, shards: list[Job]) -> None:
    """Raise `ShardTooLong` where an evaluation's longest shard is predicted past `cost.max_minutes`. The check only:
    the shards are the plan's (`sample.settings.sampling_shards`), so a cost setting never moves one. A shard whose
    prediction fits the limit but not x `cost.safety` runs, asking for the limit (`make estimate` lists it)."""
    limit = config["cost"]["max_minutes"]
    longest = max((j for j in shards if not j.unknown), key=lambda j: j.seconds, default=None)
    if limit is None or longest is None or longest.seconds <= limit * 60:
        return
    one = sample_job(config, "", ev.run.model, ev.eval_set, ev.test, dev, None, rows=config["sampling"]["batch_size"])
    batch_s, fixed_s = one.parts["compute"] + one.parts["overhead"], one.parts["fixed"] + one.parts["load"]
    fits = batches_that_fit(batch_s, fixed_s, limit * 60 / config["cost"]["safety"])
    raise ShardTooLong(longest.samples, longest.seconds, fits, ev.run.model)


def flow(value) -> str:
    """A config value as YAML's flow style writes it: null, 48, {default: 400, gpt-neo-1.3b: 48}."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {flow(v)}" for k, v in value.items()) + "}"
    return "null" if value is None else str(value)


def shard_limit_error(config: dict, dev: Device, too_long: list[ShardTooLong]):
    """The config error of sampling shards predicted past the time limit: the keys, the longest shard, and per model
    the most batches that fit."""
    from workflow_lib.config import ConfigError

    cost, s = config["cost"], config["sampling"]
    worst = max(too_long, key=lambda e: e.seconds)
    fits: dict[str, int] = {}
    for error in too_long:
        fits[error.model] = min(fits.get(error.model, error.fits), error.fits)
    head = (
        f"cost.max_minutes: {cost['max_minutes']} minutes is less than a sampling shard of {worst.samples} is "
        f"predicted to take on {dev.name} ({worst.seconds / 60:,.1f} minutes; sampling.shard_batches: "
        f"{flow(s['shard_batches'])})"
    )
    if min(fits.values()) < 1:
        return ConfigError(
            f"{head}; not even one batch of {s['batch_size']} rows fits x cost.safety {cost['safety']:g}: "
            "raise cost.max_minutes or lower sampling.batch_size"
        )
    return ConfigError(
        f"{head}: set sampling.shard_batches to at most {flow(dict(sorted(fits.items())))} (its shards then fit x cost.safety "
        f"{cost['safety']:g}; a changed value reruns that sampling), or raise cost.max_minutes"
    )


def sample_jobs(config: dict, ev, dev: Device, workdir: Path | None) -> list[Job]:
    """The sampling jobs of one evaluation: its shards (`sampling_shards`), each its whole batches of the rows."""
    count = sampling_shards(config, ev.eval_set, ev.run.model)
    rows, batch = sample_rows(config, ev.eval_set, workdir), config["sampling"]["batch_size"]
    jobs = []
    by_rows: dict[int, Job] = {}  # shards hold at most three row counts: each is predicted once
    for index, path in enumerate(ev.shards(count)):
        start, stop = shard_rows(rows, batch, index, count)
        if stop - start not in by_rows:
            by_rows[stop - start] = sample_job(
                config, "", ev.run.model, ev.eval_set, ev.test, dev, workdir, stop - start
            )
        job = copy.copy(by_rows[stop - start])
        job.key, job.samples, job.shards, job.parts = path, ev.path("samples"), count, dict(job.parts)
        jobs.append(job)
    return jobs


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
    """The featuriser's shape, without a head (MAUVE reads the last hidden state): a study model's own shape."""
    from dataclasses import replace

    chosen = Featuriser.from_config(config)
    if chosen.model is not None:
        shape = model_shape(config, chosen.model, workdir)
        return replace(shape, head=False) if shape else None
    return featuriser_shape(chosen.source(config)[0], workdir)


def mauve_seconds(config: dict, prompts: int, runs: int, mauve_s: float) -> float:
    m = config["evaluation"]["mauve"]
    buckets = m["num_buckets"] if m["num_buckets"] != "auto" else min(m["max_buckets"], max(2, round(prompts / 10)))
    return runs * m["kmeans_seeds"] * m["kmeans_num_redo"] * 2 * prompts * buckets * mauve_s


def evaluation_jobs(config: dict, ev, gpu: Device, cpu: Device, workdir: Path | None) -> list[Job]:
    """An evaluation's two jobs: its samples' features (on the featurisation's device) and MAUVE's k-means on the CPU
    (`cpu`, one core, no GPU held). A cell whose MAUVE is not scored loads no featuriser and clusters nothing:
    both are their fixed cost."""
    from workflow_lib.evaluate.floor import mauve_status

    e, s = config["evaluation"], config["sampling"]
    model = ev.run.model
    prompts = sizes.eval_set_prompts(config, ev.eval_set, workdir)
    featurise = Job("sample_features", ev.path("metrics", ".features.parquet"), model, e["gpus"])
    evaluate = Job("evaluate", ev.path("metrics"), model, 0)
    evaluate.parts = {"fixed": cpu.fixed_s["evaluate"]}
    if mauve_status(int(prompts["prompts"]), e["mauve"]):
        featurise.parts = {"fixed": gpu.fixed_s["sample_features"]}
        return [featurise, evaluate]
    length = min(e["max_text_length"], prompts["prefix_words"] * 1.3 + s["new_tokens"])
    featurise = scoring_job(
        "sample_features",
        featurise.key,
        model,
        featuriser(config, workdir),
        prompts["prompts"] * s["runs"],
        length,
        e["feature_batch_size"],
        gpu,
        "fp32",
        e["gpus"],
    )
    evaluate.parts["mauve"] = mauve_seconds(config, prompts["prompts"], s["runs"], cpu.mauve_s)
    return [featurise, evaluate]


def plan_jobs(config: dict, gpu: Device, cpu: Device, workdir: Path | None = Path(".")) -> list[Job]:
    """Every job of a rule in RULES of a validated config."""
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
    too_long: list[ShardTooLong] = []
    for ev in grid.evaluation_runs(config):
        shards = sample_jobs(config, ev, on(s["gpus"]), workdir)
        try:
            check_shards(config, ev, on(s["gpus"]), shards)
        except ShardTooLong as error:
            too_long.append(error)
        jobs += shards + evaluation_jobs(config, ev, on(e["gpus"]), cpu, workdir)
    if too_long:  # the smallest shards any evaluation needs
        raise shard_limit_error(config, on(s["gpus"]), too_long)
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
    from workflow_lib.evaluate.control_names import CONTROLS, PLANTED_ROWS
    from workflow_lib.evaluate.floor import mauve_status
    from workflow_lib.grid import planted_source

    for eval_set in sorted({ev.eval_set for ev in grid.evaluation_runs(config)}):
        p = sizes.eval_set_prompts(config, eval_set, workdir)
        # the human references, and MAUVE's control texts where MAUVE is scored (evaluate/controls.py)
        planted = len(PLANTED_ROWS) if planted_source(config, eval_set) else 0
        copies = 1 if mauve_status(int(p["prompts"]), e["mauve"]) else 1 + len(CONTROLS) + planted
        jobs.append(
            scoring_job(
                "features",
                FEATURES.format(featuriser=Featuriser.of(e["featuriser"]).id, eval_set=eval_set),
                "featuriser",
                featuriser(config, workdir),
                p["prompts"] * copies,
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
        model, eval_set, intensity = located.run.model, located.eval_set, located.test.level
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
