"""The driver's Rabit tracker: its threads never take a SIGTERM meant for ``ltr`` (pipelines.app.stop), and a tracker
that fails is logged in one line, not raised as an uncaught thread exception."""

from __future__ import annotations

import logging
import os
import signal
import threading

import pytest

from pipelines.execution.barrier_job import _wait_for_tracker, start_tracker

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="reads threads' masks from Linux /proc")


def _blocked(tid: int) -> set[int]:
    """The signals thread ``tid`` of this process blocks (/proc's SigBlk mask)."""
    with open(f"/proc/self/task/{tid}/status") as f:
        mask = int(next(line.split()[1] for line in f if line.startswith("SigBlk:")), 16)
    return {n for n in range(1, 65) if mask >> (n - 1) & 1}


def test_the_trackers_threads_block_sigterm_and_the_main_thread_does_not():
    before = set(os.listdir("/proc/self/task"))
    start_tracker("127.0.0.1", 1, timeout=2)  # no worker joins: the tracker ends after its timeout
    new = [int(t) for t in set(os.listdir("/proc/self/task")) - before]
    assert new, "the tracker started no thread"
    for tid in new:
        assert signal.SIGTERM in _blocked(tid), tid  # the native tracker thread and the thread waiting for it
    assert signal.SIGTERM not in _blocked(threading.get_native_id())  # the mask is lifted where ltr handles it
    assert signal.SIGTERM not in signal.pthread_sigmask(signal.SIG_BLOCK, [])


def test_a_failed_tracker_is_one_logged_line_and_is_freed(caplog):
    from xgboost.core import XGBoostError

    class Failing:
        freed = 0

        def wait_for(self):
            raise XGBoostError(
                "[12:00:00] result.cc:83: [coll_c_api.cc:96]:\n\n- [tracker.cc:306]: Failed to accept connection.\n"
                "- [socket.h:79]: Poll failed, nfds:1 Interrupted system call\nStack trace:"
            )

        def free(self):
            self.freed += 1

    t = Failing()
    with caplog.at_level(logging.WARNING, "pipelines.execution.barrier_job"):
        _wait_for_tracker(t)  # raises nothing
    assert t.freed == 1
    (rec,) = caplog.records
    assert rec.getMessage() == (
        "the XGBoost tracker ended with an error: [tracker.cc:306]: Failed to accept connection.; "
        "[socket.h:79]: Poll failed, nfds:1 Interrupted system call"
    )
