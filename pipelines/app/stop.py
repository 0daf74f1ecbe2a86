"""SIGTERM ends an ``ltr`` command the way an error or Ctrl-C does: its Spark jobs cancelled, the output it was
writing removed, exit 143.

SIGTERM is how ``kill``, ``timeout``, systemd and schedulers stop a process. Python's default for it ends the
process at once: no ``finally`` runs, so the hidden temporary folder of the output being written
(:func:`pipelines.core.storage.atomic_output`), as large as the output, stayed beside it.

How, and why so:

* The handler raises :class:`Stopped` in the main thread, unless that thread is inside a call into the JVM
  (py4j: a Spark job's action, most often) or PySpark is starting the JVM. Raised in a call, the exception would
  leave py4j's connection with an answer half read, and every later call on it (stopping Spark) would read the
  wrong answer; and a call from the handler into the JVM would be a second call on the same connection
  ("reentrant call"). Raised while the JVM starts, it would leave a JVM that never ends (measured).
* So a thread of its own cancels every Spark job (as PySpark does on Ctrl-C), on its own py4j connection, every
  0.2 s: the main thread's call returns with the cancelled job's error, which ``ltr`` reports as :class:`Stopped`
  (:func:`stopping`). Once the main thread is outside the JVM, the thread raises :class:`Stopped` there
  (``_thread.interrupt_main``) if nothing else has yet, and goes on cancelling until the command ends.
* :func:`clean_up` then stops Spark and, Spark's cancelled tasks being over, removes what they wrote into an
  output's temporary folder after it was removed (:func:`pipelines.core.outputs.sweep_failed`).
* A SIGTERM to the whole process group stops the JVM at the same time; py4j's traces of the lost connection are
  then dropped from the log (:class:`_QuietLostJvm`).
* The kernel hands a SIGTERM to the main thread unless that thread has another signal pending (seen right after
  a SIGCONT). Handed to another thread, the handler runs only once the main thread runs Python again, and a main
  thread waiting for a Spark job's results would wait until that job ends: so a thread of its own reads the
  signal's wakeup byte (``signal.set_wakeup_fd``), which Python writes in any thread, and starts the canceller
  at once.
* Further SIGTERMs while it stops are ignored; SIGKILL ends it at once (what is left then is removed by the next
  command that writes the same output).
"""

from __future__ import annotations

import _thread
import contextlib
import logging
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import Any

from pipelines.core.signals import STOP

log = logging.getLogger(__name__)


class Stopped(BaseException):
    """SIGTERM reached the command (raised in its main thread)."""


_state = {"seen": False, "raised": False, "cleaning": False, "canceller": False, "command": 0}
_lock = threading.Lock()
#: Where an exception must not land: a call into the JVM (py4j), or PySpark starting the JVM (raised there, its
#: ``finally`` removes the folder the new JVM is about to write its address to, and that JVM never ends).
_JVM_CALLS = (f"{os.sep}py4j{os.sep}", f"{os.sep}pyspark{os.sep}java_gateway.py")


def _active_spark() -> Any:
    """This process's SparkContext, if PySpark is loaded and one is running (None otherwise)."""
    from pipelines.core.connect import active_context

    return active_context()


def _interrupt_connect() -> Any:
    """Interrupt every job of this process's Spark Connect session on its server, if it has one; the session."""
    from pipelines.core.connect import active_connect_session, cancel_all

    remote = active_connect_session() if "pyspark.sql.connect.session" in sys.modules else None
    if remote is not None:
        try:
            cancel_all(remote)
        except Exception:  # the server may be going or gone: nothing to interrupt
            log.debug("could not interrupt the Spark Connect jobs", exc_info=True)
    return remote


def _in_jvm_call(frame: FrameType | None) -> bool:
    while frame is not None:
        if any(part in frame.f_code.co_filename for part in _JVM_CALLS):
            return True
        frame = frame.f_back
    return False


def _cancel_until_out() -> None:
    """The canceller thread (module docstring). It cancels until the command ends, not only until the stop is
    raised in the main thread: ``interrupt_main`` runs the handler at the main thread's next bytecode, and a main
    thread blocked in a socket read outside py4j (``DataFrame.toArrow``'s and ``collect``'s results) gets there
    only once the job it waits for ends. A job submitted after the last cancel (the JVM runs ``toArrow``'s
    job in a thread of its own, a moment after the call returned) then ran to its end, and with a worker that did
    not end, ``ltr`` waited for ever."""
    main, command = threading.main_thread(), _state["command"]
    interrupted = False
    # ends with the command: a process that runs ``main`` again (a test's) must not have its jobs cancelled
    while main.is_alive() and not _state["cleaning"] and _state["command"] == command:
        _interrupt_connect()
        sc = _active_spark()
        if sc is not None:
            try:
                sc.cancelAllJobs()
            except Exception:  # the JVM may be going or gone: nothing to cancel
                log.debug("could not cancel the Spark jobs", exc_info=True)
        if not (_state["raised"] or interrupted) and not _in_jvm_call(sys._current_frames().get(main.ident or 0)):
            interrupted = True
            _thread.interrupt_main(signal.SIGTERM)  # the handler again, now outside the JVM
        time.sleep(0.2)
    with _lock:
        _state["canceller"] = False


def _start_canceller() -> None:
    with _lock:
        start = not _state["canceller"]
        _state["canceller"] = True
    if start:
        threading.Thread(target=_cancel_until_out, name="ltr-sigterm", daemon=True).start()


def _handler(signum: int, frame: FrameType | None) -> None:
    if _state["raised"]:
        return  # already on its way out
    _state["seen"] = True
    STOP.set()  # a training job the canceller fails is not started again (pipelines.execution.executor)
    in_call = _in_jvm_call(frame)
    if not in_call:
        _state["raised"] = True  # before the canceller starts: it would raise the stop here a second time
    _start_canceller()
    if not in_call:
        raise Stopped(signum)


def _watch(wakeup: socket.socket, command: int) -> None:
    """The wakeup thread: Python writes each signal's number to ``wakeup`` in whichever thread the kernel handed the
    signal to, while the handler itself waits for the main thread to run Python again. On SIGTERM it marks the stop
    and starts the canceller at once (the handler raises it later, in the main thread). Ends when ``wakeup`` is
    closed."""
    while True:
        try:
            data = wakeup.recv(64)
        except OSError:
            return
        if not data:
            return
        if signal.SIGTERM in data and _state["command"] == command and not _state["seen"]:
            _state["seen"] = True
            STOP.set()
            _start_canceller()


class _QuietLostJvm(logging.Filter):
    """After SIGTERM, py4j's "Exception while sending command." (logged with its trace on the root logger, by
    ``logging.info``) is the JVM going, which a SIGTERM to the whole process group (systemd, ``kill -TERM -PGID``)
    stops at the same time: expected, and dropped."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (_state["seen"] and record.getMessage().startswith("Exception while sending command"))


_quiet = _QuietLostJvm()


def install() -> Callable[[], None]:
    """Handle SIGTERM as above, in the main thread only (where Python runs signal handlers); returns what puts the
    handler before back (``ltr``'s ``main`` runs inside other programs too: tests, a scheduler's worker)."""
    from pipelines.core.outputs import forget_failed

    _state.update(seen=False, raised=False, cleaning=False, canceller=False, command=_state["command"] + 1)
    STOP.clear()
    forget_failed()  # main runs more than once in a test's or a scheduler's process
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    before = signal.signal(signal.SIGTERM, _handler)
    logging.getLogger().addFilter(_quiet)
    hook_before = threading.excepthook

    def quiet_threads(args: Any) -> None:
        """A SIGTERM handed to another thread interrupts its system call: XGBoost's tracker thread then raised
        ``Poll failed ... Interrupted system call`` (seen once in a CI run); after a stop, dropped like py4j's."""
        if _state["seen"]:
            log.debug("after the stop, thread %s ended with %r", getattr(args.thread, "name", "?"), args.exc_value)
            return
        hook_before(args)

    threading.excepthook = quiet_threads
    reader, writer = socket.socketpair()
    writer.setblocking(False)
    wakeup_before = signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
    threading.Thread(target=_watch, args=(reader, _state["command"]), name="ltr-sigterm-wakeup", daemon=True).start()

    def restore() -> None:
        _state["cleaning"] = True  # the canceller, if any, ends
        signal.signal(signal.SIGTERM, before)
        signal.set_wakeup_fd(wakeup_before)  # an event loop's own, where ``main`` runs under one
        writer.close()
        with contextlib.suppress(OSError):
            reader.shutdown(socket.SHUT_RDWR)  # the wakeup thread's recv returns
        reader.close()
        logging.getLogger().removeFilter(_quiet)
        threading.excepthook = hook_before

    return restore


def stopping() -> bool:
    """Whether SIGTERM has come: then whatever exception the command ends with (a cancelled Spark job's error, most
    often) is the stop's doing, and the command is to be reported as stopped (further SIGTERMs are ignored)."""
    if _state["seen"]:
        _state["raised"] = True
    return bool(_state["seen"])


def clean_up() -> None:
    """After the stop reached ``main``: stop Spark (its cancelled tasks end with it), then clean each output whose
    claim ended with the stop (:func:`pipelines.core.outputs.sweep_failed`)."""
    from pipelines.core.connect import running_tasks
    from pipelines.core.outputs import sweep_failed

    _state["cleaning"] = True
    remote = _interrupt_connect()
    if remote is not None:
        try:
            remote.stop()  # the server-side session goes with its jobs; a local server (`--remote local[N]`) too
        except Exception:
            log.debug("could not stop the Spark Connect session", exc_info=True)
    sc = _active_spark()
    if sc is not None:
        try:
            sc.cancelAllJobs()
            # the cancelled jobs' tasks end first: stopped under a running task, Spark logs errors of its own
            # (a broadcast gone under the task), and the task may still write into an output
            deadline = time.monotonic() + 10
            while running_tasks(sc) and time.monotonic() < deadline:
                time.sleep(0.1)
            sc.stop()
        except Exception:  # the JVM may be gone already
            log.debug("could not stop Spark", exc_info=True)
    for path in sweep_failed():
        log.debug("cleaned %s after the stop", path)
