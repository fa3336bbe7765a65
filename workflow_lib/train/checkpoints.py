"""A training run's checkpoint folder (`--resume-dir`, results/checkpoints/...): what a checkpoint is made with, how it
is written, which one a rerun resumes, and the lock that keeps a second trainer off it (issue 64).

The folder holds `state` (the newest complete checkpoint), `state.old` (the one before it, the fallback),
`state.tmp` (a save in progress, `save_checkpoint`), `best` (select_best's model) and `lock` (`checkpoint_lock`). A
kill or a crash at any moment leaves the newest complete checkpoint readable (`settle`); a rerun resumes the newest
one whose files match their list (`choose`), else starts from step 0 with a warning. Which run a checkpoint belongs
to (`fingerprint`) is decided by the settings and the data's bytes, never by file times or paths. What the user
sees: docs/usage.md, "Training"; retries on a cluster: docs/cluster.md, "Time limits and shards".
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import shutil
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from workflow_lib.cli import StageError
from workflow_lib.files import fsync_folder, fsync_tree, remove_stale_temporaries, sha256_file

if TYPE_CHECKING:
    from workflow_lib.train.loop import RunState, TrainingRun

log = logging.getLogger("workflow_lib.train.checkpoints")

STATE_FILE = "trainer_state.json"  # the step, best, log rows, fingerprint and file list: written last, the marker
CURRENT, NEW, PREVIOUS = "state", "state.tmp", "state.old"  # the newest complete one; a save's; the one before
LOCK = "lock"  # flock'ed by the trainer using the folder; holds its pid and host
BEST = "best"  # select_best's model (loop.save_model, loop.save_best_adapter: files.replace_folder)


def data_digests(args: Any) -> dict[str, str | None]:
    """The sha256 of the training and validation files, read in chunks: what the fingerprint knows of the data."""
    files = {"train": args.train, "validation": args.validation}
    return {role: sha256_file(path) if path else None for role, path in files.items()}


def fingerprint(args, settings: dict, model_spec: dict, objective: dict, n_processes: int, adapters=None) -> str:
    """What a checkpoint was made with: a rerun resumes only a checkpoint of the same run, never one left by a
    failed run with other settings, data (its bytes), number of processes or LoRA adapters (lora.described)."""
    made = [settings, model_spec, objective, n_processes, data_digests(args)] + ([adapters] if adapters else [])
    text = json.dumps(made, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def file_list(folder: Path) -> dict[str, list]:
    """Every file under `folder` but the marker: relative path -> [size, sha256]."""
    return {
        str(path.relative_to(folder)): [path.stat().st_size, sha256_file(path)]
        for path in sorted(folder.rglob("*"))
        if path.is_file() and path.name != STATE_FILE
    }


def save_checkpoint(run: TrainingRun, state: RunState) -> None:
    """Model, optimizer, scheduler and every process's RNG states into `state.tmp`, then its marker (the step and the
    list of its files), all flushed to disk; only then does it become `state`, and the checkpoint it replaces
    `state.old` (the fallback should this one turn out damaged). The one before that is removed."""
    accelerator, resume = run.accelerator, run.resume
    new = resume / NEW
    if accelerator.is_main_process:
        shutil.rmtree(new, ignore_errors=True)  # a save a kill interrupted: never completed over
    accelerator.wait_for_everyone()
    accelerator.save_state(str(new))
    accelerator.wait_for_everyone()  # every process has written its RNG state before the folder is marked
    if accelerator.is_main_process:
        saved = {"step": state.step, "best": state.best, "log": state.log, "fingerprint": run.mark}
        saved["tracker_runs"] = state.tracker_runs
        saved["files"] = file_list(new)
        (new / f"{STATE_FILE}.tmp").write_text(json.dumps(saved))
        fsync_tree(new)  # the files, then the marker's name: a marked folder is whole on disk
        os.replace(new / f"{STATE_FILE}.tmp", new / STATE_FILE)
        fsync_folder(new)
        promote(resume)
    accelerator.wait_for_everyone()
    state.checkpoint_step = state.step


def promote(resume: Path) -> None:
    """A marked `state.tmp` becomes `state`, the `state` it replaces `state.old` (the older `state.old` is removed)."""
    current, new, previous = (resume / name for name in (CURRENT, NEW, PREVIOUS))
    if current.exists():
        shutil.rmtree(previous, ignore_errors=True)
        os.replace(current, previous)
    os.replace(new, current)
    fsync_folder(resume)


def read_marker(folder: Path) -> dict | str:
    """A checkpoint folder's marker, or what is wrong with it (naming the file)."""
    marker = folder / STATE_FILE
    try:
        saved = json.loads(marker.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        return f"{marker} cannot be read ({error})"
    if not isinstance(saved, dict) or not {"step", "best", "log", "fingerprint", "files"} <= saved.keys():
        return f"{marker} is not a complete checkpoint marker"
    return saved


def damage(folder: Path, saved: dict) -> str | None:
    """What is wrong with a marked checkpoint's files against their list (naming the file), or None if nothing."""
    for name, (size, digest) in saved["files"].items():
        path = folder / name
        if not path.is_file():
            return f"{path} is missing"
        if path.stat().st_size != size:
            return f"{path} is truncated or overwritten ({path.stat().st_size} bytes; the checkpoint wrote {size})"
        if sha256_file(path) != digest:
            return f"{path} is corrupted (its sha256 differs from the one the checkpoint wrote)"
    return None


def settle(resume: Path) -> None:
    """Finish what a killed save or select_best left: a marked `state.tmp` takes its place (its swap was cut short),
    an unmarked one is removed; `state.old` without `state` becomes `state`; `best.old` without `best` becomes `best`
    again (files.replace_folder), and the temporaries of `best` are removed. Call with the lock held."""
    new = resume / NEW
    if new.exists():
        if (new / STATE_FILE).exists():
            log.info("%s is a complete checkpoint whose save was cut short: it becomes %s", new, resume / CURRENT)
            promote(resume)
        else:
            log.info("removing %s: a save that was cut short", new)
            shutil.rmtree(new)
    for name in (CURRENT, BEST):
        folder, aside = resume / name, resume / f"{name}.old"
        if aside.exists() and not folder.exists():
            log.info("%s was being replaced when the run stopped: it becomes %s again", aside, folder)
            os.replace(aside, folder)
    for leftover in (resume / f"{BEST}.old", resume / f"{BEST}.tmp"):
        if leftover.exists():
            log.info("removing %s: left by a run that stopped while saving the best model", leftover)
            shutil.rmtree(leftover)


def remove_stale(resume: Path, output: str | os.PathLike) -> None:
    """At the start of a run, with the lock held (so no other trainer of this run lives): the model's temporaries of
    killed jobs (`.<model>.tmp-<pid>`) and whatever a killed save left in the checkpoint folder."""
    remove_stale_temporaries(output)
    if resume.is_dir():
        settle(resume)


def choose(resume: Path, mark: str) -> tuple[Path, dict] | None:
    """The checkpoint to resume (main process, lock held): the newest of this run (`mark`) whose files match their
    list. A damaged one is removed with a warning naming the file and the previous one tried; a checkpoint of another
    run is discarded with everything in the folder; None where nothing is left to resume."""
    damaged = False
    for name in (CURRENT, PREVIOUS):
        folder = resume / name
        if not folder.is_dir():
            continue
        saved = read_marker(folder)
        if isinstance(saved, dict) and saved["fingerprint"] != mark:
            log.warning("discarding the checkpoint in %s: it was made with other settings, data or processes", resume)
            discard(resume)
            return None
        problem = saved if isinstance(saved, str) else damage(folder, saved)
        if problem is None:
            assert isinstance(saved, dict)
            return folder, saved
        damaged = True
        fallback = "the previous checkpoint" if name == CURRENT and (resume / PREVIOUS).is_dir() else "step 0"
        log.warning("checkpoint %s is damaged: %s; removing it and falling back to %s", folder, problem, fallback)
        shutil.rmtree(folder)
    if damaged:
        log.warning("no loadable checkpoint is left in %s: training starts from step 0", resume)
    return None


def discard(resume: Path) -> None:
    """Remove every checkpoint in the folder (the lock file stays: its holder is this run)."""
    for entry in resume.iterdir():
        if entry.name == LOCK:
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()


@contextlib.contextmanager
def checkpoint_lock(resume: Path, main: bool) -> Iterator[None]:
    """Hold the checkpoint folder for this run (the main process takes an exclusive flock of `lock`, which names its
    pid and host): a second trainer on the same folder (a requeued job beside a live one) fails at once, naming the
    folder and the holder. On the way out a folder that holds only the lock (nothing saved) is removed."""
    if not main:
        yield
        return
    handle = acquire(resume)
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            if resume.is_dir() and [entry.name for entry in resume.iterdir()] == [LOCK]:
                (resume / LOCK).unlink()
                resume.rmdir()
        handle.close()  # releases the flock


def acquire(resume: Path):
    """The open, flock'ed lock file of `resume`, with this process named in it; StageError if another holds it."""
    path = resume / LOCK
    for _ in range(10):  # the holder may remove the file between our open and our flock: then lock the new one
        resume.mkdir(parents=True, exist_ok=True)
        handle = open(path, "a+")  # noqa: SIM115 (returned open: closing it releases the lock)
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "a process that has not named itself yet"
            handle.close()
            raise StageError(
                f"{resume}: the checkpoint folder is in use by another trainer ({holder}); two trainers of one run "
                f"would overwrite each other's checkpoints. Wait for it to end or stop it (a requeued job beside a "
                f"live one), then rerun"
            ) from None
        try:
            same = os.path.samestat(os.fstat(handle.fileno()), os.stat(path))
        except FileNotFoundError:
            same = False
        if same:
            handle.seek(0)
            handle.truncate()
            handle.write(f"pid {os.getpid()} on {socket.gethostname()}\n")
            handle.flush()
            return handle
        handle.close()
    raise StageError(f"{resume}: could not lock {path}: it kept being removed while this trainer opened it")
