"""The exact extrapolation error on the builtin corpus: TV between the model's next-word law and the truth.

The builtin grammar knows P(next word | prefix) exactly, under the in-support and the out-of-support law. For
prefixes of every human reference, the model's next-word law (averaged over `draws` keyed perturbations of the
prefix; one draw at intensity 0) is compared with it on a coarsened space of single-token words (`coarsened_laws`),
and the two halves of the draws estimate the Monte Carlo bias (`monte_carlo_bias`). It also records where the
prefixes lie against the training support (`support_shares`) and how often a synonym draw reaches it
(`synonym_reach`). What it computes: docs/usage.md, "Sampling and evaluation"; the bias, its measurement and the
default of 32 draws: docs/method.md §4, "The exact TV's Monte Carlo bias".
"""

from __future__ import annotations

import argparse
import logging

import numpy as np
import torch

from workflow_lib.cli import StageError, parse_json_arg, run
from workflow_lib.data.builtin_corpus import LAW_OF_SPLIT
from workflow_lib.files import write_json

log = logging.getLogger("workflow_lib.evaluate.extrapolation")


def word_token_ids(tokenizer, vocabulary) -> np.ndarray:
    """For each grammar word, the single token spelling ' word' (as it follows a space), or -1."""
    out = np.full(len(vocabulary), -1, dtype=np.int64)
    for i, word in enumerate(vocabulary):
        ids = tokenizer(" " + word, add_special_tokens=False)["input_ids"]
        if len(ids) == 1:
            out[i] = ids[0]
    return out


def evaluation_prefixes(references: list[str], start: int, stride: int) -> list[list[str]]:
    out: list[list[str]] = []
    for ref in references:
        words = ref.split()
        out.extend(words[:t] for t in range(start, len(words), stride))
    return out


def prefix_owners(references: list[str], start: int, stride: int) -> np.ndarray:
    """For each prefix of `evaluation_prefixes`, the index of the reference it is cut from."""
    counts = [len(range(start, len(ref.split()), stride)) for ref in references]
    return np.repeat(np.arange(len(references)), counts)


@torch.no_grad()
def model_next_word(
    model,
    tokenizer,
    prefixes: list[list[str]],
    word_tokens: np.ndarray,
    perturbation: dict,
    table,
    draws: int,
    seed: int,
    batch_size: int = 256,
    decoder: dict | None = None,
    blocks: int = 1,
) -> np.ndarray:
    """[blocks, n, W + 1]: the perturbed next-word law the decoder draws from (single-token words, then everything
    else), averaged over each of `blocks` equal runs of consecutive draws (draw d falls in block d * blocks // draws).
    Draw d of prefix i is keyed by (seed, i, d), so the first D of more draws are the D draws themselves. At intensity
    0 there is one draw, the law itself, and one block."""
    from workflow_lib.perturb.backends import KeyedRandom
    from workflow_lib.perturb.perturber import perturb as apply_perturbation
    from workflow_lib.perturb.strategies import get as get_strategy
    from workflow_lib.sample.decoding import decoded_probs, row_keys
    from workflow_lib.sample.embedded import noised_forward
    from workflow_lib.sample.loops import context_length, left_pad

    device = next(model.parameters()).device
    special = sorted(set(tokenizer.all_special_ids))
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    encoded = tokenizer([" ".join(p) for p in prefixes], add_special_tokens=True)["input_ids"]
    draws, blocks = (draws, blocks) if perturbation["intensity"] > 0 else (1, 1)
    if draws % blocks:
        raise StageError(f"extrapolation: {draws} draws do not split into {blocks} equal blocks")
    table = table.to(device) if table is not None else None
    known = torch.as_tensor(word_tokens[word_tokens >= 0], device=device)
    out = np.zeros((blocks, len(prefixes), len(word_tokens) + 1))
    for start in range(0, len(prefixes), batch_size):
        chunk = encoded[start : start + batch_size]
        lengths = torch.tensor([len(c) for c in chunk], device=device)
        offsets = torch.cat([torch.zeros(1, dtype=torch.long, device=device), lengths.cumsum(0)])
        values = torch.as_tensor([t for c in chunk for t in c], device=device)
        total = torch.zeros((blocks, len(chunk), model.config.vocab_size), dtype=torch.float64, device=device)
        for d in range(draws):
            v, o = values, offsets
            if perturbation["intensity"] > 0:
                keys = row_keys(
                    seed,
                    torch.arange(start, start + len(chunk), device=device),
                    torch.full((len(chunk),), d, device=device),
                )
                if get_strategy(perturbation["strategy"]).in_embeddings:  # the draw noises embeddings
                    out_d, _ = noised_forward(
                        model,
                        perturbation,
                        special,
                        pad,
                        values,
                        offsets,
                        keys,
                        context_length(model),
                        logits_to_keep=1,
                    )
                    total[d * blocks // draws] += decoded_probs(out_d.logits[:, -1], decoder)
                    continue
                p = apply_perturbation(
                    values,
                    offsets,
                    perturbation["strategy"],
                    perturbation["intensity"],
                    table,
                    KeyedRandom(keys, offsets),
                    special,
                )
                v, o = p.values, p.offsets
            ids, mask, positions = left_pad(v, o, pad, context_length(model))
            logits = model(input_ids=ids, attention_mask=mask, position_ids=positions, logits_to_keep=1).logits[:, -1]
            total[d * blocks // draws] += decoded_probs(logits, decoder)
        probs = total[:, :, known] / (draws // blocks)
        out[:, start : start + len(chunk), np.flatnonzero(word_tokens >= 0)] = probs.cpu().numpy()
    out[:, :, -1] = 1.0 - out[:, :, :-1].sum(2)
    if not np.isfinite(out).all():
        raise StageError(
            "extrapolation: the model's next-word law is not finite (non-finite logits); nothing is "
            "written for it. Check its weights and train_log.csv"
        )
    return out


def coarsened_laws(
    model,
    tokenizer,
    grammar,
    references: list[str],
    law: str,
    perturbation: dict,
    table,
    draws: int,
    seed: int,
    start: int = 20,
    stride: int = 10,
    decoder: dict | None = None,
    blocks: int = 1,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The truth's [n, C] and the model's [blocks, n, C] next-word laws on the coarsened space (single-token words,
    then one remaining cell) at the possible evaluation prefixes, and which prefixes are possible (a mask over all of
    `evaluation_prefixes`; the impossible ones are skipped)."""
    prefixes = evaluation_prefixes(references, start, stride)
    word_ids = [np.asarray(ids) for ids in grammar.encode([" ".join(p) for p in prefixes])]
    truth = grammar.next_word_probs(word_ids, law)
    possible = ~np.isnan(truth).any(1)
    word_tokens = word_token_ids(tokenizer, grammar.vocabulary)
    single = word_tokens >= 0
    truth_cells = np.concatenate(
        [truth[possible][:, single], truth[possible][:, ~single].sum(1, keepdims=True)], axis=1
    )
    model_law = model_next_word(
        model,
        tokenizer,
        [p for p, ok in zip(prefixes, possible) if ok],
        word_tokens,
        perturbation,
        table,
        draws,
        seed,
        decoder=decoder,
        blocks=blocks,
    )
    model_cells = np.concatenate([model_law[:, :, :-1][:, :, single], model_law[:, :, -1:]], axis=2)
    return truth_cells, model_cells, possible


def total_variation(model_cells: np.ndarray, truth_cells: np.ndarray) -> np.ndarray:
    """TV per prefix (the last axis is the coarsened space; leading axes broadcast)."""
    return 0.5 * np.abs(model_cells - truth_cells).sum(-1)


def monte_carlo_bias(halves: np.ndarray, truth_cells: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per prefix, from the mean laws of the two halves of the draws [2, n, C]: the TV of all draws' mean, the
    split-half excess (the halves' TVs, averaged, less that TV; never negative, since TV is convex) and the
    cross-fitted TV (each half's excess over the truth on the cells where the other half exceeds it, averaged over the
    halves). The halves' draws are independent, so the cross-fitted TV is, in expectation, the perturbed law's
    excess on a set of cells chosen without it: at most the perturbed law's TV (docs/method.md §4)."""
    tv = total_variation(halves.mean(0), truth_cells)
    excess = total_variation(halves, truth_cells).mean(0) - tv
    over = halves - truth_cells
    cross_fitted = (over * (over[::-1] > 0)).sum(-1).mean(0)
    return tv, excess, cross_fitted


def mean_2se(values: np.ndarray) -> tuple[float, float | None]:
    return float(values.mean()), float(2 * values.std(ddof=1) / np.sqrt(len(values))) if len(values) > 1 else None


def extrapolation_error(
    model,
    tokenizer,
    grammar,
    references: list[str],
    law: str,
    perturbation: dict,
    table,
    draws: int = 32,
    seed: int = 0,
    start: int = 20,
    stride: int = 10,
    decoder: dict | None = None,
) -> dict:
    """TV between the model's perturbed next-word law (the mean over `draws` draws of the perturbation) and the truth.

    TV is convex, so the TV of a Monte Carlo mean (`tv_mean`) overestimates the perturbed law's TV on average. Two
    statistics from the two halves of the draws say by how much (docs/method.md §4): `tv_bias_estimate`, the
    split-half excess, estimates the bias that halving the draws adds, which is about the bias left at `draws` once
    the bias falls as 1/draws (measured: from about 8 draws); `tv_lower`, the cross-fitted TV, is at most the
    perturbed law's TV in expectation, so `tv_mean - tv_lower` bounds the bias in expectation without that premise.
    Without a perturbation the law is exact: one draw, no bias, `tv_lower` = `tv_mean`."""
    perturbed = perturbation["intensity"] > 0
    if perturbed and draws % 2:
        raise StageError(
            f"evaluation.extrapolation.draws: {draws} is odd; the Monte Carlo bias estimates need two "
            "halves of equal size"
        )
    truth_cells, halves, possible = coarsened_laws(
        model,
        tokenizer,
        grammar,
        references,
        law,
        perturbation,
        table,
        draws,
        seed,
        start,
        stride,
        decoder,
        blocks=2 if perturbed else 1,
    )
    if perturbed:
        tv, excess, cross_fitted = monte_carlo_bias(halves, truth_cells)
    else:
        tv = total_variation(halves[0], truth_cells)
        excess, cross_fitted = np.zeros_like(tv), tv
    (tv_mean, tv_2se), (bias, bias_2se), (lower, lower_2se) = mean_2se(tv), mean_2se(excess), mean_2se(cross_fitted)
    # Per reference: its prefixes' mean TV, the unit the report's paired TV contrasts swap (the prefixes of one
    # reference share their words, so they are not independent units; report.contrasts).
    owners = prefix_owners(references, start, stride)[possible]
    counts = np.bincount(owners, minlength=len(references))
    per_prompt = {
        "reference": np.flatnonzero(counts),
        "tv": (np.bincount(owners, weights=tv, minlength=len(references)) / np.maximum(counts, 1))[counts > 0],
        "prefixes": counts[counts > 0],
    }
    if not np.isfinite([tv_mean, bias, lower]).all():
        raise StageError(f"extrapolation: a TV is not finite ({len(tv)} possible prefixes); nothing is written")
    return {
        **support_shares(grammar, references, start, stride, possible, tv),
        "tv_mean": tv_mean,
        "tv_2se": tv_2se,
        "tv_bias_estimate": bias,
        "tv_bias_estimate_2se": bias_2se,
        "tv_lower": lower,
        "tv_lower_2se": lower_2se,
        "prefixes": len(tv),
        "impossible_prefixes": int((~possible).sum()),
        "law": law,
        "coverage": float(truth_cells[:, :-1].sum(1).mean()),
        "draws": draws if perturbed else 1,
        "perturbation": perturbation,
        "decoder": decoder or {},
        "per_prompt": per_prompt,
    }


def support_shares(
    grammar, references: list[str], start: int, stride: int, possible: np.ndarray, tv: np.ndarray
) -> dict:
    """Where the split's prefixes lie against the training support (builtin_corpus.support_status): the share off it,
    the share a class-mate maps back into it (what the theory's premise SP_perturb needs under class replacement), and
    the mean TV on the off-support prefixes alone (None where there are none)."""
    prefixes = evaluation_prefixes(references, start, stride)
    word_ids = [np.asarray(ids) for ids in grammar.encode([" ".join(p) for p in prefixes])]
    off, reachable = (flags[possible] for flags in grammar.support_status(word_ids))
    return {
        "off_support_share": float(off.mean()) if len(off) else None,
        "reachable_share": float(reachable.mean()) if len(off) else None,
        "tv_off_support": float(tv[off].mean()) if off.any() else None,
    }


def synonym_reach(grammar, tokenizer, table) -> float | None:
    """How often a synonym draw for a held-out subject (data.builtin_corpus: the `reach` split) is a class-mate seen as
    a subject: the draws that can bring its sentence back into the training support. The mean over the held-out words
    the tokenizer spells as one token, weighted as the table draws; None without held-out subjects or a table."""
    if table is None or table.shared or not grammar.held_subject.any():
        return None
    tokens = word_token_ids(tokenizer, grammar.vocabulary)
    word_of_token = np.full(table.vocab_size, -1, dtype=np.int64)
    single = tokens >= 0
    word_of_token[tokens[single]] = np.flatnonzero(single)
    shares = []
    for word in np.flatnonzero(grammar.held_subject & single):
        start, stop = table.offsets[tokens[word]], table.offsets[tokens[word] + 1]
        if stop == start:
            shares.append(0.0)  # no synonym: no draw reaches the support
            continue
        weights = np.diff(np.concatenate([[tokens[word]], table.keys[start:stop]]))
        words = word_of_token[table.candidates[start:stop]]
        mate = (words >= 0) & (grammar.word_class[words] == grammar.word_class[word]) & ~grammar.held_subject[words]
        shares.append(float(weights[mate].sum() / weights.sum()))
    return float(np.mean(shares)) if shares else None


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
    parser.add_argument("--per-prompt", required=True, help="Parquet: each reference's mean TV over its prefixes")
    args = parser.parse_args()

    import pyarrow as pa

    from workflow_lib.data.builtin_corpus import build_grammar
    from workflow_lib.files import read_parquet, write_parquet
    from workflow_lib.perturb.synonym_table import SynonymTable
    from workflow_lib.sample.sampler import load_model

    settings = parse_json_arg(args.settings, "evaluation.extrapolation")
    grammar_params = {
        k: v for k, v in parse_json_arg(args.builtin, "builtin").items() if k not in ("docs", "sentences_per_doc")
    }
    from transformers import AutoTokenizer

    device = "cuda" if torch.cuda.is_available() else "cpu"
    tokenizer = AutoTokenizer.from_pretrained(args.model, revision=args.revision)
    model = load_model(args.model, device, revision=args.revision)
    table = SynonymTable.from_arrow(read_parquet(args.synonyms)) if args.synonyms else None
    prompts = read_parquet(args.prompts)
    references = prompts.column("reference").to_pylist()
    grammar = build_grammar(**grammar_params)
    result = extrapolation_error(
        model,
        tokenizer,
        grammar,
        references,
        LAW_OF_SPLIT[args.split],
        parse_json_arg(args.perturbation, "test perturbation"),
        table,
        settings["draws"],
        settings["seed"],
        stride=settings["stride"],
        decoder=parse_json_arg(args.decoder, "decoder"),
    )
    log.info(
        "TV %.4f +- %.4f over %d prefixes (%s law); Monte Carlo bias: split-half %.5f, cross-fitted TV %.4f",
        result["tv_mean"],
        result["tv_2se"] or 0,
        result["prefixes"],
        result["law"],
        result["tv_bias_estimate"],
        result["tv_lower"],
    )
    result["synonym_reach"] = synonym_reach(grammar, tokenizer, table)
    per_prompt = result.pop("per_prompt")
    ids = np.asarray(prompts.column("prompt_id").to_pylist())[per_prompt["reference"]]
    write_parquet(
        pa.table({"prompt_id": ids, "tv": per_prompt["tv"], "prefixes": per_prompt["prefixes"]}), args.per_prompt
    )
    write_json(result, args.output)


if __name__ == "__main__":
    run(main)
