"""The theory lab's two jobs: the delta sets of a builtin dataset (once), and each model's next-word laws on them.

`sets` builds, from the grammar alone, support prefixes and their versions at exact Hamming distance delta
from the training support (workflow_lib.lab.prefix_sets), with the true next-word law of each. `laws` reads them and
writes one model's next-word law on every prefix: unperturbed ("none"), and for each lab perturbation T the
perturbed law E_{X~ ~ T(.|X)} P(.|X~), averaged over `draws` draws of T. The draws are keyed by the config
seed, the support prefix a row was made from and the draw, so every model of a group, and every delta version
of one prefix, sees the same replacements: pairwise differences are then differences of the models, not of
Monte Carlo noise. workflow_lib.lab.verdicts turns the laws of a group into U(delta) and the bounds.
"""

from __future__ import annotations

import argparse
import logging

import numpy as np

from workflow_lib.cli import StageError, parse_json_arg, run

log = logging.getLogger("workflow_lib.lab.laws")


def grammar_of(builtin: dict):
    from workflow_lib.data.builtin_corpus import build_grammar

    return build_grammar(**{k: v for k, v in builtin.items() if k not in ("docs", "sentences_per_doc")})


def build_sets(grammar, settings: dict):
    """The prefix table: one row per (family, delta, support prefix), with its words, ids, distance and truth."""
    import pyarrow as pa

    from workflow_lib.lab import prefix_sets

    lex = prefix_sets.lexicon(grammar, settings["seed"])
    base = prefix_sets.base_prefixes(grammar, settings["prefixes"], settings["length"], settings["seed"])
    columns: dict[str, list] = {k: [] for k in ("family", "delta", "base", "ids", "distance", "truth")}
    for s in prefix_sets.delta_sets(
        grammar, lex, base, sorted(settings["deltas"]), settings["last"], settings["seed"], tries=settings["tries"]
    ):
        distance = prefix_sets.support_distance(grammar, lex, s["prefixes"])
        if (distance != s["delta"]).any():
            raise StageError(
                f"lab: {int((distance != s['delta']).sum())} prefixes of the {s['family']} set at delta "
                f"{s['delta']} are not at that distance from the support"
            )
        truth = prefix_sets.truth(grammar, lex, s["prefixes"], s["family"])
        n = len(s["prefixes"])
        columns["family"] += [s["family"]] * n
        columns["delta"].append(np.full(n, s["delta"]))
        columns["base"].append(s["base"])
        columns["ids"] += list(s["prefixes"])
        columns["distance"].append(distance)
        columns["truth"] += list(truth)
        log.info("%s delta %d: %d prefixes", s["family"], s["delta"], n)
    words = np.asarray(lex.words, dtype=object)
    ids = np.stack(columns["ids"])
    return pa.table(
        {
            "row": pa.array(np.arange(len(ids), dtype=np.int64)),
            "family": pa.array(columns["family"]),
            "delta": pa.array(np.concatenate(columns["delta"]).astype(np.int64)),
            "base": pa.array(np.concatenate(columns["base"]).astype(np.int64)),
            "distance": pa.array(np.concatenate(columns["distance"]).astype(np.int64)),
            "text": pa.array([" ".join(row) for row in words[ids].tolist()]),
            "ids": pa.array([row.astype(np.int64) for row in ids], type=pa.list_(pa.int64())),
            "truth": pa.array([row.astype(np.float64) for row in columns["truth"]], type=pa.list_(pa.float64())),
        }
    )


def model_laws(
    model, tokenizer, grammar, lex, ids: np.ndarray, base: np.ndarray, base_row: np.ndarray, settings: dict
) -> dict:
    """[P, R, W + 1] next-word laws (grammar words spelt by one token, then one cell for the rest) of one model,
    for "none" and every lab perturbation; and `differs` [P, R], the share of draws in which a row's perturbed
    words differ from those of its support prefix (row `base_row`). That share is the coupling's empirical C:
    the estimated laws of a row and of its support prefix are at most that far apart in TV, whatever the model.
    `laws_half` averages the first half of the draws: TVs computed from it show how far the Monte Carlo average
    still moves (a TV of averaged laws is biased upward, and the bias shrinks with the draws)."""
    from workflow_lib.evaluate.extrapolation import model_next_word, word_token_ids
    from workflow_lib.lab import perturbation

    word_tokens = word_token_ids(tokenizer, grammar.vocabulary)
    words = np.asarray(lex.words, dtype=object)
    keys = perturbation.keys_for(settings["seed"], base)
    specs = [("none", None), *sorted(settings["perturbations"].items())]
    laws = np.zeros((len(specs), len(ids), len(grammar.vocabulary) + 1))
    differs = np.zeros((len(specs), len(ids)))
    laws_half = np.zeros_like(laws)
    for p, (name, spec) in enumerate(specs):
        draws = 1 if spec is None else settings["draws"]
        half = max(1, draws // 2)
        for d in range(draws):
            seen = (
                ids
                if spec is None
                else perturbation.perturb_words(
                    lex, ids, spec["q0"], spec["beta"], settings["last"], keys, d, weights_source=grammar
                )
            )
            # Rows that read the same words (a synonym row under class replacement at beta 1 and its support
            # prefix, the delta-0 rows of both families) are run once.
            unique, inverse = np.unique(seen, axis=0, return_inverse=True)
            law = model_next_word(
                model, tokenizer, words[unique].tolist(), word_tokens, {"intensity": 0.0}, None, 1, 0
            )[0][inverse.reshape(-1)]  # [blocks = 1, unique rows, W + 1]: the one block
            laws[p] += law
            if d < half:
                laws_half[p] += law
            differs[p] += (seen != seen[base_row]).any(1)
        laws_half[p] /= half
        laws[p] /= draws
        differs[p] /= draws
        log.info("%s: %d draws over %d prefixes", name, draws, len(ids))
    return {
        "laws": laws,
        "laws_half": laws_half,
        "differs": differs,
        "perturbations": np.array([name for name, _ in specs]),
        "single": word_tokens >= 0,
    }


def base_rows(family: np.ndarray, delta: np.ndarray, base: np.ndarray) -> np.ndarray:
    """For every row, the row of its support prefix: same family and base, delta 0."""
    key = {(f, b): r for r, (f, d, b) in enumerate(zip(family.tolist(), delta.tolist(), base.tolist())) if d == 0}
    return np.array([key[(f, b)] for f, b in zip(family.tolist(), base.tolist())], dtype=np.int64)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m workflow_lib.lab.laws")
    sub = parser.add_subparsers(dest="command", required=True)
    st = sub.add_parser("sets", help="the delta sets of a builtin dataset, with their true next-word laws")
    st.add_argument("--builtin", required=True, help="JSON: the builtin dataset's grammar settings")
    st.add_argument("--settings", required=True, help="JSON: prefixes, length, deltas, last, tries, seed")
    st.add_argument("--output", required=True)
    lw = sub.add_parser("laws", help="one model's next-word laws on the delta sets, unperturbed and under each T")
    lw.add_argument("--model", required=True, help="model folder (with its tokenizer) or hub id")
    lw.add_argument("--revision", help="hub revision of an untrained hub model")
    lw.add_argument("--sets", required=True)
    lw.add_argument("--builtin", required=True)
    lw.add_argument("--settings", required=True, help="JSON: last, draws, perturbations, seed")
    lw.add_argument("--output", required=True)
    args = parser.parse_args()

    from workflow_lib.files import atomic_path, read_parquet, write_parquet
    from workflow_lib.lab import prefix_sets

    grammar = grammar_of(parse_json_arg(args.builtin, "builtin"))
    if args.command == "sets":
        write_parquet(build_sets(grammar, parse_json_arg(args.settings, "lab")), args.output)
        return
    import torch
    from transformers import AutoTokenizer

    from workflow_lib.sample.sampler import load_model

    settings = parse_json_arg(args.settings, "lab")
    sets = read_parquet(args.sets, columns=["ids", "family", "delta", "base"])
    ids = np.stack(sets.column("ids").to_numpy(zero_copy_only=False))
    device = "cuda" if torch.cuda.is_available() else "cpu"
    tokenizer = AutoTokenizer.from_pretrained(args.model, revision=args.revision)
    model = load_model(args.model, device, revision=args.revision)
    base = sets.column("base").to_numpy()
    out = model_laws(
        model,
        tokenizer,
        grammar,
        prefix_sets.lexicon(grammar, settings["seed"]),
        ids,
        base,
        base_rows(sets.column("family").to_numpy(zero_copy_only=False), sets.column("delta").to_numpy(), base),
        settings,
    )
    out["label"] = np.array(args.model)
    with atomic_path(args.output) as tmp, open(tmp, "wb") as handle:
        np.savez(handle, **out)


if __name__ == "__main__":
    run(main)
