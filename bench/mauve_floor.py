"""How MAUVE's spread and resolution depend on the number of texts per side: the measurement behind
`evaluation.mauve.min_texts` (docs/method.md §4).

Real text, featurised as the workflow does (MiniLM, `workflow_lib.evaluate.metrics.featurize`): paragraphs of
WikiText-2 raw (valid and test, 40 words or more, headings left out, cut to their first 60 words) and of the
eight licence texts in ../shared/data/licences/ (legal prose; paragraphs of 40 words or more). For each size n and
each of REPS repetitions, with a fresh permutation of the WikiText pool:
- P: n WikiText paragraphs (the "human" side);
- same: n other WikiText paragraphs (disjoint from P: the same distribution);
- mix10 / mix25: n other paragraphs of which 10% / 25% are licence paragraphs (a slightly / clearly different
  distribution; the rest WikiText, disjoint from P).
Each score is one `mauve_result` call with the workflow's defaults (num_buckets auto = n/10, at least 2; 5 k-means
restarts of 500 iterations; 25 points; scaling 5) and k-means seed = the repetition. Per n: the buckets, each
side's mean and standard deviation over the repetitions, the number of distinct scores among the 3 x REPS (a
quantised score takes few), and how often a repetition ranks `same` above mix10 / mix25 (ties count half): 0.5 is
no resolution, 1.0 is perfect. One core (OMP_NUM_THREADS=1). Last line: `mauve_floor: {json}`.

    python bench/mauve_floor.py 2>/dev/null   # about 2 minutes; faiss warns on stderr of every small clustering
"""

from __future__ import annotations

import json
import os
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")  # faiss and BLAS thread pools: one core, as bench/mauve_seeds.py
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np
from shared import REPO, mauve_defaults

DATA = REPO.parent / "shared" / "data"

SIZES = (10, 20, 30, 50, 75, 100, 200, 400)
REPS = 20
MIXES = {"mix10": 0.10, "mix25": 0.25}
WORDS, WIKI_POOL = 60, 2000
SETTINGS = mauve_defaults()  # the schema's: buckets auto (n/10, at most 500), 5 restarts of 500 iterations, 25, 5


def paragraphs() -> tuple[list[str], list[str]]:
    """(WikiText paragraphs, licence paragraphs), each cut to its first WORDS words, in file order."""
    wiki = [
        line.strip()
        for name in ("wiki.valid.raw", "wiki.test.raw")
        for line in (DATA / "wikitext-2-raw" / name).read_text(encoding="utf-8").splitlines()
        if len(line.split()) >= 40 and not line.strip().startswith("=")
    ]
    licence = [
        " ".join(p.split())
        for path in sorted((DATA / "licences").glob("*.txt"))
        for p in path.read_text(encoding="utf-8", errors="replace").split("\n\n")
        if len(p.split()) >= 40
    ]
    cut = lambda t: " ".join(t.split()[:WORDS])
    return [cut(t) for t in wiki[:WIKI_POOL]], [cut(t) for t in licence]


def ranked_above(a: list[float], b: list[float]) -> float:
    """Share of repetitions where a > b, ties counted half."""
    a, b = np.asarray(a), np.asarray(b)
    return float(np.mean((a > b) + 0.5 * (a == b)))


def main() -> None:
    from workflow_lib.evaluate.metrics import featurize, mauve_buckets, mauve_result

    if not (DATA / "wikitext-2-raw").is_dir() or not (DATA / "licences").is_dir():
        print(f"mauve_floor: {json.dumps({'skipped': f'no WikiText-2 raw or licence texts under {DATA}'})}")
        return
    wiki, licence = paragraphs()
    start = time.perf_counter()
    wiki_f, lic_f = featurize(wiki, "minilm", 128), featurize(licence, "minilm", 128)
    log = {
        "wiki_paragraphs": len(wiki),
        "licence_paragraphs": len(licence),
        "featurise_seconds": round(time.perf_counter() - start, 1),
    }
    print(log, flush=True)
    rows = []
    for n in SIZES:
        scores: dict[str, list[float]] = {"same": [], **{k: [] for k in MIXES}}
        start = time.perf_counter()
        for rep in range(REPS):
            rng = np.random.default_rng(1000 * n + rep)
            order = rng.permutation(len(wiki_f))
            p, rest = wiki_f[order[:n]], order[n:]
            scores["same"].append(float(mauve_result(p, wiki_f[rest[:n]], SETTINGS, rep).mauve))
            for k, (name, share) in enumerate(MIXES.items()):
                m = round(share * n)
                other = wiki_f[rest[(k + 1) * n : (k + 1) * n + n - m]]
                q = np.concatenate([other, lic_f[rng.choice(len(lic_f), m, replace=False)]])
                scores[name].append(float(mauve_result(p, q, SETTINGS, rep).mauve))
        row = {
            "n": n,
            "buckets": mauve_buckets(n, n, SETTINGS),
            "distinct": len({round(s, 6) for v in scores.values() for s in v}),
            **{f"{k}_mean": round(float(np.mean(v)), 3) for k, v in scores.items()},
            **{f"{k}_sd": round(float(np.std(v, ddof=1)), 3) for k, v in scores.items()},
            **{f"same_above_{k}": round(ranked_above(scores["same"], scores[k]), 2) for k in MIXES},
            "seconds": round(time.perf_counter() - start, 1),
        }
        rows.append(row)
        print(row, flush=True)
    print("mauve_floor: " + json.dumps({**log, "reps": REPS, "rows": rows}))


if __name__ == "__main__":
    main()
