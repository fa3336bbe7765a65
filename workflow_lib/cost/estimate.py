"""`make estimate`: what a study will cost, per rule, on a device, before it runs (and, after, against what it took).

    python -m workflow_lib.cost.estimate --configfile configs/paper.yaml --device a100-80gb --gpus 8
    python -m workflow_lib.cost.estimate --calibrate            # measure this machine first (results/estimate/)

Prints and writes (results/estimate/<device>.md and .csv) one row per rule: jobs, FLOPs, predicted device-hours,
the wall time with --gpus devices in parallel (device-hours / gpus, at least the longest job), and the share of
the total. Jobs that hold no GPU (`gpus: 0`) are predicted on `--cpu` (default: this machine's calibration if it
exists, else `cost.cpu`), one core each, and the wall time then assumes --cores of them. Then every job whose
weights, gradients and optimizer states (training) or weights and cache (sampling) alone exceed the device's
memory, naming the model and the setting to change. When results/benchmarks/ holds the study's measured jobs,
predicted and measured seconds are compared per rule (the median ratio and its range).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from workflow_lib.config import ConfigError
from workflow_lib.cost.devices import Device, assumptions, device
from workflow_lib.cost.jobs import RULES, Job, flow, plan_jobs
from workflow_lib.layout import (
    ESTIMATE,
    FEATURES,
    FEATURES_JOB,
    Evaluation,
    benchmark_path,
    fields_of,
    parse,
    shard_file,
)

CALIBRATION = Path(ESTIMATE.format(file="calibration.json"))
PARTS = {
    "compute": "compute",
    "overhead": "per-call overhead",
    "fixed": "fixed cost",
    "load": "checkpoint load",
    "mauve": "MAUVE k-means (CPU)",
}


def load_config(paths: list[str], workdir: Path) -> dict:
    """The config snakemake would see: the files merged in order (later keys win, nested dicts merged), validated."""
    from workflow_lib.config import validate_config
    from workflow_lib.config_files import read_configs
    from workflow_lib.cost.devices import check_cost

    config = read_configs(paths)
    validate_config(config, workdir=workdir)
    check_cost(config["cost"])
    return config


def devices(config: dict, gpu_name: str | None, cpu_name: str | None) -> tuple[Device, Device]:
    """(GPU, CPU) devices: the named ones, else the config's cost.device and this machine's calibration (`local`)
    where it exists, else cost.cpu. ValueError for an unknown device or a missing calibration."""
    overrides = config["cost"]["devices"]
    gpu_name = gpu_name or config["cost"]["device"]
    cpu_name = cpu_name or ("local" if CALIBRATION.is_file() else config["cost"]["cpu"])
    if "local" in (gpu_name, cpu_name) and "local" not in overrides:
        if not CALIBRATION.is_file():
            raise ValueError(f"device local: no calibration at {CALIBRATION}; run with --calibrate")
        calibrated = json.loads(CALIBRATION.read_text())
        overrides = {**overrides, "local": {k: v for k, v in calibrated.items() if k not in ("name", "source")}}
    return device(gpu_name, overrides.get(gpu_name)), device(cpu_name, overrides.get(cpu_name))


def rule_table(jobs: list[Job], gpus: int, cores: int) -> list[dict]:
    """One row per rule; a rule's share is of its kind's total (GPU-hours or CPU core-hours: never added together)."""
    rows = []
    totals = {
        kind: sum(j.device_seconds for j in jobs if not j.unknown and bool(j.devices) == kind) for kind in (False, True)
    }
    for rule in RULES:
        mine = [j for j in jobs if j.rule == rule]
        if not mine:
            continue
        known = [j for j in mine if not j.unknown]
        device_s = sum(j.device_seconds for j in known)
        on_gpu = any(j.devices for j in known)
        total = totals[on_gpu] or 1.0
        parallel = gpus if on_gpu else cores
        longest = max((j.seconds for j in known), default=0.0)
        parts: dict[str, float] = {}
        for job in known:
            for part, seconds in job.parts.items():
                parts[part] = parts.get(part, 0.0) + seconds * max(job.devices, 1)
        top = max(parts, key=parts.__getitem__) if parts else ""
        rows.append(
            {
                "rule": rule,
                "jobs": len(mine),
                "unknown": len(mine) - len(known),
                "on": "GPU" if on_gpu else "CPU",
                "flops": sum(j.flops for j in known),
                "device_hours": device_s / 3600,
                "wall_hours": max(device_s / parallel, longest) / 3600,
                "share": device_s / total,
                "largest_part": f"{PARTS.get(top, top)} ({100 * parts[top] / device_s:.0f}%)" if top else "",
            }
        )
    return rows


def time_limit_plan(config: dict, jobs: list[Job], gpu: Device) -> list[str]:
    """The shards of sampling and the longest job against `cost.max_minutes`, as the workflow will run them (the
    shards are the data's: `sampling.shard_batches`, the same on every device; their times are predicted on the
    device the estimate is for)."""
    cost = config["cost"]
    limit, safety = cost["max_minutes"], cost["safety"]
    shards = {j.samples: j.shards for j in jobs if j.shards}
    lines = ["## The plan against the time limit", ""]
    if limit is None:
        lines.append("Time limit: none (cost.max_minutes: null), so every evaluation samples in one job.")
    else:
        lines.append(
            f"Time limit: {limit} minutes (cost.max_minutes), with a safety factor of {safety:g} (cost.safety): every "
            f"job's predicted time x {safety:g} must fit, so a job may be predicted at {limit / safety / 60:.2f} h."
        )
    if shards:
        counts = sorted(shards.values())
        how = f"sampling.shard_batches {flow(config['sampling']['shard_batches'])}"
        lines.append(
            f"Sampling: {len(shards)} evaluations in {sum(counts)} shards ({how}: {counts[0]} to {counts[-1]} an "
            f"evaluation, median {counts[len(counts) // 2]})"
            + ("; a shard lost to preemption or the limit reruns alone." if counts[-1] > 1 else ".")
        )
    known = [j for j in jobs if not j.unknown]
    if known:
        longest = max(known, key=lambda j: j.seconds)
        request = longest.seconds * safety / 60
        verdict = (
            f"its request ({request:,.0f} min) is within the limit"
            if limit is not None and request <= limit
            else "a cluster's time limit below its request needs cost.max_minutes set and sampling.shard_batches"
            if limit is None
            else f"its request ({request:,.0f} min) is over the limit"
        )
        lines.append(f"Longest job: {longest.seconds / 3600:.2f} h ({longest.rule} {longest.key}); {verdict}.")
    if limit is not None:
        over = [j for j in known if j.seconds * safety / 60 > limit]
        for job in sorted(over, key=lambda j: -j.seconds)[:5]:
            what = (
                "it resumes from its checkpoint when retried"
                if job.rule == "train"
                else "it asks for the limit; fewer sampling.shard_batches fit it"
                if job.rule == "sample"
                else "a faster cost.device"
            )
            lines.append(f"- over the limit: {job.rule} {job.key} ({job.seconds / 3600:.2f} h): {what}")
    return lines


def split_saving(config: dict, jobs: list[Job]) -> list[str]:
    """The GPU-hours saved by running MAUVE's k-means in CPU jobs (evaluate) apart from the featurisation
    (sample_features): the CPU jobs' time, which in one job holding evaluation.gpus GPUs would have idled them, less
    the start-up the separate GPU jobs add (their fixed cost; the featuriser's loading is paid either way)."""
    gpus = config["evaluation"]["gpus"]
    known = [j for j in jobs if not j.unknown]
    cpu_s = sum(j.seconds for j in known if j.rule == "evaluate")
    if not gpus or not cpu_s:
        return []
    added = sum(j.parts.get("fixed", 0.0) * j.devices for j in known if j.rule == "sample_features")
    saved = (cpu_s * gpus - added) / 3600
    held = "its GPU" if gpus == 1 else f"its {gpus} GPUs"
    line = (
        f"GPU-hours saved by the split: {saved:,.1f}. MAUVE's k-means and ROUGE run in evaluate jobs that hold no GPU "
        f"({cpu_s / 3600:,.1f} core-hours); in one job with the featurisation they would have held {held} idle for "
        f"{cpu_s * gpus / 3600:,.1f} GPU-hours, and the separate sample_features jobs' start-up adds "
        f"{added / 3600:,.1f}."
    )
    return [line]


def memory_flags(jobs: list[Job], gpu: Device) -> list[str]:
    """One line per (rule, model) whose jobs' static memory exceeds the GPU's, naming the setting to change."""
    fixes = {
        "train": "a device with more memory (cost.device, --device): data parallelism (training.gpus) copies "
        "these to every GPU, and gradient_checkpointing saves only activations",
        "sample": "a smaller sampling.batch_size (the cache grows with it)",
        "sample_features": "a smaller featuriser (evaluation.featuriser)",
        "features": "a smaller evaluation.featuriser",
    }
    flags = {}
    for job in jobs:
        if job.devices and job.memory_gb > gpu.memory_gb and (job.rule, job.model) not in flags:
            flags[(job.rule, job.model)] = (
                f"{job.rule} {job.model}: {job.memory_what} need {job.memory_gb:.1f} GB, "
                f"more than {gpu.name}'s {gpu.memory_gb:g} GB: "
                f"{fixes.get(job.rule, 'a device with more memory')}"
            )
    return list(flags.values())


def measured_seconds(results: Path) -> dict[str, float]:
    """{benchmark key: wall seconds} from results/benchmarks/<rule>/<key>.tsv (snakemake `benchmark:` files)."""
    out = {}
    root = results / "benchmarks"
    for rule in RULES:
        for tsv in sorted((root / rule).rglob("*.tsv")):
            header, values = tsv.read_text().splitlines()[:2]
            out[f"{rule}/{tsv.relative_to(root / rule).with_suffix('')}"] = float(
                dict(zip(header.split("\t"), values.split("\t")))["s"]
            )
    return out


def benchmark_file(job: Job) -> str:
    """The `benchmark:` file of the job that wrote `job.key`, as its rule names it (rules/*.smk): the output's
    conditions (`layout.parse`) under results/benchmarks/<rule>/, .tsv for the output's file type."""
    if job.rule == "features":
        return benchmark_path(FEATURES_JOB.format(**fields_of(FEATURES, job.key)))
    at, kind = parse(job.key), f"benchmarks/{job.rule}"
    if at.shard is not None:  # as `layout.shard_template` names it
        assert at.eval_set is not None and at.test is not None
        evaluation = Evaluation(at.run, at.eval_set, at.test).path(kind, "")
        return shard_file(evaluation, at.shard).removesuffix(".parquet") + ".tsv"
    return at.moved(kind, at.suffix.rpartition(".")[0] + ".tsv")


def benchmark_key(job: Job) -> str:
    """<rule>/<name> of the job's benchmark file, results/benchmarks/<rule>/<name>.tsv (`measured_seconds`' key)."""
    folder = Path(benchmark_path(job.rule)).with_suffix("")
    return f"{job.rule}/{Path(benchmark_file(job)).relative_to(folder).with_suffix('')}"


def compare(jobs: list[Job], measured: dict[str, float]) -> list[dict]:
    rows = []
    for rule in RULES:
        pairs = [
            (j.seconds, measured[benchmark_key(j)])
            for j in jobs
            if j.rule == rule and not j.unknown and benchmark_key(j) in measured
        ]
        if pairs:
            ratios = sorted(p / m for p, m in pairs)
            rows.append(
                {
                    "rule": rule,
                    "jobs": len(pairs),
                    "predicted_s": statistics.median(p for p, _ in pairs),
                    "measured_s": statistics.median(m for _, m in pairs),
                    "median_ratio": statistics.median(ratios),
                    "min_ratio": ratios[0],
                    "max_ratio": ratios[-1],
                }
            )
    return rows


def markdown(rows: list[dict], columns: dict[str, str]) -> str:
    lines = ["| " + " | ".join(columns.values()) + " |", "|" + " --- |" * len(columns)]
    for row in rows:
        lines.append("| " + " | ".join(fmt(k, row[k]) for k in columns) + " |")
    return "\n".join(lines)


def fmt(column: str, value) -> str:
    if column == "share":
        return f"{100 * value:.1f}%"
    if column == "flops":
        return f"{value:.2e}"
    if isinstance(value, float):
        return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"
    return str(value)


def report(
    config: dict, gpu: Device, cpu: Device, gpus: int, cores: int, results: Path, workdir: Path
) -> tuple[str, list[dict]]:
    jobs = plan_jobs(config, gpu, cpu, workdir)
    rows = rule_table(jobs, gpus, cores)
    device_hours = sum(r["device_hours"] for r in rows if r["on"] == "GPU")
    parts = [
        f"# Predicted cost on {gpu.name} (GPU jobs, {gpus} in parallel) and {cpu.name} (CPU jobs, {cores} cores)",
        "",
        "A prediction, not a measurement. Assumptions:",
        f"- {assumptions(gpu)}",
        f"- {assumptions(cpu)}",
        "",
        markdown(
            rows,
            {
                "rule": "rule",
                "jobs": "jobs",
                "on": "on",
                "flops": "FLOPs",
                "device_hours": "device-hours",
                "wall_hours": "wall hours",
                "share": "share of GPU or CPU",
                "largest_part": "largest part",
            },
        ),
        "",
        f"GPU total: {device_hours:.1f} GPU-hours.",
    ]
    cpu_hours = sum(r["device_hours"] for r in rows if r["on"] == "CPU")
    if cpu_hours:
        parts.append(f"CPU total: {cpu_hours:.1f} core-hours.")
    parts += split_saving(config, jobs)
    parts += ["", *time_limit_plan(config, jobs, gpu)]
    unknown = sorted({f"{j.rule} {j.model}: {j.unknown} unknown" for j in jobs if j.unknown})
    if unknown:
        parts += ["", "Not predicted (size unknown before the study runs):", *[f"- {u}" for u in unknown]]
    flags = memory_flags(jobs, gpu)
    parts += ["", "Memory: " + ("every job's static memory fits." if not flags else "")] + [f"- {f}" for f in flags]
    measured = measured_seconds(results)
    comparison = compare(jobs, measured) if measured else []
    if comparison:
        parts += [
            "",
            f"Predicted vs measured ({results / 'benchmarks'}), seconds per job (medians):",
            "",
            markdown(
                comparison,
                {
                    "rule": "rule",
                    "jobs": "jobs",
                    "predicted_s": "predicted s",
                    "measured_s": "measured s",
                    "median_ratio": "median predicted/measured",
                    "min_ratio": "min",
                    "max_ratio": "max",
                },
            ),
        ]
    elif measured:  # benchmarks of other jobs (another study in the same folder): no empty table
        parts += [
            "",
            (
                f"Predicted vs measured: none of this study's GPU jobs has a benchmark under "
                f"{results / 'benchmarks'} yet ({len(measured)} files of other jobs)."
            ),
        ]
    return "\n".join(parts) + "\n", rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m workflow_lib.cost.estimate", description=__doc__.splitlines()[0])
    parser.add_argument("--configfile", nargs="+", default=["config.yaml"])
    parser.add_argument("--device", help="the GPU (default: the config's cost.device)")
    parser.add_argument("--gpus", type=int, default=8, help="GPUs running jobs in parallel")
    parser.add_argument("--cpu", help="the device of jobs with no GPU (default: 'local' if calibrated, else cost.cpu)")
    parser.add_argument("--cores", type=int, default=2, help="CPU cores running jobs in parallel")
    parser.add_argument("--calibrate", action="store_true", help="measure this machine first, into " + str(CALIBRATION))
    parser.add_argument(
        "--results",
        type=Path,
        default=Path("results"),
        help="a study's results folder: its data sizes and measured benchmarks are read (the study's "
        "working directory is its parent)",
    )
    parser.add_argument("--output", type=Path, default=Path(ESTIMATE.format(file="")))
    args = parser.parse_args(argv)
    workdir = args.results.parent
    try:
        config = load_config(args.configfile, workdir)
    except ConfigError as error:
        sys.exit(f"Invalid configuration: {error}")
    if args.calibrate:
        from workflow_lib.cost.calibrate import calibrate

        CALIBRATION.parent.mkdir(parents=True, exist_ok=True)
        measured = calibrate(config=config, workdir=workdir)
        if CALIBRATION.is_file():  # keep the shapes other studies' calibrations measured
            measured["shape_rates"] = {
                **json.loads(CALIBRATION.read_text()).get("shape_rates", {}),
                **measured["shape_rates"],
            }
        CALIBRATION.write_text(json.dumps(measured, indent=1) + "\n")
    try:
        gpu, cpu = devices(config, args.device, args.cpu)
    except ValueError as error:
        sys.exit(str(error))
    try:
        text, rows = report(config, gpu, cpu, args.gpus, args.cores, args.results, workdir)
    except ConfigError as error:  # a time limit below one sampling batch
        sys.exit(f"Invalid configuration: {error}")
    print(text)
    args.output.mkdir(parents=True, exist_ok=True)
    (args.output / f"{gpu.name}.md").write_text(text)
    import csv

    with open(args.output / f"{gpu.name}.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]) if rows else ["rule"])
        writer.writeheader()
        writer.writerows(rows)


if __name__ == "__main__":
    main()
