"""Saving a figure as STEM.png and STEM.pdf, for every stage that draws one (report, lab, simulation).

Deterministic files: no timestamps in the PDF, fixed PNG metadata, so the same study writes the same bytes.
"""

from __future__ import annotations

from pathlib import Path

from workflow_lib.files import atomic_path


def _save(fig, path_stem: str) -> None:
    stem = Path(path_stem)
    pdf_metadata = {"CreationDate": None, "Producer": None, "Creator": None}
    for ext, metadata in (("png", {"Software": None}), ("pdf", pdf_metadata)):
        with atomic_path(stem.with_name(f"{stem.name}.{ext}")) as tmp:
            fig.savefig(tmp, format=ext, metadata=metadata, dpi=150)
