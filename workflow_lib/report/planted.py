"""MAUVE's planted control: what size of MAUVE gap an eval set's contrasts can see (the `planted_control` job).

MAUVE of two disjoint human windows against the same windows with a share of the prompts' texts replaced by another
eval set's words (evaluate/controls.py), scored as the contrasts score two conditions
(`joint_mauve.joint_contrast`), so text sampling counts as well as k-means; from its interval, the smallest gap the
test detects with 80% power (`statistics.detectable`), against which the findings read each MAUVE null.
docs/method.md §4, "MAUVE's planted control".
"""

from __future__ import annotations

import argparse
import logging

import numpy as np

from workflow_lib.cli import StageError, parse_json_arg, run
from workflow_lib.evaluate.control_names import CEILING, MIXTURE, SECOND_WINDOW
from workflow_lib.files import write_json

log = logging.getLogger("workflow_lib.report.planted")


def planted(human: np.ndarray, windows: np.ndarray, mixed: np.ndarray, settings: dict, seeds: list[int], identity: str):
    """MAUVE(references, human windows) - MAUVE(references, mixed windows) by the contrasts' joint test ([n, d]
    references, [2, n, d] windows and mixture, row i of each the continuation of prompt i), and the smallest gap
    that test detects with 80% power at this n."""
    from workflow_lib.comparisons import RESAMPLES
    from workflow_lib.evaluate.metrics import mauve_buckets
    from workflow_lib.metric_registry import PAPER_GAINS
    from workflow_lib.report.joint_mauve import joint_contrast
    from workflow_lib.report.statistics import ALPHA, detectable

    n = windows.shape[1]
    buckets = mauve_buckets(n, n, settings["mauve"])
    joint = joint_contrast(human, windows, mixed, settings["mauve"], seeds, RESAMPLES, identity, buckets)
    e = joint.estimate
    can_see = detectable(e.low, e.high, None, 1)
    target = PAPER_GAINS["mauve"]
    log.info(
        "planted control: MAUVE gap %+.4f [%.4f, %.4f], p %.4g; the test sees %.4f or more (target %.3f)",
        e.difference, e.low, e.high, e.p, can_see, target,
    )  # fmt: skip
    return {
        "fraction": settings["mauve"]["controls"]["planted_fraction"],
        "windows": int(windows.shape[0]),
        "texts": int(n),
        "gap": e.difference,
        "low": e.low,
        "high": e.high,
        "p": e.p,
        "seen": bool(e.p is not None and e.p < ALPHA),
        "can_see": can_see,
        "target": target,
        "sees_target": bool(can_see is not None and can_see <= target),
        "buckets": buckets,
    }


def planted_from_features(human: np.ndarray, features, settings: dict, identity: str) -> dict:
    """The planted control from the `features` job's control features (a table of control, prompt_id, features):
    {"planted": ..} where its rows are there and featurised, else {"planted": None, "why": ..}."""
    from workflow_lib.evaluate.control_scores import control_rows
    from workflow_lib.evaluate.metrics import KMEANS_SEEDS

    rows = control_rows(features)
    if any(len(rows.get(name, ())) != len(human) for name in (CEILING, SECOND_WINDOW, *MIXTURE)):
        return {"planted": None, "why": "no planted rows for every prompt (control_texts wrote none)"}
    column = features.column("features")
    if column.null_count:
        return {"planted": None, "why": "the control texts were not featurised (under MAUVE's floor)"}
    matrix = np.asarray(column.combine_chunks().flatten(), dtype=np.float32).reshape(features.num_rows, -1)
    windows = np.stack([matrix[rows[CEILING]], matrix[rows[SECOND_WINDOW]]])
    mixed = np.stack([matrix[rows[name]] for name in MIXTURE])
    seeds = [settings["seed"] + k for k in range(settings["mauve"].get("kmeans_seeds", KMEANS_SEEDS))]
    try:
        return {"planted": planted(human, windows, mixed, settings, seeds, identity)}
    except ValueError as error:  # a non-finite score
        raise StageError(f"the planted control: {error}") from error


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m workflow_lib.report.planted", description=__doc__.splitlines()[0])
    parser.add_argument("--human", required=True, help=".npy: the references' features (the prompts' order)")
    parser.add_argument("--features", required=True, help="Parquet: the control texts' features")
    parser.add_argument("--settings", required=True, help="JSON: the evaluation settings")
    parser.add_argument("--identity", required=True, help="seeds the swaps and resamples")
    parser.add_argument("--output", required=True)
    args = parser.parse_args()

    from workflow_lib.files import read_parquet

    settings = parse_json_arg(args.settings, "evaluation")
    result = planted_from_features(np.load(args.human), read_parquet(args.features), settings, args.identity)
    log.info("planted control: %s", result.get("why") or "scored")
    write_json(result, args.output)


if __name__ == "__main__":
    run(main)
