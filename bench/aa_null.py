"""The A/A null through the whole workflow: how often the seed-level test rejects when nothing differs.

`--studies N` null studies, run as snakemake runs of `--batch` studies each in one working directory (a run of
thousands of jobs spends more time choosing jobs than running them). Study i is a model of its own, `null<i>` (the same tiny scratch
GPT-2 and settings for all), trained by MLE with the paper's recipe (insertion of oracle synonyms at training and
sampling, 20%) from 6 training seeds of its own (disjoint between studies, so the studies are independent), sampled
and scored on the builtin corpus's in-domain test set: data, tokens, perturbed data, training, sampling, ROUGE, the
exact TV to the true law and perplexity. `report.aa_null` pairs each study's seeds 4-6 with its seeds 1-3
(comparisons.null_pairs) and tests the 3 differences as the seed-level test tests two methods (report.seeds).

Read back: per metric, the share of studies whose across-seeds test has p < 0.05, with its Clopper-Pearson 95%
interval (scipy.stats.binomtest); the test holds its level where that interval covers 0.05. Beside it, the share of
the per-checkpoint rows (paired over prompts) at p < 0.05: two checkpoints of one method do differ, so those tests,
which speak of the checkpoints, reject far more often; that is why a claim about a method takes seeds as its unit.
MAUVE is not in it: at this size (20 texts a run) it does not resolve (its joint test's level:
bench/null_studies.py).

    python bench/aa_null.py --studies 200 [--batch 20] [--workdir results/aa-null] [--cores 2]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from studies.served import SNAKEMAKE, job_environment, warm_server
from workflow_lib.comparisons import NULL
from workflow_lib.report.statistics import ALPHA

CONTRASTS = "results/report/contrasts.csv"
SEEDS_PER_STUDY = 6
ARCHITECTURE = {"n_layer": 1, "n_head": 1, "n_embd": 16, "n_positions": 128}
RECIPE = {"intensities": [0.2], "synonyms": ["oracle"]}


def null_config(studies: int, first: int = 1) -> dict:
    """The config of null studies `first` .. `first + studies - 1` (see the module's docstring)."""
    corpus = {"seed": 7, "words_per_class": 4, "sentences_per_doc": 16}
    corpus["docs"] = {"train": 60, "validation": 10, "test": 20, "ood": 20}
    config: dict = {
        "seed": 1,
        "datasets": {"synthetic": {"source": "builtin", "builtin": corpus}},
        "tokenizers": {"bpe": {"source": "train", "dataset": "synthetic", "vocab_size": 300}},
        "models": {},
        "tokenize": {"block_size": 32},
        "prompts": {"max_prompts": 20},
        "training": {"batch_size": 8, "learning_rate": 1e-3},
        "sampling": {"runs": 2, "new_tokens": 8},
        "evaluation": {"max_text_length": 64, "extrapolation": {"draws": 8}},
        "eval_sets": {"syn-test": {"dataset": "synthetic", "split": "test"}},
        "experiments": {},
        "report": {"intensity": 0.2, "aa_null": True},
    }
    for i in range(first, first + studies):
        name = f"null{i:03d}"
        config["models"][name] = {"source": "scratch", "tokenizer": "bpe", "architecture": ARCHITECTURE}
        first = (i - 1) * SEEDS_PER_STUDY + 1
        config["experiments"][name] = {
            "models": [name],
            "train_dataset": "synthetic",
            "eval_sets": ["syn-test"],
            "objectives": ["mle"],
            "seeds": list(range(first, first + SEEDS_PER_STUDY)),
            "train_perturbation": dict(RECIPE),
            "test_perturbation": dict(RECIPE),
        }
    return config


def rejection_rates(contrasts) -> list[dict]:
    """Per (unit, metric): the rows of the null family, how many at p < ALPHA, and that share's 95% interval."""
    import polars as pl
    from scipy.stats import binomtest

    null = contrasts.filter((pl.col("family") == NULL) & pl.col("p").is_not_null())
    out = []
    for (unit, metric), part in sorted(null.group_by(["unit", "metric"]), key=lambda kv: kv[0]):
        rejected, n = int((part["p"] < ALPHA).sum()), part.height
        interval = binomtest(rejected, n).proportion_ci(0.95, method="exact")
        out.append(
            {
                "unit": unit,
                "metric": metric,
                "rows": n,
                "rejected": rejected,
                "rate": rejected / n,
                "low": interval.low,
                "high": interval.high,
                "holds": bool(interval.low <= ALPHA <= interval.high) if unit == "seeds" else None,
            }
        )
    return out


def markdown(rates: list[dict], studies: int, seconds: float) -> str:
    lines = [
        (
            f"A/A null: {studies} null studies ({SEEDS_PER_STUDY} training seeds each, 3 seed pairs), "
            f"{seconds / 60:.0f} min; share of rows at p < 0.05 with its Clopper-Pearson 95% interval."
        ),
        "",
        "| unit | metric | rows | p < 0.05 | share [95% interval] |",
        "|---|---|---|---|---|",
    ]
    for r in rates:
        lines.append(
            f"| {r['unit']} | {r['metric']} | {r['rows']} | {r['rejected']} | {r['rate']:.3f} "
            f"[{r['low']:.3f}, {r['high']:.3f}] |"
        )
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--studies", type=int, default=200)
    parser.add_argument("--batch", type=int, default=20, help="studies per snakemake run")
    parser.add_argument("--workdir", type=Path, default=REPO / "results/aa-null")
    parser.add_argument("--cores", default="2")
    parser.add_argument("--out", type=Path, default=REPO / "bench/measured/aa_null")
    args = parser.parse_args()
    import polars as pl
    import yaml

    args.workdir.mkdir(parents=True, exist_ok=True)
    env = job_environment({**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"})
    target = args.workdir / CONTRASTS
    start, frames = time.monotonic(), []
    with warm_server(env, args.workdir / "warm.log") as jobs_env:
        for first in range(1, args.studies + 1, args.batch):
            count = min(args.batch, args.studies + 1 - first)
            config = args.workdir / "config.yaml"
            config.write_text(yaml.safe_dump(null_config(count, first), sort_keys=False))
            command = [SNAKEMAKE, "-s", str(REPO / "Snakefile"), "--directory", str(args.workdir), CONTRASTS]
            command += ["--configfile", str(config), "--cores", args.cores]
            if subprocess.run(command, cwd=args.workdir, env=jobs_env).returncode:
                return 1
            frames.append(pl.read_csv(target, infer_schema_length=None))
            print(f"studies {first}-{first + count - 1} done, {(time.monotonic() - start) / 60:.1f} min", flush=True)
    seconds = time.monotonic() - start
    rates = rejection_rates(pl.concat(frames, how="vertical_relaxed"))
    text = markdown(rates, args.studies, seconds)
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    Path(f"{args.out}.json").write_text(json.dumps({"studies": args.studies, "seconds": seconds, "rates": rates}))
    Path(f"{args.out}.md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
