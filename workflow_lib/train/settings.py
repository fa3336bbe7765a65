"""The settings a training job reads, and how it starts: the rule and the cost model call these.

Standard library only: rules/train.smk imports it at parse time.
"""

from __future__ import annotations

# The trackers (training.report_to, tracking_dir) reach the training jobs through the environment, not params:
# turning one on must not retrain a finished model (workflow_lib/train/tracking.py).
TRACKING_KEYS = ("report_to", "tracking_dir")


def training_settings(config: dict, model: str, seed: int) -> dict:
    """The top-level `training` section with the model's overrides and the run's seed (the trackers left out)."""
    settings = {**config["training"], **config["models"][model].get("training", {}), "seed": int(seed)}
    return {k: v for k, v in settings.items() if k not in TRACKING_KEYS}


def training_processes(config: dict, model: str) -> int:
    """One process per GPU, one on a CPU."""
    return max({**config["training"], **config["models"][model].get("training", {})}["gpus"], 1)


def launcher(config: dict, model: str, seed: int) -> str:
    """How a training job starts: `python` for one process, `accelerate launch` with every setting explicit for N.

    One process needs no launcher: the trainer's `Accelerator` is given the device and the mixed precision itself,
    and `accelerate launch` would only cost its own interpreter (about 3 s a job). `training.gpus: N` (N > 1)
    starts N data-parallel processes (--multi_gpu: torchrun), all settings on the command line, so no user's
    ~/.cache accelerate config changes a run. Whether they use GPUs is decided in the job, where the hardware
    is, not here on the submit host: without CUDA the trainer joins them over gloo on the CPU, with a warning."""
    processes = training_processes(config, model)
    if processes == 1:
        return "python"
    return " ".join(accelerate_launch(processes, training_settings(config, model, seed)["mixed_precision"]))


def accelerate_launch(processes: int, mixed_precision: str, accelerate: str = "accelerate") -> list[str]:
    """`accelerate launch` with every setting explicit (bench/train.py runs it with one process too)."""
    precision = "no" if mixed_precision == "auto" else mixed_precision
    multi = ["--multi_gpu"] if processes > 1 else []
    return [accelerate, "launch", *multi, "--num_processes", str(processes), "--num_machines", "1"] + [
        *["--mixed_precision", precision, "--dynamo_backend", "no", "--main_process_port", "0"]
    ]


def tracking_settings(config: dict) -> dict:
    """The trackers' settings, which reach the job through the environment (workflow_lib/train/tracking.py)."""
    return {"report_to": config["training"]["report_to"], "dir": config["training"]["tracking_dir"]}
