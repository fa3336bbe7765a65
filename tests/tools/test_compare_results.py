"""tools/compare_results.py: what a refactor must leave unchanged, provenance and timings aside."""

from __future__ import annotations

import json
import sys

import pyarrow as pa
import pyarrow.parquet as pq

from tools import compare_results


def _study(root, provenance: str, tokens_per_s: str, loss: str, metadata: bytes) -> None:
    (root / "metrics").mkdir(parents=True)
    (root / "metrics/m.json").write_text(json.dumps({"mauve": 0.9, "provenance": {"git_commit": provenance}}))
    table = pa.table({"x": [1, 2]}).replace_schema_metadata({"versions": metadata})
    pq.write_table(table, root / "metrics/s.parquet")
    (root / "train_log.csv").write_text(f"step,loss,tokens_per_s\n1,{loss},{tokens_per_s}\n")
    (root / "logs").mkdir()
    (root / "logs/job.log").write_text(provenance)


def _run(monkeypatch, a, b) -> int:
    monkeypatch.setattr(sys, "argv", ["compare_results", str(a), str(b)])
    return compare_results.main()


def test_provenance_and_timings_aside_two_studies_are_the_same(tmp_path, monkeypatch, capsys):
    _study(tmp_path / "a", "abc", "100", "6.25", b"1")
    _study(tmp_path / "b", "def", "250", "6.25", b"2")
    assert _run(monkeypatch, tmp_path / "a", tmp_path / "b") == 0
    assert "3 of 3 files the same" in capsys.readouterr().out  # the log is left out


def test_a_changed_value_or_a_missing_file_is_reported(tmp_path, monkeypatch, capsys):
    _study(tmp_path / "a", "abc", "100", "6.25", b"1")
    _study(tmp_path / "b", "abc", "100", "6.26", b"1")
    assert _run(monkeypatch, tmp_path / "a", tmp_path / "b") == 1
    assert "differ: train_log.csv" in capsys.readouterr().out
    (tmp_path / "b/train_log.csv").write_text((tmp_path / "a/train_log.csv").read_text())
    (tmp_path / "b/metrics/m.json").write_text(json.dumps({"mauve": 0.8, "provenance": {}}))
    (tmp_path / "b/extra.md").write_text("x")
    assert _run(monkeypatch, tmp_path / "a", tmp_path / "b") == 1
    out = capsys.readouterr().out
    assert "differ: metrics/m.json" in out and "only in B: extra.md" in out
