"""What a finished rehearsal of configs/paper.yaml must hold: every cell, figure and section of the paper's study.

Each check takes what it reads (frames, text, paths) and returns the problems it found, one sentence each; an
empty list means the check holds. The expectations come from configs/paper.yaml itself (its experiments, eval
sets and simulation grid), never from the rehearsal's outputs, so a cell the study silently dropped is missed.
`finished_problems` runs them all, and the report in a browser, on a finished rehearsal (studies/rehearsal.py calls
it); tests/studies/test_rehearsal.py shows each one failing on doctored input.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from pathlib import Path

import polars as pl
import yaml

from studies.browser import CATEGORIES, browser_problems
from workflow_lib.report.conditions import UNTRAINED_LABEL

SWEEP = [0.1 * 2**k for k in range(-4, 3)]  # the paper's intensities, 0.1 * 2^k, k = -4..2
STRATEGY_INTENSITIES = [0, 0.0125, 0.025, 0.05]
STRATEGIES = ["insertion", "replacement", "deletion"]
FETCHED = ["webtext.test.jsonl", "webtext.train.jsonl", "writingPrompts.tar.gz"]


def finite(value) -> bool:
    return value is not None and math.isfinite(float(value))


def condition_rows(
    metrics: pl.DataFrame,
    model: str,
    objective: str,
    eval_set: str,
    strategy: str | None,
    intensity: float,
    *,
    train: bool = True,
    test: bool = True,
) -> pl.DataFrame:
    """The unbiased-decoder rows of one cell: `strategy` at `intensity` at training and/or sampling (0: none)."""
    rows = metrics.filter(
        (pl.col("model") == model)
        & (pl.col("objective") == objective)
        & (pl.col("eval_set") == eval_set)
        & (pl.col("decoder") == "unbiased")
    )

    def at(prefix: str, on: bool) -> pl.Expr:
        alpha = intensity if on else 0.0
        if alpha == 0:
            return pl.col(f"{prefix}_intensity") == 0
        return (pl.col(f"{prefix}_strategy") == strategy) & ((pl.col(f"{prefix}_intensity") - alpha).abs() < 1e-12)

    return rows.filter(at("train", train) & at("test", test))


def cell_problems(rows: pl.DataFrame, what: str, columns=("mauve_mean", "rouge1_mean")) -> list[str]:
    """A cell is a metrics row whose columns are finite; a MAUVE column may instead be unscored where the row is
    flagged "too few texts (n)" (the rehearsal's 8 prompts are under MAUVE's floor: workflow_lib.evaluate.floor),
    never missing or non-finite without that flag."""
    if rows.height == 0:
        return [f"{what}: no metrics row"]
    status = rows["mauve_status"].to_list() if "mauve_status" in rows.columns else [None] * rows.height
    return [
        f"{what}: {column} = {value}"
        for column in columns
        for value, flag in zip(rows[column].to_list(), status)
        if not finite(value) and not (column.startswith("mauve") and value is None and flag)
    ]


def table1_problems(metrics: pl.DataFrame, table1: pl.DataFrame, paper: dict) -> list[str]:
    """Every (model, objective, condition, eval set) of the paper's Table 1, zero-shot rows included, is a finite
    MAUVE and ROUGE-1 in metrics.csv and a filled cell of tables/table1.csv."""
    problems = []
    experiments = paper["experiments"]
    plain, perturbed = experiments["table1"], experiments["table1-perturbed"]
    alpha = perturbed["test_perturbation"]["intensities"][0]
    cells = [(m, o, "no", e) for m in plain["models"] for o in plain["objectives"] for e in plain["eval_sets"]]
    cells += [
        (m, o, f"insertion {alpha:g}", e)
        for m in perturbed["models"]
        for o in perturbed["objectives"]
        for e in perturbed["eval_sets"]
    ]
    for model, objective, label, eval_set in cells:
        rows = condition_rows(metrics, model, objective, eval_set, "insertion", 0.0 if label == "no" else alpha)
        problems += cell_problems(rows, f"Table 1 {model} {objective} {label} {eval_set}")
        shown = UNTRAINED_LABEL if objective == "untrained" else objective
        line = table1.filter(
            (pl.col("model") == model)
            & (pl.col("objective").is_in([objective, shown]))
            & (pl.col("perturbation") == label)
        )
        column = f"{eval_set} MAUVE"
        if line.height != 1 or column not in table1.columns or not (line[column][0] or "").strip():
            problems.append(f"tables/table1.csv: no {column} cell for {model} {objective} {label}")
    return problems


# The ablation's experiments: the paper's (insertion) and, beyond it, the embedding space's noise and NEFTune (which
# perturbs at training only, every position: its arms are NoPerturb and TrainPerturb, at intensity 1).
ARMS = (("NoPerturb", False, False), ("TrainPerturb", True, False), ("TestPerturb", False, True), ("Both", True, True))
ABLATIONS = (
    ("ablation", "insertion", ARMS),
    ("ablation-embedding", "embedding-noise", ARMS),
    ("neftune", "neftune", ARMS[:2]),
)


def ablation_problems(metrics: pl.DataFrame, ablation: pl.DataFrame, paper: dict) -> list[str]:
    """Each ablation experiment's arms for each of its objectives (the paper's: MLE and Brier), finite, and in
    tables/ablation.csv on the strategy's row."""
    problems = []
    for name, strategy, arms in ABLATIONS:
        exp = paper["experiments"][name]
        alpha = max(exp["train_perturbation"]["intensities"])
        for objective in exp["objectives"]:
            for eval_set in exp["eval_sets"]:
                for arm, train, test in arms:
                    rows = condition_rows(
                        metrics, exp["models"][0], objective, eval_set, strategy, alpha, train=train, test=test
                    )
                    problems += cell_problems(rows, f"{name} {objective} {arm} {eval_set}")
                    line = ablation.filter(
                        (pl.col("model") == exp["models"][0])
                        & (pl.col("objective") == objective)
                        & (pl.col("eval_set") == eval_set)
                        & (pl.col("strategy") == strategy)
                    )
                    if line.height != 1 or not (line[f"{arm} MAUVE"][0] or "").strip():
                        problems.append(f"tables/ablation.csv: no {arm} cell for {strategy} {objective} {eval_set}")
    return problems


def sweep_problems(metrics: pl.DataFrame, figure: Path) -> list[str]:
    """The intensity figure's 7 intensities: GPT-2 MLE on WebText, the same insertion at training and sampling."""
    problems = [] if figure.exists() and figure.stat().st_size else [f"{figure}: missing"]
    for alpha in SWEEP:
        problems += cell_problems(
            condition_rows(metrics, "gpt2", "mle", "webtext", "insertion", alpha),
            f"intensity sweep {alpha:g}",
            columns=("mauve_mean",),
        )
    return problems


def strategy_problems(metrics: pl.DataFrame, strategies: pl.DataFrame) -> list[str]:
    """The strategy table: 3 strategies x 4 intensities (0 the shared baseline), finite, in tables/strategies.csv."""
    problems = []
    for strategy in STRATEGIES:
        line = strategies.filter(
            (pl.col("model") == "gpt2")
            & (pl.col("objective") == "mle")
            & (pl.col("eval_set") == "webtext")
            & (pl.col("strategy") == strategy)
        )
        for alpha in STRATEGY_INTENSITIES:
            problems += cell_problems(
                condition_rows(metrics, "gpt2", "mle", "webtext", strategy, alpha),
                f"strategy {strategy} {alpha:g}",
                columns=("mauve_mean",),
            )
            column = f"{alpha:g} MAUVE"
            if line.height != 1 or column not in strategies.columns or not (line[column][0] or "").strip():
                problems.append(f"tables/strategies.csv: no {column} cell for {strategy}")
    return problems


def simulation_problems(summary: pl.DataFrame, settings: dict) -> list[str]:
    """The simulation's grid: every (|V|, intensity) the config names for each synonym rule, and the shrinkage
    control of each |V| (no intensity) unless `shrinkage: false`, each over all its replications, finite."""
    problems = []
    rules = settings.get("synonyms", ["oracle", "empirical"])
    for vocab in settings["vocab_sizes"]:
        if settings.get("shrinkage", True):
            control = summary.filter((pl.col("vocab_size") == vocab) & (pl.col("arm") == "shrinkage"))
            if control.height != 1 or control["replications"][0] != settings["replications"]:
                problems.append(f"simulation V={vocab}: the shrinkage control over all replications is missing")
            elif not finite(control["mae_unseen_pairs_mean"][0]):
                problems.append(f"simulation V={vocab}, shrinkage: MAE (b) = {control['mae_unseen_pairs_mean'][0]}")
        for alpha in settings["intensities"]:
            rows = summary.filter(
                (pl.col("vocab_size") == vocab)
                & ((pl.col("intensity") - alpha).abs() < 1e-12)
                & pl.col("arm").is_in(rules)
            )
            if rows.height < len(rules):
                problems.append(f"simulation: no row for V={vocab}, alpha={alpha:g}")
                continue
            if rows["replications"].to_list() != [settings["replications"]] * rows.height:
                problems.append(f"simulation V={vocab}, alpha={alpha:g}: replications {rows['replications'].to_list()}")
            problems += [
                f"simulation V={vocab}, alpha={alpha:g}: MAE (b) = {v}"
                for v in rows["mae_unseen_pairs_mean"].to_list()
                if not finite(v)
            ]
    return problems


def report_problems(results: Path, contrasts: pl.DataFrame, models: list[str]) -> list[str]:
    """Paired contrasts of every family, the example generations and each model's training curves."""
    problems = []
    for family in ("perturbation", "ablation", "objective"):
        rows = contrasts.filter(pl.col("family") == family)
        if rows.height == 0:
            problems.append(f"contrasts.csv: no {family} contrast")
        problems += [f"contrasts.csv {family}: difference {v}" for v in rows["difference"].to_list() if not finite(v)]
    examples = results / "report/tables/examples.csv"
    if not examples.exists() or pl.read_csv(examples).height < 2:
        problems.append(f"{examples}: missing, or no generation beside the human text")
    for model in models:
        curves = results / "report/figures/training" / model
        if not any(curves.glob("*.png")):
            problems.append(f"{curves}: no training curve")
    return problems


def controls_problems(results: Path, eval_sets: list[str]) -> list[str]:
    """MAUVE's controls of every eval set: a verdict file each under the one featuriser, and a row each in
    tables/controls.csv (at the rehearsal's 8 prompts they are not scored: "not checked", the floor's text)."""
    problems = []
    found = {p.stem: p for p in results.glob("controls/*/*.json")}
    for eval_set in eval_sets:
        if eval_set not in found:
            problems.append(f"controls: no verdict of {eval_set}")
        elif "status" not in json.loads(found[eval_set].read_text()):
            problems.append(f"{found[eval_set]}: no status")
    table = results / "report/tables/controls.csv"
    listed = set(pl.read_csv(table)["eval set"].to_list()) if table.exists() else set()
    problems += [f"tables/controls.csv: no row of {e}" for e in eval_sets if e not in listed]
    return problems


def summary_problems(summary: str, fetched_sha256: dict[str, str]) -> list[str]:
    """The paper comparison renders and says it is a rehearsal; the data section lists each fetched file with the
    sha256 of its bytes (`fetched_sha256`: file name -> sha256 computed here)."""
    problems = []
    section = (
        summary.split("## Paper comparison", 1)[1].split("\n## ", 1)[0] if "## Paper comparison" in summary else ""
    )
    if "## What MAUVE can see here" not in summary:
        problems.append("summary.md: no section on what MAUVE can see (its controls)")
    if "## The synonyms the perturbation draws" not in summary or "| synonyms (weight) |" not in summary:
        problems.append("summary.md: no synonym audit (the synonyms the perturbation draws, as text)")
    if not section:
        problems.append("summary.md: no paper comparison section")
    elif "Rehearsal: these numbers mean nothing" not in section:
        problems.append("summary.md: the paper comparison is not marked as a rehearsal")
    elif len(re.findall(r"\(paper \d", section)) == 0 or "| model |" not in section:
        problems.append("summary.md: the paper comparison has no table")
    data = summary.split("## Data", 1)[1].split("\n## ", 1)[0] if "## Data" in summary else ""
    for name, digest in fetched_sha256.items():
        if not re.search(rf"{re.escape(name)}[^\n`]*: sha256 `{digest}` \(not pinned", data):
            problems.append(f"summary.md: the data section does not list {name} with sha256 {digest}, to pin")
    return problems


def fetched_files(results: Path) -> dict[str, str]:
    """The sha256 of each file the rehearsal downloaded (FETCHED), by name."""
    return {
        name: hashlib.sha256(path.read_bytes()).hexdigest()
        for name in FETCHED
        for path in (results / "downloads").glob(f"*/*{name}")
    }


def finished_problems(workdir: Path, configs: list[Path]) -> list[str]:
    """Every check on the rehearsal finished in `workdir` with `configs` (configs/paper.yaml, then its rehearsal
    overlay): the expectations are the paper's config's, the simulation's grid the overlay's."""
    paper = yaml.safe_load(configs[0].read_text())
    overlay = yaml.safe_load(configs[1].read_text())
    results = workdir / "results"
    metrics = pl.read_csv(results / "report/metrics.csv", infer_schema_length=None)
    tables = results / "report/tables"
    fetched = fetched_files(results)
    problems = [] if sorted(fetched) == sorted(FETCHED) else [f"downloaded {sorted(fetched)}, not {sorted(FETCHED)}"]
    config = {**paper["simulation"], **overlay.get("simulation", {})}
    settings = {"vocab_sizes": [50, 100, 200, 400, 800], "intensities": [0, 0.1, 0.2, 0.3, 0.5, 0.7, 1.0], **config}
    return (
        problems
        + table1_problems(metrics, pl.read_csv(tables / "table1.csv"), paper)
        + ablation_problems(metrics, pl.read_csv(tables / "ablation.csv"), paper)
        + sweep_problems(metrics, results / "report/figures/intensity.png")
        + strategy_problems(metrics, pl.read_csv(tables / "strategies.csv"))
        + simulation_problems(pl.read_csv(results / "simulation/summary.csv"), settings)
        + report_problems(results, pl.read_csv(results / "report/contrasts.csv"), list(paper["models"]))
        + summary_problems((results / "summary.md").read_text(), fetched)
        + controls_problems(results, list(paper["eval_sets"]))
        + browser_problems(workdir, CATEGORIES)
    )
