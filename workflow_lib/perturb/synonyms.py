"""Synonym tables: for each token, candidate substitutes and their weights, computed once per source (the `synonyms`
rule).

Sources: `embedding` (the k nearest neighbours by cosine in a pretrained model's input embeddings, the natural
notion for hub models), `distributional` (PPMI-weighted left/right context counts from the training corpus, any
tokenizer), `uniform` (the Proposition's Q0), `oracle` (the builtin corpus's true classes, on the tokens that spell a
whole word), `embedding-words` and `distributional-words` (the same among whole-word tokens only: `word_tokens`)
and `file` (perturb/synonym_file.py). What each gives, its weights and why: docs/usage.md, "The perturbation", the
synonym tables; docs/method.md §1, "Synonyms".
"""

from __future__ import annotations

import argparse
import json
import logging

import numpy as np

from workflow_lib.cli import StageError, parse_json_arg, run
from workflow_lib.constants import SYNONYM_SOURCES
from workflow_lib.files import write_parquet
from workflow_lib.perturb.realised import SETTINGS_KEY, count_positions, settings_hint
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


def token_texts(tokenizer, ids=None) -> list[str]:
    """Each token's own text (of `ids`, else of the whole vocabulary), as it reads inside a text: a byte-level BPE's
    leading-space marker is a space."""
    pieces = tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))) if ids is None else [int(i) for i in ids])
    return [tokenizer.convert_tokens_to_string([piece]) if piece is not None else "" for piece in pieces]


def word_tokens(texts: list[str], blocks: np.ndarray) -> np.ndarray:
    """[V] bool: the tokens that spell a whole word in the training blocks [N, L]. A token is one when its text is a
    space and then letters only (" the", " Paris": the form a word takes after another; a piece without the space,
    "ing", continues a word), the blocks hold it, and the next token continues it (its text starts with a letter or
    a digit, no space) in at most half of its occurrences: " Bre" then "ak" is a piece, " the" is a word. A token the
    blocks never show is left out: a byte-level BPE keeps the steps of its merges (" th" on the way to " the"),
    which spell like words and never occur. Once per vocabulary entry when a table is built."""
    spelled = np.array([len(t) > 1 and t[0] == " " and t[1:].isalpha() for t in texts], dtype=bool)
    continues = np.array([bool(t) and t[0].isalnum() for t in texts], dtype=bool)
    current, following = blocks[:, :-1].reshape(-1), blocks[:, 1:].reshape(-1)
    seen = np.bincount(current, minlength=len(texts))[: len(texts)]
    continued = np.bincount(current[continues[following]], minlength=len(texts))[: len(texts)]
    return spelled & (seen > 0) & (2 * continued <= seen)


def restricted(build, features, allowed: np.ndarray, vocab_size: int) -> SynonymTable:
    """`build` (top_k_rows' neighbours of allowed rows) on the allowed rows alone, mapped back to token ids: a
    word-level table costs words^2, not V^2."""
    rows = np.flatnonzero(allowed)
    idx, sim = build(features[rows], np.ones(len(rows), dtype=bool))
    full_idx = np.zeros((vocab_size, idx.shape[1]), dtype=np.int64)
    full_sim = np.zeros((vocab_size, sim.shape[1]), dtype=np.float32)
    full_idx[rows], full_sim[rows] = rows[idx], sim
    return table_from_neighbours(vocab_size, rows, full_idx, full_sim)


def distributional_synonyms(
    blocks: np.ndarray, vocab_size: int, k: int = 10, special_ids=(), min_count: int = 5, words=None
) -> SynonymTable:
    """Synonyms from shared left/right contexts in token blocks [N, L]: PPMI-weighted neighbour counts, cosine, top
    k (docs/usage.md, "The perturbation"); `words` ([V] bool, `word_tokens`): only those tokens are sources and
    candidates."""
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
    if words is not None:
        return restricted(lambda f, a: top_k_rows(f, k, a), features.tocsr(), allowed & words, vocab_size)
    rows = np.flatnonzero(allowed)
    idx, sim = top_k_rows(features.tocsr(), k, allowed)
    return table_from_neighbours(vocab_size, rows, idx, sim)


def embedding_synonyms(
    embeddings: np.ndarray, k: int = 10, special_ids=(), vocab_size: int | None = None, words=None
) -> SynonymTable:
    """k nearest neighbours by cosine in an embedding matrix [V, d] (rows past the tokenizer are ignored); `words`
    ([V] bool, `word_tokens`): only those tokens are sources and candidates."""
    vocab_size = vocab_size or embeddings.shape[0]
    emb = np.asarray(embeddings[:vocab_size], dtype=np.float32)
    emb = emb / np.maximum(np.linalg.norm(emb, axis=1, keepdims=True), 1e-12)
    allowed = np.ones(vocab_size, dtype=bool)
    allowed[list(special_ids)] = False
    if words is not None:
        return restricted(lambda f, a: top_k_rows(f, k, a), emb, allowed & words, vocab_size)
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


def read_token_blocks(path: str) -> np.ndarray:
    """A tokens Parquet's `input_ids` as one [N, L] array (every block has the tokenize stage's length)."""
    from workflow_lib.files import read_parquet

    ids = read_parquet(path, columns=["input_ids"]).column("input_ids").combine_chunks()
    return ids.values.to_numpy().reshape(len(ids), -1)


def build_table(source: str, tokenizer, settings: dict, tokens: str | None, pairs: str | None) -> SynonymTable:
    """The table of one source (the job's work; `tokens`, `pairs`: the files the source reads, else None)."""
    vocab_size, special = len(tokenizer), special_token_ids(tokenizer)
    blocks = read_token_blocks(tokens) if tokens else None
    words = None
    if source.endswith("-words"):
        assert blocks is not None, "the rule gives the -words sources the train split's tokens"
        words = word_tokens(token_texts(tokenizer), blocks)
    if source == "uniform":
        return SynonymTable.uniform(vocab_size, special)
    if source in ("distributional", "distributional-words"):
        assert blocks is not None, "the rule gives distributional sources the train split's tokens"
        return distributional_synonyms(blocks, vocab_size, settings["k"], special, settings["min_count"], words)
    if source in ("embedding", "embedding-words"):
        from workflow_lib.models import load_input_embeddings

        embeddings = load_input_embeddings(settings["model"])
        return embedding_synonyms(embeddings, settings["k"], special, vocab_size, words)
    if source == "file":
        from workflow_lib.perturb.synonym_file import load_synonym_pairs

        assert pairs is not None, "the rule gives the file source synonyms.file"
        return load_synonym_pairs(pairs, tokenizer)
    from workflow_lib.data.builtin_corpus import build_grammar

    params = {k: v for k, v in settings["builtin"].items() if k not in ("docs", "sentences_per_doc")}
    return oracle_synonyms(tokenizer, build_grammar(**params))


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m workflow_lib.perturb.synonyms")
    parser.add_argument("--source", choices=SOURCES, required=True)
    parser.add_argument("--tokenizer", required=True, help="tokenizer folder")
    parser.add_argument("--tokens", help="token blocks Parquet (distributional, and the -words sources)")
    parser.add_argument("--pairs", help="the user's synonym pairs (file: synonyms.file)")
    parser.add_argument("--settings", required=True, help="JSON: k, min_count, model (embedding), builtin (oracle)")
    parser.add_argument("--output", required=True)
    args = parser.parse_args()
    settings = parse_json_arg(args.settings, "synonyms")

    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
    table = build_table(args.source, tokenizer, settings, args.tokens, args.pairs)
    provenance = {"source": args.source, "k": settings["k"], "min_count": settings["min_count"]}
    with_synonyms = int(np.asarray(table.has_synonyms(_numpy())).sum())
    log.info("%s synonyms: %d of %d tokens have candidates", args.source, with_synonyms, len(tokenizer))
    check_table(
        table, provenance, read_token_blocks(args.tokens) if args.tokens else None, special_token_ids(tokenizer)
    )
    arrow = table.to_arrow()
    metadata = {**(arrow.schema.metadata or {}), SETTINGS_KEY: json.dumps(provenance, sort_keys=True)}
    write_parquet(arrow.replace_schema_metadata(metadata), args.output)


def check_table(table: SynonymTable, provenance: dict, blocks: np.ndarray | None = None, special_ids=()) -> None:
    """Refuse a table a perturbation could not use (StageError naming its settings): no token with a synonym, or,
    where the job reads the training blocks, none of their tokens with one. A table that covers some of the
    tokens is the perturb and sample jobs' to judge, by the share they realise (perturb/realised.py)."""
    has = np.asarray(table.has_synonyms(_numpy()))
    if not has.any():
        raise StageError(f"{settings_hint(provenance)} is empty: no token has a synonym, so no perturbation can happen")
    if blocks is not None:
        perturbable, eligible = count_positions(blocks.reshape(-1), special_ids, has)
        if int(perturbable) and not int(eligible):
            raise StageError(
                f"{settings_hint(provenance)} gives a synonym to none of the {int(perturbable)} training tokens, so "
                "no perturbation of the training data can happen"
            )


def _numpy():
    from workflow_lib.perturb.backends import backend

    return backend(np.zeros(0))


if __name__ == "__main__":
    run(main)
