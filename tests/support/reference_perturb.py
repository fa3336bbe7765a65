"""A plain per-token Python perturber: the oracle the vectorised one is tested (and benchmarked) against.

Same semantics as workflow_lib.perturb.perturber.perturb, written the obvious way, one token at a time.
"""

from __future__ import annotations

import random


def perturb_loop(
    sequences: list[list[int]],
    strategy: str,
    intensity: float,
    candidates: dict[int, tuple[list[int], list[float]]],
    rng: random.Random,
    special: set[int] = frozenset(),
) -> list[list[int]]:
    out = []
    for seq in sequences:
        selected = []
        for tok in seq:
            eligible = tok not in special and (strategy == "deletion" or tok in candidates)
            selected.append(eligible and rng.random() < intensity)
        if strategy == "deletion":
            out.append([t for t, s in zip(seq, selected) if not s])
        elif strategy == "replacement":
            out.append([rng.choices(*candidates[t])[0] if s else t for t, s in zip(seq, selected)])
        else:
            first = 1 if seq and seq[0] in special else 0
            last = len(seq) - (1 if seq and seq[-1] in special else 0)
            at_gap: dict[int, list[int]] = {}
            for tok, s in zip(seq, selected):
                if s:
                    at_gap.setdefault(rng.randint(first, last), []).append(rng.choices(*candidates[tok])[0])
            new = []
            for gap in range(len(seq) + 1):
                inserts = at_gap.get(gap, [])
                rng.shuffle(inserts)
                new.extend(inserts)
                if gap < len(seq):
                    new.append(seq[gap])
            out.append(new)
    return out
