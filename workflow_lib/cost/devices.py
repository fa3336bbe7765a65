"""Devices a study runs on: peak throughput and memory from vendor datasheets, and the assumptions that turn peak
into time.

A job's compute time is its FLOPs over (peak x model-FLOPs utilisation, MFU); a decoding step of a key/value
cache is bounded below by reading the weights once (bytes over bandwidth x its utilisation); every forward call
pays a per-layer dispatch overhead (eager PyTorch launches each layer's kernels from Python); and every job pays
a fixed cost (interpreter, imports, CUDA start, model load). The utilisations and overheads are assumptions, not
measurements: `cost.devices.<name>` in the config overrides any of them, and `--calibrate` measures this machine.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace

TB = 1e12


@dataclass(frozen=True)
class Device:
    """One device (a GPU, or one CPU core: the default study's jobs run one thread each)."""

    name: str
    peak_half: float  # dense bf16 (fp16 on V100) FLOP/s, tensor cores; what mixed-precision training runs at
    peak_fp32: float  # dense fp32 FLOP/s (no TF32: torch leaves it off for matmuls); sampling and scoring run here
    memory_gb: float
    bandwidth: float  # memory bytes/s
    has_bf16: bool = True
    source: str = ""
    # Assumptions (override with cost.devices.<name>.<key>):
    mfu_train: float = 0.35  # of peak_half (bf16 mixed precision), or of peak_fp32 where the device has no bf16
    mfu_forward: float = 0.5  # batched forward passes (scoring, features, prompts, exact sampling)
    bandwidth_use: float = 0.6  # of bandwidth, a cached decoding step's weight and cache reads
    layer_overhead_s: float = 6e-4  # per layer per forward call: eager dispatch and kernel launches
    load_bytes_per_s: float = 1e9  # loading a checkpoint from disk
    launch_s: float = 3.3  # `accelerate launch` of a multi-process training job (measured here, docs/benchmarks.md)
    mauve_s: float = 4.0e-7  # MAUVE's k-means on the host CPU: s per point per bucket per clustering (--calibrate here)
    fixed_s: dict = field(default_factory=lambda: dict(GPU_FIXED_S))  # per rule: interpreter, imports, CUDA start
    # Measured FLOP/s of given model shapes ({Shape.key: {"train": .., "forward": ..}}, --calibrate with a config):
    # where a shape has them, they replace peak x MFU for that shape.
    shape_rates: dict = field(default_factory=dict)

    def peak(self, precision: str) -> float:
        return self.peak_half if precision in ("bf16", "fp16") and self.peak_half else self.peak_fp32

    def rate(self, kind: str, precision: str, shape_key: str | None = None) -> float:
        """Achieved FLOP/s of a kind of work (train, forward): measured for the shape where calibrated, else
        peak x the assumed MFU."""
        if shape_key in self.shape_rates:
            return self.shape_rates[shape_key][kind]
        return self.peak(precision) * (self.mfu_train if kind == "train" else self.mfu_forward)


# Seconds a GPU job pays before its first FLOP (interpreter, torch + transformers imports, CUDA context): the
# imports as --calibrate measured them on the development machine (3.7-4.7 s) plus an assumed 5 s of CUDA start.
GPU_FIXED_S: dict[str, float] = {
    "train": 9.0,
    "sample": 9.0,
    "sample_features": 9.0,
    "evaluate": 5.0,  # a CPU job (no CUDA start): mauve and polars imports
    "perplexity": 9.0,
    "features": 9.0,
    "extrapolation": 9.0,
}

DEVICES = {
    "a100-40gb": Device(
        "a100-40gb",
        312 * TB,
        19.5 * TB,
        40,
        1.555 * TB,
        source="NVIDIA A100 datasheet (SXM): 312 TFLOPS bf16 dense, 19.5 fp32, 1,555 GB/s",
    ),
    "a100-80gb": Device(
        "a100-80gb",
        312 * TB,
        19.5 * TB,
        80,
        2.039 * TB,
        source="NVIDIA A100 datasheet (80GB SXM): 312 TFLOPS bf16 dense, 19.5 fp32, 2,039 GB/s",
    ),
    "h100": Device(
        "h100",
        989 * TB,
        67 * TB,
        80,
        3.35 * TB,
        source="NVIDIA H100 datasheet (SXM5): 989 TFLOPS bf16 dense, 67 fp32, 3.35 TB/s",
    ),
    "h200": Device(
        "h200",
        989 * TB,
        67 * TB,
        141,
        4.8 * TB,
        source="NVIDIA H200 datasheet (SXM): 989 TFLOPS bf16 dense, 67 fp32, 141 GB, 4.8 TB/s; MFUs and overhead "
        "fitted to `make gpu-check` on one H200 (bench/measured/gpu_check_h200.json, 2026-11-30)",
        # Fitted jointly to bf16 training, fp32 sampling and featurisation (every prediction within -18% to +23%,
        # tests/bench/test_h200_calibration.py). A two-term fit, not a physical MFU: at these sizes each step is
        # bound by kernel launches (bf16 autocast's casts included), which the overhead and the MFU share.
        mfu_train=0.6,
        mfu_forward=0.54,
        layer_overhead_s=1.9e-3,
    ),
    "l40s": Device(
        "l40s",
        362 * TB,
        91.6 * TB,
        48,
        0.864 * TB,
        source="NVIDIA L40S datasheet: 362 TFLOPS bf16 dense, 91.6 fp32, 864 GB/s",
    ),
    "v100": Device(
        "v100",
        125 * TB,
        15.7 * TB,
        32,
        0.9 * TB,
        has_bf16=False,
        source="NVIDIA V100 datasheet (SXM2 32GB): 125 TFLOPS fp16 tensor, 15.7 fp32, 900 GB/s; no bf16, "
        "so mixed_precision auto trains in fp32",
    ),
    # One core of a current x86 server (AVX2/AVX-512 FMA at ~3 GHz, ~100 GFLOP/s fp32 peak): an assumption; run
    # --calibrate for this machine's own numbers.
    "cpu": Device(
        "cpu",
        0.0,
        100e9,
        16,
        10e9,
        has_bf16=False,
        source="assumed: one x86 core, 100 GFLOP/s fp32",
        mfu_train=0.3,
        mfu_forward=0.3,
        layer_overhead_s=2e-4,
        load_bytes_per_s=5e8,
        fixed_s={
            "train": 3.7,
            "sample": 3.8,
            "sample_features": 3.7,
            "evaluate": 4.7,
            "perplexity": 3.8,
            "features": 3.7,
            "extrapolation": 3.7,
        },
    ),
}

TUNABLE = {f.name for f in fields(Device)} - {"name", "source"}


def device(name: str, overrides: dict | None = None) -> Device:
    """A device of the table (or a calibrated one, passed as overrides of `cpu`), with the config's overrides."""
    if name not in DEVICES and not overrides:
        raise ValueError(
            f"unknown device {name!r}: one of {', '.join(DEVICES)} (or calibrate this machine with --calibrate)"
        )
    base = DEVICES.get(name, replace(DEVICES["cpu"], name=name, source="calibrated"))
    overrides = dict(overrides or {})
    unknown = set(overrides) - TUNABLE
    if unknown:
        raise ValueError(f"cost.devices.{name}: unknown keys {sorted(unknown)}; allowed: {sorted(TUNABLE)}")
    if "fixed_s" in overrides:
        overrides["fixed_s"] = {**base.fixed_s, **overrides["fixed_s"]}
    return replace(base, **overrides)


def assumptions(dev: Device) -> str:
    """The assumptions behind a prediction, one line, for tables and captions."""
    fixed = ", ".join(f"{rule} {s:g}" for rule, s in dev.fixed_s.items())
    return (
        f"{dev.name}: {dev.source}; MFU {dev.mfu_train:g} training, {dev.mfu_forward:g} forward passes; "
        f"{dev.bandwidth_use:g} of bandwidth when decoding; {dev.layer_overhead_s * 1e3:g} ms per layer per "
        f"forward call; checkpoints load at {dev.load_bytes_per_s / 1e9:g} GB/s; fixed s per job: {fixed}"
    )


def check_cost(cost: dict) -> None:
    """The config's `cost` section names devices that exist and overrides only what a device has. Run beside
    `validate_config` (rules/common.smk, `load_config` of the estimate), which checks everything else."""
    from workflow_lib.config import ConfigError

    for name, overrides in cost.get("devices", {}).items():
        unknown = set(overrides) - TUNABLE
        if unknown:
            raise ConfigError(
                f"config key cost.devices.{name}: unknown keys {sorted(unknown)}; allowed: {sorted(TUNABLE)}"
            )
    if cost.get("max_minutes") is not None and cost["max_minutes"] < cost["min_minutes"]:
        raise ConfigError(
            f"config key cost.max_minutes: {cost['max_minutes']} is below cost.min_minutes ({cost['min_minutes']}), "
            "the least any job asks for"
        )
    for key in ("device", "cpu"):
        if cost[key] not in DEVICES and cost[key] not in cost.get("devices", {}):
            raise ConfigError(
                f"config key cost.{key}: unknown device {cost[key]!r}: one of {', '.join(DEVICES)}, or a name "
                "defined under cost.devices"
            )
