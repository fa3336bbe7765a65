"""The MAUVE controls by name: one home for the registry that the control texts (controls.py), their scores
(control_scores.py), the report's instrument table and the cost model (at Snakefile parse time) read. Standard
library only."""

from __future__ import annotations

CEILING = "human"
# name -> its short name (a refused cell's text) and what it is (the summary's table)
CONTROLS: dict[str, str] = {
    CEILING: "human text",
    "shuffled": "shuffled words",
    "loop": "a 5-word loop",
    "salad": "word salad",
    "swapped": "another prompt's continuation",
}
DESCRIPTIONS: dict[str, str] = {
    CEILING: "the human words that follow the reference (the ceiling)",
    "shuffled": "the reference's continuation, its words in a random order",
    "loop": "the continuation's first 5 words, repeated to its length",
    "salad": "words drawn from the eval set's unigram distribution",
    "swapped": "another prompt's human continuation (fluent, off-prompt)",
}

# The graded, planted control (docs/method.md §4, "MAUVE's planted control"): two disjoint human windows (the
# ceiling, `CEILING` then `SECOND_WINDOW`) against the same windows with a share of the prompts' texts replaced by
# another eval set's words (`MIXTURE`, one row name per window), scored by the contrasts' joint permutation test.
SECOND_WINDOW = "human_2"
MIXTURE = ("mixture_1", "mixture_2")
PLANTED_ROWS = (SECOND_WINDOW, *MIXTURE)
