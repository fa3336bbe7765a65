"""The `lab` rule: T's exact constants, the premise-meeting model classes and the trained models' disagreement, as
tables (CSV and the summary's Markdown), generated findings, and one figure.

What each number is, with the paper's line that defines it, is in docs/theory.md, "The theory lab"; the settings
are docs/config.md, "`lab`". This module reads the inputs and writes the outputs; T's constants come from
lab.perturbation, the premise classes' sups and verdicts from lab.premise and lab.theorems, the trained models'
disagreement (descriptive: they disagree on the support, so no bound is marked for them) from lab.bounds, the
Markdown from lab.tables, its sentences from lab.findings, the figure from lab.figure.
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import cast

import numpy as np
import polars as pl

from workflow_lib.cli import StageError, parse_json_arg, run
from workflow_lib.files import atomic_path
from workflow_lib.lab.bounds import check_models, uncertainty_table
from workflow_lib.lab.figure import figure
from workflow_lib.lab.premise_views import constants_of
from workflow_lib.lab.tables import markdown

log = logging.getLogger("workflow_lib.lab.verdicts")


def settings_specs(settings: Mapping) -> dict[str, dict]:
    """Perturbation name -> {q0, beta, last} from the lab settings: either that mapping itself or
    {"perturbations": {name: {q0, beta[, last]}}, "last": l} (the rule's settings; a spec's own `last` wins)."""
    if "perturbations" not in settings:
        return dict(settings)
    shared = {"last": settings["last"]} if "last" in settings else {}
    return {name: {**shared, **spec} for name, spec in settings["perturbations"].items()}


def _read_model(path: str) -> dict:
    with np.load(path, allow_pickle=False) as data:
        missing = {"laws", "perturbations", "single"} - set(data.files)
        if missing:
            raise StageError(f"{path}: missing arrays {sorted(missing)}")
        label = str(data["label"][()]) if "label" in data.files else Path(path).stem
        model = {"laws": data["laws"], "perturbations": data["perturbations"], "single": data["single"], "label": label}
        for optional in ("differs", "laws_half"):  # the draws' coupling shares, the half-draws average (lab_laws)
            if optional in data.files:
                model[optional] = data[optional]
        return model


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m workflow_lib.lab.verdicts")
    parser.add_argument(
        "--prefixes", required=True, help="the lab's prefixes Parquet (row, family, delta, base, ids, truth)"
    )
    parser.add_argument("--laws", nargs="+", required=True, help="one .npz per model of the group")
    parser.add_argument("--builtin", required=True, help="JSON: the builtin dataset's grammar settings")
    parser.add_argument(
        "--settings",
        required=True,
        help="JSON: perturbations {name: {q0, beta}}, last, length, draws, premise_draws, seed",
    )
    parser.add_argument("--csv", required=True, help="the trained models' table")
    parser.add_argument("--premise", required=True, help="the premise classes' table (CSV)")
    parser.add_argument("--markdown", required=True)
    parser.add_argument("--figure", required=True, help="writes STEM.png and STEM.pdf")
    args = parser.parse_args()
    settings = parse_json_arg(args.settings, "lab --settings")
    if missing := {"perturbations", "last", "length", "draws", "premise_draws", "seed"} - set(settings):
        raise StageError(f"lab --settings lacks {sorted(missing)}")
    specs = settings_specs(settings)
    prefixes = pl.read_parquet(args.prefixes).sort("row")
    missing = {"row", "family", "delta", "base", "ids", "truth"} - set(prefixes.columns)
    if missing:
        raise StageError(f"{args.prefixes}: missing columns {sorted(missing)}")
    models = [_read_model(path) for path in args.laws]
    check_models(models, args.laws, rows=prefixes.height, words=cast(int | None, prefixes["truth"].list.len().max()))
    from workflow_lib.lab import prefix_sets
    from workflow_lib.lab.laws import grammar_of
    from workflow_lib.lab.theorems import premise_table

    grammar = grammar_of(parse_json_arg(args.builtin, "lab --builtin"))
    lex = prefix_sets.lexicon(grammar, settings["seed"])
    premise = premise_table(
        grammar, lex, prefixes, specs, settings["length"], settings["seed"], settings["premise_draws"]
    )
    try:
        trained = uncertainty_table(prefixes, models, constants_of(premise), settings["draws"], names=args.laws)
    except StageError as error:
        raise StageError(str(error).replace("prefixes:", f"{args.prefixes}:", 1)) from error
    for table, path in ((trained, args.csv), (premise, args.premise)):
        with atomic_path(path) as tmp:
            table.write_csv(tmp)
    with atomic_path(args.markdown) as tmp:
        tmp.write_text(markdown(trained, premise, settings["length"]))
    figure(trained, premise, args.figure)
    log.info(
        "theory lab: %d models, %d prefixes; premise-class verdicts: %s",
        len(models),
        prefixes.height,
        dict(premise.group_by("robustness").len().iter_rows()),
    )


if __name__ == "__main__":
    run(main)
