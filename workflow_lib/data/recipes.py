"""How a split's rows are built from a corpus, as named recipes the config picks (`datasets.<key>.recipe`).

The paper evaluates on MixCE's prepared files (bloomberg/MixCE-acl2023, data/*_data.py), whose order matters:
cleaning and the 50 < words < 1000 window come BEFORE the 5000-row cut, and WebText and WikiText-103 test are
filled up to 5000 rows with filtered train rows. `mixce` is that order; `raw` keeps every cleaned row (the
first `max_rows` if set), which is what WikiText-2 is, and what the paper's WikiText-103 numbers suggest.

Each recipe returns the rows and a record of every step's row count, so `results/data/<set>.json` shows where
rows went; `rows_sha256` identifies the final rows the way MixCE's .txt file would be identified.
"""

from __future__ import annotations

import hashlib
import io
from collections.abc import Callable

from workflow_lib.data.cleaning import clean

RECIPES = ("raw", "mixce")
TOP_UP_ORDER = ("test", "validation")  # MixCE fills test first, then validation, from the head of train


def rows_sha256(rows: list[str]) -> str:
    """sha256 of the rows joined by newlines: the bytes of the .txt file MixCE writes for a split, so a set
    built here can be compared with one built by MixCE's scripts (`sha256sum webtext.test.txt`)."""
    return hashlib.sha256("\n".join(rows).encode("utf-8")).hexdigest()


def file_round_trip(rows: list[str]) -> list[str]:
    """The rows as MixCE reads them back: it writes `"\\n".join(rows)` and re-reads with `readlines()` and
    `strip()`. Text mode ends a line at "\\r" too, so a row holding a carriage return (WebText has a few)
    becomes several rows, unfiltered. Python's own reader does the split, so the result is MixCE's exactly."""
    if not rows:
        return []
    return [line.strip() for line in io.StringIO("\n".join(rows), newline=None)]


def _step(name: str, rows: int, **extra) -> dict:
    return {"step": name, "rows": rows, **extra}


def raw(rows: list[str], cleaning: str, max_rows: int | None) -> tuple[list[str], list[dict]]:
    """Every cleaned row, in order; `max_rows` keeps the first N of them (after cleaning, so N rows survive)."""
    kept, counts = clean(cleaning, rows)
    steps = [_step("load", len(rows)), _step(f"clean ({cleaning})", len(kept), **_dropped(counts))]
    if max_rows is not None and len(kept) > max_rows:
        kept = kept[:max_rows]
        steps.append(_step(f"first {max_rows}", len(kept)))
    return kept, steps


def _dropped(counts: dict) -> dict:
    return {k: v for k, v in counts.items() if k.startswith(("dropped_", "empty_")) and v}


def mixce_filtered(rows: list[str], cleaning: str) -> tuple[list[str], list[dict]]:
    """MixCE's per-split preparation: clean (which ends in the 50 < words < 1000 window), write, read back."""
    kept, counts = clean(cleaning, rows)
    back = file_round_trip(kept)
    steps = [
        _step("load", len(rows)),
        _step(f"clean and 50 < words < 1000 ({cleaning})", len(kept), **_dropped(counts)),
    ]
    if len(back) != len(kept):
        steps.append(_step("split at carriage returns (MixCE's file round trip)", len(back)))
    return back, steps


def _head_filtered(rows: list[str], cleaning: str, need: int) -> tuple[list[str], int]:
    """The first `need` filtered rows of `rows`, cleaning only as many raw rows as that takes (a WikiText-103
    top-up needs a few hundred of train's 1.8M rows, and Moses detokenisation is the slow step).
    Returns them and the number of raw rows read."""
    chunk, start = max(2 * need, 256), 0
    out: list[str] = []
    while len(out) < need and start < len(rows):
        # A chunk's rows are filtered independently of the next chunk's (each row is its own line; a row's
        # carriage returns split only that row), so chunking does not change which rows come first.
        out += mixce_filtered(rows[start : start + chunk], cleaning)[0]
        start, chunk = start + chunk, chunk * 2
    return out[:need], min(start, len(rows))


def mixce(
    split: str,
    load: Callable[[str], list[str]],
    cleaning: str,
    max_rows: int | None,
    top_up: str | None,
    splits: list[str],
) -> tuple[list[str], list[dict], dict | None]:
    """MixCE's order for one split: filter, then cut test and validation to `max_rows`, then top them up.

    With `top_up` (MixCE: train), test gets train's first filtered rows up to `max_rows`, validation the next
    ones, and the top-up split itself loses the rows it gave. `load(split)` returns a split's raw rows; other
    splits are loaded only when their counts decide this one's rows. Returns rows, steps, top-up record.
    """
    rows, steps = mixce_filtered(load(split), cleaning)
    if split == top_up:
        assert max_rows is not None, "a top-up split gives rows up to max_rows (the config sets it for mixce)"
        given = sum(_deficit(s, load, cleaning, max_rows) for s in TOP_UP_ORDER if s in splits and s != top_up)
        if given:
            rows = rows[given:]
            steps.append(_step(f"minus the first {given} rows, given to the top-ups", len(rows)))
        return rows, steps, None
    if split not in TOP_UP_ORDER or max_rows is None:
        return rows, steps, None
    if len(rows) > max_rows:
        rows = rows[:max_rows]
        steps.append(_step(f"first {max_rows}", len(rows)))
    if top_up is None or top_up not in splits or len(rows) >= max_rows:
        return rows, steps, None
    offset = sum(
        _deficit(s, load, cleaning, max_rows)
        for s in TOP_UP_ORDER[: TOP_UP_ORDER.index(split)]
        if s in splits and s != top_up
    )
    need = max_rows - len(rows)
    source = load(top_up)
    extra, read = _head_filtered(source, cleaning, offset + need)
    extra = extra[offset:]
    if len(extra) < need:
        raise ValueError(
            f"the top-up of {split!r} needs {need} filtered {top_up!r} rows after the first {offset}, but "
            f"{top_up!r} has only {len(extra)} more ({len(source)} rows loaded); for a downloaded head, raise its "
            "head_bytes"
        )
    rows = rows + extra
    steps.append(_step(f"top-up from {top_up}", len(rows), added=len(extra)))
    record = {
        "split": top_up,
        "rows": len(extra),
        "first_doc_id": len(rows) - len(extra),
        "skipped": offset,
        "source_rows_read": read,
        "source_rows_loaded": len(source),
    }
    return rows, steps, record


def _deficit(split: str, load: Callable[[str], list[str]], cleaning: str, max_rows: int) -> int:
    """How many top-up rows `split` takes: what its filtered rows fall short of max_rows."""
    return max(0, max_rows - len(mixce_filtered(load(split), cleaning)[0]))
