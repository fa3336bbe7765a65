"""What MAUVE can see here: the control texts, built from each eval set's human references and laid out exactly as
the model texts are (the same prompts, the reference's number of words, one text per prompt).

The controls (`human`, the ceiling; `shuffled`, `loop`, `salad`, `swapped`; the planted control's rows) and the rule
that decides whether an eval set's MAUVE cells are reported: docs/method.md §4, "MAUVE's controls" and "MAUVE's
planted control". This module builds the texts (the `control_texts` rule: no featuriser, no model); the `features`
job featurises them beside the references (evaluate.features) and evaluate.control_scores scores them and applies
the rule. Kept apart so that an edit of the scoring code rebuilds no text.
"""

from __future__ import annotations

import argparse
import hashlib
import logging

import numpy as np

from workflow_lib.cli import StageError, parse_json_arg, run
from workflow_lib.evaluate.control_names import CEILING, MIXTURE, SECOND_WINDOW
from workflow_lib.files import write_parquet

log = logging.getLogger("workflow_lib.evaluate.controls")

LOOP_WORDS = 5


def control_seed(seed: int, eval_set: str, control: str) -> np.random.Generator:
    """A control's generator, from the study's seed and the eval set's and control's names (same config, same
    bytes; no two controls or eval sets share a stream)."""
    key = hashlib.sha256(f"{eval_set}\0{control}".encode()).digest()
    return np.random.default_rng([seed, int.from_bytes(key[:8], "little")])


def word_stream(texts: list[str], forbidden: str | None) -> tuple[list[list[str]], np.ndarray]:
    """The eval set's rows as whitespace words, rows holding `forbidden` (WikiText headings) dropped as the prompts
    drop them, and the kept rows' indices in `texts`."""
    keep = [i for i, t in enumerate(texts) if t and not (forbidden and forbidden in t)]
    return [texts[i].split() for i in keep], np.asarray(keep, dtype=np.int64)


def following_words(rows: list[list[str]], row: int, start: int, count: int) -> list[str]:
    """`count` words of the row stream from word `start` of row `row`, continuing into the next rows (and from the
    first row after the last)."""
    out: list[str] = []
    r, at = row, start
    for _ in range(len(rows) + 1):
        out += rows[r][at : at + count - len(out)]
        if len(out) == count:
            return out
        r, at = (r + 1) % len(rows), 0
    raise StageError(f"the eval set holds fewer than {count} words after a prompt's reference")


def control_texts(
    prompts,
    texts: list[str],
    doc_ids: list[int],
    eval_set: str,
    prefix_words: int,
    reference_words: int,
    forbidden: str | None,
    seed: int,
    planted: dict | None = None,
    other: list[str] | None = None,
):
    """Every control's continuation of every prompt: a table (control, prompt_id, text) whose `text` is a
    continuation as a samples file holds one (the prompt's prefix goes before it), in CONTROLS order, then by
    prompt_id. `prompts` is the prompts table (prompt_id, doc_id, prefix, reference); `texts` and `doc_ids` the eval
    set's rows, from which the prompts were cut (data/prompts.py). `planted` ({fraction, source}) and `other` (the
    source eval set's continuations) add the planted control's rows after them: `human_2`, the human words after the
    ceiling's (a second disjoint window), and `mixture_1` and `mixture_2`, the two windows with a share of the prompts
    (`planted.fraction`, the same prompts in both) given the other eval set's words instead (none without a source)."""
    import pyarrow as pa

    ids = np.asarray(prompts.column("prompt_id").to_numpy(), dtype=np.int64)
    prefixes = prompts.column("prefix").to_pylist()
    references = prompts.column("reference").to_pylist()
    if len(ids) < 2:
        raise StageError(f"eval_sets.{eval_set}: MAUVE's controls need at least 2 prompts, not {len(ids)}")
    continuations = [r[len(p) :].split() for r, p in zip(references, prefixes, strict=True)]
    rows, kept = word_stream(texts, forbidden)
    row_of_doc = {int(doc_ids[i]): k for k, i in enumerate(kept)}
    doc_of_prompt = prompts.column("doc_id").to_pylist()
    if missing := [d for d in doc_of_prompt if int(d) not in row_of_doc]:
        raise StageError(f"eval_sets.{eval_set}: a prompt's document {missing[0]} is not among the eval set's rows")

    built: dict[str, list[list[str]]] = {
        CEILING: [
            following_words(rows, row_of_doc[int(d)], prefix_words + reference_words, reference_words)
            for d in doc_of_prompt
        ]
    }
    rng = control_seed(seed, eval_set, "shuffled")
    built["shuffled"] = [[c[i] for i in rng.permutation(len(c))] for c in continuations]
    built["loop"] = [(c[:LOOP_WORDS] * (len(c) // max(1, len(c[:LOOP_WORDS])) + 1))[: len(c)] for c in continuations]
    vocabulary, counts = np.unique(np.asarray([w for row in rows for w in row], dtype=object), return_counts=True)
    rng = control_seed(seed, eval_set, "salad")
    lengths = np.asarray([len(c) for c in continuations])
    drawn = rng.choice(len(vocabulary), size=int(lengths.sum()), p=counts / counts.sum())
    built["salad"] = [list(vocabulary[part]) for part in np.split(drawn, np.cumsum(lengths)[:-1])]
    shift = int(control_seed(seed, eval_set, "swapped").integers(1, len(ids)))
    built["swapped"] = [continuations[(i + shift) % len(ids)] for i in range(len(ids))]

    if planted and planted["fraction"] > 0 and other is not None:
        built[SECOND_WINDOW] = [
            following_words(rows, row_of_doc[int(d)], prefix_words + 2 * reference_words, reference_words)
            for d in doc_of_prompt
        ]
        built |= mixture([built[CEILING], built[SECOND_WINDOW]], other, planted["fraction"], seed, eval_set)
    names = [name for name in built for _ in ids]
    return pa.table(
        {
            "control": pa.array(names, pa.string()),
            "prompt_id": pa.array(np.tile(ids, len(built)), pa.int64()),
            "text": pa.array([" " + " ".join(words) for name in built for words in built[name]], pa.string()),
        }
    )


def mixture(windows: list[list[list[str]]], other: list[str], fraction: float, seed: int, eval_set: str) -> dict:
    """The planted rows: each human window with the texts of the same chosen prompts (round(fraction x n), at least
    one) replaced by consecutive words of another eval set's continuations (`other`, cycled), each as long as the
    text it replaces. The choice is seeded by the study's seed and the eval set's name."""
    n = len(windows[0])
    chosen = control_seed(seed, eval_set, "mixture").choice(n, size=max(1, round(fraction * n)), replace=False)
    words = [w for text in other for w in text.split()]
    if not words:
        raise StageError(f"eval_sets.{eval_set}: the planted control's source eval set has no continuation words")
    at, out = 0, {}
    for name, window in zip(MIXTURE, windows, strict=True):
        texts = [list(text) for text in window]
        for i in sorted(chosen.tolist()):
            length = len(window[i])
            texts[i] = [words[(at + k) % len(words)] for k in range(length)]
            at += length
        out[name] = texts
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m workflow_lib.evaluate.controls", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--eval-set", required=True)
    parser.add_argument("--prompts", required=True)
    parser.add_argument("--data", required=True, help="the eval set's split (Parquet: doc_id, text)")
    parser.add_argument("--settings", required=True, help="JSON: the prompts' settings and the seed")
    parser.add_argument("--other", help="the planted control's source eval set's prompts (Parquet)")
    parser.add_argument("--output", required=True)
    args = parser.parse_args()

    from workflow_lib.files import read_parquet

    settings = parse_json_arg(args.settings, "prompts")
    data = read_parquet(args.data, columns=["doc_id", "text"])
    other = None
    if args.other:
        source = read_parquet(args.other, columns=["prefix", "reference"])
        pairs = zip(source.column("prefix").to_pylist(), source.column("reference").to_pylist(), strict=True)
        other = [reference[len(prefix) :] for prefix, reference in pairs]
    table = control_texts(
        read_parquet(args.prompts),
        data.column("text").to_pylist(),
        data.column("doc_id").to_pylist(),
        args.eval_set,
        settings["prefix_words"],
        settings["reference_words"],
        settings["forbidden"],
        settings["seed"],
        settings.get("planted"),
        other,
    )
    log.info("%d control texts (%s)", table.num_rows, ", ".join(sorted(set(table.column("control").to_pylist()))))
    write_parquet(table, args.output)


if __name__ == "__main__":
    run(main)
