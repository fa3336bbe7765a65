"""What proves a `.part` is still the start of the remote file: the validator (ETag, else Last-Modified) of the
response its first byte came from, saved beside it in `<file>.part.json`, and sent back as `If-Range` on a resume.

A Range request alone splices: when the file changed between two jobs, the server continues the old bytes with
the new file's tail. With `If-Range`, a server whose file changed answers 200 with the whole new file instead of
206 (RFC 9110, 13.1.5), and the download starts again from zero; a .part with no validator saved is never
resumed. Standard library and workflow_lib.files only.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

from workflow_lib.files import write_json


@dataclass(frozen=True)
class Validator:
    """The version of `url` that a .part holds the start of, as its server named it."""

    url: str
    etag: str | None = None
    last_modified: str | None = None

    def if_range(self) -> str | None:
        """The If-Range value: a strong ETag, else the Last-Modified date; None when there is neither (a weak ETag
        may not be sent in If-Range)."""
        if self.etag and not self.etag.startswith("W/"):
            return self.etag
        return self.last_modified

    def same_version(self, headers: Mapping[str, str]) -> bool:
        """False when a response names another version than this one: the defence against a server that honours
        Range but ignores If-Range. A header the response leaves out proves nothing either way."""
        etag, modified = headers.get("ETag"), headers.get("Last-Modified")
        if self.etag and etag and etag != self.etag:
            return False
        return not (self.last_modified and modified and modified != self.last_modified)


def of_response(url: str, headers: Mapping[str, str]) -> Validator:
    return Validator(url=url, etag=headers.get("ETag"), last_modified=headers.get("Last-Modified"))


def sidecar_path(part: Path) -> Path:
    return part.with_name(part.name + ".json")


def save(part: Path, validator: Validator) -> None:
    """Keep the validator beside `part` (written whole or not at all), or none when it could not be sent back."""
    if validator.if_range() is None:
        forget(part)
    else:
        write_json(asdict(validator), sidecar_path(part))


def load(part: Path, url: str) -> Validator | None:
    """The validator saved beside `part` for this `url`; None when there is none, it is unreadable, or it was
    saved for another URL (the config changed the URL behind the same local name)."""
    try:
        saved = json.loads(sidecar_path(part).read_text())
        validator = Validator(**saved)
    except (OSError, ValueError, TypeError):
        return None
    return validator if validator.url == url and validator.if_range() else None


def forget(part: Path) -> None:
    sidecar_path(part).unlink(missing_ok=True)
