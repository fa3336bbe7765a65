"""The synonym audit: what each synonym table of a study holds, in words a reader can judge.

For every table the study's perturbations draw from (results/synonyms/<tokenizer>/<dataset>/<source>.parquet), a
seeded sample of source tokens that have synonyms, each with its synonyms and their weights, as text; and the share
of the training tokens (the train split the table was built for, as the study tokenized it) that have any synonym:
the positions a perturbation can touch at all (deletion aside, which needs none). The sample is drawn among the
tokens the training data holds, where the study tokenizes it: those are the tokens a training perturbation edits.
The rule `synonym_audit` writes results/report/tables/synonyms.md and .csv; the summary includes the Markdown.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from workflow_lib.cli import run
from workflow_lib.files import atomic_path
from workflow_lib.report import escape

log = logging.getLogger("workflow_lib.report.synonym_audit")
SAMPLE = 20  # source tokens shown per table (issue 63: enough to judge, short enough to read)
COLUMNS = [
    "table",
    "token_id",
    "token",
    "training_occurrences",
    "synonyms",
    "synonym_ids",
    "weights",
    "tokens_with_synonyms",
    "vocab_size",
    "training_tokens",
    "share_of_training_tokens_with_synonyms",
]


@dataclass(frozen=True)
class Audit:
    """One table's audit. `rows`: the sampled sources (token id, its training count or None, candidate ids, their
    weights, most likely first); `share`: of the training tokens, those with a synonym (None: not counted)."""

    name: str
    vocab_size: int
    with_synonyms: int
    training_tokens: int | None
    share: float | None
    rows: list[tuple[int, int | None, list[int], list[float]]]
    shared: bool = False


def table_name(path: str) -> str:
    """'<tokenizer>/<dataset>/<source>' of results/synonyms/<tokenizer>/<dataset>/<source>.parquet."""
    parts = Path(path).with_suffix("").parts
    return "/".join(parts[-3:])


def sample_rng(seed: int, name: str) -> np.random.Generator:
    """The table's own stream: the study's seed and the table's name, so that adding a table moves no other sample."""
    digest = int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "little")
    return np.random.default_rng([seed, digest])


def audit(table, counts: np.ndarray | None, seed: int, name: str, size: int = SAMPLE) -> Audit:
    """The audit of one synonym table (pyarrow: token, candidates, weights, as perturb/synonym_table.py writes it)
    given the training token counts ([V], or None where the study has no training tokens for it)."""
    vocab_size = int(table.schema.metadata[b"vocab_size"])
    tokens = table.column("token").to_numpy().astype(np.int64)
    shared = len(tokens) == 1 and tokens[0] == -1
    # which tokens have synonyms: the table's rows, or for a shared (uniform) table every token it draws from
    sources = table.column("candidates").combine_chunks().values.to_numpy().astype(np.int64) if shared else tokens
    has = np.zeros(vocab_size, dtype=bool)
    has[sources] = True
    total = int(counts.sum()) if counts is not None else None
    share = float(counts[has].sum() / total) if counts is not None and total else None
    eligible = sources if counts is None else sources[counts[sources] > 0]
    rng = sample_rng(seed, name)
    picked = np.sort(rng.choice(eligible, size=min(size, len(eligible)), replace=False))
    if counts is not None:  # most frequent first: the words a perturbation meets most
        picked = picked[np.argsort(-counts[picked], kind="stable")]
    rows: list[tuple[int, int | None, list[int], list[float]]] = []
    if shared:
        rows = [(int(t), None if counts is None else int(counts[t]), [], []) for t in picked]
    else:
        row_of = np.full(vocab_size, -1, dtype=np.int64)
        row_of[tokens] = np.arange(len(tokens))
        chosen = table.take(row_of[picked]).to_pydict()
        for t, cands, weights in zip(picked, chosen["candidates"], chosen["weights"], strict=True):
            order = np.lexsort((np.asarray(cands), -np.asarray(weights)))  # heaviest first, then by id
            rows.append(
                (
                    int(t),
                    None if counts is None else int(counts[t]),
                    [int(cands[i]) for i in order],
                    [float(weights[i]) for i in order],
                )
            )
    return Audit(name, vocab_size, int(has.sum()), total, share, rows, shared)


def shown(text: str) -> str:
    """A token's text as a Markdown cell shows it: spaces as ␣ (a leading space is part of a word's token),
    line breaks and tabs escaped, Markdown's own characters escaped."""
    text = text.replace("\\", "\\\\").replace("\n", "\\n").replace("\t", "\\t").replace("\r", "\\r")
    for char in escape.MARKDOWN_CHARS.replace("\\", ""):
        text = text.replace(char, "\\" + char)
    return text.replace(" ", "␣") or "(empty)"


def markdown(audits: list[Audit], texts: dict[str, dict[int, str]], seed: int) -> str:
    """The audit of every table as Markdown: per table a line of counts and a table of its sampled sources."""
    if not audits:
        return "This study draws no synonyms: no perturbation of its grid reads a synonym table.\n"
    intro = (
        f"A seeded sample (seed {seed}) of up to {SAMPLE} source tokens with synonyms per table, each with its "
        "synonyms and their weights (a synonym's probability of being drawn), heaviest first. ␣ is a space: a word's "
        "token after another word starts with one. Sources are drawn among the tokens of the training data where the "
        "study tokenizes it.\n"
    )
    parts = [intro]
    for a in audits:
        text = texts[a.name]
        if a.share is not None:
            share = (
                f"{a.share:.1%} of the {a.training_tokens:,} training tokens have a synonym (the positions an "
                "insertion or a replacement can pick)"
            )
        else:
            share = "the share of training tokens with a synonym is not counted (the study tokenizes no training data for it)"
        parts.append(f"### `{a.name}`\n")
        parts.append(f"{a.with_synonyms:,} of the {a.vocab_size:,} tokens have synonyms; {share}.\n")
        if not a.rows:
            parts.append("No token of the training data has a synonym in this table.\n")
            continue
        lines = ["| token | id | in training | synonyms (weight) |", "|---|---|---|---|"]
        for token, count, cands, weights in a.rows:
            synonyms = (
                f"any of the {a.with_synonyms:,} tokens, {1 / a.with_synonyms:.2g} each"
                if a.shared
                else ", ".join(f"{shown(text[c])} {w:.2f}" for c, w in zip(cands, weights, strict=True))
            )
            lines.append(f"| {shown(text[token])} | {token} | {'' if count is None else f'{count:,}'} | {synonyms} |")
        parts.append("\n".join(lines) + "\n")
    return "\n".join(parts)


def csv_rows(audits: list[Audit], texts: dict[str, dict[int, str]]) -> list[dict]:
    out = []
    for a in audits:
        text = texts[a.name]
        for token, count, cands, weights in a.rows:
            out.append(
                {
                    "table": a.name,
                    "token_id": token,
                    "token": text[token],
                    "training_occurrences": "" if count is None else count,
                    "synonyms": json.dumps([text[c] for c in cands], ensure_ascii=False),
                    "synonym_ids": json.dumps(cands),
                    "weights": json.dumps([round(w, 6) for w in weights]),
                    "tokens_with_synonyms": a.with_synonyms,
                    "vocab_size": a.vocab_size,
                    "training_tokens": "" if a.training_tokens is None else a.training_tokens,
                    "share_of_training_tokens_with_synonyms": "" if a.share is None else f"{a.share:.6f}",
                }
            )
    return out


def token_counts(path: str, vocab_size: int) -> np.ndarray:
    """[V] occurrences of each token in a tokens Parquet (the tokenize stage's blocks)."""
    from workflow_lib.perturb.synonyms import read_token_blocks

    return np.bincount(read_token_blocks(path).reshape(-1), minlength=vocab_size)


def write_audit(specs: list[tuple[str, str, str | None]], seed: int, stem: str) -> str:
    """Audit each (table, tokenizer folder, tokens or None); writes STEM.md and STEM.csv and returns the Markdown."""
    from transformers import AutoTokenizer

    from workflow_lib.files import read_parquet
    from workflow_lib.perturb.synonyms import token_texts

    audits, texts = [], {}
    for table_path, tokenizer_folder, tokens in sorted(specs):
        table = read_parquet(table_path)
        vocab_size = int(table.schema.metadata[b"vocab_size"])
        counts = token_counts(tokens, vocab_size) if tokens else None
        result = audit(table, counts, seed, table_name(table_path))
        tokenizer = AutoTokenizer.from_pretrained(tokenizer_folder)
        ids = sorted({t for row in result.rows for t in [row[0], *row[2]]})
        texts[result.name] = dict(zip(ids, token_texts(tokenizer, ids), strict=True))
        audits.append(result)
        log.info(
            "%s: %d tokens with synonyms, share of training tokens %s", result.name, result.with_synonyms, result.share
        )
    text = markdown(audits, texts, seed)
    with atomic_path(f"{stem}.md") as tmp:
        tmp.write_text(text)
    with atomic_path(f"{stem}.csv") as tmp, open(tmp, "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, COLUMNS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(csv_rows(audits, texts))
    return text


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m workflow_lib.report.synonym_audit")
    parser.add_argument(
        "--table",
        nargs=3,
        action="append",
        default=[],
        metavar=("TABLE", "TOKENIZER", "TOKENS"),
        help="a synonym table, its tokenizer folder and the training tokens to count ('none': not counted)",
    )
    parser.add_argument("--seed", type=int, required=True, help="the config's seed")
    parser.add_argument("--stem", required=True, help="writes STEM.md and STEM.csv")
    args = parser.parse_args()
    specs = [(table, tokenizer, None if tokens == "none" else tokens) for table, tokenizer, tokens in args.table]
    write_audit(specs, args.seed, args.stem)


if __name__ == "__main__":
    run(main)
