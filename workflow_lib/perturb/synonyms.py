"""Synonym tables: for each token, candidate substitutes and their weights, computed once per source.

Sources:
- `embedding`: the k nearest neighbours (cosine) in a pretrained model's input embedding matrix; the
  natural notion for hub models, whose embeddings already encode similarity.
- `distributional`: tokens that occur in the same contexts in the training corpus, for any tokenizer,
  including one trained a minute ago. Each token is described by its left and right neighbour counts
  (a V x 2V sparse matrix) reweighted by positive pointwise mutual information; candidates are the k
  tokens with the highest cosine between these vectors. PPMI rather than raw counts because raw counts make
  every token look like the most frequent ones (everything follows "the"); PPMI keeps the contexts that are
  informative about a token, the standard choice for distributional similarity (Levy & Goldberg 2014).
  A token needs `min_count` occurrences to get or be a candidate: rarer ones have too few contexts.
- `uniform`: Q0 uniform over the non-special vocabulary (the paper's Proposition on token replacement).
- `oracle`: the true synonym classes of the builtin corpus, mapped onto the tokens that spell a whole word.
Weights: proportional to the (positive) similarity for `embedding` and `distributional`, the grammar's
within-class word probabilities for `oracle`.
"""

from __future__ import annotations

import argparse
import logging

import numpy as np

from workflow_lib.cli import StageError, parse_json_arg, run
from workflow_lib.constants import SYNONYM_SOURCES
from workflow_lib.files import write_parquet
from workflow_lib.perturb.synonym_table import SynonymTable

log = logging.getLogger("workflow_lib.perturb.synonyms")
SOURCES = SYNONYM_SOURCES  # one home: workflow_lib/constants.py, which the rules read at parse time


def top_k_rows(features, k: int, allowed: np.ndarray, chunk: int = 1024) -> tuple[np.ndarray, np.ndarray]:
    """For each row of L2-normalised `features` (dense or scipy sparse), the k most cosine-similar allowed
    rows other than itself: ([V, k] indices, [V, k] similarities), chunked to bound memory."""
    n = features.shape[0]
    k = min(k, max(int(allowed.sum()) - 1, 0))
    idx = np.zeros((n, k), dtype=np.int64)
    sim = np.zeros((n, k), dtype=np.float32)
    if k == 0:
        return idx, sim
    transposed = features.T
    for start in range(0, n, chunk):
        block = features[start : start + chunk] @ transposed
        block = np.asarray(block.todense() if hasattr(block, "todense") else block, dtype=np.float32)
        block[:, ~allowed] = -np.inf
        rows = np.arange(block.shape[0])
        block[rows, start + rows] = -np.inf  # not itself
        part = np.argpartition(-block, k - 1, axis=1)[:, :k]
        values = np.take_along_axis(block, part, axis=1)
        order = np.argsort(-values, axis=1, kind="stable")
        idx[start : start + len(rows)] = np.take_along_axis(part, order, axis=1)
        sim[start : start + len(rows)] = np.take_along_axis(values, order, axis=1)
    return idx, sim


def table_from_neighbours(vocab_size: int, rows: np.ndarray, idx: np.ndarray, sim: np.ndarray) -> SynonymTable:
    """Keep neighbours with positive similarity; weights proportional to it."""
    tokens, cands, weights = [], [], []
    positive = sim > 0
    for r in rows:  # once per vocabulary entry when the table is built, not on the perturbation path
        keep = positive[r]
        if keep.any():
            tokens.append(r)
            cands.append(idx[r][keep])
            weights.append(sim[r][keep])
    return SynonymTable.from_rows(vocab_size, tokens, cands, weights)


def distributional_synonyms(
    blocks: np.ndarray, vocab_size: int, k: int = 10, special_ids=(), min_count: int = 5
) -> SynonymTable:
    """Synonyms from shared left/right contexts in token blocks [N, L] (see the module docstring)."""
    from scipy import sparse

    left, right = blocks[:, :-1].reshape(-1), blocks[:, 1:].reshape(-1)
    ones = np.ones(len(left), dtype=np.float64)
    # Row v: counts of the token before v (columns 0..V-1) and after v (columns V..2V-1).
    counts = sparse.coo_matrix(
        (np.concatenate([ones, ones]), (np.concatenate([right, left]), np.concatenate([left, right + vocab_size]))),
        shape=(vocab_size, 2 * vocab_size),
    ).tocsr()
    counts.sum_duplicates()
    total = counts.sum()
    row_sum = np.asarray(counts.sum(axis=1)).ravel()
    col_sum = np.asarray(counts.sum(axis=0)).ravel()
    coo = counts.tocoo()
    pmi = np.log(coo.data * total / (row_sum[coo.row] * col_sum[coo.col]))
    keep = pmi > 0
    ppmi = sparse.csr_matrix((pmi[keep], (coo.row[keep], coo.col[keep])), shape=counts.shape)
    norms = np.sqrt(np.asarray(ppmi.multiply(ppmi).sum(axis=1)).ravel())
    features = sparse.diags(np.where(norms > 0, 1.0 / np.maximum(norms, 1e-12), 0.0)) @ ppmi
    frequency = np.bincount(blocks.reshape(-1), minlength=vocab_size)
    allowed = frequency >= min_count
    allowed[list(special_ids)] = False
    rows = np.flatnonzero(allowed)
    idx, sim = top_k_rows(features.tocsr(), k, allowed)
    return table_from_neighbours(vocab_size, rows, idx, sim)


def embedding_synonyms(
    embeddings: np.ndarray, k: int = 10, special_ids=(), vocab_size: int | None = None
) -> SynonymTable:
    """k nearest neighbours by cosine in an embedding matrix [V, d] (rows past the tokenizer are ignored)."""
    vocab_size = vocab_size or embeddings.shape[0]
    emb = np.asarray(embeddings[:vocab_size], dtype=np.float32)
    emb = emb / np.maximum(np.linalg.norm(emb, axis=1, keepdims=True), 1e-12)
    allowed = np.ones(vocab_size, dtype=bool)
    allowed[list(special_ids)] = False
    idx, sim = top_k_rows(emb, k, allowed)
    return table_from_neighbours(vocab_size, np.flatnonzero(allowed), idx, sim)


def oracle_synonyms(tokenizer, grammar) -> SynonymTable:
    """The grammar's synonym classes on the tokens that spell one whole word (with or without the leading
    space a byte-level BPE keeps): a word's token gets the tokens of its class-mates in the same spelling."""
    vocab = tokenizer.get_vocab()
    spelled = {}  # (leading space?, word) -> token id
    for token, tid in vocab.items():
        text = tokenizer.convert_tokens_to_string([token])
        word = text.strip()
        if word and text in (word, " " + word):
            spelled[(text != word, word)] = tid
    word_id = {w: i for i, w in enumerate(grammar.vocabulary)}
    tokens, cands, weights = [], [], []
    for cls in grammar.synonym_classes():
        if len(cls) < 2:
            continue
        for space in (False, True):
            members = [(spelled.get((space, grammar.vocabulary[w])), w) for w in cls]
            for tid, w in members:
                others = [(t, grammar.word_weight[o]) for t, o in members if t is not None and o != w]
                if tid is not None and others:
                    tokens.append(tid)
                    cands.append([t for t, _ in others])
                    weights.append([wt for _, wt in others])
    if not tokens:
        raise StageError(
            "oracle synonyms: no token of this tokenizer spells a whole word of the builtin grammar "
            "(raise the tokenizer's vocab_size so that words become single tokens)"
        )
    del word_id
    return SynonymTable.from_rows(len(vocab), tokens, cands, weights)


def special_token_ids(tokenizer) -> list[int]:
    return sorted(set(tokenizer.all_special_ids))


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m workflow_lib.perturb.synonyms")
    parser.add_argument("--source", choices=SOURCES, required=True)
    parser.add_argument("--tokenizer", required=True, help="tokenizer folder")
    parser.add_argument("--tokens", help="token blocks Parquet (distributional)")
    parser.add_argument("--settings", required=True, help="JSON: k, min_count, model (embedding), builtin (oracle)")
    parser.add_argument("--output", required=True)
    args = parser.parse_args()
    settings = parse_json_arg(args.settings, "synonyms")

    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
    vocab_size, special = len(tokenizer), special_token_ids(tokenizer)
    if args.source == "uniform":
        table = SynonymTable.uniform(vocab_size, special)
    elif args.source == "distributional":
        from workflow_lib.files import read_parquet

        ids = read_parquet(args.tokens, columns=["input_ids"]).column("input_ids").combine_chunks()
        blocks = ids.values.to_numpy().reshape(len(ids), -1)
        table = distributional_synonyms(blocks, vocab_size, settings["k"], special, settings["min_count"])
    elif args.source == "embedding":
        from workflow_lib.models import load_input_embeddings

        table = embedding_synonyms(load_input_embeddings(settings["model"]), settings["k"], special, vocab_size)
    else:
        from workflow_lib.data.builtin_corpus import build_grammar

        params = {k: v for k, v in settings["builtin"].items() if k not in ("docs", "sentences_per_doc")}
        table = oracle_synonyms(tokenizer, build_grammar(**params))
    with_synonyms = int(np.asarray(table.has_synonyms(_numpy())).sum())
    log.info("%s synonyms: %d of %d tokens have candidates", args.source, with_synonyms, vocab_size)
    write_parquet(table.to_arrow(), args.output)


def _numpy():
    from workflow_lib.perturb.backends import backend

    return backend(np.zeros(0))


if __name__ == "__main__":
    run(main)
