"""Perplexity of a causal LM on an eval set's human text (the prompts' `reference`: prefix + the next 80 words).

One job scores every eval set a model is evaluated on: the model is loaded once (loading costs more than scoring,
for a 1.3B model on a GPU or a tiny one on a CPU), and each eval set gets its own two files in the output folder,
`<eval set>.json` and `<eval set>.prompts.parquet`, as if it had been scored alone. How a reference is scored and
how perplexity pools them: docs/usage.md, "Sampling and evaluation".

    python -m workflow_lib.evaluate.perplexity --model PATH_OR_HUB_ID [--revision REV] \
        --prompts EVAL_SET=PROMPTS.parquet [EVAL_SET=PROMPTS.parquet ...] --settings JSON --output-dir DIR
"""

from __future__ import annotations

import argparse
import logging
import shutil
from pathlib import Path

import numpy as np

from workflow_lib.cli import StageError, parse_json_arg, run
from workflow_lib.files import write_json, write_parquet
from workflow_lib.provenance import provenance

log = logging.getLogger("workflow_lib.evaluate.perplexity")


def reference_ids(tokenizer, references: list[str], max_len: int | None) -> list[list[int]]:
    """Token ids of each reference, no special tokens, at most `max_len` (the model's context) of them."""
    ids = tokenizer(references, add_special_tokens=False)["input_ids"]
    return [row[:max_len] if max_len else row for row in ids]


def sequence_nll(model, rows: list[list[int]], batch_size: int, pad_id: int) -> tuple[np.ndarray, np.ndarray]:
    """(summed NLL in nats, scored tokens) per row: every token after the first, given the ones before."""
    import torch
    from torch.nn.utils.rnn import pad_sequence

    device = next(model.parameters()).device
    nll = np.zeros(len(rows), dtype=np.float64)
    tokens = np.array([max(len(r) - 1, 0) for r in rows], dtype=np.int64)
    by_length = np.argsort([len(r) for r in rows], kind="stable")  # similar lengths share a batch: less padding
    with torch.no_grad():
        for start in range(0, len(rows), batch_size):
            index = by_length[start : start + batch_size]
            width = max(len(rows[i]) for i in index)
            if width < 2:
                continue
            ids = pad_sequence(
                [torch.tensor(rows[i], dtype=torch.long) for i in index], batch_first=True, padding_value=pad_id
            ).to(device)
            lengths = torch.tensor([len(rows[i]) for i in index], device=device)
            mask = (torch.arange(width, device=device) < lengths[:, None]).long()
            logits = model(input_ids=ids, attention_mask=mask).logits[:, :-1].float()
            # Over the vocabulary as the last, contiguous axis: cross_entropy of [B, V, L] (the class axis second)
            # took 7x as long on a CPU for SmolLM2's 49,152 words, and was further from float64 (docs/benchmarks.md,
            # "Test suite time", session 14).
            token_nll = torch.nn.functional.cross_entropy(
                logits.reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1), reduction="none"
            ).view(len(index), width - 1)
            nll[index] = (token_nll.double() * mask[:, 1:]).sum(1).cpu().numpy()
            log.info("scored %d of %d references", min(start + batch_size, len(rows)), len(rows))
    return nll, tokens


def eval_set_prompts(pairs: list[str]) -> dict[str, str]:
    """{eval set: prompts path} from EVAL_SET=PATH arguments, in the order given."""
    out = {}
    for pair in pairs:
        name, sep, path = pair.partition("=")
        if not sep or not name or not path:
            raise StageError(f"perplexity: --prompts takes EVAL_SET=PROMPTS.parquet, got {pair!r}")
        if name in out:
            raise StageError(f"perplexity: eval set {name!r} given twice")
        out[name] = path
    return out


def score_eval_set(model, tokenizer, prompts_path: str, settings: dict, label: str):
    """(per-prompt table, summary) of one eval set; a non-finite NLL or nothing to score stops the job."""
    import pyarrow as pa

    from workflow_lib.files import read_parquet
    from workflow_lib.sample.loops import context_length

    prompts = read_parquet(prompts_path, columns=["prompt_id", "reference"])
    rows = reference_ids(tokenizer, prompts.column("reference").to_pylist(), context_length(model))
    pad_id = next((i for i in (tokenizer.pad_token_id, tokenizer.eos_token_id) if i is not None), 0)  # masked anyway
    nll, tokens = sequence_nll(model, rows, settings.get("batch_size", 16), pad_id)
    if not np.isfinite(nll).all():
        raise StageError(
            f"perplexity: {label} gives a non-finite NLL on {int((~np.isfinite(nll)).sum())} "
            f"references of {prompts_path}; nothing is written"
        )
    if tokens.sum() == 0:
        raise StageError(f"perplexity: {prompts_path} has no reference of two tokens or more; nothing to score")
    per_token = float(nll.sum() / tokens.sum())
    table = pa.table(
        {"prompt_id": prompts.column("prompt_id").cast(pa.int64()), "nll": pa.array(nll), "tokens": pa.array(tokens)}
    )
    summary = {
        "perplexity": float(np.exp(per_token)),
        "nll_per_token": per_token,
        "tokens": int(tokens.sum()),
        "prompts": len(rows),
        "provenance": provenance(settings),
    }
    return table, summary


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m workflow_lib.evaluate.perplexity")
    parser.add_argument("--model", required=True, help="model folder (with its tokenizer) or hub id")
    parser.add_argument("--revision", help="hub revision of an untrained hub model")
    parser.add_argument(
        "--prompts",
        required=True,
        nargs="+",
        metavar="EVAL_SET=PATH",
        help="each eval set's prompts Parquet (prompt_id, reference)",
    )
    parser.add_argument("--settings", required=True, help="JSON: batch_size, precision (fp32 | bf16), seed")
    parser.add_argument(
        "--output-dir",
        required=True,
        type=Path,
        help="folder of <eval set>.json (perplexity, nll_per_token, tokens, prompts, provenance) and "
        "<eval set>.prompts.parquet (prompt_id, nll summed, tokens)",
    )
    args = parser.parse_args()

    import torch
    from transformers import AutoTokenizer

    from workflow_lib.sample.sampler import PRECISIONS, load_model

    prompts = eval_set_prompts(args.prompts)
    settings = parse_json_arg(args.settings, "perplexity settings")
    precision = settings.get("precision", "fp32")
    if precision not in PRECISIONS:
        raise StageError(f"perplexity: precision {precision!r} is not one of {sorted(PRECISIONS)}")
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = load_model(args.model, device, precision, args.revision)
    tokenizer = AutoTokenizer.from_pretrained(args.model, revision=args.revision)
    # Every eval set is scored before anything is written, into a folder renamed when complete.
    part = args.output_dir.with_name(args.output_dir.name + ".part")
    shutil.rmtree(part, ignore_errors=True)
    part.mkdir(parents=True)
    try:
        for eval_set, path in prompts.items():
            table, summary = score_eval_set(model, tokenizer, path, settings, args.model)
            log.info(
                "%s: perplexity %.3f (%.4f nats per token over %d tokens of %d references, %s on %s)",
                eval_set,
                summary["perplexity"],
                summary["nll_per_token"],
                summary["tokens"],
                summary["prompts"],
                precision,
                device,
            )
            write_parquet(table, part / f"{eval_set}.prompts.parquet")
            write_json(summary, part / f"{eval_set}.json")
    except BaseException:
        shutil.rmtree(part, ignore_errors=True)
        raise
    shutil.rmtree(args.output_dir, ignore_errors=True)
    part.rename(args.output_dir)


if __name__ == "__main__":
    run(main)
