"""The trainer's command line as the tests run it (`python -m workflow_lib.train.trainer`), on a data folder laid out
as theirs are: `<data>/<train_file>`, `<data>/val.parquet` and the tokenizer `<data>/tok`; the run's checkpoints
under `<out>/resume`, its model in `<out>/model`."""

from __future__ import annotations

import json
import sys
from pathlib import Path

MLE = {"loss": "mle"}


def trainer_command(
    data: Path,
    out: Path,
    *,
    model: dict,
    settings: dict,
    train_file: str = "train.parquet",
    objective: dict = MLE,
    model_key: str = "tiny",
) -> list[str]:
    """The trainer's command line for one model (`model`, the config's entry) trained with `settings` (the config's
    `training` section) and `objective`, with this interpreter."""
    return [
        sys.executable,
        "-m",
        "workflow_lib.train.trainer",
        "--train",
        str(data / train_file),
        "--validation",
        str(data / "val.parquet"),
        "--tokenizer",
        str(data / "tok"),
        "--model-key",
        model_key,
        "--model",
        json.dumps(model),
        "--objective",
        json.dumps(objective),
        "--settings",
        json.dumps(settings),
        "--resume-dir",
        str(out / "resume"),
        "--output",
        str(out / "model"),
    ]
