"""SIGTERM in ``ltr``'s process (:mod:`pipelines.app.stop`), in this process: outside a call into the JVM the stop is
raised at once and marked for the loops that would start work again; the handler before comes back after."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

import pytest

from pipelines.app import stop
from pipelines.core.signals import STOP


def _count_cancels(monkeypatch) -> list[float]:
    """The times of the canceller's cancels, from a stand-in for the SparkContext (this process has none)."""
    cancels: list[float] = []

    class Context:
        def cancelAllJobs(self) -> None:
            cancels.append(time.monotonic())

    monkeypatch.setattr(stop, "_active_spark", Context)
    return cancels


def _assert_the_stop_threads_end() -> None:
    """The canceller and the wakeup thread end with their command (left running, they would cancel a later
    command's jobs)."""
    deadline = time.monotonic() + 5
    while any(t.name.startswith("ltr-sigterm") for t in threading.enumerate()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(t.name.startswith("ltr-sigterm") for t in threading.enumerate())


def test_sigterm_outside_the_jvm_raises_the_stop_and_marks_it():
    before = signal.getsignal(signal.SIGTERM)
    restore = stop.install()
    try:
        assert not STOP.is_set() and not stop.stopping()
        with pytest.raises(stop.Stopped):
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)  # the handler runs at the next bytecode: not reached
        assert STOP.is_set() and stop.stopping()
    finally:
        restore()
    assert signal.getsignal(signal.SIGTERM) is before
    _assert_the_stop_threads_end()
    stop.install()()  # the next command starts unmarked
    assert not STOP.is_set() and not stop.stopping()


def test_sigterm_inside_a_jvm_call_raises_the_stop_after_it_and_cancels_until_the_command_ends(monkeypatch):
    """SIGTERM while the main thread is in a call into the JVM: not raised there, but once the main thread is out of
    it; and the jobs are cancelled on until the command ends, not only until then. A main thread reading a job's
    results from a socket (``toArrow``) runs the raise only when that job ends, and a job submitted after the last
    cancel ran to its end (with a worker that never ended, ``ltr`` waited for ever)."""
    cancels = _count_cancels(monkeypatch)
    in_call = compile(  # a frame whose file is py4j's, as the handler sees a call into the JVM
        "def call(handler, sys):\n    handler(15, sys._getframe())\n", f"{os.sep}x{os.sep}py4j{os.sep}java.py", "exec"
    )
    namespace: dict = {}
    exec(in_call, namespace)
    restore = stop.install()
    try:
        namespace["call"](stop._handler, sys)  # returns: not raised inside the call
        assert STOP.is_set()
        start = time.monotonic()
        with pytest.raises(stop.Stopped):
            # raised by the canceller's interrupt once the main thread runs Python again: a blocking call (as a
            # socket read) is not cut short by it
            time.sleep(2)
        end = time.monotonic()
        assert end - start > 1.9
        # while the main thread was blocked, the canceller went on cancelling, every 0.2 s
        assert len([t for t in cancels if start + 0.5 < t < end]) >= 4, (start, end, cancels)
    finally:
        restore()
    _assert_the_stop_threads_end()
    stop.install()()


def test_sigterm_handed_to_another_thread_starts_the_cancels_at_once(monkeypatch):
    """The kernel hands a process's SIGTERM to another thread than the main one when the main thread has a signal
    pending. Python runs the handler only in the main thread, once it runs Python again; a main thread waiting for
    a job's results waited for the whole job. The signal's wakeup byte now starts the cancels at once, so the job
    ends, and the stop is raised when the main thread runs again."""
    cancels = _count_cancels(monkeypatch)

    def another_thread() -> None:  # gets the SIGTERM 0.3 s into the main thread's wait (its own wait goes on)
        time.sleep(0.3)
        signal.pthread_kill(threading.get_ident(), signal.SIGTERM)
        time.sleep(2)

    other = threading.Thread(target=another_thread)
    restore = stop.install()
    try:
        start = time.monotonic()
        with pytest.raises(stop.Stopped):
            other.start()
            time.sleep(2.5)  # the main thread blocked, as in a socket read: not cut short, the signal is not its own
        end = time.monotonic()
        assert end - start > 2.4
        assert len([t for t in cancels if start + 0.8 < t < end]) >= 4, (start, end, cancels)
    finally:
        restore()
        other.join()
    stop.install()()
    assert not STOP.is_set()
