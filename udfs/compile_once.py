"""A numba kernel compiled once per machine, not once per process that reaches it at the same moment.

numba's ``cache=True`` keeps a kernel's machine code beside its source (``__pycache__``): a process that finds it
there loads it in milliseconds. But every process that reaches the kernel before the first one has written it
compiles it too, at the same time. That is how an ingest starts: the Python workers of an executor (or of
``local[N]``) take the first chunks together, and each compiled the LETOR parser's kernels: on a machine with
few cores, several compilations at once each take far longer than one (benchmarks/RESULTS.md has the figures).

:class:`CompiledOnce` wraps a kernel so that a process's first call holds a lock file per kernel (``flock``,
beside numba's cache of the kernel, one per Python version) while numba compiles it or loads it from the cache:
the first process compiles and writes the cache, the others wait, then load it. Only the compilation is under the
lock, never a run of the kernel, and later calls go straight to the kernel. Where no lock can be had (no
``fcntl``, a folder that cannot be written, a file system without ``flock``, a holder past :data:`WAIT_S`) the
process compiles as before. Nothing here changes what a kernel computes.

What it saves is CPU, not time on an idle machine: N workers compiling at once on N free cores take as long as one.
It is the CPU of whatever else runs on the machine meanwhile (another application's executors; in CI, the other
test worker). The small dataset's ingest on ``local[2]`` from a cold numba cache, this 2-core machine otherwise
idle: 20.2 s before, 18.8-20.4 s after. The kernels wrapped are the ingest's (``udfs.letor_parse``,
``udfs.letor_chunks``). The training's and the metrics' are in the code identity's closure
(:mod:`pipelines.core.keys`): wrapping them would re-key every study.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

log = logging.getLogger(__name__)

#: The longest a process waits for another's compilation before it compiles the kernel itself (seconds).
WAIT_S = 300.0


def lock_path(kernel: Any) -> str:
    """The lock file of ``kernel`` (a numba dispatcher): beside numba's cache of it (the source's ``__pycache__``, or
    where ``NUMBA_CACHE_DIR`` or numba's fallback puts it), so that it is shared by exactly the processes that share
    that cache, and goes with it (an unpacked ``ltr pack`` archive's executor folder, say)."""
    func = kernel.py_func
    name = f"{func.__module__.rsplit('.', 1)[-1]}.{func.__qualname__}.py{sys.version_info[0]}{sys.version_info[1]}"
    return os.path.join(kernel.stats.cache_path, f"{name}.compile-lock")


@contextlib.contextmanager
def host_lock(path: str, wait_s: float = WAIT_S) -> Iterator[bool]:
    """Hold an exclusive ``flock`` on ``path`` (created if missing) for the block; yields whether it is held.

    Waits up to ``wait_s`` for another holder; a lock that cannot be had (no ``fcntl``, the folder cannot be
    written, the wait ran out) yields False and the block runs without it."""
    try:
        import fcntl
    except ImportError:  # not on this platform: compile as numba does
        yield False
        return
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError as e:
        log.debug("no compile lock %s: %s", path, e)
        yield False
        return
    try:
        deadline = time.monotonic() + wait_s
        held = False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                held = True
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    log.debug("compile lock %s still held after %.0f s: compiling without it", path, wait_s)
                    break
                time.sleep(0.05)
            except OSError as e:  # a file system without flock (some network mounts)
                log.debug("no compile lock %s: %s", path, e)
                break
        yield held
    finally:
        os.close(fd)  # releases the lock


class CompiledOnce:
    """``kernel`` (a ``numba.njit(cache=True)`` dispatcher), called through; see the module's docstring."""

    def __init__(self, kernel: Callable[..., Any], wait_s: float = WAIT_S) -> None:
        self.kernel = kernel
        self.wait_s = wait_s
        # a plain function (NUMBA_DISABLE_JIT) has nothing to compile
        self._ready = not hasattr(kernel, "typeof_pyval")

    def __call__(self, *args: Any) -> Any:
        if not self._ready:
            self.prepare(*args)
        return self.kernel(*args)

    def prepare(self, *args: Any) -> None:
        """Compile (or load from numba's cache) the kernel for these arguments' types, under the lock. The types are
        those numba's own dispatch gives these arguments (``typeof_pyval``), so the call finds what was compiled."""
        sig = tuple(self.kernel.typeof_pyval(a) for a in args)  # type: ignore[attr-defined]
        with host_lock(lock_path(self.kernel), self.wait_s):
            self.kernel.compile(sig)  # type: ignore[attr-defined]
        self._ready = True
