"""The cost model: its arithmetic against independent counts, memory flags, SLURM requests, and `make estimate`."""

from __future__ import annotations

import copy
import math
import re
import subprocess
import sys
import time

import pytest
import yaml

from support.workflow_runs import REPO, tiny_config
from workflow_lib import layout
from workflow_lib.config import ConfigError, validate_config
from workflow_lib.cost import jobs as cost_jobs
from workflow_lib.cost import slurm
from workflow_lib.cost.devices import DEVICES, check_cost, device
from workflow_lib.cost.estimate import benchmark_key, compare, load_config, memory_flags, rule_table
from workflow_lib.cost.shapes import KNOWN, from_config
from workflow_lib.layout import SamplingCondition, TrainCondition
from workflow_lib.perturb.strategies import get as get_strategy


def config_of(**changes) -> dict:
    config = tiny_config()
    for key, value in changes.items():
        config[key] = {**config.get(key, {}), **value}
    return validate_config(config)


@pytest.mark.parametrize("name", ["gpt2", "gpt2-large", "facebook/opt-125m", "EleutherAI/gpt-neo-1.3B"])
def test_parameter_count_matches_the_real_architecture(name):
    """Shape.params against transformers' own count of a randomly initialised model of the same config (biases
    and norms are left out of Shape, so it is a little lower)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    family = {"gpt2": "gpt2", "facebook/opt-125m": "opt", "EleutherAI/gpt-neo-1.3B": "gpt_neo"}.get(name, "gpt2")
    known = KNOWN[name]
    keys = {"num_heads": "num_heads", "num_layers": "num_layers"}
    config = AutoConfig.for_model(family, **{keys.get(k, k): v for k, v in known.items()})
    if family == "gpt_neo":
        config.attention_types = [[["global", "local"], known["num_layers"] // 2]]
        config.attention_layers = ["global", "local"] * (known["num_layers"] // 2)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    actual = sum(p.numel() for p in model.parameters())
    predicted = from_config(known).params
    assert 0.98 * actual <= predicted <= actual, (predicted, actual)


def test_training_flops_are_palms_six_n_plus_attention_over_every_token():
    config = config_of()
    cond = TrainCondition("none", "augment", 1, "none", "0")
    job = cost_jobs.train_job(config, "k", "tiny", "synthetic", cond, 1, DEVICES["a100-80gb"], None)
    shape = from_config({**config["models"]["tiny"]["architecture"], "vocab_size": 300})
    data = tiny_config()["datasets"]["synthetic"]["builtin"]
    words = data["docs"]["train"] * data["sentences_per_doc"] * 7.33
    blocks = math.floor(words / 32)
    tokens = 2 * blocks * 32  # the data and one copy (augment, m = 1), blocks of 32
    n = 1 * (4 * 16**2 + 2 * 16 * 64) + 300 * 16
    validation = data["docs"]["validation"] * data["sentences_per_doc"] * 7.33
    evals = math.ceil(2 * blocks / 8) // 500 + 1  # eval_every 500 steps of batch 8, and the last step
    assert shape.matmul_params == n
    assert job.flops == pytest.approx(tokens * (6 * n + 12 * 1 * 16 * 32) + evals * validation * (2 * n + 4 * 16 * 32))


def test_exact_sampling_is_quadratic_in_new_tokens_and_cached_is_linear():
    def flops(mode: str, new_tokens: int, intensity: str = "0.025") -> float:
        config = config_of(sampling={"new_tokens": new_tokens})
        test = SamplingCondition("unbiased", "distributional", "replacement", intensity, mode)
        return cost_jobs.sample_job(config, "k", "tiny", "syn-test", test, DEVICES["h100"], None).flops

    # generated part only: subtract the prompts' forward pass (the same at every length)
    base = {mode: flops(mode, 1) for mode in ("exact", "cached")}
    exact = [flops("exact", n) - base["exact"] for n in (41, 81)]
    cached = [flops("cached", n) - base["cached"] for n in (41, 81)]
    assert cached[1] / cached[0] == pytest.approx(2.0)
    assert exact[1] / exact[0] > 2.5  # (prefix + s) summed over s: quadratic once s outgrows the 20-word prefix
    assert flops("exact", 81, "0") == flops("cached", 81, "0")  # intensity 0: one cached path for both modes


def test_memory_flags_name_the_model_and_the_setting_and_stay_quiet_when_it_fits():
    config = load_config([str(REPO / "configs/paper.yaml")], REPO)
    small = device("a100-80gb", {"memory_gb": 16})
    planned = cost_jobs.plan_jobs(config, small, DEVICES["cpu"], None)
    flags = memory_flags(planned, small)
    neo = [f for f in flags if f.startswith("train gpt-neo-1.3b")]
    assert len(neo) == 1 and "weights, gradients and AdamW states" in neo[0] and "cost.device" in neo[0], flags
    assert not any("train gpt2" in f or "train opt-125m" in f for f in flags), flags  # 2 GB of states fit
    big = DEVICES["a100-80gb"]
    assert memory_flags(cost_jobs.plan_jobs(config, big, DEVICES["cpu"], None), big) == []
    # sampling: a batch whose key/value cache outgrows the device names sampling.batch_size
    crowded = device("a100-80gb", {"memory_gb": 6})
    config["sampling"]["batch_size"] = 4096
    config["cost"]["max_minutes"] = None  # one batch of 4096 is over the paper's 4 h limit (refused: tested below)
    flags = memory_flags(cost_jobs.plan_jobs(config, crowded, DEVICES["cpu"], None), crowded)
    assert any(f.startswith("sample gpt-neo-1.3b") and "sampling.batch_size" in f for f in flags), flags


def test_unknown_model_is_reported_not_guessed(tmp_path):
    config = tiny_config()
    config["models"]["hub"] = {"source": "hf", "name": "someone/unknown-model", "tokenizer": "bpe"}
    config["experiments"]["main"]["models"] = ["hub"]
    auto = validate_config(copy.deepcopy(config), tmp_path)  # MAUVE's featuriser: the study's model, unknown too
    assert auto["evaluation"]["featuriser"] == {"model": "hub"}
    assert all(
        j.unknown for j in cost_jobs.plan_jobs(auto, DEVICES["a100-80gb"], DEVICES["cpu"], None) if j.rule == "features"
    )
    config["evaluation"]["featuriser"] = "minilm"
    config = validate_config(config, tmp_path)
    planned = cost_jobs.plan_jobs(config, DEVICES["a100-80gb"], DEVICES["cpu"], None)
    unknown = [j for j in planned if j.model == "hub" and j.rule not in ("sample_features", "evaluate")]  # featuriser
    assert {j.rule for j in unknown} == {"train", "sample", "perplexity", "extrapolation"}
    assert all(j.unknown == "model shape" for j in unknown)
    assert all(not j.unknown for j in planned if j.rule in ("evaluate", "features"))
    assert [r["unknown"] for r in rule_table(planned, 8, 2) if r["rule"] == "sample"] == [
        len([j for j in unknown if j.rule == "sample"])
    ]
    output = slurm.planned(config)
    key = next(j.key for j in unknown if j.rule == "sample")
    assert key in output and slurm.runtime_minutes(config, key, 2) == 2 * config["cost"]["unknown_minutes"]


def test_slurm_runtime_is_the_prediction_times_safety_and_attempt():
    config = config_of(cost={"safety": 50, "min_minutes": 1})
    planned = slurm.planned(config)
    train = next(j for j in planned.values() if j.rule == "train")
    expected = max(1, math.ceil(train.seconds * 50 / 60))
    assert slurm.runtime_minutes(config, train.key, 1) == expected
    assert slurm.runtime_minutes(config, train.key, 3) == 3 * expected
    doubled = config_of(cost={"safety": 100, "min_minutes": 1})
    assert slurm.runtime_minutes(doubled, train.key, 1) == max(1, math.ceil(train.seconds * 100 / 60))
    floor = config_of(cost={"safety": 50, "min_minutes": 10_000})
    assert slurm.runtime_minutes(floor, train.key, 1) == 10_000
    # a slower device asks for more time: half the FLOP/s and twice the fixed cost of the cpu entry
    slow = config_of(
        cost={
            "safety": 50,
            "min_minutes": 1,
            "cpu": "slow",
            "devices": {
                "slow": {
                    "peak_fp32": DEVICES["cpu"].peak_fp32 / 2,
                    "fixed_s": {r: 2 * s for r, s in DEVICES["cpu"].fixed_s.items()},
                }
            },
        }
    )
    assert slurm.runtime_minutes(slow, train.key, 1) > expected
    assert slurm.mem_mb(config, train.key, 2) == 2 * slurm.mem_mb(config, train.key, 1) > 0


def test_config_refuses_an_unknown_device_or_override_by_name():
    with pytest.raises(ConfigError, match="config key cost.device: unknown device 'a100'"):
        check_cost(config_of(cost={"device": "a100"})["cost"])
    with pytest.raises(ConfigError, match=r"config key cost.devices.h100: unknown keys \['tflops'\]"):
        check_cost(config_of(cost={"devices": {"h100": {"tflops": 1}}})["cost"])


def test_predicted_vs_measured_reads_benchmark_files(tmp_path):
    config = config_of()
    planned = cost_jobs.plan_jobs(config, DEVICES["cpu"], DEVICES["cpu"], None)
    sample = next(j for j in planned if j.rule == "sample")
    train = next(j for j in planned if j.rule == "train")
    assert benchmark_key(sample).startswith("sample/tiny/") and not benchmark_key(sample).endswith(".parquet")
    measured = {benchmark_key(sample): sample.seconds * 2, benchmark_key(train): train.seconds / 2}
    rows = {r["rule"]: r for r in compare(planned, measured)}
    assert rows["sample"]["median_ratio"] == pytest.approx(0.5) and rows["sample"]["jobs"] == 1
    assert rows["train"]["median_ratio"] == pytest.approx(2.0)
    # the files as snakemake's benchmark directive writes them
    from workflow_lib.cost.estimate import measured_seconds

    tsv = tmp_path / "benchmarks" / f"{benchmark_key(sample)}.tsv"
    tsv.parent.mkdir(parents=True)
    tsv.write_text("s\th:m:s\tmax_rss\n12.5\t0:00:12\t100\n")
    assert measured_seconds(tmp_path) == {benchmark_key(sample): 12.5}


def test_estimate_prints_no_empty_comparison_table(tmp_path):
    """Before any job of the study ran there is nothing to compare: no table; benchmarks of other jobs (another
    study in the same results folder) are said to be other jobs', not shown as an empty table."""
    from workflow_lib.cost.estimate import report

    config = config_of()
    text, _ = report(config, DEVICES["cpu"], DEVICES["cpu"], 1, 2, tmp_path, None)
    assert "Predicted vs measured" not in text
    other = tmp_path / "benchmarks" / "sample" / "another-model" / "x.tsv"
    other.parent.mkdir(parents=True)
    other.write_text("s\th:m:s\tmax_rss\n12.5\t0:00:12\t100\n")
    text, _ = report(config, DEVICES["cpu"], DEVICES["cpu"], 1, 2, tmp_path, None)
    assert "none of this study's GPU jobs has a benchmark" in text and "(1 files of other jobs)" in text
    assert "| rule | jobs | predicted s |" not in text
    sample = next(j for j in cost_jobs.plan_jobs(config, DEVICES["cpu"], DEVICES["cpu"], None) if j.rule == "sample")
    mine = tmp_path / "benchmarks" / f"{benchmark_key(sample)}.tsv"
    mine.parent.mkdir(parents=True, exist_ok=True)
    mine.write_text("s\th:m:s\tmax_rss\n12.5\t0:00:12\t100\n")
    text, _ = report(config, DEVICES["cpu"], DEVICES["cpu"], 1, 2, tmp_path, None)
    assert "| rule | jobs | predicted s |" in text and "| sample | 1 |" in text


def test_estimate_prints_the_paper_table_offline_in_seconds(tmp_path):
    start = time.monotonic()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "workflow_lib.cost.estimate",
            "--configfile",
            "configs/paper.yaml",
            "--device",
            "a100-80gb",
            "--gpus",
            "8",
            "--cpu",
            "cpu",
            "--results",
            str(tmp_path / "results"),
            "--output",
            str(tmp_path / "estimate"),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    seconds = time.monotonic() - start
    assert done.returncode == 0, done.stderr
    assert seconds < 30, seconds
    paper = load_config(["configs/paper.yaml"], REPO)
    shards = sum(1 for job in slurm.planned(paper).values() if job.rule == "sample")
    for rule, jobs in {"train": 56, "sample": shards, "sample_features": 200, "perplexity": 59, "features": 4}.items():
        assert f"| {rule} | {jobs} | GPU |" in done.stdout, done.stdout
    # MAUVE's k-means runs in CPU jobs: the GPU-hours it would have idled, less the split's start-up, are saved
    assert "| evaluate | 200 | CPU |" in done.stdout, done.stdout
    saved = re.search(
        r"GPU-hours saved by the split: ([\d.,]+)\. .* \(([\d.,]+) core-hours\);.* adds ([\d.,]+)\.", done.stdout
    )
    assert saved, done.stdout
    saved_h, core_h, added_h = (float(x.replace(",", "")) for x in saved.groups())
    assert core_h > 30 and 0 < added_h < 1 and saved_h == pytest.approx(core_h - added_h, abs=0.11)
    assert (
        f"Sampling: 200 evaluations in {shards} shards (sampling.shard_batches {{default: 400, gpt-neo-1.3b: 48}}"
        in done.stdout
    )
    assert "A prediction, not a measurement" in done.stdout and "GPU-hours" in done.stdout
    assert (tmp_path / "estimate/a100-80gb.md").read_text() == done.stdout.rstrip("\n") + "\n"
    assert (tmp_path / "estimate/a100-80gb.csv").read_text().startswith("rule,jobs,unknown,on,flops")


def test_calibration_measures_this_machine_into_a_device():
    from workflow_lib.cost import calibrate
    from workflow_lib.cost.shapes import model_shape

    config = config_of()
    measured = calibrate.calibrate(log=lambda *_: None, rules=("sample",), config=config)
    local = device("local", {k: v for k, v in measured.items() if k not in ("name", "source")})
    assert local.peak_fp32 > 1e8 and 0 < local.mfu_train < 2 and local.layer_overhead_s > 0
    assert local.bandwidth > 0 and local.load_bytes_per_s > 0 and local.mauve_s > 0
    assert 0.5 < local.fixed_s["sample"] < 60  # a fresh interpreter importing and loading what a sample job does
    # the study's own model shape is timed, and its rates replace peak x MFU for that shape only
    shape = model_shape(config, "tiny")
    assert set(local.shape_rates) == {shape.key} and local.rate("train", "fp32", shape.key) > 1e6
    assert local.rate("train", "fp32", "another-shape") == local.peak_fp32 * local.mfu_train
    train = next(j for j in cost_jobs.plan_jobs(config, local, local, None) if j.rule == "train")
    generic = device("local", {k: v for k, v in measured.items() if k not in ("name", "source", "shape_rates")})
    train_generic = next(j for j in cost_jobs.plan_jobs(config, generic, generic, None) if j.rule == "train")
    assert train.parts["compute"] != train_generic.parts["compute"]


def test_a_featuriser_is_costed_without_an_output_head():
    """MAUVE's features are the last hidden state: MiniLM multiplies its 6 blocks (10.6M parameters), not its 30,522 x
    384 embedding as a head would (which doubled the evaluate jobs' predicted FLOPs against make real's)."""
    from workflow_lib.cost.shapes import featuriser_shape

    headless, as_lm = featuriser_shape("minilm"), from_config(KNOWN["minilm"])
    assert headless.matmul_params == 6 * (4 * 384**2 + 2 * 384 * 1536) == as_lm.matmul_params - 30522 * 384
    assert headless.params == as_lm.params and headless.key != as_lm.key  # its own entry in a calibration


def test_an_evaluation_under_mauves_floor_is_costed_without_the_featuriser():
    """Under evaluation.mauve.min_texts an evaluation scores no MAUVE (workflow_lib.evaluate.metrics): its
    sample_features job loads no featuriser and its evaluate job runs no k-means, so each is its fixed cost alone; at
    the floor the featurisation is a GPU job's forward passes and the k-means a CPU job's, which holds no GPU."""
    cpu, gpu = DEVICES["cpu"], DEVICES["a100-80gb"]

    config = config_of()
    config["evaluation"]["gpus"] = 1
    prompts = cost_jobs.sizes.eval_set_prompts(config, next(iter(config["eval_sets"])), None)["prompts"]

    def evaluation(min_texts: int):
        config["evaluation"]["mauve"]["min_texts"] = min_texts
        jobs = cost_jobs.plan_jobs(config, gpu, cpu, None)
        return next(j for j in jobs if j.rule == "sample_features"), next(j for j in jobs if j.rule == "evaluate")

    (few_features, few), (features, enough) = evaluation(prompts + 1), evaluation(prompts)
    assert few.parts == {"fixed": cpu.fixed_s["evaluate"]} and not few.unknown
    assert few_features.parts == {"fixed": gpu.fixed_s["sample_features"]} and few_features.devices == 1
    assert set(enough.parts) == {"fixed", "mauve"} and enough.devices == 0 and enough.seconds > few.seconds
    assert enough.parts["mauve"] == cost_jobs.mauve_seconds(config, prompts, config["sampling"]["runs"], cpu.mauve_s)
    assert {"compute", "overhead", "fixed", "load"} == set(features.parts) and features.devices == 1
    assert features.key == layout.sidecar(enough.key, ".features.parquet")


def paper_config(**cost) -> dict:
    config = load_config(["configs/paper.yaml"], REPO)
    config["cost"].update(cost)
    return config


def shard_plan(config: dict) -> dict[str, list[str]]:
    """{samples path: its shards' paths}, as the cost model plans them."""
    shards: dict[str, list[str]] = {}
    for job in slurm.planned(config).values():
        if job.rule == "sample":
            shards.setdefault(job.samples, []).append(job.key)
    return shards


def test_the_papers_study_plans_every_job_within_its_four_hour_limit():
    config = paper_config()
    assert (config["cost"]["device"], config["cost"]["max_minutes"]) == ("a100-80gb", 240)
    planned = slurm.planned(config)
    assert all(not j.unknown for j in planned.values())
    assert max(slurm.runtime_minutes(config, key) for key in planned) <= 240
    assert max(j.seconds for j in planned.values()) * config["cost"]["safety"] <= 240 * 60
    shards = shard_plan(config)
    assert len(shards) == 200 and max(map(len, shards.values())) > 1
    # Each shard of an evaluation is whole batches of its rows, at most sampling.shard_batches of them.
    for job in planned.values():
        if job.rule == "sample":
            assert job.flops > 0 and len(shards[job.samples]) == job.shards


def test_no_cost_setting_or_device_moves_a_sampling_shard():
    """Issue 53: the shards are the data's (sampling.shard_batches), so what a user changes after a timeout (a
    larger cost.safety or cost.max_minutes) or for another cluster (cost.device, a datasheet) leaves every shard's
    path, and so every finished sampling job, as it was; only the requests change."""
    base = shard_plan(paper_config())
    for cost in ({"safety": 3}, {"device": "h100"}, {"max_minutes": 480}, {"max_minutes": None}, {"min_minutes": 30}):
        assert shard_plan(paper_config(**cost)) == base, cost
    faster = paper_config(devices={"a100-80gb": {"peak_fp32": 1e15, "mfu_forward": 0.9}})  # a datasheet override
    assert shard_plan(faster) == base
    key = next(iter(base.values()))[0]
    assert slurm.runtime_minutes(paper_config(safety=3), key) > slurm.runtime_minutes(paper_config(), key)


def test_a_shard_predicted_past_the_limit_is_refused_naming_the_shard_batches_that_fit():
    with pytest.raises(ConfigError, match=r"set sampling.shard_batches to at most (\{.*\}) \(its") as error:
        slurm.planned(paper_config(max_minutes=60, min_minutes=1))
    fits = yaml.safe_load(re.search(r"at most (\{.*\}) \(its", error.value.args[0]).group(1))
    assert set(fits) == {"gpt2", "opt-125m", "gpt-neo-1.3b"} and 1 <= fits["gpt-neo-1.3b"] < 48
    assert "cost.max_minutes: 60 minutes" in error.value.args[0]
    config = paper_config(max_minutes=60, min_minutes=1)
    config["sampling"]["shard_batches"] = fits  # what the message names: every shard then fits
    assert max(j.seconds for j in slurm.planned(config).values() if j.rule == "sample") * 2 <= 60 * 60
    with pytest.raises(ConfigError, match=r"not even one batch of 64 rows fits .* raise cost.max_minutes"):
        slurm.planned(paper_config(max_minutes=1, min_minutes=1))
    # predicted within the limit but not x cost.safety: planned, asking for the limit
    config = paper_config(safety=3)
    assert max(j.seconds for j in slurm.planned(config).values()) * 3 > 240 * 60
    assert max(slurm.runtime_minutes(config, key) for key in slurm.planned(config)) == 240


def test_the_old_shards_key_and_unknown_models_are_refused_naming_the_key():
    with pytest.raises(ConfigError, match="sampling.shards: replaced by sampling.shard_batches"):
        config_of(sampling={"shards": 3})
    with pytest.raises(ConfigError, match="sampling.shard_batches.gpt9: not a model of this config; name one of tiny"):
        config_of(sampling={"shard_batches": {"default": 2, "gpt9": 1}})
    mapped = config_of(sampling={"shard_batches": {"default": None, "tiny": 1}, "batch_size": 2})
    assert {j.shards for j in slurm.planned(mapped).values() if j.rule == "sample"} != {1}


def test_a_fixed_number_of_shards_is_kept_and_requests_stay_under_the_limit():
    config = config_of(
        sampling={"shard_batches": 1, "batch_size": 2}, cost={"max_minutes": 15, "min_minutes": 1, "safety": 1_000_000}
    )
    sample = next(j for j in slurm.planned(config).values() if j.rule == "sample")
    assert sample.shards > 1 and sample.key.endswith(f".shards/0-of-{sample.shards}.parquet")
    # predicted x safety is far over 15 minutes: the request stops at the limit, for every attempt
    assert slurm.runtime_minutes(config, sample.key, 1) == slurm.runtime_minutes(config, sample.key, 3) == 15
    with pytest.raises(ConfigError, match="cost.max_minutes: 5 is below cost.min_minutes"):
        check_cost(config_of(cost={"max_minutes": 5})["cost"])


@pytest.mark.parametrize("strategy", ["insertion", "replacement", "deletion"])
def test_exact_sampling_feeds_the_expected_suffix_past_the_first_edit(strategy):
    """`exact_fed_tokens` against the tokens exact sampling feeds past its unperturbed cache (`reuse.suffixes`) on
    10,000 prefixes perturbed by the perturber, every token eligible and no synonym the token itself: within 3%
    (measured within 2%) at the prefix lengths the paper's sampling sees (30 to 100 tokens)."""
    import torch

    from workflow_lib.perturb.backends import KeyedRandom
    from workflow_lib.perturb.perturber import perturb
    from workflow_lib.perturb.synonym_table import SynonymTable
    from workflow_lib.sample.reuse import suffixes

    vocab, rows = 50, 10_000
    tokens = list(range(1, vocab))
    table = SynonymTable.from_rows(vocab, tokens, [[t % (vocab - 1) + 1] for t in tokens], [[1.0]] * len(tokens))
    for n in (30, 100):
        values = torch.randint(1, vocab, (rows * n,), generator=torch.Generator().manual_seed(n))
        offsets = torch.arange(0, rows * n + 1, n)
        for p in (0.025, 0.1):
            out = perturb(values, offsets, strategy, p, table.to("cpu"), KeyedRandom(torch.arange(rows), offsets), [0])
            fed = float(suffixes(values, offsets, out.values, out.offsets)[1].double().mean())
            assert cost_jobs.exact_fed_tokens(n, p, strategy) == pytest.approx(fed, rel=0.03), (n, p)
    assert cost_jobs.exact_fed_tokens(40, 0.0, strategy) == 0.0
    assert cost_jobs.exact_fed_tokens(40, 1.0, strategy) == 40 * get_strategy(strategy).length_factor(1.0)


def test_exact_sampling_is_costed_as_it_runs_reusing_the_cache_or_not():
    """A GPT-2 whose prompt and new tokens fit its context reuses the cache (reuse.reuse_fits); GPT-Neo (local
    attention, the paper's 1.3B) and a prefix beyond the context recompute the whole prefix: their jobs cost
    what they did before the reuse, and the reuse costs fewer FLOPs (the tiny study's exact jobs: 0.39 of them)."""
    gpt2, neo = from_config(KNOWN["gpt2"]), from_config(KNOWN["EleutherAI/gpt-neo-1.3B"])
    assert neo.window == 256 and gpt2.window is None
    assert cost_jobs.exact_reuses_cache(gpt2, 40, 80) and not cost_jobs.exact_reuses_cache(neo, 40, 80)
    assert cost_jobs.exact_reuses_cache(gpt2, 945, 80) and not cost_jobs.exact_reuses_cache(gpt2, 946, 80)

    def flops(reusing: bool) -> float:
        test = SamplingCondition("unbiased", "distributional", "insertion", "0.025", "exact")
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(cost_jobs, "exact_reuses_cache", lambda *args: reusing)
            return cost_jobs.sample_job(config_of(), "k", "tiny", "syn-test", test, DEVICES["h100"], None).flops

    assert flops(True) < 0.6 * flops(False)


def test_cached_insertion_feeds_the_inserting_rows_alone_on_every_device():
    """Cached insertion feeds every row its token and the rows that insert (about alpha of them) a second pass of
    their own (sample/loops.py, Cached.insert), on a CPU and a GPU alike: (1 + alpha) tokens a row a step, not the
    two slots of one pass for every row; intensity 0 (one token a row a step) is the reference."""

    def generated_flops(gpus: int, strategy: str, intensity: str) -> float:
        config = config_of(sampling={"new_tokens": 41, "gpus": gpus})
        dev = DEVICES["h100"] if gpus else DEVICES["cpu"]
        test = SamplingCondition("unbiased", "distributional", strategy, intensity, "cached")
        job = cost_jobs.sample_job(config, "k", "tiny", "syn-test", test, dev, None)
        first = config_of(sampling={"new_tokens": 1, "gpus": gpus})  # the prompts' pass alone
        return job.flops - cost_jobs.sample_job(first, "k", "tiny", "syn-test", test, dev, None).flops

    for gpus in (0, 1):
        ratio = generated_flops(gpus, "insertion", "0.025") / generated_flops(gpus, "insertion", "0.0")
        assert ratio == pytest.approx(1 + 0.025)
