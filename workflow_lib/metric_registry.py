"""The study's metrics: one entry each, from which collection, contrasts, tables and findings read.

Adding a metric: a text statistic (a per-run statistic of the sampled continuations) is one function in
evaluate/textstats.py decorated with its `Metric`, read here from that file's syntax tree (`text_statistics`). Any
other is computed in its job (evaluate/metrics.py, perplexity.py, extrapolation.py write `<name>_mean`, `<name>_2se`)
plus its `Metric` here. Nothing else names it: `report/collect.py` collects the entries of kind "metrics",
`report/contrasts.py` compares the paired ones, `report/tables.py` shows each in the tables its `tables` names (bold
only if `ranked`; captions read `gloss`, `caption_note`), the findings and dose-response read those with a `finding`.
Standard library only (and module_deps, which is too). The entries' order is the report's columns' and rows' order.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from workflow_lib.module_deps import _tree, module_path
from workflow_lib.registries import _call_name


@dataclass(frozen=True)
class Metric:
    name: str  # the key in its result file (`<name>_mean`, `<name>_2se` in a metrics JSON) and the report's column
    label: str  # as the tables and findings print it
    kind: str  # the result file that holds it: metrics (of samples), extrapolation (builtin sets), perplexity
    lower_is_better: bool = False
    # How a contrast pairs two conditions' values (docs/method.md §4): "runs" (MAUVE: a shared quantisation over
    # (prompt, run), else the paired t over runs), "prompts" (a permutation test over prompts), "references" (over
    # each reference's prefixes); None: not contrasted.
    paired: str | None = None
    tables: tuple[str, ...] = ()  # the tables that show it: table1 (and EMO/Brier), strategies, ablation, other
    finding: int | None = None  # its place in the summary's findings ("What this study found"); None: not there
    # The effect a replication should see (`make design`'s default target): the paper's smallest Table 1 gains of MLE
    # (ours) over MLE but one (docs/method.md §6: MAUVE .02 on OPT-125M WritingPrompts, then .03; ROUGE-1 .01).
    paper_gain: float | None = None
    # Read as a result, with a better direction (`lower_is_better`): bold marks its best mean. False: a description of
    # the texts (diversity, repetition) that no table ranks, which its caption says.
    ranked: bool = True
    # Caption words, each following its label mid-sentence (no capital, no full stop). `gloss`: what it is, in
    # parentheses where a caption names it unranked ("distinct-2 (share of distinct bigrams)"); `caption_note`: what a
    # table that shows it says of its numbers ("perplexity of the model on the eval set's human text, ...").
    gloss: str = ""
    caption_note: str = ""

    @property
    def mean_column(self) -> str:
        """Its mean's column in the tidy table (report/collect.py): `<name>_mean`, or the bare name of a perplexity,
        whose file holds one value per model and eval set and no 2 SE."""
        return self.name if self.kind == "perplexity" else f"{self.name}_mean"

    @property
    def over_prefixes(self) -> bool:
        """Its 2 SE is over hundreds of prefixes (an extrapolation's), not a few runs: its 95% interval is the 2 SE."""
        return self.kind == "extrapolation"


TEXT_STATISTICS = "workflow_lib.evaluate.textstats"


def _literal(argument: ast.expr | ast.keyword, where: str):
    """The value of a literal argument (`ast.literal_eval`), or an error naming the file and function."""
    try:
        if isinstance(argument, ast.keyword):
            if argument.arg is None:  # **mapping
                raise ValueError
            return ast.literal_eval(argument.value)
        return ast.literal_eval(argument)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        raise ValueError(
            f"{where}: its Metric(...) argument {ast.unparse(argument)!r} is not a literal (metric_registry.py reads "
            "it from the source's syntax tree, without running it)"
        ) from None


def text_statistics() -> tuple[Metric, ...]:
    """The `Metric`s of the text statistics evaluate/textstats.py registers, in its order: each top-level function
    decorated `@statistic(Metric(...))`, its entry built from the call's literal arguments (`ast.literal_eval`). Read
    from the source's syntax tree, as registries.py reads the strategies: nothing is imported or executed, so the
    Snakefile's parse never loads numpy."""
    where = TEXT_STATISTICS.replace(".", "/") + ".py"
    metrics = []
    for node in _tree(module_path(TEXT_STATISTICS)).body:
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for decorator in node.decorator_list:
            if _call_name(decorator) != "statistic":
                continue
            assert isinstance(decorator, ast.Call)
            entry = decorator.args[0] if len(decorator.args) == 1 and not decorator.keywords else None
            if entry is None or _call_name(entry) != "Metric":
                raise ValueError(f"{where}, {node.name}: its decorator is not statistic(Metric(...))")
            assert isinstance(entry, ast.Call)
            arguments = [_literal(a, f"{where}, {node.name}") for a in entry.args]
            keywords = {str(k.arg): _literal(k, f"{where}, {node.name}") for k in entry.keywords}  # k.arg None: refused
            try:
                metric = Metric(*arguments, **keywords)
            except TypeError as error:
                raise ValueError(f"{where}, {node.name}: Metric(...) {error}") from None
            if metric.kind != "metrics":
                raise ValueError(f"{where}, {node.name}: a text statistic is of kind 'metrics', not {metric.kind!r}")
            metrics.append(metric)
    return tuple(metrics)


REGISTRY: tuple[Metric, ...] = (
    Metric(
        "mauve",
        "MAUVE",
        "metrics",
        paired="runs",
        tables=("table1", "strategies", "ablation"),
        finding=1,
        paper_gain=0.03,
    ),
    Metric("rouge1", "ROUGE-1", "metrics", paired="prompts", tables=("table1",), finding=2, paper_gain=0.01),
    Metric("rouge2", "ROUGE-2", "metrics", paired="prompts", tables=("other",)),
    Metric("rougeL", "ROUGE-L", "metrics", paired="prompts", tables=("other",)),
    Metric(
        "perplexity",
        "perplexity",
        "perplexity",
        lower_is_better=True,
        paired="prompts",
        tables=("other",),
        finding=3,
        caption_note="of the model on the eval set's human text, which no sampling setting changes",
    ),
    *text_statistics(),  # evaluate/textstats.py
    # The sharpest instrument first in the findings: the exact TV to the true law needs no proxy (builtin sets only).
    Metric("tv", "TV to the true law", "extrapolation", lower_is_better=True, paired="references", finding=0),
)
BY_NAME = {m.name: m for m in REGISTRY}

# Derived views, in the registry's order.
SAMPLE_METRICS = [m.name for m in REGISTRY if m.kind == "metrics"]  # the columns of a metrics JSON, collected
PAIRED = {m.name: m.label for m in REGISTRY if m.paired}  # the metrics a contrast compares, with their labels
PROMPT_PAIRED = [m.name for m in REGISTRY if m.kind == "metrics" and m.paired == "prompts"]  # from the sidecar
LOWER_IS_BETTER = frozenset(m.name for m in REGISTRY if m.lower_is_better)
PAPER_GAINS = {m.name: m.paper_gain for m in REGISTRY if m.paper_gain is not None}  # `make design`'s default targets
IN_FINDINGS = tuple(name for _, name in sorted((m.finding, m.name) for m in REGISTRY if m.finding is not None))


def shown(table: str) -> list[Metric]:
    """The metrics a table shows, in order (read from REGISTRY when called)."""
    return [m for m in REGISTRY if table in m.tables]


def shown_in(table: str) -> list[tuple[str, str]]:
    """(name, label) of the metrics a table shows, in order."""
    return [(m.name, m.label) for m in shown(table)]
