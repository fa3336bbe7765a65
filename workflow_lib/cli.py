"""What every `python -m workflow_lib.<stage>` entry point shares: logging and a clean failure.

Rules redirect stderr to their `log:` file, and snakemake (with --show-failed-logs) shows that file when a job
fails. A user's error (StageError: bad data, a missing file, no network; FileNotFoundError) is one line that names
the config key or file. Anything else (a ValueError from a check that refuses a non-finite result, or a bug) keeps
its traceback in the log for whoever debugs, and its last line is still the plain message.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Callable

log = logging.getLogger("workflow_lib")


class StageError(RuntimeError):
    """An expected failure (bad data, missing file, no network): reported as one clear line."""


def setup_logging(level: int = logging.INFO) -> None:
    logging.basicConfig(level=level, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s")


def run(main: Callable[[], None]) -> None:
    setup_logging()
    try:
        main()
    except (StageError, FileNotFoundError) as error:
        log.error("%s", error)
        sys.exit(1)
    except Exception as error:
        log.exception("%s, with this traceback:", type(error).__name__)
        log.error("%s", error)
        sys.exit(1)


def parse_json_arg(text: str, what: str) -> dict:
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise StageError(f"{what}: not valid JSON ({error})") from error
