"""The local lock (:class:`pipelines.core.locks.FileLock`) between two real processes: one holds it, the other is
refused at once (and reads the holder's pid) or waits; the holder killed with SIGKILL releases it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from pipelines.core.locks import FileLock

#: processes: a second Python process holds the lock
pytestmark = [pytest.mark.processes]

HOLD = (
    "import sys, time; from pipelines.core.locks import FileLock; lock = FileLock(sys.argv[1]); "
    "assert lock.acquire(wait=False); print('held', flush=True); time.sleep(60)"
)


def _holder(path: str) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", HOLD, path], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


def test_a_lock_held_by_another_process_is_refused_at_once_with_its_pid_and_freed_when_that_process_is_killed(
    tmp_path,
):
    path = str(tmp_path / "sub" / ".out.lock")  # its folder is made
    proc = _holder(path)
    try:
        mine = FileLock(path)
        t0 = time.monotonic()
        assert mine.acquire(wait=False) is False and time.monotonic() - t0 < 1
        assert mine.holder() == str(proc.pid) and not mine.held
        os.kill(proc.pid, signal.SIGKILL)  # no clean-up of its own: the kernel releases the lock
        proc.wait()
        assert mine.acquire(wait=False) is True and mine.held
        assert mine.holder() == str(os.getpid())
        with pytest.raises(RuntimeError, match="held already"):
            mine.acquire()
        mine.release()
        assert not mine.held and os.path.exists(path)  # the file stays
    finally:
        proc.kill()
        proc.wait()


def test_a_waiting_process_gets_the_lock_when_the_holder_ends(tmp_path):
    path = str(tmp_path / ".store.lock")
    proc = _holder(path)
    try:
        subprocess.Popen(["sh", "-c", f"sleep 1; kill {proc.pid}"])
        t0 = time.monotonic()
        with FileLock(path) as lock:  # waits
            assert lock.held and time.monotonic() - t0 >= 0.5
    finally:
        proc.kill()
        proc.wait()


CREATE = (
    "import sys, time; from pipelines.core.locks import exclusive_create; start = float(sys.argv[2]); "
    "time.sleep(max(0.0, start - time.time())); "
    "print(exclusive_create(sys.argv[1], (sys.argv[3] * 100000).encode()), flush=True)"
)


def test_of_processes_creating_one_name_at_once_exactly_one_succeeds_and_its_file_is_whole(tmp_path):
    """The atomic create a node's lease is made with (pipelines.core.locks.exclusive_create): four processes
    released at the same instant, one creates the file, the others are refused, and the file holds the winner's
    data whole (never a part, never another's)."""
    path = str(tmp_path / "sub" / "_lease.json")
    start = time.time() + 1.5
    procs = [
        subprocess.Popen([sys.executable, "-c", CREATE, path, str(start), str(i)], stdout=subprocess.PIPE, text=True)
        for i in range(4)
    ]
    said = [p.communicate(timeout=60)[0].strip() for p in procs]
    assert sorted(said) == ["False", "False", "False", "True"]
    winner = str(said.index("True"))
    assert open(path).read() == winner * 100000
    assert os.listdir(tmp_path / "sub") == ["_lease.json"]  # no temporary file left
