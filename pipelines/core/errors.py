"""One error model for the package.

Every exception ``pipelines`` raises on purpose derives from :class:`LtrError`, and its class says how the
process ends (``exit_code``):

* :class:`UserError` (exit 2): the input, the config or the command line is the user's to fix; the message is
  one line that names the file, key or value and the fix.
* :class:`BusyError` (exit 75, ``EX_TEMPFAIL``): another process holds what this one needs (a node's lease); a
  scheduler's retry after it is gone succeeds.
* :class:`StorageError` (exit 74, ``EX_IOERR``): the storage failed under the command (a full disk, a read-only
  or vanished directory, a quota, an I/O error): not the input's fault, and nothing half-written is left that a
  later run could take for done. :func:`storage_failure` finds such a cause in any error's text (a Spark task's).
* anything else (exit 1): a failure of the run itself (a node that failed after its retries, a checkpoint that is
  gone, a pack that failed).

``ltr`` (:func:`pipelines.app.cli.main`) catches :class:`LtrError` once and prints its one line.

Errors raised inside a Spark barrier task reach the driver wrapped in a ``PythonException`` whose text holds
``<ClassName>: <message>``. The classes registered with :func:`crosses_tasks` (one registry,
:data:`CROSSES_TASKS`) are raised again on the driver as themselves by :func:`relay`, and the executor never
retries them: they say something about the input or about who owns a node, which a retry does not change.

``udfs`` may not import ``pipelines``: its few exceptions (``LineError``, ``QueryOrderError``) are caught at the
boundary and raised again as one of these (ingest's ``IngestError``).
"""

from __future__ import annotations

import re
from typing import ClassVar, TypeVar

__all__ = [
    "CROSSES_TASKS",
    "BusyError",
    "LtrError",
    "STORAGE_ERRNOS",
    "StorageError",
    "UserError",
    "crosses_tasks",
    "relay",
    "storage_failure",
]


class LtrError(Exception):
    """Base of every error the package raises on purpose; ``exit_code`` is what ``ltr`` exits with."""

    exit_code: ClassVar[int] = 1

    @classmethod
    def from_task(cls, message: str) -> LtrError:
        """The error raised in a Spark task, made again on the driver from its one-line ``message``.

        Classes whose ``__init__`` takes more than a message override this.
        """
        return cls(message)


class UserError(LtrError, ValueError):
    """The user's to fix (input, config, command line): one line, exit code 2."""

    exit_code: ClassVar[int] = 2


class BusyError(LtrError, RuntimeError):
    """Another process holds what this one needs: exit code 75 (``EX_TEMPFAIL``); a later retry succeeds."""

    exit_code: ClassVar[int] = 75


class StorageError(LtrError, OSError):
    """The storage failed under the command: exit code 74 (``EX_IOERR``), one line naming the path and the cause;
    ``detail``: the trace of where it happened (a Spark task's), written to the trace file, not the console."""

    exit_code: ClassVar[int] = 74

    def __init__(self, message: str, detail: str = "") -> None:
        super().__init__(message)
        self.detail = detail


#: The errnos of a storage failure: ENOSPC, EROFS, EDQUOT, EIO.
STORAGE_ERRNOS = frozenset({28, 30, 122, 5})
#: The same causes as Python, pyarrow and the JVM word them in an error's text.
_STORAGE = re.compile(
    rf"\[errno (?:{'|'.join(map(str, sorted(STORAGE_ERRNOS)))})\]|No space left on device|Read-only file system|"
    "Disk quota exceeded",
    re.IGNORECASE,
)


def storage_failure(text: str) -> str | None:
    """The line of ``text`` (an error's message, a task's trace) that names a storage failure (:class:`StorageError`),
    stripped; None when it names none."""
    for line in text.splitlines():
        if _STORAGE.search(line):
            return line.strip()
    return None


#: Name -> class of the errors that cross from a Spark task to the driver as themselves (:func:`relay`).
CROSSES_TASKS: dict[str, type[LtrError]] = {}

E = TypeVar("E", bound=type[LtrError])


def crosses_tasks(cls: E) -> E:
    """Class decorator: ``cls``, raised in a Spark task, is raised again on the driver as itself (:func:`relay`)
    and never retried by the executor."""
    CROSSES_TASKS[cls.__name__] = cls
    return cls


def relay(e: BaseException) -> LtrError | None:
    """The registered error whose ``<ClassName>: <message>`` appears in ``e``'s text (a Spark task's failure, as the
    driver sees it), made again from its first line; ``None`` when there is none (or ``e`` is already ours)."""
    if isinstance(e, LtrError):
        return None
    text = str(e)
    found = [(text.find(f"{name}: "), name) for name in CROSSES_TASKS if f"{name}: " in text]
    if not found:
        return None
    at, name = min(found)  # the first one named: the cause, not a later wrapper's mention
    message = text[at + len(name) + 2 :].splitlines()[0]
    return CROSSES_TASKS[name].from_task(message)
