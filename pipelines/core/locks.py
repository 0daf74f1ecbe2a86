"""The local lock: an exclusive ``flock`` on a lock file, held through an open file, the holder's pid written in it.

What guarantees exclusion here is the kernel of one machine: two processes on it (or on machines sharing a file
system whose locks the kernel forwards, as NFS v4 does) cannot both hold the lock, and a process that ends, however
it ends (SIGKILL, the OOM killer), releases it. The lock file stays: removing it would let two processes hold two
different locks of one name. An object store has no such lock: there :mod:`pipelines.store.lease` (a node's lease)
is what refuses a second writer.

Used by :mod:`pipelines.core.outputs` (one process writes an output folder) and :mod:`pipelines.tracking.runs` (one
process at a time opens a fresh SQLite MLflow store).
"""

from __future__ import annotations

import fcntl
import os
from types import TracebackType


class FileLock:
    """An exclusive ``flock`` on ``path`` (created, with its folder, if missing). :meth:`acquire` takes it;
    :meth:`release` (or the process's end) gives it back; as a context manager it waits for it."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._fd: int | None = None

    def acquire(self, wait: bool = True) -> bool:
        """Take the lock (True); without ``wait``, False at once while another process holds it. Raises
        :class:`OSError` when the lock file cannot be created or opened (a folder that cannot be written)."""
        if self._fd is not None:
            raise RuntimeError(f"{self.path}: this lock is held already")
        os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        except BaseException:
            os.close(fd)
            raise
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd
        return True

    def holder(self) -> str:
        """The pid the lock's last holder wrote in it ("unknown" when none can be read)."""
        try:
            with open(self.path, "rb") as f:
                return f.read(32).decode(errors="replace").strip() or "unknown"
        except OSError:
            return "unknown"

    def release(self) -> None:
        """Give the lock back (closing the file releases it); nothing when it is not held."""
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)

    @property
    def held(self) -> bool:
        """Whether this object holds the lock."""
        return self._fd is not None

    def __enter__(self) -> FileLock:
        self.acquire(wait=True)
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None) -> None:
        self.release()
