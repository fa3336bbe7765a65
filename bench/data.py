"""Benchmark of the data stage on one core: read + clean, BPE training, tokenisation, prompts.

Input: WikiText-2 raw from ../shared/data (valid + test; the train split is those rows repeated 4x, about
1.8M words, the size of WikiText-2 train), otherwise the builtin corpus at a similar size. Each step runs the
same functions the rules run. Last line: `data: {json}`.

    python bench/data.py
"""

from __future__ import annotations

import json
import os

os.environ.setdefault("RAYON_NUM_THREADS", "1")  # the tokenizers library's thread pool: one core
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
if hasattr(os, "sched_setaffinity"):
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})

from shared import REPO, timed

WIKI = REPO.parent / "shared" / "data" / "wikitext-2-raw"


def main() -> None:
    from workflow_lib.data.cleaning import clean
    from workflow_lib.data.prompts import make_prompts
    from workflow_lib.data.readers import read_rows
    from workflow_lib.data.tokenization import group_blocks, token_ids, train_bpe

    if (WIKI / "wiki.test.raw").exists():
        source = "wikitext-2-raw (valid+test; train = those rows x4)"
        (test_rows, _), t_read = timed(read_rows, "wikitext", [str(WIKI / "wiki.test.raw")])
        (valid_rows, _), t_read2 = timed(read_rows, "wikitext", [str(WIKI / "wiki.valid.raw")])
        t_read += t_read2
        train_rows = (valid_rows + test_rows) * 4
        cleaning = "wikitext"
    else:
        from workflow_lib.data.builtin_corpus import build_grammar

        source = "builtin (no ../shared/data)"
        grammar = build_grammar(seed=1)
        (train_rows, t_read) = timed(grammar.generate, "train", n_docs=12000, sentences_per_doc=20, seed=1)
        test_rows = grammar.generate("test", n_docs=4000, sentences_per_doc=20, seed=1)
        cleaning = "none"

    (train_clean, _), t_clean = timed(clean, cleaning, train_rows)
    (test_clean, _), t_clean2 = timed(clean, cleaning, test_rows)
    t_clean += t_clean2
    tokenizer, t_bpe = timed(train_bpe, train_clean, 8192)
    (ids, _), t_tok = timed(token_ids, tokenizer, train_clean)
    blocks, t_group = timed(group_blocks, ids, 256)
    (prompts, _stats), t_prompts = timed(make_prompts, test_clean, list(range(len(test_clean))), max_prompts=4000)

    rows = len(train_rows) + len(test_rows)
    words = sum(len(r.split()) for r in train_rows)
    total = t_read + t_clean + t_bpe + t_tok + t_group + t_prompts
    result = {
        "source": source,
        "rows": rows,
        "train_words": words,
        "train_tokens": len(ids),
        "blocks": len(blocks),
        "prompts": prompts.height,
        "read_clean_rows_per_s": round(rows / (t_read + t_clean)),
        "bpe_train_seconds": round(t_bpe, 2),
        "tokenize_tokens_per_s": round(len(ids) / (t_tok + t_group)),
        "prompt_rows_per_s": round(len(test_clean) / t_prompts),
        "total_seconds": round(total, 2),
        "target_seconds": 30,
    }
    print(json.dumps({k: result[k] for k in ("read_clean_rows_per_s", "tokenize_tokens_per_s", "total_seconds")}))
    print("data: " + json.dumps(result))


if __name__ == "__main__":
    main()
