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
from workflow_lib.sample.modes import DEFAULT as DEFAULT_MODE

# The report's categories: no study figure (no ablation or sweep) and no simulation (simulation.enabled: false).
REPORT_CATEGORIES = ("Summary", "Tables", "Training curves")
# What tells one expected metrics row from another (with its eval set and seed).
COLUMNS = [
    "model",
    "objective",
    "train_mode",
    "train_strategy",
    "train_intensity",
    "test_strategy",
    "test_intensity",
    "test_mode",
]


def _arm(grid: dict, default_mode: str) -> tuple[str, str, float]:
    """(mode, strategy, intensity) of a one-point perturbation grid as the metrics table spells it: intensity 0 is
    the unperturbed law (strategy `none`; sampled `exact`)."""
    intensity = float((grid.get("intensities") or [0])[0])
    if intensity == 0:
        return (DEFAULT_MODE if default_mode == DEFAULT_MODE else grid.get("modes", [default_mode])[0]), "none", 0.0
    return grid.get("modes", [default_mode])[0], grid["strategies"][0], intensity


def expected_rows(real: dict) -> dict[tuple, tuple[str, list[int]]]:
    """{row (COLUMNS): (its experiment, its training seeds)} from the study's config: every experiment of the real
    study is one point of each grid (one model, one perturbation at training and one at sampling) per objective; an
    untrained model's row is `augment` mode's name (layout.py) and the config's seed."""
    out = {}
    for name, exp in real["experiments"].items():
        train = exp.get("train_perturbation", {})
        test = exp.get("test_perturbation", {})
        train_mode, train_strategy, train_intensity = _arm(train, "augment")
        test_mode, test_strategy, test_intensity = _arm(test, "exact")
        for model in exp["models"]:
            for objective in exp["objectives"]:
                untrained = objective == "untrained"
                row = (
                    model,
                    objective,
                    "augment" if untrained else train_mode,
                    train_strategy,
                    train_intensity,
                    test_strategy,
                    test_intensity,
                    test_mode,
                )
                out[row] = (name, sorted(exp.get("seeds", [real["seed"]])) if not untrained else [real["seed"]])
    return out


def row_problems(metrics: pl.DataFrame, real: dict) -> list[str]:
    """Every row the config asks for on its experiment's eval sets, once per training seed, with a finite ROUGE-1
    (MAUVE may be refused, never missing silently), and no row twice."""
    problems = []
    for row, (experiment, want) in expected_rows(real).items():
        for eval_set in real["experiments"][experiment]["eval_sets"]:
            rows = metrics.filter(
                (pl.col("eval_set") == eval_set) & pl.all_horizontal(pl.col(c) == v for c, v in zip(COLUMNS, row))
            )
            name = f"{eval_set}: {row[0]} {row[1]} ({row[2]}) at {row[3]} {row[4]:g}/{row[5]} {row[6]:g} ({row[7]})"
            if sorted(rows["seed"].to_list()) != want:
                problems.append(f"{name} has seeds {sorted(rows['seed'].to_list())}, not {want}")
            elif rows["rouge1_mean"].is_null().any() or not rows["rouge1_mean"].is_finite().all():
                problems.append(f"{name} has no finite ROUGE-1")
    return problems


def provenance_problems(results: Path, real: dict) -> list[str]:
    """The model's folder holds the pinned bytes (the GGUF file it was dequantised from, offline; the released files,
    with the network), and every fetched text is one the config pins."""
    problems = []
    model = real["models"]["smollm2"]
    if model.get("gguf"):
        record = json.loads((results / "pretrained/smollm2/gguf.json").read_text())
        if record["sha256"] != model["gguf"]["sha256"]:
            problems.append(f"results/pretrained/smollm2 was made from sha256 {record['sha256']}, not the pinned file")
    else:
        record = json.loads((results / "pretrained/smollm2/hub.json").read_text())
        fetched_files = {file: entry["sha256"] for file, entry in record["files"].items()}
        if fetched_files != model["files"] or record["revision"] != model["revision"]:
            problems.append(
                f"results/pretrained/smollm2 holds {record['name']} at {record['revision']} with files "
                f"{sorted(fetched_files)}, not the pinned files of {model['revision']}"
            )
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
    """The config the finished study ran with: its config files merged in order, as snakemake merges them, and an
    experiment an overlay set to null left out (as the workflow's config check leaves it out)."""
    from snakemake.utils import update_config

    from workflow_lib.config import drop_removed_experiments

    config: dict = {}
    for path in configs:
        update_config(config, yaml.safe_load(path.read_text()))
    drop_removed_experiments(config)
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
