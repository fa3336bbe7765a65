"""What a failed job leaves in its log: one line for a user's error, the traceback and the message for anything else."""

from __future__ import annotations

import logging

import pytest

from workflow_lib import cli
from workflow_lib.cli import StageError


def failing_with(error: Exception):
    def main() -> None:
        raise error

    return main


def test_a_users_error_is_one_line_naming_the_key(caplog):
    caplog.set_level(logging.INFO, logger="workflow_lib")
    with pytest.raises(SystemExit) as ended:
        cli.run(failing_with(StageError("datasets.wiki.files.test: no such file 'x.txt'")))
    assert ended.value.code == 1
    assert [r.getMessage() for r in caplog.records] == ["datasets.wiki.files.test: no such file 'x.txt'"]
    assert all(r.exc_info is None for r in caplog.records)


def test_any_other_error_keeps_its_traceback_and_ends_with_its_message(caplog):
    """A bug (or a refused non-finite result) is not hidden behind one line: the traceback is logged at ERROR,
    which the job's log shows, and the message is still the last line."""
    caplog.set_level(logging.INFO, logger="workflow_lib")
    for error in (ValueError("paired t: a non-finite per-run value; no estimate is made"), KeyError("model")):
        caplog.clear()
        with pytest.raises(SystemExit) as ended:
            cli.run(failing_with(error))
        assert ended.value.code == 1
        first, last = caplog.records
        assert first.levelno == logging.ERROR and first.exc_info is not None and first.exc_info[1] is error
        assert type(error).__name__ in first.getMessage()
        assert last.getMessage() == str(error) and last.exc_info is None
