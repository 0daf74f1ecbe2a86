"""One process at a time writes an output folder, and what a stopped run left beside it is removed.

:func:`pipelines.core.storage.atomic_output` writes a folder ``OUT`` into a hidden sibling ``.OUT.tmp-<hex>`` and
moves it into place at the end; an error, Ctrl-C or SIGTERM (``ltr`` turns it into an exception) removes the
sibling. A process killed outright (SIGKILL, the kernel's OOM killer, a lost machine) cannot, and its sibling,
as large as the output (gigabytes for a large ingest), would stay there unseen, one more for every killed run.

:func:`claim_output` takes an exclusive lock (:class:`pipelines.core.locks.FileLock`), ``.OUT.lock`` beside ``OUT``,
for as long as a command writes it.
The kernel releases the lock when the process ends, however it ends. So a process that holds the lock knows that
every ``.OUT.tmp-*`` there was left by a run that is over, and removes it (with a warning naming its size). A
second process that wants ``OUT`` while another holds it is refused at once (:class:`BusyError`, exit 75), with the
holder's pid; the study's steps wait for it instead (``wait=True``) and then look again whether the output
is there and fresh. The lock file itself (a few bytes: the pid of its last holder) stays: removing it would let two
processes hold two different locks of one name.

Local folders only. A lock on an object store or HDFS says nothing about another machine's process; there a
leftover is named in a warning and kept.

Outside the code identity's import closure (:mod:`pipelines.core.keys`): the commands and the study's steps take
the claim around the jobs, which do not know of it, so this module's edits keep every key.
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

import pyarrow.fs as pafs

from pipelines.core.errors import STORAGE_ERRNOS, BusyError, StorageError
from pipelines.core.locks import FileLock
from pipelines.core.storage import OutputError
from udfs.uris import resolve

log = logging.getLogger(__name__)

_held: dict[str, int] = {}  # local path -> claims of it open in this process (a claim is re-entrant)
_held_lock = threading.Lock()
_failed: set[str] = set()  # local paths whose claim ended with an exception (see sweep_failed)


def staging_prefix(name: str) -> str:
    """The name :func:`pipelines.core.storage.atomic_output` gives the temporary sibling of an output ``name``, up
    to its random part (``tests/core/test_outputs.py`` holds the two together)."""
    return f".{name}.tmp-"


def leftovers(out: str) -> list[str]:
    """The temporary siblings of ``out`` (a local folder) that are there now: ``.OUT.tmp-*``, and ``.OUT.tmp-*.old``
    (the output being replaced, set aside for the moment of the swap)."""
    parent, name = os.path.split(os.path.abspath(out))
    prefix = staging_prefix(name)
    try:
        with os.scandir(parent) as entries:
            return sorted(e.path for e in entries if e.name.startswith(prefix) and e.is_dir(follow_symlinks=False))
    except FileNotFoundError:
        return []


def _bytes(path: str) -> int:
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            try:
                total += os.lstat(os.path.join(root, f)).st_size
            except OSError:
                pass
    return total


@contextmanager
def claim_output(*outs: str | None, wait: bool = False) -> Iterator[None]:
    """Hold the claim of each of ``outs`` (local folders or URIs; ``None`` is skipped) for the ``with`` block,
    removing what stopped runs left beside them first (module docstring). Another process's claim is a
    :class:`BusyError` at once, or, with ``wait``, waited for. Re-entrant within a process."""
    with ExitStack() as stack:
        for out in dict.fromkeys(o for o in outs if o):
            stack.enter_context(_claim(out, wait))
        yield


@contextmanager
def _claim(out: str, wait: bool) -> Iterator[None]:
    fs, path = resolve(out)
    if not isinstance(fs, pafs.LocalFileSystem):
        _warn_remote(fs, path, out)
        yield
        return
    path = os.path.abspath(path)
    with _held_lock:
        if _held.get(path):
            _held[path] += 1
            lock: FileLock | None = None
        else:
            lock = _lock(path, out, wait)
            _held[path] = 1
    try:
        if lock is not None:
            _remove_leftovers(path, out)
        yield
    except BaseException:
        if lock is not None:
            _failed.add(path)
        raise
    finally:
        with _held_lock:
            _held[path] -= 1
            if not _held[path]:
                del _held[path]
        if lock is not None:
            lock.release()


def forget_failed() -> None:
    """Start a command afresh: the outputs of earlier commands in this process are not its to sweep."""
    _failed.clear()


def sweep_failed() -> list[str]:
    """Claim again, and so clean, every output whose claim ended with an exception in this process; the ones
    another process has claimed since are left to it. Returns the paths cleaned.

    For a command stopped while Spark tasks wrote into an output's temporary folder: a task that was being
    cancelled can write a file after :func:`~pipelines.core.storage.atomic_output` removed the folder. Called once
    Spark has stopped, this takes those files away too."""
    done = []
    for path in sorted(_failed):
        try:
            with claim_output(path):
                done.append(path)
        except BusyError:
            pass
    _failed.clear()
    return done


def _lock(path: str, out: str, wait: bool) -> FileLock:
    parent, name = os.path.split(path)
    if os.path.exists(parent) and not os.path.isdir(parent):
        raise OutputError(f"cannot write {out}: {parent} is not a folder")
    lock = FileLock(os.path.join(parent, f".{name}.lock"))
    try:
        if lock.acquire(wait=False):
            return lock
    except OSError as e:  # a folder that cannot be written, said before any work
        if e.errno in STORAGE_ERRNOS:  # the storage's failure (full, read-only): not the user's input
            raise StorageError(f"cannot write {out}: {e.strerror}: {e.filename}") from None
        raise OutputError(f"cannot write {out}: {e.strerror}: {e.filename}") from None  # (permissions: the user's)
    holder = lock.holder()
    if not wait:
        raise BusyError(f"{out} is being written by another ltr process (pid {holder}); wait for it to end, or stop it")
    log.info("waiting for the ltr process writing %s (pid %s) to end", out, holder)
    lock.acquire(wait=True)
    return lock


def _remove_leftovers(path: str, out: str) -> None:
    for p in leftovers(path):
        size = _bytes(p)
        try:
            shutil.rmtree(p)
        except OSError as e:
            log.warning("could not remove %s, left by a run writing %s that was stopped: %s", p, out, e)
            continue
        log.warning(
            "removed %s (%.1f MB): a run writing %s was stopped before it finished and left it", p, size / 1e6, out
        )


def _warn_remote(fs: pafs.FileSystem, path: str, out: str) -> None:
    parent, _, name = path.rstrip("/").rpartition("/")
    try:
        found = [
            i.path
            for i in fs.get_file_info(pafs.FileSelector(parent or "/", allow_not_found=True))
            if i.base_name.startswith(staging_prefix(name))
        ]
    except OSError:
        return
    if found:
        log.warning(
            "beside %s: %s, left by a run that was stopped or is running elsewhere; remove it once no run writes %s",
            out,
            ", ".join(found),
            out,
        )
