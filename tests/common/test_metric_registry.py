"""The metric registry is the one home of the study's metrics (issue 53): the report derives from it which metrics it
collects, compares, labels and shows, and no report module spells a list of metric names of its own."""

from __future__ import annotations

import ast
from pathlib import Path

from workflow_lib.metric_registry import (
    BY_NAME,
    IN_FINDINGS,
    LOWER_IS_BETTER,
    PAIRED,
    PROMPT_PAIRED,
    REGISTRY,
    SAMPLE_METRICS,
    shown_in,
)

REPO = Path(__file__).resolve().parents[2]


def test_each_metric_is_one_entry_and_the_views_follow_it():
    assert len(BY_NAME) == len(REGISTRY) and len({m.label for m in REGISTRY}) == len(REGISTRY)
    assert {m.kind for m in REGISTRY} == {"metrics", "perplexity", "extrapolation"}
    assert {m.paired for m in REGISTRY} <= {None, "runs", "prompts", "references"}
    assert SAMPLE_METRICS[:4] == ["mauve", "rouge1", "rouge2", "rougeL"] and "perplexity" not in SAMPLE_METRICS
    assert list(PAIRED) == ["mauve", "rouge1", "rouge2", "rougeL", "perplexity", "tv"]  # the contrasts' order
    assert PROMPT_PAIRED == ["rouge1", "rouge2", "rougeL"] and LOWER_IS_BETTER == {"perplexity", "tv"}
    assert shown_in("table1") == [("mauve", "MAUVE"), ("rouge1", "ROUGE-1")]
    assert IN_FINDINGS == ("tv", "mauve", "rouge1", "perplexity")
    assert [name for name, _ in shown_in("other")] == ["rouge2", "rougeL", "perplexity", "distinct_2", "repetition"]


def test_the_report_collects_every_sample_metric_the_registry_names():
    from workflow_lib.report.collect import SCHEMA

    assert all(f"{m}_mean" in SCHEMA and f"{m}_2se" in SCHEMA for m in SAMPLE_METRICS)


def test_no_report_module_spells_its_own_list_of_metric_names():
    """A literal list, tuple, set or dict holding two or more metric names, in a report module or the planning
    modules, would be a second home: adding a metric would have to touch it."""
    names = set(BY_NAME)
    found = []
    for path in sorted((REPO / "workflow_lib/report").glob("*.py")) + [REPO / "workflow_lib/comparisons.py"]:
        for node in ast.walk(ast.parse(path.read_text())):
            items = node.keys if isinstance(node, ast.Dict) else getattr(node, "elts", None)
            if isinstance(node, (ast.List, ast.Tuple, ast.Set, ast.Dict)) and items:
                spelled = {i.value for i in items if isinstance(i, ast.Constant) and i.value in names}
                if len(spelled) >= 2:
                    found.append(f"{path.relative_to(REPO)}:{node.lineno} {sorted(spelled)}")
    assert not found, found
