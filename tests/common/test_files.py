"""workflow_lib/files.py: the argument files of the gather jobs."""

from __future__ import annotations

import argparse

import pytest

from workflow_lib.files import write_argument_file


def test_an_argument_file_reads_back_as_the_arguments_it_holds(tmp_path):
    """argparse's @FILE gives back each line as one argument, spaces and all, in order, beside the command line's."""
    paths = ["results/metrics/a b/x.json", "--mauve", "results/report/mauve/0123456789abcdef.json"]
    write_argument_file(paths, tmp_path / "args.txt")
    parser = argparse.ArgumentParser(fromfile_prefix_chars="@")
    parser.add_argument("--output")
    parser.add_argument("--mauve", nargs="*", default=[])
    parser.add_argument("paths", nargs="*")
    args = parser.parse_args(["--output", "o.csv", f"@{tmp_path / 'args.txt'}"])
    assert (args.output, args.paths, args.mauve) == ("o.csv", paths[:1], paths[2:])
    write_argument_file([], tmp_path / "empty.txt")
    assert parser.parse_args([f"@{tmp_path / 'empty.txt'}"]).paths == []


@pytest.mark.parametrize("bad", ["", "two\nlines"])
def test_an_argument_that_one_line_cannot_hold_is_refused(tmp_path, bad):
    with pytest.raises(ValueError, match="cannot hold an empty argument or a newline"):
        write_argument_file(["fine", bad], tmp_path / "args.txt")
    assert not (tmp_path / "args.txt").exists()
