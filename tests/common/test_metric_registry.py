"""The metric registry is the one home of the study's metrics (issues 53, 66): the report derives from it which metrics
it collects, compares, labels, ranks and shows, and the words its captions say of them. These tests check properties
of every entry, not lists of names, so that adding a metric edits no test."""

from __future__ import annotations

import ast
import importlib.util
import json
import re
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from workflow_lib import metric_registry
from workflow_lib.metric_registry import (
    BY_NAME,
    IN_FINDINGS,
    LOWER_IS_BETTER,
    PAIRED,
    PAPER_GAINS,
    PROMPT_PAIRED,
    REGISTRY,
    SAMPLE_METRICS,
    Metric,
    shown,
    shown_in,
)

REPO = Path(__file__).resolve().parents[2]
# The tables a metric can be shown in (report/tables.py).
TABLES = {"table1", "strategies", "ablation", "other"}
PAIRINGS = {None, "runs", "prompts", "references"}


def test_each_metric_is_one_well_formed_entry():
    from workflow_lib.comparisons import KINDS

    assert len(BY_NAME) == len(REGISTRY) and len({m.label for m in REGISTRY}) == len(REGISTRY)
    for m in REGISTRY:
        assert re.fullmatch(r"[A-Za-z][A-Za-z0-9_]*", m.name), m  # a column stem: `<name>_mean`, `<name>_2se`
        assert m.label.strip() == m.label and m.label, m
        assert m.kind in KINDS, m  # a result file a job writes
        assert m.paired in PAIRINGS and set(m.tables) <= TABLES, m
        assert m.paired != "runs" or m.kind == "metrics", m  # runs are sampled
        assert m.paired != "references" or m.kind == "extrapolation", m  # references are a builtin set's
        assert m.paper_gain is None or (m.paper_gain > 0 and m.paired), m  # a target a contrast can test
    places = [m.finding for m in REGISTRY if m.finding is not None]
    assert len(set(places)) == len(places)


def test_every_metric_has_a_direction_and_only_ranked_ones_are_read_as_results():
    """A ranked metric has a better direction (`lower_is_better`); an unranked one claims none, and nothing reads it
    as a result: no contrast, finding or target of the design."""
    for m in REGISTRY:
        assert isinstance(m.ranked, bool) and isinstance(m.lower_is_better, bool), m
        if not m.ranked:
            assert not m.lower_is_better and m.paired is None and m.finding is None and m.paper_gain is None, m
    assert all(BY_NAME[name].ranked for name in (*PAIRED, *IN_FINDINGS, *PAPER_GAINS))


def test_every_metric_has_the_caption_words_it_needs():
    """Caption words follow a label mid-sentence, inside a caption's parentheses: short, no capital, no full stop, no
    separator of their own. Every metric the long table shows has its caption entry: its note, if it has one, and, if
    it is unranked, its label and gloss where the caption says it is not ranked."""
    from workflow_lib.report.tables import other_caption

    for m in REGISTRY:
        for words in (m.gloss, m.caption_note):
            assert words == words.strip() and len(words.split()) <= 15, m
            assert not words or (words[0].islower() and not words.endswith(".") and not set(words) & set(";()")), m
    caption = other_caption(shown("other"))
    unranked_clause = caption.rsplit("; ", 1)[-1]
    for m in shown("other"):
        named = f"{m.label} ({m.gloss})" if m.gloss else m.label
        if m.caption_note:
            assert f"; {m.label} {m.caption_note}" in caption, m
        if not m.ranked:
            assert named in unranked_clause and unranked_clause.endswith("not ranked."), m
        else:
            assert m.label not in unranked_clause, m


def test_the_views_follow_the_entries():
    order = {m.name: i for i, m in enumerate(REGISTRY)}
    assert set(SAMPLE_METRICS) == {m.name for m in REGISTRY if m.kind == "metrics"}
    assert set(PROMPT_PAIRED) <= set(SAMPLE_METRICS) and all(BY_NAME[n].paired == "prompts" for n in PROMPT_PAIRED)
    assert set(PAIRED) == {m.name for m in REGISTRY if m.paired}
    assert LOWER_IS_BETTER == {m.name for m in REGISTRY if m.lower_is_better}
    assert [BY_NAME[n].finding for n in IN_FINDINGS] == sorted(BY_NAME[n].finding for n in IN_FINDINGS)
    for table in TABLES:
        names = [name for name, _ in shown_in(table)]
        assert names == sorted(names, key=order.get) and [m.name for m in shown(table)] == names
    assert shown("table1") and shown("other")  # the report has a Table 1 and a long table to fill


def test_the_names_the_report_uses_exist_with_the_attributes_it_assumes():
    """Where the report treats a metric as itself (MAUVE's per-run reader, the TV's own table and theory check), the
    registry has that metric as the report reads it; the dose-response's columns are registry columns, its direction
    the registry's."""
    from workflow_lib.report.dose_response import trended_metrics

    assert BY_NAME["mauve"].paired == "runs" and BY_NAME["mauve"].kind == "metrics"
    assert BY_NAME["tv"].kind == "extrapolation" and BY_NAME["tv"].over_prefixes
    assert BY_NAME["perplexity"].mean_column == "perplexity"
    columns = {m.mean_column: m for m in REGISTRY}
    trended = trended_metrics()
    assert [label for _, label, _ in trended] == [m.label for m in REGISTRY if m.finding is not None]
    for column, _, higher_is_better in trended:
        assert column in columns and higher_is_better == (not columns[column].lower_is_better), column


def test_the_report_collects_every_sample_metric_the_registry_names():
    from workflow_lib.report.collect import SCHEMA

    assert all(f"{m}_mean" in SCHEMA and f"{m}_2se" in SCHEMA for m in SAMPLE_METRICS)


def _strings(path: Path) -> list[tuple[int, str]]:
    """(line, text) of a module's string constants, docstrings left out."""
    tree = ast.parse(path.read_text())
    docs = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs
    ]


def test_no_report_module_spells_its_own_list_of_metric_names():
    """A literal list, tuple, set or dict holding two or more metric names or labels, in a report module or the
    planning modules, would be a second home: adding a metric would have to touch it."""
    names = set(BY_NAME) | {m.label for m in REGISTRY}
    found = []
    for path in sorted((REPO / "workflow_lib/report").glob("*.py")) + [REPO / "workflow_lib/comparisons.py"]:
        for node in ast.walk(ast.parse(path.read_text())):
            items = node.keys if isinstance(node, ast.Dict) else getattr(node, "elts", None)
            if isinstance(node, (ast.List, ast.Tuple, ast.Set, ast.Dict)) and items:
                spelled = {i.value for i in items if isinstance(i, ast.Constant) and i.value in names}
                if len(spelled) >= 2:
                    found.append(f"{path.relative_to(REPO)}:{node.lineno} {sorted(spelled)}")
    assert not found, found


def test_the_tables_name_no_metric_but_mauve_the_paper_reports():
    """report/tables.py reads its columns, ranking and caption words from the registry: no string of its code names
    a metric, but MAUVE where the module is about MAUVE itself (the paper's Table 1 numbers, MAUVE's refusals)."""
    found = [
        f"{line}: {m.name} ({m.label}) in {text!r}"
        for line, text in _strings(REPO / "workflow_lib/report/tables.py")
        for m in REGISTRY
        if m.name != "mauve" and re.search(rf"(?<![\w-])({re.escape(m.name)}|{re.escape(m.label)})(?![\w-])", text)
    ]
    assert not found, found


# A metric a peer might add: unranked, shown in the long table, with its gloss; and a ranked one, lower is better.
SELF_BLEU = Metric(
    "self_bleu", "self-BLEU", "metrics", tables=("other",), ranked=False, gloss="BLEU among a run's texts"
)
LOSS = Metric("loss", "loss", "metrics", lower_is_better=True, tables=("other",))


def test_a_new_metric_changes_the_ranking_and_caption_with_no_other_edit(monkeypatch):
    from workflow_lib.report.tables import other_caption, ranking

    before = other_caption(shown("other"))
    lowest, unranked = ranking(shown("other"))
    monkeypatch.setattr(metric_registry, "REGISTRY", (*REGISTRY, SELF_BLEU, LOSS))
    after = other_caption(shown("other"))
    assert ranking(shown("other")) == (lowest | {"loss"}, unranked | {"self-BLEU"})
    assert "self-BLEU (BLEU among a run's texts)" in after.rsplit("; ", 1)[-1] and "self-BLEU" not in before
    assert " and loss)" in after and after.endswith("are not ranked.")
    # Each caption word is the registry's: take the new entries out and the caption is as it was.
    monkeypatch.setattr(metric_registry, "REGISTRY", REGISTRY)
    assert other_caption(shown("other")) == before


def test_a_new_metric_reaches_the_long_table_unbolded_and_glossed(tmp_path, monkeypatch):
    """Through tables(): the registered metric is a column of the long table, never bold, named in its caption."""
    from workflow_lib.report.collect import collect
    from workflow_lib.report.tables import tables

    monkeypatch.chdir(tmp_path)
    base = "results/metrics/tiny/syn/mle/{syn}/augment-m1/{st}-{a}/seed1/test/unbiased/{syn}/{st}-{a}-exact.json"
    paths = []
    for a, syn, st, value in (("0", "none", "none", 0.2), ("0.025", "distributional", "insertion", 0.4)):
        path = Path(base.format(a=a, syn=syn, st=st))
        path.parent.mkdir(parents=True)
        numbers = {"mauve": value, "rouge1": value, "rouge2": value, "distinct_2": value, "repetition": value}
        data = {f"{k}_{s}": v if s == "mean" else 0.01 for k, v in numbers.items() for s in ("mean", "2se")}
        path.write_text(json.dumps(data | {"runs": 3, "prompts": 50}))
        paths.append(str(path))
    frame = collect(paths).with_columns(
        pl.Series("self_bleu_mean", [0.1, 0.9]), pl.Series("self_bleu_2se", [0.01, 0.01])
    )
    monkeypatch.setattr(metric_registry, "REGISTRY", (*REGISTRY, SELF_BLEU))
    written = tables(frame, str(tmp_path / "tables"), 0.025, ["test"])["metrics"]
    caption, _, table = written.partition("\n\n")
    assert "self-BLEU (BLEU among a run's texts) are not ranked." in caption
    header, _, *rows = table.splitlines()
    column = [c.strip() for c in header.split("|")].index("self-BLEU")
    assert sorted(row.split("|")[column].strip() for row in rows) == ["0.100 ± 0.022", "0.900 ± 0.022"]
    assert "**0.400" in table  # the ranked columns are still ranked


def test_the_text_statistics_read_from_the_source_are_the_registered_ones():
    """metric_registry reads the text statistics from evaluate/textstats.py's syntax tree; importing textstats
    registers the same entries, in the same order, and text_stats evaluates each of them."""
    from workflow_lib.evaluate import textstats

    registered = tuple(metric for metric, _ in textstats.STATISTICS.values())
    assert metric_registry.text_statistics() == registered
    assert set(registered) <= set(REGISTRY)
    stats = textstats.text_stats(np.array([1, 2, 1, 2, 3]), np.array([0, 2, 5]), np.array([0, 1]), 2)
    assert tuple(stats) == tuple(m.name for m in registered)


@pytest.fixture
def textstats_source(tmp_path, monkeypatch):
    """Writes a copy of evaluate/textstats.py with `extra` appended into a workflow_lib under tmp_path, which the
    source scan reads instead of the real one."""
    from workflow_lib import module_deps

    original = module_deps.module_path(metric_registry.TEXT_STATISTICS).read_text()

    def write(extra: str) -> Path:
        path = tmp_path / "workflow_lib/evaluate/textstats.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(original + extra)
        return path

    monkeypatch.setattr(module_deps, "PACKAGE_DIR", tmp_path / "workflow_lib")
    module_deps.direct_imports.cache_clear()
    module_deps.module_closure.cache_clear()
    yield write
    module_deps.direct_imports.cache_clear()
    module_deps.module_closure.cache_clear()


SELF_REPEAT = """

@statistic(Metric("self_repeat", "self-repeat", "metrics", tables=("other",), ranked=False, gloss="a test"))
def self_repeat(texts: Texts) -> np.ndarray:
    return texts.distinct(5)
"""


def test_a_statistic_added_to_textstats_is_a_metric_with_its_fields(textstats_source):
    """Adding a text statistic is one decorated function in evaluate/textstats.py: the registry's view of that file
    has it, last, with the fields its decorator gives."""
    textstats_source("")
    before = metric_registry.text_statistics()
    written = textstats_source(SELF_REPEAT)
    after = metric_registry.text_statistics()
    assert after[:-1] == before
    assert after[-1] == Metric("self_repeat", "self-repeat", "metrics", tables=("other",), ranked=False, gloss="a test")
    # Run, the copy registers it too: text_stats gives it, after the others, one value per run.
    spec = importlib.util.spec_from_file_location("textstats_copy", written)
    copy = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(copy)
    stats = copy.text_stats(np.array([1, 2, 3, 4, 5, 1]), np.array([0, 6]), np.array([0]), 1)
    assert list(stats) == [m.name for m in after] and stats["self_repeat"].tolist() == [1.0]


@pytest.mark.parametrize(
    "decorator, refused",
    [
        ('statistic(Metric("odd", "odd", "metrics", gloss=GLOSS))', "'gloss=GLOSS' is not a literal"),
        ('statistic(Metric(NAME, "odd", "metrics"))', "'NAME' is not a literal"),
        ('statistic(Metric("odd", "odd", "metrics", **EXTRA))', "'**EXTRA' is not a literal"),
        ('statistic(Metric("odd", "odd", "metrics", colour="red"))', "colour"),
        ('statistic(Metric("odd", "odd", "perplexity"))', "of kind 'metrics'"),
        ("statistic(ENTRY)", "not statistic(Metric(...))"),
    ],
)
def test_a_statistic_the_registry_cannot_read_is_refused_naming_it(textstats_source, decorator, refused):
    textstats_source(f"\n\n@{decorator}\ndef odd_one(texts: Texts) -> np.ndarray:\n    return texts.distinct(1)\n")
    with pytest.raises(ValueError, match=r"workflow_lib/evaluate/textstats\.py, odd_one: ") as refusal:
        metric_registry.text_statistics()
    assert refused in str(refusal.value)
