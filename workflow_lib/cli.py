"""What every `python -m workflow_lib.<stage>` entry point shares: logging and a clean failure.

Rules redirect stderr to their `log:` file, and snakemake (with --show-failed-logs) shows that file when a job
fails. The traceback is logged for whoever debugs, but the last line is always the plain message that
names the config key or file, so a user never has to read a traceback to know what to fix.
"""

from __future__ import annotations

import json
import logging
import sys
from typing import Callable

log = logging.getLogger("workflow_lib")


class StageError(RuntimeError):
    """An expected failure (bad data, missing file, no network): reported as one clear line."""


def setup_logging(level: int = logging.INFO) -> None:
    logging.basicConfig(level=level, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s")


def run(main: Callable[[], None]) -> None:
    setup_logging()
    try:
        main()
    except (StageError, ValueError, FileNotFoundError) as error:
        log.debug("traceback", exc_info=True)
        log.error("%s", error)
        sys.exit(1)


def parse_json_arg(text: str, what: str) -> dict:
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise StageError(f"{what}: not valid JSON ({error})") from error
