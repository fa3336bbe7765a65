"""The `unpack` rule's work: exactly the named regular-file members of a tar (any compression) or zip archive,
extracted in one streaming pass, with their sizes and sha256 for the record.

A member path must stay inside the output folder (no absolute path, no ..), and the folder appears only when every
member is there. docs/usage.md, "Real data and hub models"; the command line is `fetch.py`'s `unpack`.
"""

from __future__ import annotations

import hashlib
import lzma
import tarfile
import zipfile
import zlib
from pathlib import Path, PurePosixPath

from workflow_lib.cli import StageError
from workflow_lib.data.transfer import CHUNK
from workflow_lib.files import atomic_path, sha256_file


def unpack(archive: str | Path, members: list[str], output_dir: str | Path, *, what: str) -> dict:
    """Extract exactly the named regular-file members of a tar (any compression) or zip archive to output_dir/<member>.

    One streaming pass that stops once every member is out; output_dir appears only when all of them are there.
    """
    archive = Path(archive)
    if not archive.is_file():
        raise StageError(f"{what}: archive {archive} does not exist")
    wanted = {safe_member(member, what) for member in members}
    if not wanted:
        raise StageError(f"{what}: no archive members to extract from {archive}")
    found: dict[str, dict] = {}
    held: list[str] = []
    with atomic_path(output_dir) as tmp:
        tmp.mkdir()
        if zipfile.is_zipfile(archive):
            unzip_members(archive, wanted, tmp, found, held, what)
        else:
            try:
                with tarfile.open(archive, "r|*") as tar:
                    for info in tar:
                        name = str(PurePosixPath(info.name))
                        if info.isfile() and len(held) < 10:
                            held.append(name)
                        if name not in wanted:
                            continue
                        if not info.isfile():
                            raise StageError(f"{what}: member {name} of {archive} is not a regular file")
                        found[name] = extract_member(tar.extractfile(info), info.size, tmp / name)
                        if len(found) == len(wanted):
                            break
            except (tarfile.TarError, EOFError, zlib.error, lzma.LZMAError) as error:
                raise StageError(f"{what}: {archive} is not a readable tar or zip archive ({error})") from error
        missing = sorted(wanted - set(found))
        if missing:
            raise StageError(
                f"{what}: {archive} has no member {', '.join(missing)}; it holds e.g. "
                f"{', '.join(held) or 'no regular files'}"
            )
    return {
        "archive": str(archive),
        "archive_sha256": sha256_file(archive),
        "members": {name: found[name] for name in sorted(found)},
    }


def safe_member(member: str, what: str) -> str:
    """A member path that stays inside the output folder (no absolute path, no ..), normalised like tar names."""
    path = PurePosixPath(member)
    if not member or path.is_absolute() or ".." in path.parts:
        raise StageError(f"{what}: archive member {member!r} must be a relative path without '..'")
    return str(path)


def unzip_members(archive: Path, wanted: set[str], tmp: Path, found: dict, held: list[str], what: str) -> None:
    """The zip branch of `unpack` (WikiText's archives are zip files): the same members, checks and records."""
    try:
        with zipfile.ZipFile(archive) as bundle:
            for info in bundle.infolist():
                name = str(PurePosixPath(info.filename))
                if not info.is_dir() and len(held) < 10:
                    held.append(name)
                if name not in wanted:
                    continue
                if info.is_dir():
                    raise StageError(f"{what}: member {name} of {archive} is not a regular file")
                with bundle.open(info) as source:
                    found[name] = extract_member(source, info.file_size, tmp / name)
    except (zipfile.BadZipFile, EOFError, zlib.error) as error:
        raise StageError(f"{what}: {archive} is not a readable zip archive ({error})") from error


def extract_member(source, size: int, target: Path) -> dict:
    target.parent.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256()
    with open(target, "wb") as out:
        while block := source.read(CHUNK):
            digest.update(block)
            out.write(block)
    return {"bytes": size, "sha256": digest.hexdigest()}
