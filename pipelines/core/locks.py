"""The project's locks: one protocol (:class:`Lock`), and what each store can honestly guarantee.

* **One machine (or a file system whose locks the kernel forwards, as NFS v4 does):** :class:`FileLock`, an
  exclusive ``flock`` on a lock file, held through an open file, the holder's pid written in it. Two processes
  cannot both hold it, and a process that ends, however it ends (SIGKILL, the OOM killer), releases it. The lock
  file stays: removing it would let two processes hold two different locks of one name. Used by
  :mod:`pipelines.core.outputs` (one process writes an output folder), :mod:`pipelines.tracking.runs` (one process
  at a time opens a fresh SQLite MLflow store) and :mod:`pipelines.app.jvm` (one process writes the class archive).
* **A record that must outlive its process** (a node's lease, :mod:`pipelines.store.lease`, which expires instead
  of being released by a kernel): :func:`exclusive_create`, the file system's atomic create (a hard link of a
  whole file, else ``O_CREAT | O_EXCL``): of two processes creating one name, one succeeds.
* **Object stores reached through pyarrow** (``s3://``, ``gs://``, ``hdfs://``, ...): pyarrow exposes no
  exclusive or conditional create, so nothing here can make two writers impossible there. The lease on such a
  store refuses, in one line, a second writer whose lease it sees (a live lease of another owner when it asks,
  or another owner's lease when it reads its own back, or at its next renewal), and every checkpoint commit is
  fenced by the lease's token: :mod:`pipelines.store.lease` says what is left (two writers within a second).
"""

from __future__ import annotations

import fcntl
import os
from types import TracebackType
from typing import Protocol


class Lock(Protocol):
    """What every lock of the project offers: take it (waiting, or refused at once), give it back, say who holds
    it."""

    def acquire(self, wait: bool = True) -> bool:
        """Take the lock (True), or without ``wait`` False at once while another holds it."""
        ...

    def release(self) -> None:
        """Give the lock back; nothing when it is not held."""
        ...

    @property
    def held(self) -> bool:
        """Whether this object holds the lock."""
        ...

    def holder(self) -> str:
        """Who holds it (or held it last), for messages."""
        ...


def exclusive_create(path: str, data: bytes) -> bool:
    """Create ``path`` holding ``data``, whole, unless it exists (False): the file system's atomic create. The
    data is written under a temporary name first and hard-linked into place, so a reader never sees it half
    written; where hard links are not supported (some FUSE and SMB mounts), ``O_CREAT | O_EXCL`` and then the
    write. Its folder is made."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = f"{path}.{os.getpid()}.{os.urandom(4).hex()}.tmp"
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    try:
        os.link(tmp, path)
        return True
    except FileExistsError:
        return False
    except OSError:  # no hard links here: exclusive create, then write
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        return True
    finally:
        os.unlink(tmp)


class FileLock:
    """A :class:`Lock` on one machine: an exclusive ``flock`` on ``path`` (created, with its folder, if missing).
    :meth:`acquire` takes it; :meth:`release` (or the process's end) gives it back; as a context manager it waits
    for it."""

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
