"""The MAUVE controls by name, read from their registry (control_builders.py's `@control(name, short, description)`
decorators, read from its syntax tree by registries.py: nothing imported or executed) for the control scores, the
report's instrument table and the cost model, at Snakefile parse time. Standard library only.
"""

from __future__ import annotations

from workflow_lib.registries import control_entries

CEILING = "human"  # the ceiling control, human text itself: registered first
_ENTRIES = control_entries()
if _ENTRIES[0][0] != CEILING:
    raise ValueError(f"evaluate/control_builders.py: the first control registered must be the ceiling, {CEILING!r}")
# name -> its short name (a refused cell's text) and what it is (the summary's table), in the registry's order
CONTROLS: dict[str, str] = {name: short for name, short, _ in _ENTRIES}
DESCRIPTIONS: dict[str, str] = {name: description for name, _, description in _ENTRIES}

# The graded, planted control (docs/method.md §4, "MAUVE's planted control"): two disjoint human windows (the
# ceiling, `CEILING` then `SECOND_WINDOW`) against the same windows with a share of the prompts' texts replaced by
# another eval set's words (`MIXTURE`, one row name per window), scored by the contrasts' joint permutation test.
SECOND_WINDOW = "human_2"
MIXTURE = ("mixture_1", "mixture_2")
PLANTED_ROWS = (SECOND_WINDOW, *MIXTURE)
