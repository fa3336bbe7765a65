"""What a finished `make real` must hold: every row the real study asks for, from the pinned files, with MAUVE
reported only where its controls pass, and a report that opens in a browser.

Each check takes what it reads and returns the problems it found, one sentence each (an empty list: it holds); the
expectations come from the study's config, never from its outputs. `finished_problems` runs them all on a finished
study (studies/real.py calls it); tests/studies/test_real.py shows each failing on doctored input.
"""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import yaml

from studies.browser import browser_problems

# The report's categories: no study figure (no ablation or sweep) and no simulation (simulation.enabled: false).
REPORT_CATEGORIES = ("Summary", "Tables", "Training curves")
# The rows the issues ask of the real study: (model, objective, train strategy, train intensity, test strategy, test
# intensity, test mode), on every eval set; each trained one once per training seed (its experiment's), the zero-shot
# one once. The `exact` row is Algorithm 2's own check: the first perturbed seed on the eval sets of experiment
# exact-check only. Beyond the paper: the embedding space's noise (training and sampling) and NEFTune (training), and
# SmolLM2 fine-tuned with LoRA adapters (issue 55).
ROWS = [
    ("smollm2", "untrained", "none", 0.0, "none", 0.0, "exact"),
    ("smollm2", "mle", "none", 0.0, "none", 0.0, "exact"),
    ("smollm2", "mle", "insertion", 0.025, "insertion", 0.025, "cached"),
    ("smollm2", "emo", "none", 0.0, "none", 0.0, "exact"),
    ("smollm2", "mle", "embedding-noise", 0.025, "embedding-noise", 0.025, "cached"),
    ("smollm2", "mle", "neftune", 1.0, "none", 0.0, "exact"),
    ("smollm2-lora", "mle", "none", 0.0, "none", 0.0, "exact"),
]
EXACT = ("smollm2", "mle", "insertion", 0.025, "insertion", 0.025, "exact")
COLUMNS = ["model", "objective", "train_strategy", "train_intensity", "test_strategy", "test_intensity", "test_mode"]
# The experiment whose seeds a row has (the zero-shot row: the config's seed).
EXPERIMENT_OF = {"embedding-noise": "embedding-noise", "neftune": "neftune", "insertion": "perturbed"}


def row_experiment(row: tuple, real: dict) -> dict:
    """The experiment a row comes from (its seeds and eval sets)."""
    experiments = real["experiments"]
    if row[1] == "untrained":
        return experiments["zero-shot"]
    if row[0] == "smollm2-lora":
        return experiments["lora"]
    return experiments[EXPERIMENT_OF.get(row[2], "baseline")]


def expected_seeds(row: tuple, real: dict) -> list[int]:
    """The training seeds a row is sampled from: its experiment's (the zero-shot row: the config's seed)."""
    return sorted(row_experiment(row, real).get("seeds", [real["seed"]]))


def row_problems(metrics: pl.DataFrame, real: dict) -> list[str]:
    """Every row of ROWS on its experiment's eval sets, once per training seed, with a finite ROUGE-1 (MAUVE may be refused, never
    missing silently); the `exact` check on exactly the eval sets and seeds experiment exact-check names."""
    experiments = real["experiments"]
    expected = {row: expected_seeds(row, real) for row in ROWS}
    problems = []
    for eval_set in real["eval_sets"]:
        check = {row: seeds for row, seeds in expected.items() if eval_set in row_experiment(row, real)["eval_sets"]}
        if eval_set in experiments["exact-check"]["eval_sets"]:
            check[EXACT] = sorted(experiments["exact-check"]["seeds"])
        for row, want in [*check.items(), *([(EXACT, [])] if EXACT not in check else [])]:
            rows = metrics.filter(
                (pl.col("eval_set") == eval_set) & pl.all_horizontal(pl.col(c) == v for c, v in zip(COLUMNS, row))
            )
            name = f"{eval_set}: {row[0]} {row[1]} at {row[2]} {row[3]:g}/{row[4]} {row[5]:g} ({row[6]})"
            if sorted(rows["seed"].to_list()) != want:
                problems.append(f"{name} has seeds {sorted(rows['seed'].to_list())}, not {want}")
            elif rows["rouge1_mean"].is_null().any() or not rows["rouge1_mean"].is_finite().all():
                problems.append(f"{name} has no finite ROUGE-1")
    return problems


def provenance_problems(results: Path, real: dict) -> list[str]:
    """The dequantised folder is the pinned GGUF file's, and every fetched text is one the config pins."""
    problems = []
    record = json.loads((results / "pretrained/smollm2/gguf.json").read_text())
    if record["sha256"] != real["models"]["smollm2"]["gguf"]["sha256"]:
        problems.append(f"results/pretrained/smollm2 was made from sha256 {record['sha256']}, not the pinned file")
    pinned = {e["sha256"] for e in real["datasets"]["licences"]["files"]["test"]}
    fetched = json.loads((results / "data/licences/test.json").read_text())
    found = {f["sha256"] for f in fetched["provenance"]["files"]}
    if found != pinned:
        problems.append(f"the licences read are not the pinned ones: {sorted(found ^ pinned)}")
    return problems


def controls_problems(results: Path, metrics: pl.DataFrame, eval_sets: list[str]) -> list[str]:
    """MAUVE's controls ran for every eval set with the study's featuriser (SmolLM2), and every MAUVE cell is a
    number only where its eval set's controls passed, else says why (issue 51)."""
    problems = []
    for eval_set in eval_sets:
        path = results / "controls/model-smollm2" / f"{eval_set}.json"
        if not path.is_file():
            problems.append(f"{eval_set}: no MAUVE controls at {path}")
            continue
        status = json.loads(path.read_text())["status"]
        for row in metrics.filter(pl.col("eval_set") == eval_set).iter_rows(named=True):
            if status and (row["mauve_status"] != status or row["mauve_mean"] is not None):
                problems.append(f"{eval_set}: a MAUVE cell is reported though the controls fail ({status})")
            if not status and row["mauve_mean"] is None and not row["mauve_status"]:
                problems.append(f"{eval_set}: a MAUVE cell has neither a number nor a reason")
    return problems


def summary_problems(summary: str) -> list[str]:
    problems = []
    for needed in (
        "What this study found",
        "What MAUVE can see here",
        "The synonyms the perturbation draws",
        "wikitext2",
        "licences",
    ):
        if needed not in summary:
            problems.append(f"results/summary.md does not mention {needed!r}")
    return problems


def study_config(configs: list[Path]) -> dict:
    """The config the finished study ran with: its config files merged in order, as snakemake merges them."""
    from snakemake.utils import update_config

    config: dict = {}
    for path in configs:
        update_config(config, yaml.safe_load(path.read_text()))
    return config


def finished_problems(workdir: Path, configs: list[Path]) -> list[str]:
    """Every check on the study finished in `workdir` with `configs`."""
    results = workdir / "results"
    real = study_config(configs)
    metrics = pl.read_csv(results / "report/metrics.csv")
    return (
        row_problems(metrics, real)
        + provenance_problems(results, real)
        + summary_problems((results / "summary.md").read_text())
        + controls_problems(results, metrics, list(real["eval_sets"]))
        + browser_problems(workdir, REPORT_CATEGORIES)
    )
