"""What MAUVE can see here: the control texts (the `control_texts` job), laid out exactly as the model texts are (the
same prompts, the reference's number of words, one text per prompt): every registered control's words
(control_builders.py), then the planted control's rows.

The controls, the planted control, and the rule that decides whether an eval set's MAUVE cells are reported:
docs/method.md §4, "MAUVE's controls" and "MAUVE's planted control". The `features` job featurises these texts and
evaluate.control_scores scores them: an edit of the scoring code rebuilds no text.
"""

from __future__ import annotations

import argparse
import logging

import numpy as np

from workflow_lib.cli import StageError, parse_json_arg, run
from workflow_lib.evaluate.control_builders import BUILDERS, Source, control_seed
from workflow_lib.evaluate.control_names import CEILING, CONTROLS, MIXTURE, SECOND_WINDOW
from workflow_lib.files import write_parquet

log = logging.getLogger("workflow_lib.evaluate.controls")


def word_stream(texts: list[str], forbidden: str | None) -> tuple[list[list[str]], np.ndarray]:
    """The eval set's rows as whitespace words, rows holding `forbidden` (WikiText headings) dropped as the prompts
    drop them, and the kept rows' indices in `texts`."""
    keep = [i for i, t in enumerate(texts) if t and not (forbidden and forbidden in t)]
    return [texts[i].split() for i in keep], np.asarray(keep, dtype=np.int64)


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
    rows, kept = word_stream(texts, forbidden)
    row_of_doc = {int(doc_ids[i]): k for k, i in enumerate(kept)}
    doc_of_prompt = prompts.column("doc_id").to_pylist()
    if missing := [d for d in doc_of_prompt if int(d) not in row_of_doc]:
        raise StageError(f"eval_sets.{eval_set}: a prompt's document {missing[0]} is not among the eval set's rows")
    source = Source(
        continuations=[r[len(p) :].split() for r, p in zip(references, prefixes, strict=True)],
        rows=rows,
        prompt_rows=[row_of_doc[int(d)] for d in doc_of_prompt],
        prefix_words=prefix_words,
        reference_words=reference_words,
        seed=seed,
        eval_set=eval_set,
    )
    built = {name: BUILDERS[name](source) for name in CONTROLS}
    if wrong := [name for name, words in built.items() if len(words) != len(ids)]:
        raise StageError(f"the control {wrong[0]!r} built {len(built[wrong[0]])} texts for {len(ids)} prompts")
    if planted and planted["fraction"] > 0 and other is not None:
        built[SECOND_WINDOW] = source.window(2)
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
