"""How much text each job reads, before it runs (from the config) or after (from the files the study wrote).

Before a study runs, sizes come from the config: the builtin corpus's document counts, the published word counts
of the corpora the studies use (`CORPUS_WORDS`), a local or fetched file's bytes, and the prompts' word counts.
Words become tokens at `TOKENS_PER_WORD`. Once the study's data jobs have run, the tokenised training rows and the
prompts files are read instead (Parquet metadata and one column), so a prediction after the data stage uses the
real sizes. `workdir=None` reads nothing: the SLURM requests use the config alone, so a job's request does not
depend on when snakemake evaluated it.
"""

from __future__ import annotations

import math
from functools import cache
from pathlib import Path

from workflow_lib.data.settings import planned_prompts
from workflow_lib.layout import prompts_path, tokens_path
from workflow_lib.perturb.strategies import get as get_strategy

# Words per sentence of the builtin grammar at its default settings (measured: 200 documents of 20 sentences).
BUILTIN_WORDS_PER_SENTENCE = 7.33
# Tokens per word: a BPE trained on the builtin corpus gives 1.00 (the default study: 293,120 training tokens for
# 293,000 words); GPT-2's BPE on English prose about 1.3 (OpenAI's rule of thumb, ~0.75 words per token).
TOKENS_PER_WORD = {"train": 1.0, "hf": 1.3}
BYTES_PER_WORD = 6.0  # English text, a word and its space
# Whitespace words per split (Merity et al. 2016, Table 1).
CORPUS_WORDS = {
    ("Salesforce/wikitext", "wikitext-2-raw-v1"): {"train": 2_088_628, "validation": 217_646, "test": 245_569},
    ("Salesforce/wikitext", "wikitext-103-raw-v1"): {"train": 103_227_021, "validation": 217_646, "test": 245_569},
}


def tokens_per_word(config: dict, tokenizer: str) -> float:
    return TOKENS_PER_WORD["train" if config["tokenizers"][tokenizer]["source"] == "train" else "hf"]


def split_words(config: dict, dataset: str, split: str, workdir: Path | None = Path(".")) -> float | None:
    """Whitespace words of a dataset split, from the config alone (None: not knowable before it is fetched)."""
    ds = config["datasets"][dataset]
    if ds["source"] == "builtin":
        b = ds["builtin"]
        return b["docs"][split] * b["sentences_per_doc"] * BUILTIN_WORDS_PER_SENTENCE
    if ds["source"] == "hf":
        words = CORPUS_WORDS.get((ds["path"], ds.get("name")), {}).get(ds.get("splits", {}).get(split, split))
        if words is None:
            local = Path(workdir or ".", ds["path"]).expanduser()
            files = [f for f in local.rglob("*") if f.is_file()] if local.is_dir() else []
            return sum(f.stat().st_size for f in files) / BYTES_PER_WORD if files else None
        return words
    entry = ds.get("files", {}).get(split)
    if ds["source"] == "local" and entry is not None:
        paths = entry if isinstance(entry, list) else [entry]
        sizes = [Path(workdir or ".", p).stat().st_size for p in paths if Path(workdir or ".", p).is_file()]
        return sum(sizes) / BYTES_PER_WORD if sizes else None
    if isinstance(entry, dict) and entry.get("head_bytes"):
        return entry["head_bytes"] / BYTES_PER_WORD
    return None


def _row_tokens(workdir: Path | None, path: str) -> tuple[int, int] | None:
    """(rows, tokens) of a Parquet file with an `input_ids` list column, or None when it does not (yet) exist."""
    if workdir is None or not Path(workdir, path).is_file():
        return None
    return _read_row_tokens(str(Path(workdir, path)))


@cache
def _read_row_tokens(path: str) -> tuple[int, int]:
    import pyarrow.compute as pc

    from workflow_lib.files import read_parquet

    column = read_parquet(path, columns=["input_ids"]).column("input_ids")
    return column.length(), int(pc.sum(pc.list_value_length(column)).as_py() or 0)


def training_rows(
    config: dict, model: str, dataset: str, cond, seed: int, workdir: Path | None = Path(".")
) -> dict | None:
    """{rows, tokens, source} of a training job's data: the perturbed Parquet when it exists, else the config's
    arithmetic (blocks of `tokenize.block_size`, the original plus m copies in augment mode, insertion lengthening
    and deletion shortening rows by the intensity, rows cut at `training.max_length`)."""
    from workflow_lib.grid import perturbed_path

    tokenizer = config["models"][model]["tokenizer"]
    found = _row_tokens(workdir, perturbed_path(tokenizer, dataset, cond, seed))
    if found:
        return {"rows": found[0], "tokens": found[1], "source": "data"}
    words = split_words(config, dataset, "train", workdir)
    if words is None:
        return None
    block = config["tokenize"]["block_size"]
    blocks = math.floor(words * tokens_per_word(config, tokenizer) / block)
    copies = cond.copies + 1 if cond.mode == "augment" else cond.copies
    alpha = cond.level
    stretch = get_strategy(cond.strategy).length_factor(alpha) if alpha > 0 else 1.0
    from workflow_lib.train.settings import training_settings

    max_length = training_settings(config, model, 0)["max_length"]
    length = min(block * stretch, max_length) if cond.copies else block
    perturbed = blocks * (copies - 1 if cond.mode == "augment" else copies)
    original = blocks if cond.mode == "augment" else 0
    return {"rows": original + perturbed, "tokens": original * block + perturbed * length, "source": "config"}


def validation_tokens(config: dict, model: str, dataset: str, workdir: Path | None = Path(".")) -> float:
    tokenizer = config["models"][model]["tokenizer"]
    found = _row_tokens(workdir, tokens_path(tokenizer, dataset, "validation"))
    if found:
        return found[1]
    from workflow_lib.grid import dataset_splits

    if "validation" not in dataset_splits(config["datasets"][dataset]):
        return 0.0
    return (split_words(config, dataset, "validation", workdir) or 0.0) * tokens_per_word(config, tokenizer)


def _prompt_words(workdir: Path | None, path: str) -> tuple[int, float, float] | None:
    if workdir is None or not Path(workdir, path).is_file():
        return None
    return _read_prompt_words(str(Path(workdir, path)))


@cache
def _read_prompt_words(path: str) -> tuple[int, float, float]:
    import pyarrow.compute as pc

    from workflow_lib.files import read_parquet

    table = read_parquet(path, columns=["prefix", "reference"])

    def mean_words(name: str) -> float:
        words = pc.list_value_length(pc.split_pattern_regex(pc.utf8_trim_whitespace(table.column(name)), r"\s+"))
        return float(pc.mean(words).as_py() or 0.0)

    return table.num_rows, mean_words("prefix"), mean_words("reference")


def eval_set_prompts(config: dict, eval_set: str, workdir: Path | None = Path(".")) -> dict:
    """{prompts, prefix_words, reference_words, source}: the prompts file when it exists, else the config
    (`data.settings.planned_prompts`)."""
    found = _prompt_words(workdir, prompts_path(eval_set))
    if found:
        return {"prompts": found[0], "prefix_words": found[1], "reference_words": found[2], "source": "data"}
    prefix = config["eval_sets"][eval_set]["prefix_words"]
    return {
        "prompts": planned_prompts(config, eval_set),
        "prefix_words": prefix,
        "reference_words": prefix + config["prompts"]["reference_words"],
        "source": "config",
    }
