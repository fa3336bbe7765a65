"""The exact extrapolation error on the builtin corpus: TV between the model's next-word law and the truth.

The builtin grammar knows P(next word | prefix) exactly, under the in-support law (train/validation/test) and
the out-of-support law (ood). For evaluation prefixes (the first t words of each human reference, t every
`stride` words from the prompt length on), the model's next-word law is its next-token law at the end of the
prefix, averaged over `draws` Monte Carlo perturbations T(. | X) of the prefix (the test perturbation; one
draw at intensity 0), read at the tokens that spell " word". Words the tokenizer splits into several tokens
and every other token form one remaining cell, so the TV is computed on that coarsened space (a lower bound of
the TV over all continuations; `coverage` reports the truth's mass on single-token words). Prefixes that are
impossible under the law (NaN truth) are skipped and counted.
"""

from __future__ import annotations

import argparse
import logging

import numpy as np
import torch

from workflow_lib.cli import StageError, parse_json_arg, run
from workflow_lib.files import write_json

log = logging.getLogger("workflow_lib.evaluate.extrapolation")
LAW_OF_SPLIT = {"train": "in_support", "validation": "in_support", "test": "in_support", "ood": "ood"}


def word_token_ids(tokenizer, vocabulary) -> np.ndarray:
    """For each grammar word, the single token spelling ' word' (as it follows a space), or -1."""
    out = np.full(len(vocabulary), -1, dtype=np.int64)
    for i, word in enumerate(vocabulary):
        ids = tokenizer(" " + word, add_special_tokens=False)["input_ids"]
        if len(ids) == 1:
            out[i] = ids[0]
    return out


def evaluation_prefixes(references: list[str], start: int, stride: int) -> list[list[str]]:
    out = []
    for ref in references:
        words = ref.split()
        out.extend(words[:t] for t in range(start, len(words), stride))
    return out


@torch.no_grad()
def model_next_word(model, tokenizer, prefixes: list[list[str]], word_tokens: np.ndarray, perturbation: dict, table,
                    draws: int, seed: int, batch_size: int = 256, decoder: dict | None = None) -> np.ndarray:
    """[n, W + 1]: the perturbed next-word law the decoder draws from (single-token words, then everything else)."""
    from workflow_lib.perturb.backends import KeyedRandom
    from workflow_lib.perturb.perturber import perturb as apply_perturbation
    from workflow_lib.sample.decoding import decoded_probs, row_keys
    from workflow_lib.sample.loops import context_length, left_pad

    device = next(model.parameters()).device
    special = sorted(set(tokenizer.all_special_ids))
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    encoded = tokenizer([" ".join(p) for p in prefixes], add_special_tokens=True)["input_ids"]
    draws = draws if perturbation["intensity"] > 0 else 1
    table = table.to(device) if table is not None else None
    known = torch.as_tensor(word_tokens[word_tokens >= 0], device=device)
    out = np.zeros((len(prefixes), len(word_tokens) + 1))
    for start in range(0, len(prefixes), batch_size):
        chunk = encoded[start : start + batch_size]
        lengths = torch.tensor([len(c) for c in chunk], device=device)
        offsets = torch.cat([torch.zeros(1, dtype=torch.long, device=device), lengths.cumsum(0)])
        values = torch.as_tensor([t for c in chunk for t in c], device=device)
        total = torch.zeros((len(chunk), model.config.vocab_size), dtype=torch.float64, device=device)
        for d in range(draws):
            v, o = values, offsets
            if perturbation["intensity"] > 0:
                keys = row_keys(seed, torch.arange(start, start + len(chunk), device=device), torch.full((len(chunk),), d, device=device))
                p = apply_perturbation(values, offsets, perturbation["strategy"], perturbation["intensity"], table,
                                       KeyedRandom(keys, offsets), special)
                v, o = p.values, p.offsets
            ids, mask, positions = left_pad(v, o, pad, context_length(model))
            logits = model(input_ids=ids, attention_mask=mask, position_ids=positions, logits_to_keep=1).logits[:, -1]
            total += decoded_probs(logits, decoder)
        probs = total / draws
        words = np.zeros((len(chunk), len(word_tokens) + 1))
        words[:, np.flatnonzero(word_tokens >= 0)] = probs[:, known].cpu().numpy()
        words[:, -1] = 1.0 - words[:, :-1].sum(1)
        out[start : start + len(chunk)] = words
    if not np.isfinite(out).all():
        raise StageError("extrapolation: the model's next-word law is not finite (non-finite logits); nothing is "
                         "written for it. Check its weights and train_log.csv")
    return out


def extrapolation_error(model, tokenizer, grammar, references: list[str], law: str, perturbation: dict, table,
                        draws: int = 8, seed: int = 0, start: int = 20, stride: int = 10, decoder: dict | None = None) -> dict:
    prefixes = evaluation_prefixes(references, start, stride)
    word_ids = [np.asarray(ids) for ids in grammar.encode([" ".join(p) for p in prefixes])]
    truth = grammar.next_word_probs(word_ids, law)
    possible = ~np.isnan(truth).any(1)
    word_tokens = word_token_ids(tokenizer, grammar.vocabulary)
    single = word_tokens >= 0
    truth_cells = np.concatenate([truth[:, single], truth[:, ~single].sum(1, keepdims=True)], axis=1)
    model_law = model_next_word(model, tokenizer, [p for p, ok in zip(prefixes, possible) if ok], word_tokens, perturbation,
                                table, draws, seed, decoder=decoder)
    model_cells = np.concatenate([model_law[:, :-1][:, single], model_law[:, -1:]], axis=1)
    tv = 0.5 * np.abs(model_cells - truth_cells[possible]).sum(1)
    return {"tv_mean": float(tv.mean()), "tv_2se": float(2 * tv.std(ddof=1) / np.sqrt(len(tv))) if len(tv) > 1 else None,
            "prefixes": int(possible.sum()), "impossible_prefixes": int((~possible).sum()), "law": law,
            "coverage": float(truth_cells[possible][:, :-1].sum(1).mean()), "draws": draws if perturbation["intensity"] > 0 else 1,
            "perturbation": perturbation, "decoder": decoder or {}}


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m workflow_lib.evaluate.extrapolation")
    parser.add_argument("--model", required=True, help="model folder (with its tokenizer) or hub id")
    parser.add_argument("--revision", help="hub revision of an untrained hub model")
    parser.add_argument("--prompts", required=True)
    parser.add_argument("--synonyms")
    parser.add_argument("--perturbation", required=True)
    parser.add_argument("--builtin", required=True, help="JSON: the builtin dataset's grammar settings")
    parser.add_argument("--split", required=True)
    parser.add_argument("--settings", required=True, help="JSON: draws, stride, seed")
    parser.add_argument("--decoder", default="{}", help="JSON: the decoder whose law is compared (default: unbiased)")
    parser.add_argument("--output", required=True)
    args = parser.parse_args()

    import pyarrow.parquet as pq

    from workflow_lib.data.builtin_corpus import build_grammar
    from workflow_lib.perturb.synonym_table import SynonymTable
    from workflow_lib.sample.sampler import load_model

    settings = parse_json_arg(args.settings, "evaluation.extrapolation")
    grammar_params = {k: v for k, v in parse_json_arg(args.builtin, "builtin").items() if k not in ("docs", "sentences_per_doc")}
    from transformers import AutoTokenizer

    device = "cuda" if torch.cuda.is_available() else "cpu"
    tokenizer = AutoTokenizer.from_pretrained(args.model, revision=args.revision)
    model = load_model(args.model, device, revision=args.revision)
    table = SynonymTable.from_arrow(pq.read_table(args.synonyms)) if args.synonyms else None
    references = pq.read_table(args.prompts).column("reference").to_pylist()
    result = extrapolation_error(model, tokenizer, build_grammar(**grammar_params), references, LAW_OF_SPLIT[args.split],
                                 parse_json_arg(args.perturbation, "test perturbation"), table, settings["draws"],
                                 settings["seed"], stride=settings["stride"], decoder=parse_json_arg(args.decoder, "decoder"))
    log.info("TV %.4f +- %.4f over %d prefixes (%s law)", result["tv_mean"], result["tv_2se"] or 0, result["prefixes"], result["law"])
    write_json(result, args.output)


if __name__ == "__main__":
    run(main)
