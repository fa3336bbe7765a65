"""Tokenizers and run_clm-style token blocks.

`tokenizer` either saves a hub tokenizer locally (so every later job, possibly on a node without network,
loads it from disk) or trains a byte-level BPE on a corpus for a scratch model. `tokenize` reproduces
run_clm's preprocessing: rows tokenised with the tokenizer's defaults (no EOS is added; OPT's tokenizer adds
its BOS as run_clm does), concatenated, and cut into `block_size` blocks; the remainder is dropped.
"""

from __future__ import annotations

import argparse
import itertools
import logging

import numpy as np

from workflow_lib.cli import StageError, parse_json_arg, run
from workflow_lib.files import atomic_path, write_parquet

log = logging.getLogger("workflow_lib.data.tokenization")

SPECIAL = "<|endoftext|>"
LOCAL_TOKENIZER_HELP = (
    "Without network access, set `name` to a local folder that holds the tokenizer files "
    "(e.g. one written by `AutoTokenizer.from_pretrained(...).save_pretrained(folder)`)."
)


def train_bpe(texts: list[str], vocab_size: int, min_frequency: int = 2):
    """A GPT-2-style byte-level BPE learnt from `texts`, wrapped as a transformers tokenizer.

    The single special token plays BOS, EOS and pad, as in GPT-2, so padding never needs a new embedding.
    """
    from tokenizers import ByteLevelBPETokenizer
    from transformers import PreTrainedTokenizerFast

    bpe = ByteLevelBPETokenizer()
    batches = (texts[i : i + 1000] for i in range(0, len(texts), 1000))
    bpe.train_from_iterator(
        batches,
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=[SPECIAL],
        show_progress=False,
        length=len(texts),
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=bpe._tokenizer,
        bos_token=SPECIAL,
        eos_token=SPECIAL,
        unk_token=SPECIAL,
        pad_token=SPECIAL,
        model_max_length=1 << 30,
    )


def load_hub_tokenizer(key: str, name: str, revision: str | None):
    from transformers import AutoTokenizer

    from workflow_lib.hub import hub_unreachable

    if why := hub_unreachable(name):
        raise StageError(f"tokenizers.{key}.name: could not load tokenizer {name!r}: {why}\n{LOCAL_TOKENIZER_HELP}")
    try:
        return AutoTokenizer.from_pretrained(name, revision=revision)
    except Exception as error:  # OSError offline, ValueError for a bad folder, HTTP errors...
        raise StageError(
            f"tokenizers.{key}.name: could not load tokenizer {name!r}: {type(error).__name__}: "
            f"{str(error).splitlines()[0] if str(error) else ''}\n" + LOCAL_TOKENIZER_HELP
        ) from error


# Init arguments transformers records in tokenizer_config.json that say how this process loaded the files, not
# what the tokenizer is: `local_files_only` is True whenever HF_HUB_OFFLINE is set, so the same study would write
# other bytes with and without it. Loading the folder sets it afresh.
ENVIRONMENT_KWARGS = ("local_files_only",)


def save_tokenizer(tokenizer, folder) -> None:
    """tokenizer.save_pretrained(folder) without the environment's traces, so its files are the same bytes
    whatever HF_HUB_OFFLINE is (the tokenizer rule and every trained model save through here)."""
    for key in ENVIRONMENT_KWARGS:
        tokenizer.init_kwargs.pop(key, None)
    tokenizer.save_pretrained(folder)


def token_ids(tokenizer, texts: list[str], batch_size: int = 2000) -> tuple[np.ndarray, np.ndarray]:
    """Token ids of every row, concatenated, plus row offsets; batched through the Rust tokenizer."""
    from tqdm import tqdm

    chunks, lengths = [], []
    for start in tqdm(range(0, len(texts), batch_size), desc="tokenise", unit="batch", mininterval=5):
        encoded = tokenizer(texts[start : start + batch_size], return_attention_mask=False)["input_ids"]
        sizes = [len(ids) for ids in encoded]
        lengths.extend(sizes)
        # chain + fromiter flatten in C, without a Python-level step per token.
        chunks.append(np.fromiter(itertools.chain.from_iterable(encoded), dtype=np.int32, count=sum(sizes)))
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    ids = np.concatenate(chunks) if chunks else np.zeros(0, np.int32)
    return ids, offsets


def group_blocks(ids: np.ndarray, block_size: int) -> np.ndarray:
    """run_clm's group_texts on one concatenated stream: [n_blocks, block_size], remainder dropped."""
    n_blocks = len(ids) // block_size
    return ids[: n_blocks * block_size].reshape(n_blocks, block_size)


def blocks_table(blocks: np.ndarray):
    import pyarrow as pa

    n, width = blocks.shape
    offsets = pa.array(np.arange(0, (n + 1) * width, width, dtype=np.int32))
    ids = pa.ListArray.from_arrays(offsets, pa.array(blocks.reshape(-1).astype(np.int32)))
    return pa.table({"block_id": pa.array(np.arange(n, dtype=np.int64)), "input_ids": ids})


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m workflow_lib.data.tokenization")
    sub = parser.add_subparsers(dest="command", required=True)
    tk = sub.add_parser("tokenizer", help="save a hub tokenizer, or train a BPE, to a folder")
    tk.add_argument("--key", required=True)
    tk.add_argument("--spec", required=True, help="the tokenizer's config section, as JSON")
    tk.add_argument("--train-data", help="normalised Parquet to learn from (source: train)")
    tk.add_argument("--output", required=True)
    bl = sub.add_parser("tokenize", help="normalised Parquet -> token blocks")
    bl.add_argument("--tokenizer", required=True)
    bl.add_argument("--input", required=True)
    bl.add_argument("--output", required=True)
    bl.add_argument("--block-size", type=int, required=True)
    args = parser.parse_args()

    if args.command == "tokenizer":
        spec = parse_json_arg(args.spec, f"tokenizers.{args.key}")
        if spec["source"] == "train":
            from workflow_lib.files import read_parquet

            texts = read_parquet(args.train_data, columns=["text"]).column("text").to_pylist()
            tokenizer = train_bpe(texts, spec["vocab_size"], spec.get("min_frequency", 2))
            log.info("trained byte-level BPE on %d rows: vocabulary %d", len(texts), len(tokenizer))
        else:
            tokenizer = load_hub_tokenizer(args.key, spec["name"], spec.get("revision"))
        with atomic_path(args.output) as tmp:
            save_tokenizer(tokenizer, tmp)
    else:
        from transformers import AutoTokenizer

        from workflow_lib.files import read_parquet

        tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
        texts = read_parquet(args.input, columns=["text"]).column("text").to_pylist()
        ids, _ = token_ids(tokenizer, texts)
        blocks = group_blocks(ids, args.block_size)
        if len(blocks) == 0:
            raise StageError(f"{args.input}: {len(ids)} tokens, fewer than tokenize.block_size = {args.block_size}")
        log.info(
            "%d rows -> %d tokens -> %d blocks of %d (%d dropped)",
            len(texts),
            len(ids),
            len(blocks),
            args.block_size,
            len(ids) - blocks.size,
        )
        write_parquet(blocks_table(blocks), args.output)


if __name__ == "__main__":
    run(main)
