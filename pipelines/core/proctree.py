"""A process and every process below it (Linux ``/proc``): the one way the project walks, measures and kills
a process tree. The Airflow operator kills a timed-out unit's spark-submit tree with it, the tests kill their
own drivers and clusters with it, and the benchmarks sum a run's memory with it.

Why a walk, and why freeze first: PySpark's daemon puts itself and the Python workers it forks into a process
group of their own (``os.setpgid(0, 0)`` in ``pyspark/daemon.py``), so neither a process-group kill nor a
kill of the direct children reaches a barrier task's worker; and a tree that is killed while it is walked can
fork a new process, or reparent one to init, between the walk and the kill. :func:`kill_tree` therefore stops
every process it finds with SIGSTOP (a stopped process forks nothing and keeps its parent), walks again until
no new one appears, and only then sends SIGKILL to all of them.

Tree memory: a process whose parent died is reparented to init and is no longer below the root. A
:class:`ProcessTree` remembers every process it has seen below its root (by pid and start time, so a reused
pid is never mistaken for a remembered process) and kills those too: the operator calls
:meth:`ProcessTree.remember` while the application runs, so the kill after a timeout also reaches workers
whose driver already died.
"""

from __future__ import annotations

import logging
import os
import signal
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cached_property

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Proc:
    """One process as ``/proc/<pid>/stat`` shows it: parent, state letter, start time (clock ticks since boot:
    with the pid, a process's identity); its command line is read when first asked for (:attr:`cmdline`)."""

    pid: int
    ppid: int
    state: str
    start: int

    @cached_property
    def cmdline(self) -> str:
        """The command line, read on first use ("" once the process is gone). Not read by the walks: reading
        ``/proc/<pid>/cmdline`` takes the process's memory-map lock, which a JVM in a garbage collection can
        hold for a long while, and a freeze (:func:`signal_tree`) walks every process of the machine, so on a
        loaded machine the tree ran on while the walk waited."""
        try:
            with open(f"/proc/{self.pid}/cmdline", "rb") as f:
                return f.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            return ""


def _read(pid: int) -> Proc | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            rest = f.read().rsplit(")", 1)[1].split()
        return Proc(pid, int(rest[1]), rest[0], int(rest[19]))
    except (OSError, IndexError, ValueError):
        return None


def processes() -> dict[int, Proc]:
    """Every process on the machine, by pid (those that end while they are read are left out)."""
    out: dict[int, Proc] = {}
    for d in os.listdir("/proc"):
        if d.isdigit() and (p := _read(int(d))) is not None:
            out[p.pid] = p
    return out


def _below(roots: set[int], procs: dict[int, Proc], skip: frozenset[int] = frozenset()) -> set[int]:
    """``roots`` (those that exist) and every process descending from one of them in ``procs``, except the
    processes ``skip`` and everything below them."""
    kids: dict[int, list[int]] = {}
    for p in procs.values():
        kids.setdefault(p.ppid, []).append(p.pid)
    seen: set[int] = set()
    todo = [r for r in roots if r in procs and r not in skip]
    while todo:
        pid = todo.pop()
        if pid not in seen:
            seen.add(pid)
            todo += [k for k in kids.get(pid, []) if k not in skip]
    return seen


def tree_pids(root: int) -> list[int]:
    """``root`` and every process below it now (empty once ``root`` is gone)."""
    return sorted(_below({root}, processes()))


#: The states of a process that has exited (``/proc/<pid>/stat``): zombie, dead.
_EXITED = ("Z", "X")


def _state(pid: int) -> str | None:
    """The state letter of ``pid`` in ``/proc/<pid>/stat``: ``X`` once it is gone (reaped), None where it
    cannot be read (no ``/proc``: not Linux)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return "X" if os.path.isdir("/proc/self") else None
    except (OSError, IndexError):
        return None


def alive(pid: int) -> bool:
    """Whether process ``pid`` of this machine runs: the one liveness check of the project (the process-tree
    kills here, and the lease's "is the owner on this machine dead?", :mod:`pipelines.store.lease`).

    Parameters
    ----------
    pid
        A process id (0 or less: no process, False).

    Returns
    -------
    bool
        False for a pid that does not exist and for a zombie (``Z``) or dead (``X``) process: a zombie has
        exited and is only waiting to be reaped by its parent, so it runs no code and holds nothing. True for
        any other process, another user's included (``os.kill`` says it exists; its state, where ``/proc``
        cannot be read, e.g. not on Linux, is taken to be running).
    """
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # it exists: another user's
        pass
    return _state(pid) not in _EXITED


def signal_pids(pids: Iterable[int], sig: int) -> None:
    """Send ``sig`` to each of ``pids``; one that has ended (or is not ours to signal) is skipped. A tree frozen by
    :func:`signal_tree` is let go on with ``signal_pids(frozen, signal.SIGCONT)``, with no new walk."""
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def signal_tree(*roots: int, sig: int) -> set[int]:
    """Send ``sig`` to every process of ``roots`` and below them, walking again until no new one appears (with
    SIGSTOP the walk is complete: a stopped process forks nothing). Returns their pids."""
    done: set[int] = set()
    while True:
        new = _below({*roots, *done}, processes()) - done
        if not new:
            return done
        signal_pids(new, sig)
        done |= new


def kill_tree(*roots: int, timeout: float = 30.0) -> set[int]:
    """Freeze the trees of ``roots`` with SIGSTOP, then SIGKILL every process of them, and wait up to
    ``timeout`` s until none runs (zombies are left to their parents to reap: the caller of ``Popen`` should
    ``wait()``). Returns the pids killed."""
    frozen = signal_tree(*roots, sig=signal.SIGSTOP)
    signal_pids(frozen, signal.SIGKILL)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(alive(p) for p in frozen):
        time.sleep(0.05)
    left = sorted(p for p in frozen if alive(p))
    if left:
        log.warning("processes still running %.0f s after SIGKILL: %s", timeout, left)
    return frozen


@dataclass
class ProcessTree:
    """A root process and every process ever seen below it (tree memory, see the module docstring).

    ``remember()`` records the tree as it is now; ``kill()`` freezes and kills the tree as it is now plus every
    remembered process that still runs (a reused pid has another start time and is left alone)."""

    root: int
    include_root: bool = True  # False: the processes below the root only (a task kills its children, not itself)
    #: processes below the root that are not of this tree, with everything below them (see :meth:`from_now_on`)
    skip: frozenset[int] = frozenset()
    seen: dict[int, int] = field(default_factory=dict)  # pid -> start time
    _last: float = 0.0

    @classmethod
    def from_now_on(cls, root: int) -> ProcessTree:
        """The processes ``root`` starts from now on, and everything below them: its children of this moment
        (and their trees) are not part of it, nor is ``root`` itself. What a task process uses to kill the
        application it starts, and nothing it had started before (in a test, the shared Spark session)."""
        procs = processes()
        return cls(root, include_root=False, skip=frozenset(p.pid for p in procs.values() if p.ppid == root))

    def remember(self, every: float = 0.0) -> None:
        """Record the processes below the root; with ``every`` > 0, at most once per ``every`` s."""
        now = time.monotonic()
        if every and now - self._last < every:
            return
        self._last = now
        procs = processes()
        for pid in _below({self.root}, procs, self.skip):
            if pid != self.root or self.include_root:
                self.seen[pid] = procs[pid].start  # a reused pid below the root is the process to remember now

    def members(self) -> set[int]:
        """The remembered processes that still run: the same process (same start time; a reused pid is
        another process), below the root or not (an orphan, reparented when its parent died)."""
        procs = processes()
        return {
            pid
            for pid, start in self.seen.items()
            if pid in procs and procs[pid].start == start and procs[pid].state not in _EXITED
        }

    def kill(self, timeout: float = 30.0) -> set[int]:
        """Freeze and kill the tree as it is now and every remembered process still running; returns the pids
        killed."""
        self.remember()
        members = self.members()
        if not self.include_root:  # the walk below each member must not reach back to the root
            members.discard(self.root)
        return kill_tree(*members, timeout=timeout)


# ----------------------------------------------------------------- memory (the benchmarks' figures)
def rss(pid: int) -> int:
    """Resident memory (bytes) of one process; 0 once it is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            return next((int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS:")), 0)
    except OSError:
        return 0


def tree_rss(root: int) -> int:
    """Summed resident memory (bytes) of ``root``'s tree."""
    return sum(rss(p) for p in tree_pids(root))


def tree_memory(root: int) -> dict[str, int]:
    """RSS (bytes) of ``root``'s tree, of its JVM(s), and of its largest PySpark Python process (the
    training worker, when one trains)."""
    tree = jvm = worker = 0
    procs = processes()
    for pid in _below({root}, procs):
        r = rss(pid)
        tree += r
        cmd = procs[pid].cmdline
        if "java" in cmd.split(" ", 1)[0]:
            jvm += r
        elif "pyspark" in cmd:
            worker = max(worker, r)
    return {"tree": tree, "jvm": jvm, "worker": worker}


def python_workers(root: int) -> list[int]:
    """PySpark Python workers below ``root`` that an executor's daemon forked (children of a
    ``pyspark.daemon`` process): what a test kills to simulate a lost executor worker."""
    procs = processes()
    return sorted(
        pid
        for pid in _below({root}, procs)
        if "pyspark.daemon" in procs[pid].cmdline
        and "pyspark.daemon" in getattr(procs.get(procs[pid].ppid), "cmdline", "")
    )
