"""SIGTERM in ``ltr``'s process (:mod:`pipelines.app.stop`), in this process: outside a call into the JVM the stop is
raised at once and marked for the loops that would start work again; the handler before comes back after."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from pipelines.app import stop
from pipelines.core.signals import STOP


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
    deadline = time.monotonic() + 5  # the canceller ended with the command: it would cancel a later one's jobs
    while any(t.name == "ltr-sigterm" for t in threading.enumerate()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(t.name == "ltr-sigterm" for t in threading.enumerate())
    stop.install()()  # the next command starts unmarked
    assert not STOP.is_set() and not stop.stopping()
