"""pipelines.core.proctree: the one freeze-walk-kill of a process tree (the Airflow operator's kill of a timed-out
unit, the tests' kills of their drivers and clusters, the benchmarks' memory). Real processes, no Spark."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from pipelines.core.proctree import ProcessTree, alive, kill_tree, python_workers, tree_memory, tree_pids

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="reads /proc (Linux)")

# A root that starts a "daemon" which, like PySpark's, moves itself into a process group of its own and forks
# workers; the root keeps forking short-lived children meanwhile (a tree that changes while it is walked).
DAEMON_TREE = textwrap.dedent("""
    import os, subprocess, sys, time
    daemon = os.fork()
    if daemon == 0:
        os.setpgid(0, 0)
        for _ in range(2):
            if os.fork() == 0:
                time.sleep(600); os._exit(0)
        print(os.getpid(), flush=True)
        time.sleep(600); os._exit(0)
    while True:
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.2)"])
        time.sleep(0.05)
""")

# A root whose child starts a grandchild in a session of its own and then exits: the grandchild is reparented
# (to init or a subreaper) and is no longer below the root.
ORPHANING = textwrap.dedent("""
    import os, sys, time
    child = os.fork()
    if child == 0:
        if os.fork() == 0:
            os.setsid()
            time.sleep(600); os._exit(0)
        time.sleep(float(sys.argv[1])); os._exit(0)
    os.waitpid(child, 0)
    time.sleep(600)
""")


def _wait(cond, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_kill_tree_reaches_workers_in_their_own_process_group():
    root = subprocess.Popen([sys.executable, "-c", DAEMON_TREE], stdout=subprocess.PIPE, start_new_session=True)
    try:
        daemon = int(root.stdout.readline())
        _wait(lambda: len([p for p in tree_pids(root.pid) if p != daemon and os.getpgid(p) == daemon]) >= 2)
        workers = [p for p in tree_pids(root.pid) if os.getpgid(p) == daemon]
        assert daemon in workers and len(workers) == 3  # the daemon and its two workers, in their own group
        os.killpg(root.pid, 0)  # the root's group exists, and a kill of it would miss the daemon's group
        killed = kill_tree(root.pid)
        root.wait(10)
        assert set(workers) <= killed
        assert not [p for p in workers if alive(p)]
        assert root.returncode == -signal.SIGKILL
    finally:
        if root.poll() is None:
            kill_tree(root.pid)
            root.wait()


def test_tree_memory_kills_a_process_whose_parent_died_and_nothing_else():
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    root = subprocess.Popen([sys.executable, "-c", ORPHANING, "1.5"], start_new_session=True)
    tree = ProcessTree(root.pid)
    try:

        def own_session() -> list[int]:
            return [p for p in tree_pids(root.pid) if p != root.pid and os.getsid(p) == p]

        _wait(lambda: len(own_session()) == 1)
        tree.remember()
        grandchild = own_session()[0]
        _wait(lambda: grandchild not in tree_pids(root.pid))  # its parent exited: an orphan now
        assert alive(grandchild)
        assert grandchild not in kill_tree(root.pid)  # a plain walk from the root misses it
        root.wait(10)
        assert alive(grandchild)
        killed = tree.kill()
        assert grandchild in killed and not alive(grandchild)
        assert bystander.poll() is None and bystander.pid not in killed
    finally:
        for p in (root, bystander):
            if p.poll() is None:
                p.kill()
            p.wait()


def test_remember_throttles_and_tree_memory_sums_the_tree():
    root = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import subprocess, sys, time; subprocess.Popen([sys.executable, "
            "'-c', 'import time; time.sleep(600)']); time.sleep(600)",
        ],
        start_new_session=True,
    )
    tree = ProcessTree(root.pid)
    try:
        _wait(lambda: len(tree_pids(root.pid)) == 2)
        tree.remember(every=60)
        tree.remember(every=60)  # within a minute of the last: not read again
        assert set(tree.seen) == set(tree_pids(root.pid))
        mem = tree_memory(root.pid)
        assert mem["tree"] > 0 and mem["jvm"] == 0
        assert python_workers(root.pid) == []  # no pyspark.daemon below it
    finally:
        kill_tree(root.pid)
        root.wait()


def test_from_now_on_leaves_what_the_root_had_started_before():
    """A task process kills the application it starts, never a process it had started before (in a test
    process: the shared Spark session's JVM)."""
    before = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    tree = ProcessTree.from_now_on(os.getpid())
    after = subprocess.Popen([sys.executable, "-c", DAEMON_TREE], stdout=subprocess.PIPE, start_new_session=True)
    try:
        daemon = int(after.stdout.readline())
        tree.remember()
        assert before.pid not in tree.seen and os.getpid() not in tree.seen and daemon in tree.seen
        killed = tree.kill()
        after.wait(10)
        assert daemon in killed and not alive(daemon) and after.pid in killed
        assert before.poll() is None and before.pid not in killed
    finally:
        for p in (before, after):
            if p.poll() is None:
                p.kill()
            p.wait()


def test_alive_counts_a_zombie_as_dead():
    """A process that has exited but is not reaped yet (a zombie) is not alive; nor is one that is gone. The
    lease's "is the owner dead?" (:mod:`pipelines.store.lease`) and the kills here share this one check."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        _wait(lambda: open(f"/proc/{proc.pid}/stat").read().rsplit(")", 1)[1].split()[0] == "Z")
        assert os.path.exists(f"/proc/{proc.pid}")  # still there, as a zombie
        assert not alive(proc.pid)
    finally:
        proc.wait()
    assert not alive(proc.pid)  # reaped: gone
    assert alive(os.getpid()) and alive(1)  # ours, and another user's (init)
    assert not alive(0) and not alive(-1)
