"""What one split's job sees of its dataset's entry (Snakefile-safe: standard library only). The rules' params and the
`download` job both read it, and no planning module (grid, layout) is in the job's code closure.
"""

from __future__ import annotations


def split_spec(dataset: dict, split: str) -> dict:
    """The dataset's entry as one split's job sees it: a `max_rows` given per split becomes that split's number
    (or null), so a cap changed for train reruns train's job only."""
    cap = dataset.get("max_rows")
    if not isinstance(cap, dict):
        return dataset
    return {**dataset, "max_rows": cap.get(split)}
