"""`make design`: the seeds x prompts x runs that a comparison of two training methods needs to see a given effect,
read from a finished pilot study's variance components (report.variance) and priced by the cost model.

    python -m workflow_lib.report.design --configfile configs/real.yaml --results results/real/results \
        --effect mauve=0.03 --effect rouge1=0.01 --device h100

For each contrast of `--family` and metric with a target effect: the fewest seeds (at least MIN_SEEDS) whose test
across seeds has 80% power, per (prompts, runs), cheapest first; the power at the components' upper bounds; and the
paper's own design. The power model, its two limits and its assumptions: docs/method.md §4, "Variance components
and the design calculator"; how to run it: docs/cluster.md, "What a study costs".
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import polars as pl

from workflow_lib.layout import PROMPTS_RECORD, REPORT_TABLE
from workflow_lib.metric_registry import BY_NAME, PAPER_GAINS
from workflow_lib.report.statistics import ALPHA
from workflow_lib.report.variance import COLUMNS, IDENTITY, INTERACTION, KMEANS, PROMPTS, RUNS, SEEDS

MIN_SEEDS, MAX_SEEDS, POWER = 3, 200, 0.8
PAPER_EFFECTS = PAPER_GAINS  # the default targets: the paper's gains (metric_registry, `paper_gain`)
# The paper's design (its Supplement, "Evaluation details", tex line 718): 20 sampling runs per prompt; the prompts
# are EMO's (configs/paper.yaml: 4,000 on WikiText-2, 5,000 on the others); one training per method.
PAPER_RUNS, PAPER_PROMPTS = 20, 4000
PROMPT_FACTORS, RUN_GRID = (0.5, 1, 2, 4, 8, 16, 32), (1, 2, 3, 5, 10, 20)


def over_runs(metric: str) -> bool:
    """Whether a contrast pairs the metric over runs (metric_registry `paired`: MAUVE, a score of each run's set of
    texts), not over prompts."""
    return (m := BY_NAME.get(metric)) is not None and m.paired == "runs"


def mauve_floor(config: dict) -> int:
    """The fewest texts per run a MAUVE cell is scored with (evaluation.mauve.min_texts): a design asks for no fewer."""
    from workflow_lib.evaluate.floor import MIN_TEXTS

    return int(((config.get("evaluation") or {}).get("mauve") or {}).get("min_texts", MIN_TEXTS))


def floored(c: dict) -> dict:
    """Components as the design uses them: an unestimated (None) or negative estimate counts as 0."""
    return {k: max(0.0, v or 0.0) for k, v in c.items()}


def seed_mean_variance(c: dict, metric: str, prompts: float, runs: int, pilot_prompts: int, kmeans: int) -> float:
    """V(P, R): the variance of one seed's mean difference over P prompts and R runs, components floored at 0."""
    g = floored(c)
    if over_runs(metric):  # runs are sets of P texts: their noise at P texts is P0 / P of the pilot's
        return g[SEEDS] + g[RUNS] * pilot_prompts / prompts / runs + g[KMEANS] / (runs * kmeans)
    return g[SEEDS] + g[INTERACTION] / prompts + g[RUNS] / (prompts * runs)


def shared_variance(c: dict, metric: str, prompts: float) -> float:
    """The variance of the prompt set's effect, shared by every seed of a study: the prompts' main effect over P
    prompts. The test across seeds holds the prompts fixed, so against the effect over all the eval set's texts this
    moves every seed alike. MAUVE's is not measured (its runs share their prompts): 0, an assumption."""
    return 0.0 if over_runs(metric) else max(0.0, c.get(PROMPTS) or 0.0) / prompts


def power(effect: float, variance: float, seeds: int, tests: int = 1, shared: float = 0.0) -> float:
    """P(the two-sided paired t over `seeds` differences rejects at ALPHA / tests) when the method's effect over the
    eval set is `effect`, each seed's mean difference has `variance` about the prompt set's, and the prompt set's
    effect varies by `shared` (averaged over it by Gauss-Hermite quadrature)."""
    import numpy as np
    from scipy import stats

    if variance <= 0:
        return 1.0
    df, scale = seeds - 1, math.sqrt(variance / seeds)
    critical = float(stats.t.ppf(1 - ALPHA / (2 * tests), df))
    nodes, weights = np.polynomial.hermite_e.hermegauss(41)  # E f(Z), Z ~ N(0, 1): sum w f(x) / sqrt(2 pi)
    shifts = (abs(effect) + math.sqrt(shared) * nodes) / scale
    rejects = stats.nct.sf(critical, df, shifts) + np.nan_to_num(stats.nct.cdf(-critical, df, shifts))
    return float(np.dot(weights, rejects) / math.sqrt(2 * math.pi))


def fewest_seeds(effect: float, variance: float, tests: int = 1, shared: float = 0.0) -> int | None:
    """The fewest seeds (MIN_SEEDS to MAX_SEEDS) whose test has POWER at `effect`; None if none has."""
    for seeds in range(MIN_SEEDS, MAX_SEEDS + 1):
        if power(effect, variance, seeds, tests, shared) >= POWER:
            return seeds
    return None


def paper_design(c: dict, metric: str, effect: float, pilot_prompts: int, kmeans: int) -> dict:
    """The per-checkpoint test the paper's one-seed design can run: its power at `effect`, and its rate of
    significant results for a method with no effect (the seed component moves the one checkpoint's difference, and
    that test's standard error does not hold it)."""
    from scipy import stats

    g = floored(c)
    if over_runs(metric):  # the paired t over runs, each run's variance its sampling at P texts and its k-means
        se2 = (g[RUNS] * pilot_prompts / PAPER_PROMPTS + g[KMEANS] / kmeans) / PAPER_RUNS
    else:  # the swap test over prompts: each prompt's mean over runs varies by all of its components
        se2 = (g[PROMPTS] + g[INTERACTION] + g[RUNS] / PAPER_RUNS) / PAPER_PROMPTS
    spread = math.sqrt(g[SEEDS] + se2)
    z = float(stats.norm.ppf(1 - ALPHA / 2)) * math.sqrt(se2)
    return {
        "power": float(stats.norm.sf((z - effect) / spread) + stats.norm.cdf((-z - effect) / spread)),
        "false_positive": float(2 * stats.norm.sf(z / spread)),
    }


def pricing(config: dict, gpu, cpu, workdir: Path) -> dict:
    """Per (model, eval set): seconds of one training, and of one evaluation as (fixed, per text, P0, R0), on `gpu`
    (every modelled job on it) and on `cpu` (every job on this machine's CPU)."""
    from workflow_lib import grid
    from workflow_lib.cost import sizes
    from workflow_lib.cost.jobs import plan_jobs

    prices: dict[tuple[str, str], dict[str, dict]] = {}
    for name, dev in (("device", gpu), ("cpu", cpu)):
        jobs = plan_jobs(config, dev, dev, workdir)
        train: dict[str, list[float]] = {}
        for job in jobs:
            if job.rule == "train" and not job.unknown:
                train.setdefault(job.model, []).append(job.seconds)
        owner = {}
        for ev in grid.evaluation_runs(config):
            for path in (ev.path("metrics"), ev.path("metrics", ".features.parquet"), ev.path("samples")):
                owner[path] = (ev.run.model, ev.eval_set, ev.path("metrics"))
        first: dict[tuple, str] = {}
        evaluation: dict[tuple, dict] = {}
        for job in jobs:
            hit = owner.get(job.samples or job.key)
            if hit is None or job.rule not in ("sample", "sample_features", "evaluate"):
                continue
            key = hit[:2]
            if first.setdefault(key, hit[2]) != hit[2]:
                continue  # the first evaluation of that model and eval set prices them all
            e = evaluation.setdefault(key, {"fixed": 0.0, "texts": 0.0, "unknown": ""})
            e["fixed"] += job.parts.get("fixed", 0.0) + job.parts.get("load", 0.0)
            e["texts"] += job.parts.get("compute", 0.0) + job.parts.get("overhead", 0.0)
            e["unknown"] = e["unknown"] or job.unknown
        for (model, eval_set), e in evaluation.items():
            p0 = int(sizes.eval_set_prompts(config, eval_set, workdir)["prompts"])
            r0 = int(config["sampling"]["runs"])
            fit = train.get(model, [])
            prices.setdefault((model, eval_set), {})[name] = {
                "train": sum(fit) / len(fit) if fit else 0.0,
                "fixed": e["fixed"],
                "per_text": e["texts"] / max(p0 * r0, 1),
                "mauve_s": dev.mauve_s,
                "unknown": e["unknown"],
            }
    return prices


def available_prompts(workdir: Path, eval_set: str) -> int | None:
    """How many of the eval set's texts the pilot's prompt filters let through (its prompts record's rows_eligible):
    a design asks for at most these. None where the record is missing."""
    import json

    record = workdir / PROMPTS_RECORD.format(eval_set=eval_set)
    if not record.is_file():
        return None
    return json.loads(record.read_text()).get("filters", {}).get("rows_eligible")


def design_hours(price: dict, config: dict, seeds: int, prompts: int, runs: int) -> float:
    """2 arms x seeds x (a training + an evaluation of prompts x runs texts), in hours."""
    from workflow_lib.cost.jobs import mauve_seconds

    evaluation = (
        price["fixed"] + price["per_text"] * prompts * runs + mauve_seconds(config, prompts, runs, price["mauve_s"])
    )
    return 2 * seeds * (price["train"] + evaluation) / 3600


def designs(
    components: pl.DataFrame,
    effects: dict,
    config: dict,
    prices: dict,
    family: str,
    tests: int,
    available: dict[str, int | None] | None = None,
) -> list[dict]:
    """One row per (contrast, metric, design): the cheapest designs with POWER first, then the paper's. `available`:
    per eval set, the most prompts a design may ask for (None: no limit known)."""
    available = available or {}
    out = []
    keys = IDENTITY  # a contrast and its metric (report.variance)
    for key, group in components.filter(pl.col("family") == family).group_by(keys, maintain_order=True):
        row = dict(zip(keys, key))
        metric = row["metric"]
        if metric not in effects:
            continue
        c = {r["component"]: r["estimate"] for r in group.iter_rows(named=True)}
        upper = {r["component"]: r["high"] for r in group.iter_rows(named=True)}
        first = group.row(0, named=True)
        base = row | {"effect": effects[metric], "pilot": f"{first['seeds']} x {first['prompts']} x {first['runs']}"}
        if c.get(SEEDS) is None:
            out.append(
                base
                | {"design": "none", "note": "the pilot has one training seed: its between-seed variance is unknown"}
            )
            continue
        p0, kmeans = int(first["prompts"]), int(first["kmeans"] or 1)
        price = prices.get((row["model"], row["eval_set"]))
        found = []
        limit = available.get(row["eval_set"])
        # A MAUVE run of fewer texts than the study's floor is refused, not scored (evaluate/floor.py).
        least = mauve_floor(config) if over_runs(metric) else 2
        for factor in PROMPT_FACTORS:
            prompts = max(2, round(p0 * factor))
            if (limit is not None and prompts > limit) or prompts < least:
                continue
            for runs in RUN_GRID:
                v = seed_mean_variance(c, metric, prompts, runs, p0, kmeans)
                shared = shared_variance(c, metric, prompts)
                seeds = fewest_seeds(effects[metric], v, tests)
                if seeds is None:
                    continue
                v_upper = seed_mean_variance(upper, metric, prompts, runs, p0, kmeans)
                cost = {
                    f"{name}_hours": design_hours(price[name], config, seeds, prompts, runs) if price else None
                    for name in ("device", "cpu")
                }
                found.append(
                    base
                    | {"design": "powered", "seeds": seeds, "prompts": prompts, "runs": runs}
                    | {"power": power(effects[metric], v, seeds, tests)}
                    | {"power_upper": power(effects[metric], v_upper, seeds, tests)}
                    | {"false_positive": power(0.0, v, seeds, tests, shared)}
                    | cost
                )
        found.sort(
            key=lambda r: r["device_hours"] if r["device_hours"] is not None else r["seeds"] * r["prompts"] * r["runs"]
        )
        out += found[:5] or [
            base | {"design": "none", "note": f"no design of at most {MAX_SEEDS} seeds reaches {POWER:.0%} power"}
        ]
        paper = paper_design(c, metric, effects[metric], p0, kmeans)
        out.append(
            base
            | {"design": "paper", "seeds": 1, "prompts": PAPER_PROMPTS, "runs": PAPER_RUNS}
            | {"power": paper["power"], "false_positive": paper["false_positive"]}
            | {
                f"{name}_hours": design_hours(price[name], config, 1, PAPER_PROMPTS, PAPER_RUNS) if price else None
                for name in ("device", "cpu")
            }
            | {
                "note": "a method claim is not testable with one seed; power and false positives of its per-checkpoint test"
            }
        )
    return out


def markdown(rows: list[dict], device: str) -> str:
    head = (
        f"| metric | eval set | contrast | effect | pilot S x P x R | design | seeds | prompts | runs | power | "
        f"power at upper bounds | false positives over the eval set | {device} h | CPU h | note |\n|"
        + "---|" * 15
        + "\n"
    )

    def f(v, spec=".2f"):
        return "" if v is None else format(v, spec)

    lines = [
        f"| {r['metric']} | {r['eval_set']} | {r['a']} vs {r['b']} | {r['effect']:g} | {r['pilot']} | {r['design']} | "
        f"{r.get('seeds', '')} | {r.get('prompts', '')} | {r.get('runs', '')} | {f(r.get('power'))} | "
        f"{f(r.get('power_upper'))} | {f(r.get('false_positive'))} | {f(r.get('device_hours'), '.1f')} | "
        f"{f(r.get('cpu_hours'), '.1f')} | {r.get('note', '')} |"
        for r in rows
    ]
    return head + "\n".join(lines) + "\n"


def unsized(effects: dict[str, float], rows: list[dict]) -> str:
    """A line per target metric the pilot gave no design for: no contrast of it had variance components (MAUVE's
    cells refused by its controls or floor, say), so its size cannot be read from this pilot."""
    missing = [m for m in effects if not any(r["metric"] == m for r in rows)]
    return "".join(
        f"\n{m}: no design; the pilot has no variance components of its contrasts (were its cells refused? "
        'see its summary\'s "What MAUVE can see here"), so this pilot cannot size a study for it.\n'
        for m in missing
    )


def main(argv: list[str] | None = None) -> None:
    from workflow_lib.config import ConfigError
    from workflow_lib.cost.estimate import devices, load_config

    parser = argparse.ArgumentParser(prog="python -m workflow_lib.report.design", description=__doc__.splitlines()[0])
    parser.add_argument("--configfile", nargs="+", default=["config.yaml"], help="the pilot study's config files")
    parser.add_argument("--results", type=Path, default=Path("results"), help="the pilot's results folder")
    parser.add_argument(
        "--effect",
        action="append",
        default=[],
        metavar="METRIC=DELTA",
        help=f"a target difference (repeatable; default {PAPER_EFFECTS})",
    )
    parser.add_argument(
        "--family", default="perturbation", help="the contrasts to size (perturbation, ablation, objective)"
    )
    parser.add_argument("--tests", type=int, default=1, help="the claim is one of this many tests (Bonferroni level)")
    parser.add_argument("--device", help="the GPU to price on (default: the config's cost.device)")
    parser.add_argument("--cpu", help="this machine's CPU device (default: 'local' if calibrated, else cost.cpu)")
    args = parser.parse_args(argv)
    effects = dict(PAPER_EFFECTS)
    for item in args.effect:
        metric, _, value = item.partition("=")
        try:
            effects[metric] = float(value)
        except ValueError:
            sys.exit(f"--effect {item!r}: expected METRIC=DELTA, for example mauve=0.03")
    table = args.results.parent / REPORT_TABLE.format(table="variance", ext="csv")
    if not table.is_file():
        sys.exit(f"{table}: no variance components; finish the pilot study first (its report step writes them)")
    workdir = args.results.parent
    try:
        config = load_config(args.configfile, workdir)
        gpu, cpu = devices(config, args.device, args.cpu)
    except (ConfigError, ValueError) as error:
        sys.exit(str(error))
    components = pl.read_csv(table, schema=COLUMNS)
    available = {es: available_prompts(workdir, es) for es in components["eval_set"].unique().to_list()}
    rows = designs(components, effects, config, pricing(config, gpu, cpu, workdir), args.family, args.tests, available)
    text = markdown(rows, gpu.name) + unsized(effects, rows)
    print(text)
    out = args.results / "design"
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{gpu.name}.md").write_text(text)
    pl.DataFrame(rows).write_csv(out / f"{gpu.name}.csv")


if __name__ == "__main__":
    main()
