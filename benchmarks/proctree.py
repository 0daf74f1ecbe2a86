"""A process and every process below it, read from /proc (Linux): the benchmarks' memory
figures (summed RSS of a driver, its JVM and its Python workers) and their kills."""

from __future__ import annotations

import os
import signal


def _children() -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            out.setdefault(ppid, []).append(int(d))
    return out


def tree_pids(root: int) -> list[int]:
    """``root`` and every process below it."""
    kids, seen, todo = _children(), [], [root]
    while todo:
        p = todo.pop()
        seen.append(p)
        todo += kids.get(p, [])
    return seen


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


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def tree_memory(root: int) -> dict[str, int]:
    """RSS (bytes) of ``root``'s tree, of its JVM(s), and of its largest PySpark Python process (the
    training worker, when one trains)."""
    tree = jvm = worker = 0
    for p in tree_pids(root):
        r = rss(p)
        tree += r
        cmd = _cmdline(p)
        if "java" in cmd.split(" ", 1)[0]:
            jvm += r
        elif "pyspark" in cmd:
            worker = max(worker, r)
    return {"tree": tree, "jvm": jvm, "worker": worker}


def kill_tree(root: int) -> None:
    """Freeze the whole tree, then kill it: PySpark's daemon runs its workers in their own process
    group, so a process-group kill leaves them running for a moment."""
    pids = tree_pids(root)
    for sig in (signal.SIGSTOP, signal.SIGKILL):
        for p in pids:
            try:
                os.kill(p, sig)
            except ProcessLookupError:
                pass
