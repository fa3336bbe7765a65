"""The MAUVE controls' registry: each control is a builder decorated `@control(name, short, description)`, which
makes one word list per prompt from the prompts' human continuations and the eval set's words (`Source`), in the
order the report's columns follow. registries.py reads the decorators (for control_names.py, at Snakefile parse time,
without importing numpy); evaluate/controls.py, the `control_texts` job, runs them. What each control is for, and the
rule that reports MAUVE: docs/method.md §4, "MAUVE's controls".
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from workflow_lib.cli import StageError

LOOP_WORDS = 5


def control_seed(seed: int, eval_set: str, control: str) -> np.random.Generator:
    """A control's generator, from the study's seed and the eval set's and control's names (same config, same
    bytes; no two controls or eval sets share a stream)."""
    key = hashlib.sha256(f"{eval_set}\0{control}".encode()).digest()
    return np.random.default_rng([seed, int.from_bytes(key[:8], "little")])


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


@dataclass(frozen=True)
class Source:
    """What every control is built from: the prompts' human continuations (`continuations`, words per prompt), the
    eval set's rows as words (`rows`) and each prompt's row among them (`prompt_rows`)."""

    continuations: list[list[str]]
    rows: list[list[str]]
    prompt_rows: list[int]
    prefix_words: int
    reference_words: int
    seed: int
    eval_set: str

    def rng(self, control: str) -> np.random.Generator:
        """The control's own stream (`control_seed`)."""
        return control_seed(self.seed, self.eval_set, control)

    def window(self, k: int) -> list[list[str]]:
        """The k-th window of human words after each prompt's reference (k = 1: the words right after it), each as
        long as a reference's continuation."""
        start = self.prefix_words + k * self.reference_words
        return [following_words(self.rows, row, start, self.reference_words) for row in self.prompt_rows]


BUILDERS: dict[str, Callable[[Source], list[list[str]]]] = {}


def control(name: str, short: str, description: str):
    """Register a control's builder (Source -> one word list per prompt, in the prompts' order). `short` names it
    in a refused cell's text, `description` says what it is in the summary's table (control_names.py reads both from
    this decorator's arguments, which must be string literals)."""

    def add(build: Callable[[Source], list[list[str]]]):
        BUILDERS[name] = build
        return build

    return add


@control("human", "human text", "the human words that follow the reference (the ceiling)")
def human(source: Source) -> list[list[str]]:
    return source.window(1)


@control("shuffled", "shuffled words", "the reference's continuation, its words in a random order")
def shuffled(source: Source) -> list[list[str]]:
    rng = source.rng("shuffled")
    return [[c[i] for i in rng.permutation(len(c))] for c in source.continuations]


@control("loop", "a 5-word loop", "the continuation's first 5 words, repeated to its length")
def loop(source: Source) -> list[list[str]]:
    return [(c[:LOOP_WORDS] * (len(c) // max(1, len(c[:LOOP_WORDS])) + 1))[: len(c)] for c in source.continuations]


@control("salad", "word salad", "words drawn from the eval set's unigram distribution")
def salad(source: Source) -> list[list[str]]:
    words = np.asarray([w for row in source.rows for w in row], dtype=object)
    vocabulary, counts = np.unique(words, return_counts=True)
    lengths = np.asarray([len(c) for c in source.continuations])
    drawn = source.rng("salad").choice(len(vocabulary), size=int(lengths.sum()), p=counts / counts.sum())
    return [list(vocabulary[part]) for part in np.split(drawn, np.cumsum(lengths)[:-1])]


@control("swapped", "another prompt's continuation", "another prompt's human continuation (fluent, off-prompt)")
def swapped(source: Source) -> list[list[str]]:
    n = len(source.continuations)
    shift = int(source.rng("swapped").integers(1, n))
    return [source.continuations[(i + shift) % n] for i in range(n)]
