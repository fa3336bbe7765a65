"""A result path's condition, and the frames built from it that the tables, figures and contrasts share.

workflow_lib/layout.py writes the paths and reads them back; `parse_path` is its reading as the report's columns,
so a table works for whatever subset of the grid a config defines.
"""

from __future__ import annotations

import polars as pl

from workflow_lib.comparisons import KEYS, MODEL_KEYS, mode_label, parse_path  # noqa: F401 (the report's columns: one home)
from workflow_lib.constants import PAPER_STRATEGY, UNTRAINED
from workflow_lib.layout import parse
from workflow_lib.sample.modes import get as get_mode

ABLATION = ["NoPerturb", "TrainPerturb", "TestPerturb", "Both"]
UNTRAINED_LABEL = "untrained (zero-shot)"


# ---- conditions ----------------------------------------------------------------------------------------


def parse_model_dir(path: str) -> dict | None:
    """The training condition a model folder names; None for a folder outside results/models."""
    try:
        located = parse(str(path))
    except ValueError:
        return None
    return located.columns() if located.kind == "models" and not located.suffix else None


def typed(frame: pl.DataFrame) -> pl.DataFrame:
    """Intensities as floats, copies and seed as integers (the rest of a condition are names)."""
    return frame.with_columns(
        pl.col("train_intensity", "test_intensity").cast(pl.Float64), pl.col("copies", "seed").cast(pl.Int64)
    )


def shown_objective(frame: pl.DataFrame) -> pl.DataFrame:
    """The objective column as tables print it: an untrained model visibly marked."""
    return frame.with_columns(
        pl.when(pl.col("objective") == UNTRAINED)
        .then(pl.lit(UNTRAINED_LABEL))
        .otherwise(pl.col("objective"))
        .alias("objective")
    )


def method_frame(frame: pl.DataFrame, intensity: float) -> pl.DataFrame:
    """Table 1's rows: each objective without perturbation (train 0, test 0) and with it (both at `intensity`,
    the headline strategy insertion); column `perturbation` names which."""
    plain = frame.filter((pl.col("train_intensity") == 0) & (pl.col("test_intensity") == 0))
    perturbed = frame.filter(
        (pl.col("train_intensity") == intensity)
        & (pl.col("test_intensity") == intensity)
        & (pl.col("train_strategy") == PAPER_STRATEGY)
        & (pl.col("test_strategy") == PAPER_STRATEGY)
    )
    return pl.concat(
        [
            plain.with_columns(pl.lit("no").alias("perturbation")),
            perturbed.with_columns(
                (pl.lit(f"insertion {intensity:g}") + sampling_mode(perturbed)).alias("perturbation")
            ),
        ]
    )


def sampling_mode(perturbed: pl.DataFrame) -> pl.Expr:
    """' (exact)' / ' (cached, persistent perturbation)' where a study samples its perturbed conditions in both modes
    (a check of Algorithm 2 on one seed beside `cached` on all), so that a table never shows one mode's row in the
    other's place; ' (cached, persistent perturbation)' where it samples them in `cached` alone, an estimator of its
    own, not Algorithm 2's law (`comparisons.mode_label`); else ''."""
    modes = set(perturbed["test_mode"].to_list()) if perturbed.height else set()
    if len(modes) > 1 or any(not get_mode(m).algorithm2 for m in modes):
        shown = pl.col("test_mode").replace_strict({m: mode_label(m) for m in modes}, return_dtype=pl.String)
        return pl.lit(" (") + shown + pl.lit(")")
    return pl.lit("")


# What a strategy's arms and their NoPerturb share: the table's row, but the strategy.
ARM_KEYS = ["model", "dataset", "objective", "eval_set", "decoder"]


def ablation_frame(frame: pl.DataFrame, intensity: float) -> pl.DataFrame:
    """The ablation's four conditions, named in column `condition`, per strategy (column `strategy`): each
    strategy's arms at the headline intensity (at 1 for one that perturbs every position, NEFTune:
    `comparisons.arm_intensity`), the shared NoPerturb under each. Insertion first."""
    from workflow_lib.comparisons import ablation_strategies, arm_intensity

    plain = (pl.col("train_intensity") == 0) & (pl.col("test_intensity") == 0)
    parts = []
    for strategy in ablation_strategies(frame.select("train_strategy", "test_strategy").unique().to_dicts()):
        at = arm_intensity(strategy, intensity)
        on = {
            side: (pl.col(f"{side}_strategy") == strategy) & (pl.col(f"{side}_intensity") == at)
            for side in ("train", "test")
        }
        sides = [on[side] | (pl.col(f"{side}_intensity") == 0) for side in ("train", "test")]
        arms = frame.filter(sides[0] & sides[1] & ~plain)
        if arms.height:  # NoPerturb where the strategy has an arm to compare with it, not in every row of the study
            base = frame.filter(plain).join(arms.select(ARM_KEYS).unique(), on=ARM_KEYS, how="semi", nulls_equal=True)
            parts.append(pl.concat([base, arms]).with_columns(pl.lit(strategy).alias("strategy")))
    if not parts:
        return frame.filter(pl.lit(False)).with_columns(pl.lit("").alias("strategy"), pl.lit("").alias("condition"))
    frame = pl.concat(parts)
    train, test = pl.col("train_intensity") > 0, pl.col("test_intensity") > 0
    condition = (
        pl.when(train & test)
        .then(pl.lit("Both"))
        .when(train)
        .then(pl.lit("TrainPerturb"))
        .when(test)
        .then(pl.lit("TestPerturb"))
        .otherwise(pl.lit("NoPerturb"))
    )
    mode = sampling_mode(frame.filter(test))
    return frame.with_columns(pl.when(test).then(condition + mode).otherwise(condition).alias("condition"))
