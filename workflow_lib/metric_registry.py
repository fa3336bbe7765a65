"""The study's metrics: one entry each, from which collection, contrasts, tables and findings read.

Adding a metric: compute it in its job (evaluate/metrics.py writes `<name>_mean` and `<name>_2se` into the metrics
JSON; evaluate/perplexity.py and evaluate/extrapolation.py write theirs), add its `Metric` here, and test it. Nothing
else names it: `report/collect.py` collects the entries of kind "metrics", `report/contrasts.py` compares the paired
ones (and reads the prompt-paired ones of kind "metrics" from the per-prompt sidecar), `report/tables.py` shows each
in the tables its `tables` names (bold ranks it only if `ranked`; its caption reads `gloss` and `caption_note`), and
the findings and the paired tables label it. Standard library only.

The order of the entries is the order of the columns and rows the report writes.
"""

from __future__ import annotations

from dataclasses import dataclass


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
    Metric("distinct_1", "distinct-1", "metrics", ranked=False, gloss="share of distinct unigrams"),
    Metric("distinct_2", "distinct-2", "metrics", tables=("other",), ranked=False, gloss="share of distinct bigrams"),
    Metric("distinct_3", "distinct-3", "metrics", ranked=False, gloss="share of distinct trigrams"),
    Metric("distinct_4", "distinct-4", "metrics", ranked=False, gloss="share of distinct 4-grams"),
    Metric("repetition", "repetition", "metrics", tables=("other",), ranked=False),
    Metric("rep_4", "rep-4", "metrics", ranked=False),
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
