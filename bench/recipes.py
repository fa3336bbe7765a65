"""Benchmark of building an evaluation set by each recipe, on one core, on a WikiText-sized input.

Input: WikiText-2 raw from ../shared/data (valid + test, repeated 4x: about 36k rows and 1.8M words, the size
of WikiText-2 train), otherwise the builtin corpus at a similar size. Each recipe runs as the download rule runs
it (workflow_lib.data.prepare.normalise on a local dataset), so reading, cleaning, the recipe's steps and the row
checksum are all in the time; Parquet writing is not.

- raw, cleaning wikitext: WikiText-2's recipe (rows verbatim).
- mixce, cleaning wikitext103: MixCE's WikiText-103 recipe (headings and joiners removed, Moses
  detokenisation, 50 < words < 1000, cut to 5000, topped up from a train split of the same size).
- mixce, cleaning webtext, with a top-up: the same rows as WebText-style jsonl (the WebText recipe).

    python bench/recipes.py

Last line: `recipes: {json}`.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path

if hasattr(os, "sched_setaffinity"):
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})

from shared import REPO

WIKI = REPO.parent / "shared" / "data" / "wikitext-2-raw"


def rows_of_input() -> tuple[list[str], str]:
    if (WIKI / "wiki.test.raw").exists():
        from workflow_lib.data.readers import read_rows

        rows = read_rows("wikitext", [str(WIKI / "wiki.valid.raw"), str(WIKI / "wiki.test.raw")])[0]
        return rows * 4, "wikitext-2-raw valid+test x4"
    from workflow_lib.data.builtin_corpus import build_grammar

    grammar = build_grammar(seed=1)
    return grammar.generate("train", n_docs=12000, sentences_per_doc=20, seed=1), "builtin (no ../shared/data)"


def timed_build(spec: dict, split: str) -> tuple[float, dict]:
    from workflow_lib.data.prepare import normalise

    start = time.perf_counter()
    _, meta = normalise("bench", spec, split)
    return time.perf_counter() - start, meta


def main() -> None:
    rows, source = rows_of_input()
    words = sum(len(r.split()) for r in rows)
    results = {"input": source, "rows": len(rows), "words": words}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        (tmp / "wiki.raw").write_text("".join(r or " \n" for r in rows))  # "" rows were blank lines
        (tmp / "web.jsonl").write_text("".join(json.dumps({"text": r}) + "\n" for r in rows))
        os.chdir(tmp)
        cases = {
            "raw (wikitext)": (
                {
                    "source": "local",
                    "format": "wikitext",
                    "files": {"test": "wiki.raw"},
                    "cleaning": "wikitext",
                    "recipe": "raw",
                    "max_rows": None,
                    "top_up": None,
                },
                "test",
            ),
            "mixce (wikitext103, top-up)": (
                {
                    "source": "local",
                    "format": "wikitext",
                    "files": {"test": "wiki.raw", "train": "wiki.raw"},
                    "cleaning": "wikitext103",
                    "recipe": "mixce",
                    "max_rows": 20000,
                    "top_up": "train",
                },
                "test",
            ),
            "mixce (webtext, top-up)": (
                {
                    "source": "local",
                    "format": "jsonl",
                    "files": {"test": "web.jsonl", "train": "web.jsonl"},
                    "cleaning": "webtext",
                    "recipe": "mixce",
                    "max_rows": 20000,
                    "top_up": "train",
                },
                "test",
            ),
        }
        for name, (spec, split) in cases.items():
            seconds, meta = timed_build(spec, split)
            steps = ", ".join(f"{s['step']}: {s['rows']}" for s in meta["steps"])
            results[name] = {
                "seconds": round(seconds, 2),
                "rows_written": meta["rows_written"],
                "top_up": (meta["top_up"] or {}).get("rows", 0),
            }
            print(f"{name:30s} {seconds:7.2f} s   {steps}")
    print(f"{len(rows)} rows, {words} words ({source}), one core")
    print("recipes: " + json.dumps(results))


if __name__ == "__main__":
    main()
