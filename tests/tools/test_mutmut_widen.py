"""tools/mutmut_widen: a function's mutmut test selection grows to whole test files, and nothing else changes."""

from __future__ import annotations

import json

import pytest

from tools import mutmut_widen


def test_a_function_gets_every_test_of_its_tests_files_and_others_are_untouched():
    durations = {"t/a.py::one": 1.0, "t/a.py::two": 1.0, "t/b.py::three": 1.0, "t/c.py::four": 1.0}
    tests = {"pkg.lab.x_f": ["t/a.py::one"], "pkg.lab.x_g": ["t/b.py::three"], "pkg.other.x_h": ["t/a.py::one"]}
    assert mutmut_widen.widen(tests, durations, "pkg.lab.") == 1
    assert tests == {
        "pkg.lab.x_f": ["t/a.py::one", "t/a.py::two"],  # the fixture's later user, in the same file
        "pkg.lab.x_g": ["t/b.py::three"],
        "pkg.other.x_h": ["t/a.py::one"],  # another package: as mutmut recorded it
    }


def test_the_command_rewrites_the_stats_file_and_refuses_without_one(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit, match="run `mutmut run` first"):
        mutmut_widen.main(["pkg."])
    (tmp_path / "mutants").mkdir()
    stats = {
        "tests_by_mangled_function_name": {"pkg.x_f": ["t/a.py::one"]},
        "duration_by_test": {"t/a.py::one": 1.0, "t/a.py::two": 2.0},
        "other": 1,
    }
    (tmp_path / "mutants" / "mutmut-stats.json").write_text(json.dumps(stats))
    mutmut_widen.main(["pkg."])
    written = json.loads((tmp_path / "mutants" / "mutmut-stats.json").read_text())
    assert written["tests_by_mangled_function_name"] == {"pkg.x_f": ["t/a.py::one", "t/a.py::two"]}
    assert written["other"] == 1 and not (tmp_path / "mutants" / "mutmut-stats.json.tmp").exists()
