"""MAUVE's controls scored, and the rule that decides whether an eval set's MAUVE cells are reported (the
`mauve_controls` rule, on the CPU, from the `features` job's features; the texts are evaluate.controls').

Each control is scored against the human references as a sampling run is (`metrics.mauve_over_seeds`). `verdict`:
a control is seen when its mean score is below the ceiling's by more than the larger k-means range of the two, and
an eval set's MAUVE is reported only when every control in `evaluation.mauve.controls.must_detect` is seen;
otherwise its cells read "MAUVE cannot see ..." (`report.resolution`). docs/method.md §4, "MAUVE's controls".
"""

from __future__ import annotations

import argparse
import logging

import numpy as np

from workflow_lib.cli import StageError, parse_json_arg, run
from workflow_lib.evaluate.control_names import CEILING, CONTROLS
from workflow_lib.files import write_json

log = logging.getLogger("workflow_lib.evaluate.control_scores")


def spread(scores) -> float:
    """A control's k-means spread: the range of its scores over the clustering seeds."""
    return float(np.ptp(np.asarray(scores, dtype=np.float64)))


def verdict(scores: dict[str, list[float]], must_detect: list[str], texts: int, featuriser: str) -> dict:
    """The instrument's check (the module docstring's rule), from each control's scores over the k-means seeds:
    per control its mean, spread, gap below the ceiling and whether it is seen; `status` None when every control in
    `must_detect` is seen, else the refused cells' text. Fewer than 2 seeds give no spread, so nothing is seen."""
    ceiling = np.asarray(scores[CEILING], dtype=np.float64)
    rows = {}
    for name, listed in scores.items():
        values = np.asarray(listed, dtype=np.float64)
        margin = max(spread(ceiling), spread(values))
        gap = float(ceiling.mean() - values.mean())
        rows[name] = {
            "scores": values.tolist(),
            "mean": float(values.mean()),
            "spread": spread(values),
            "gap": None if name == CEILING else gap,
            "margin": None if name == CEILING else margin,
            "seen": None if name == CEILING else bool(len(values) > 1 and len(ceiling) > 1 and gap > margin),
        }
    blind = [name for name in must_detect if not rows[name]["seen"]]
    status = (
        f"MAUVE cannot see {', '.join(CONTROLS[name] for name in blind)} at n = {texts} with {featuriser}"
        if blind
        else None
    )
    return {
        "controls": rows,
        "must_detect": list(must_detect),
        "texts": texts,
        "featuriser": featuriser,
        "status": status,
    }


def control_rows(features) -> dict[str, np.ndarray]:
    """Each control's row indices in the `features` job's table (control, prompt_id, features), in prompt order."""
    names = np.asarray(features.column("control").to_pylist())
    prompt = features.column("prompt_id").to_numpy()
    out = {}
    for name in dict.fromkeys(names.tolist()):
        rows = np.flatnonzero(names == name)
        out[name] = rows[np.argsort(prompt[rows], kind="stable")]
    return out


def score_controls(human: np.ndarray, features, settings: dict) -> dict:
    """Every control's MAUVE against the human references, for each clustering seed (seed, seed + 1, ..., as the
    model cells), and the verdict; under MAUVE's floor nothing is scored (`floor`: the cells' own status) and the
    cells are refused by the floor, not by the controls."""
    from workflow_lib.evaluate.floor import MIN_TEXTS, mauve_status
    from workflow_lib.evaluate.metrics import KMEANS_SEEDS, mauve_over_seeds

    texts = len(human)
    label = settings["featuriser_label"]
    must_detect = list(settings["mauve"]["controls"]["must_detect"])
    layout = {"feature_text": settings["feature_text"], "min_texts": settings["mauve"].get("min_texts", MIN_TEXTS)}
    if floor := mauve_status(texts, settings["mauve"]):
        return {
            "controls": {},
            "must_detect": must_detect,
            "texts": texts,
            "featuriser": label,
            "status": None,
            "floor": floor,
            **layout,
        }
    seeds = [settings["seed"] + k for k in range(settings["mauve"].get("kmeans_seeds", KMEANS_SEEDS))]
    rows_of = control_rows(features)
    matrix = np.asarray(features.column("features").combine_chunks().flatten(), dtype=np.float32).reshape(
        features.num_rows, -1
    )
    scores = {}
    for name in CONTROLS:
        rows = rows_of.get(name, np.zeros(0, dtype=np.int64))
        if len(rows) != texts:
            raise StageError(
                f"the control features hold {len(rows)} rows of {name!r} for {texts} prompts: rerun features"
            )
        scores[name], _curves, _buckets = mauve_over_seeds(human, matrix[rows], settings["mauve"], seeds, 0)
        log.info("control %s: MAUVE %s", name, " ".join(f"{s:.3f}" for s in scores[name]))
    if not np.isfinite(np.asarray(list(scores.values()))).all():
        raise StageError("evaluation: a control's MAUVE is not finite; nothing is written")
    return verdict(scores, must_detect, texts, label) | {"floor": None, "kmeans_seeds": seeds, **layout}


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m workflow_lib.evaluate.control_scores", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--human", required=True, help=".npy: the references' features (the prompts' order)")
    parser.add_argument("--features", required=True, help="Parquet: the control texts' features")
    parser.add_argument("--settings", required=True, help="JSON: the evaluation settings")
    parser.add_argument("--output", required=True)
    args = parser.parse_args()

    from workflow_lib.files import read_parquet

    settings = parse_json_arg(args.settings, "evaluation")
    result = score_controls(np.load(args.human), read_parquet(args.features), settings)
    log.info("MAUVE's controls: %s", result["status"] or result["floor"] or "every must-detect control is seen")
    write_json(result, args.output)


if __name__ == "__main__":
    run(main)
