"""Simulated null studies for the calibration test (tests/report/test_calibration.py): per-prompt differences of the
shapes the workflow compares, the p-values of a Holm table by the report's permutation test and by the percentile
bootstrap it replaced, and the family-wise error and power of Holm's marks over many studies.

Kept apart from the test so that the same functions give the numbers quoted in docs/method.md §4 with more studies:
    PYTHONPATH=. .venv/bin/python bench/null_studies.py --studies 20000
    PYTHONPATH=. .venv/bin/python bench/null_studies.py --joint --studies 1000    (joint MAUVE tables)
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from workflow_lib.comparisons import resamples_for
from workflow_lib.report.contrasts import ALPHA, RESAMPLES
from workflow_lib.report.statistics import (
    Permutations,
    bootstrap_indices,
    holm,
    permutation_mean_differences,
)

SHAPES = ("normal", "rouge", "sparse")


class Size(NamedTuple):
    """A study's size: prompts per comparison, sampling runs averaged per prompt, rows of the largest Holm table."""

    name: str
    prompts: int
    runs: int
    table: int


# The default study (config.yaml): 3 runs; its tables have 12, 4 and 16 rows (perturbation, ablation, each objective
# against MLE). 30 prompts, the size issue 32 measured the bootstrap at; config.yaml now keeps up to 50 prompts per eval
# set (MAUVE's floor), where the bootstrap errs less: the smaller size is the harder test.
DEFAULT = Size("default study", 30, 3, 16)
# configs/paper.yaml: 5000 prompts (max_prompts; WikiText-2 4000), 20 runs; its largest tables have 96 rows.
PAPER = Size("paper", 5000, 20, 96)


def null_differences(rng: np.random.Generator, shape: str, rows: int, size: Size) -> np.ndarray:
    """[rows, prompts] per-prompt differences A - B of comparisons with no effect: a prompt's two values are
    exchangeable, so each difference is symmetric about 0, but not normal:
    - normal: N(0, 1);
    - rouge: ROUGE-like, each side the mean over `runs` runs of a score k/10 (10 reference tokens), drawn around
      the prompt's own level (itself skewed: Beta(2, 5)) with the binomial spread, rounded to a multiple of
      1/(10 runs) and clipped to [0, 1]: bounded, discrete, many exact ties (a normal draw rounded, not a binomial
      one, which is ten times slower at the paper's size);
    - sparse: 60% exact ties (d = 0), the rest a heavy right-skewed size (Beta(0.5, 4)) with a random sign."""
    shape_ = (rows, size.prompts)
    if shape == "normal":
        return rng.standard_normal(shape_)
    if shape == "rouge":
        level = rng.beta(2, 5, shape_)
        tokens = 10 * size.runs
        spread = np.sqrt(level * (1 - level) * tokens)
        a, b = (np.clip(np.round(level * tokens + spread * rng.standard_normal(shape_)), 0, tokens) for _ in range(2))
        return (a - b) / tokens
    if shape == "sparse":
        magnitude = rng.beta(0.5, 4, shape_) * (rng.random(shape_) >= 0.6)
        return np.where(rng.random(shape_) < 0.5, -magnitude, magnitude)
    raise ValueError(f"unknown shape {shape!r}; one of {SHAPES}")


def permutation_p(d: np.ndarray, identity: str) -> list[float | None]:
    """The report's p of each row of a table: the paired permutation test (statistics.permutation_mean_differences)
    with the table's B. The rows share one draw of swaps, as ROUGE-1/2/L of one comparison do (the study's
    comparisons each draw their own): each row's p is exact either way, and Holm holds under any dependence."""
    count = resamples_for(len(d), RESAMPLES)
    return [e.p for e in permutation_mean_differences(d, np.zeros_like(d), Permutations(d.shape[1], count, identity))]


def bootstrap_p(d: np.ndarray, identity: str) -> list[float | None]:
    """The p the report used before: percentile bootstrap over prompts, p = min(1, 2 (1 + k) / (B + 1)), k the
    replicates on the far side of 0, with the table's B (the removed statistics.percentile_estimate). The rows of a
    table share one resample here (ROUGE-1/2/L of one comparison did); replicate means as counts @ d."""
    count, n = resamples_for(len(d), RESAMPLES), d.shape[1]
    rows = max(1, (1 << 21) // n)
    replicates = []
    for start in range(0, count, rows):
        indices = bootstrap_indices(n, min(rows, count - start), identity, start)
        cells = (np.arange(len(indices))[:, None] * n + indices).ravel()
        weights = (
            np.bincount(cells, minlength=indices.size).reshape(indices.shape) / n
        )  # resample r's count of prompt i, / n
        replicates.append(weights @ d.T)
    replicates = np.concatenate(replicates)  # [B, rows]
    far = np.minimum((replicates <= 0).sum(axis=0), (replicates >= 0).sum(axis=0))
    return list(np.minimum(1.0, 2 * (1 + far) / (count + 1)))


class Calibration(NamedTuple):
    """Over `studies` simulated studies: the share with a false mark (family-wise error) and, where an effect was
    planted in one row, the share that marked it (power)."""

    studies: int
    family_wise_error: float
    power: float | None

    def bound(self, level: float = ALPHA) -> float:
        """The level plus three Monte Carlo standard errors of a share estimated from `studies` studies."""
        return level + 3 * np.sqrt(level * (1 - level) / self.studies)


def calibrate(
    p_values: Callable[[np.ndarray, str], list[float | None]],
    shape: str,
    size: Size,
    studies: int,
    seed: int = 0,
    effect: float | None = None,
    table: int | None = None,
) -> Calibration:
    """Simulate `studies` studies of one Holm table (`table` rows, default the size's largest), mark by Holm's
    adjusted p < ALPHA (statistics.holm), and count. `effect`: the first row's differences are shifted by this many
    standard deviations of a null difference (its power is reported; the family-wise error counts the other rows)."""
    rng = np.random.default_rng(seed)
    rows = table or size.table
    false, found = 0, 0
    for study in range(studies):
        d = null_differences(rng, shape, rows, size)
        if effect is not None:
            d[0] += effect * d[1:].std()
        adjusted = holm(p_values(d, f"{shape}|{size.name}|{seed}|{study}"))
        marked = [p is not None and p < ALPHA for p in adjusted]
        found += marked[0] if effect is not None else 0
        false += any(marked[1:] if effect is not None else marked)
    return Calibration(studies, false / studies, found / studies if effect is not None else None)


# Training seeds as the unit (report.seeds): the real study trains 3 seeds per arm, and its seed tables have 2 rows
# (one per eval set); CI's overlay 2 (not testable); a paper-sized table of 16 rows at 5 seeds.
SEED_SHAPES = ("normal", "heavy", "rouge")
SEED_SIZES = ((3, 2), (3, 16), (5, 16))  # (seeds, rows of the Holm table)


def seed_differences(rng: np.random.Generator, shape: str, rows: int, seeds: int, prompts: int = 100) -> np.ndarray:
    """[rows, seeds] differences d_s of two training methods of one law, each seed's estimate on shared prompts: a
    training-randomness part (the two checkpoints of seed s differ even under the null) plus the seed's sampling
    noise, the mean over `prompts` of ROUGE-like per-prompt differences (null_differences "rouge", 3 runs):
    - normal: N(0, 1) training part;
    - heavy: Student t with 3 degrees of freedom (rare seeds that train far off);
    - rouge: no training part beyond the sampling noise of bounded, tied per-prompt scores (a seed's difference is
      then nearly normal by averaging, the case the t-test is built for, with the smallest spread)."""
    noise = null_differences(rng, "rouge", rows * seeds, Size("seeds", prompts, 3, rows)).mean(axis=1)
    noise = noise.reshape(rows, seeds) / 0.03  # the sampling part on the scale of the training part (sd ~1)
    if shape == "normal":
        return rng.standard_normal((rows, seeds)) + noise
    if shape == "heavy":
        return rng.standard_t(3, (rows, seeds)) + noise
    if shape == "rouge":
        return noise
    raise ValueError(f"unknown shape {shape!r}; one of {SEED_SHAPES}")


def calibrate_seeds(
    shape: str, seeds: int, table: int, studies: int, seed: int = 0, effect: float | None = None
) -> Calibration:
    """`studies` simulated Holm tables of `table` seed-level contrasts (statistics.across_seeds on `seeds` seeds
    each), marked by Holm's adjusted p < ALPHA. `effect`: the first row shifted by this many standard deviations of a
    null seed difference (its power is reported; the family-wise error counts the other rows)."""
    from workflow_lib.report.statistics import across_seeds

    rng = np.random.default_rng(seed)
    sd = seed_differences(np.random.default_rng(seed + 1), shape, 4000, 1).std()  # a null seed difference's
    false, found = 0, 0
    for _ in range(studies):
        d = seed_differences(rng, shape, table, seeds)
        if effect is not None:
            d[0] += effect * sd
        marked = [p is not None and p < ALPHA for p in holm([across_seeds(row).p for row in d])]
        found += marked[0] if effect is not None else 0
        false += any(marked[1:] if effect is not None else marked)
    return Calibration(studies, false / studies, found / studies if effect is not None else None)


# The joint MAUVE contrasts (report.joint_mauve) of the default study: 50 prompts (MAUVE's floor, config.yaml's cap),
# 3 runs, 5 clustering seeds, its largest MAUVE table (16 rows), the evaluation's k-means settings, 5 buckets (MAUVE's
# rule at 50 texts), features of the featuriser's kind (d dimensions, several modes).
JOINT_DEFAULT = Size("default study, joint MAUVE", 50, 3, 16)
JOINT_SETTINGS = {"kmeans_num_redo": 5, "kmeans_max_iter": 500, "discretization": 25, "scaling": 5}


def joint_features(rng: np.random.Generator, size: Size, tilt: float = 0.0, d: int = 32, modes: int = 8):
    """(human [n, d], A [R, n, d], B [R, n, d]) of one comparison: every text a draw from a mixture of `modes`
    Gaussian clouds; human and A from the same weights, B from weights tilted by `tilt` (0: the null, A and B one
    law, so a (prompt, run)'s two continuations are exchangeable, as the test assumes)."""
    centres = rng.normal(size=(modes, d)) * 2.5
    signs = np.where(np.arange(modes) < modes // 2, 1.0, -1.0)

    def draw(shape, t):
        weights = (1 + t * signs) / modes
        return centres[rng.choice(modes, size=shape, p=weights / weights.sum())] + rng.normal(size=(*shape, d))

    n, runs = size.prompts, size.runs
    return draw((n,), 0.0), draw((runs, n), 0.0), draw((runs, n), tilt)


def calibrate_joint(
    size: Size, studies: int, seed: int = 0, effect: float | None = None, seeds: int = 5, settings: dict | None = None
) -> Calibration:
    """`studies` simulated MAUVE tables of `size.table` rows, each row a joint MAUVE contrast (report.joint_mauve.
    joint_contrast: the evaluation's clustering, `seeds` seeds, the table's B) of two conditions drawn from one law,
    marked by Holm's adjusted p < ALPHA. `effect`: the first row's B is tilted by this much (power is reported)."""
    from workflow_lib.evaluate.metrics import mauve_buckets
    from workflow_lib.report.joint_mauve import joint_contrast

    settings = settings or JOINT_SETTINGS
    buckets = mauve_buckets(size.prompts, size.prompts, {"num_buckets": "auto"})
    count = resamples_for(size.table, RESAMPLES)
    rng = np.random.default_rng(seed)
    false, found = 0, 0
    for study in range(studies):
        p = []
        for row in range(size.table):
            human, a, b = joint_features(rng, size, tilt=effect if (effect is not None and row == 0) else 0.0)
            clustering = [int(rng.integers(1 << 30)) + k for k in range(seeds)]
            p.append(
                joint_contrast(
                    human, a, b, settings, clustering, count, f"joint|{seed}|{study}|{row}", buckets, interval=False
                ).estimate.p
            )
        marked = [q is not None and q < ALPHA for q in holm(p)]
        found += marked[0] if effect is not None else 0
        false += any(marked[1:] if effect is not None else marked)
    return Calibration(studies, false / studies, found / studies if effect is not None else None)


def main() -> None:
    parser = argparse.ArgumentParser(prog="bench/null_studies.py")
    parser.add_argument("--size", choices=["default", "paper"], default="default")
    parser.add_argument("--studies", type=int, default=2000, help="null studies per (shape, method)")
    parser.add_argument(
        "--methods", nargs="+", choices=["permutation", "bootstrap"], default=["permutation", "bootstrap"]
    )
    parser.add_argument("--shapes", nargs="+", choices=SHAPES, default=list(SHAPES))
    parser.add_argument("--effect", type=float, help="plant an effect of this many standard deviations in one row")
    parser.add_argument("--prompts", type=int, help="prompts per comparison instead of the size's")
    parser.add_argument("--seed", type=int, default=1, help="the simulation's seed (another seed, other studies)")
    parser.add_argument(
        "--joint",
        action="store_true",
        help="the joint MAUVE contrasts' tables at the default study's size instead (--effect: a tilt)",
    )
    args = parser.parse_args()
    if args.joint:
        result = calibrate_joint(JOINT_DEFAULT, args.studies, seed=args.seed, effect=args.effect)
        power = "" if result.power is None else f", power {result.power:.4f}"
        print(
            f"{JOINT_DEFAULT.name} ({JOINT_DEFAULT.prompts} prompts, {JOINT_DEFAULT.runs} runs, {JOINT_DEFAULT.table}-row "
            f"table): family-wise error {result.family_wise_error:.4f} over {args.studies} studies (bound "
            f"{result.bound():.4f}){power}",
            flush=True,
        )
        return
    size = {"default": DEFAULT, "paper": PAPER}[args.size]
    size = size._replace(prompts=args.prompts) if args.prompts else size
    methods = {"permutation": permutation_p, "bootstrap": bootstrap_p}
    for shape in args.shapes:
        for name in args.methods:
            result = calibrate(methods[name], shape, size, args.studies, seed=args.seed, effect=args.effect)
            power = "" if result.power is None else f", power {result.power:.4f}"
            print(
                f"{size.name} ({size.prompts} prompts, {size.table}-row table), {shape}, {name}: family-wise error "
                f"{result.family_wise_error:.4f} over {args.studies} studies (bound {result.bound():.4f}){power}",
                flush=True,
            )


if __name__ == "__main__":
    main()
