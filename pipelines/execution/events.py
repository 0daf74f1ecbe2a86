"""Progress and live results from executors to the driver, over TCP (never through files).

Cluster executors share no disk with the driver, so rank 0 of every training
job connects to a small listener on the driver (the way XGBoost's workers reach
its tracker) and sends one JSON object per line:

* ``{"ev": "node_start", "node": KEY, "tree": T}`` when a node starts (T: where it continues from);
* ``{"ev": "tree", "node": KEY, "tree": T}`` after every tree;
* ``{"ev": "checkpoint", "node": KEY, "tree": T, "curve": [[tree, vali, test], ...]}``
  after every committed checkpoint (the node's curve so far).

Every barrier task also says ``hello`` (job token, partition) before it joins
XGBoost's collective and is answered whether it is the first attempt of that
partition: a task of a barrier stage that Spark retried must not reach the
job's spent Rabit tracker (it would wait for it until the tracker's timeout),
so it stops at once and the driver starts a new job from the checkpoints.

:class:`EventServer` runs on the driver and hands each event, in order, to a
callback (progress display, MLflow streaming). Sending is best effort: if the
driver cannot be reached, training goes on and logs one warning. But a job of a
Spark Connect client (``driver_bound``) stops when the connection it had breaks:
the client's process is gone (a SIGKILL, a lost machine; a SIGTERM interrupts its
jobs itself), and the job would otherwise train on the server to its end for
nobody. It stops too when its first connection is refused: its tasks joined the
XGBoost tracker in that same process, so nothing listening there means the client
has ended since (an interrupt that reaches the server between an operation's start
and its Spark job's submission ends the operation but not the job, which then
outlives its client). A client that still runs starts the job again from its
checkpoints, as after any failed job.
:class:`ProgressDisplay` shows ``N/M trees`` with rate and time left: a tqdm
bar on a terminal, plain log lines otherwise.
"""

from __future__ import annotations

import json
import logging
import socket
import socketserver
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from pipelines.core.errors import LtrError
from pipelines.core.spark_progress import rate_and_left

log = logging.getLogger(__name__)

Callback = Callable[[dict[str, Any]], None]


class _Handler(socketserver.StreamRequestHandler):
    def handle(self) -> None:
        """Read one connection's JSON lines until it closes: answer each ``hello``, dispatch every other event.

        A ``hello`` is answered on the same connection with ``{"fresh": bool}`` (:meth:`EventServer.register`);
        a line that is not JSON is logged and skipped.
        """
        server: EventServer = self.server  # type: ignore[assignment]
        for line in self.rfile:
            try:
                ev = json.loads(line)
            except ValueError:
                log.warning("ignoring a malformed progress message from %s", self.client_address)
                continue
            if ev.get("ev") == "hello":  # a barrier task asks whether its job's tracker is still fresh
                self.wfile.write(
                    (json.dumps({"fresh": server.register(ev["job"], int(ev["partition"]))}) + "\n").encode()
                )
                self.wfile.flush()
                continue
            server.dispatch(ev)


class EventServer(socketserver.ThreadingTCPServer):
    """The driver's listener: ``with EventServer(host, callback) as srv: ... srv.address``."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, host: str, callback: Callback) -> None:
        super().__init__((host, 0), _Handler)
        self.callback = callback
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True)
        self.errors = 0
        self._seen: dict[str, set[int]] = {}

    def register(self, job: str, partition: int) -> bool:
        """True the first time a job's partition checks in; False for a retried task or stage of that job
        (its XGBoost tracker is spent: connecting to it again would hang)."""
        with self._lock:
            seen = self._seen.setdefault(job, set())
            fresh = partition not in seen
            seen.add(partition)
            return fresh

    @property
    def address(self) -> tuple[str, int]:
        """(host, port) the listener is bound to (the port is chosen by the system), for the workers to connect."""
        host, port = self.server_address[:2]
        return str(host), int(port)

    def dispatch(self, ev: dict[str, Any]) -> None:
        """Hand ``ev`` to the callback, one event at a time across all connections.

        An exception of the callback is logged and counted in ``errors``, never raised: a display or tracking
        failure must not break the connection of a training job.
        """
        with self._lock:  # events of concurrent jobs reach the callback one at a time
            try:
                self.callback(ev)
            except Exception:  # a display or tracking hiccup must not break the connection
                self.errors += 1
                log.exception("progress callback failed on %s", ev.get("ev"))

    def __enter__(self) -> EventServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
        self.server_close()
        self._thread.join(timeout=5)


class DriverGone(LtrError):
    """A Spark Connect client's job lost its connection to the client (:class:`EventClient`, ``driver_bound``)."""


class EventClient:
    """Rank 0's side: connects lazily, sends JSON lines, gives up quietly after one warning; with ``driver_bound``
    (a Spark Connect client's job) it raises :class:`DriverGone` instead once a connection it had breaks or its
    first connection is refused."""

    def __init__(self, host: str, port: int, timeout: float = 10.0, driver_bound: bool = False) -> None:
        self.host, self.port, self.timeout, self.driver_bound = host, port, timeout, driver_bound
        self._sock: socket.socket | None = None
        self._broken = False

    def send(self, ev: dict[str, Any]) -> None:
        """Send ``ev`` as one JSON line, connecting on the first call; best effort.

        On the first connection or send error, logs one warning and drops this and every later event (the
        client is broken from then on); nothing is raised, but with ``driver_bound`` a connection that was made
        and then broke raises :class:`DriverGone` (the driver's process ended: a closed socket answers the first
        line after its end with a reset, and the next send fails), and so does a first connection refused (the
        host answered, and nothing listens where the client's listener was). A first connection that times out
        or finds no route (the client's machine unreachable from here) still trains on without reports.
        """
        if self._broken:
            return
        try:
            if self._sock is None:
                self._sock = socket.create_connection((self.host, self.port), timeout=self.timeout)
            self._sock.sendall((json.dumps(ev) + "\n").encode())
        except OSError as e:
            self._broken = True
            # a connection that was made and broke, or none where the listener was: the client is gone
            if self.driver_bound and (self._sock is not None or isinstance(e, ConnectionRefusedError)):
                raise self._gone(e, f"at {ev.get('ev')} {ev.get('tree', '')} of node {ev.get('node', '?')}") from None
            log.warning(
                "progress listener %s:%d unreachable (%s): training goes on without progress reports",
                self.host,
                self.port,
                e,
            )

    def _gone(self, e: OSError, where: str) -> DriverGone:
        """The :class:`DriverGone` of this client's lost connection (``e``), the job stopping ``where``; said in the
        log here too: leaving XGBoost's collective, a worker whose tracker (in the client) is gone can end before
        its error reaches Spark."""
        gone = DriverGone(
            f"the Spark Connect client at {self.host}:{self.port} is gone ({e}): this job stops {where}, "
            "its checkpoints kept"
        )
        log.warning("%s", gone)
        return gone

    def hello(self, job: str, partition: int) -> bool | None:
        """Ask the driver whether this task is the first attempt of its partition in ``job``
        (None: the driver cannot be reached, so nobody can tell). With ``driver_bound``, a refused connection
        raises :class:`DriverGone` (the client is gone: its job stops before it loads any data)."""
        try:
            with socket.create_connection((self.host, self.port), timeout=self.timeout) as sock:
                sock.sendall((json.dumps({"ev": "hello", "job": job, "partition": partition}) + "\n").encode())
                reply = sock.makefile("r").readline()
            return bool(json.loads(reply)["fresh"])
        except (OSError, ValueError, KeyError) as e:
            if self.driver_bound and isinstance(e, ConnectionRefusedError):
                raise self._gone(e, f"before partition {partition} starts") from None
            log.warning("progress listener %s:%d unreachable (%s)", self.host, self.port, e)
            return None

    def close(self) -> None:
        """Close the connection, if one is open (a later :meth:`send` would open a new one)."""
        if self._sock is not None:
            try:
                self._sock.close()
            finally:
                self._sock = None


class ProgressDisplay:
    """``label: done/total trees (rate, time left)``: a tqdm bar on a terminal, log lines every ``interval`` s."""

    def __init__(self, label: str, total: int, done: int = 0, interval: float = 5.0, tty: bool | None = None) -> None:
        self.label, self.total, self.done, self.interval = label, total, done, interval
        self._start_done, self._last = done, 0.0
        self._first: float | None = None
        self._bar = None
        if tty if tty is not None else sys.stderr.isatty():
            from tqdm import tqdm

            self._bar = tqdm(total=total, initial=done, desc=label, unit="tree", dynamic_ncols=True)

    def advance(self, n: int = 1) -> None:
        """Count ``n`` more trees built (``done`` capped at ``total``) and update the bar or, at most every
        ``interval`` seconds, log :meth:`line`.

        The rate counts from the first call, not from the job's start-up.
        """
        self.done = min(self.total, self.done + n)
        if self._first is None:  # the rate counts from the first tree's arrival, not from the job's start-up
            self._first, self._start_done = time.perf_counter(), self.done
        if self._bar is not None:
            self._bar.update(n)
            return
        now = time.perf_counter()
        if now - self._last >= self.interval:
            self._last = now
            log.info("%s", self.line())

    def line(self) -> str:
        """``label: done/total trees``, with the rate and time left once trees arrived after the first call."""
        head = f"{self.label}: {self.done}/{self.total} trees"
        if self._first is None or self.done == self._start_done:  # no rate from fewer than two trees
            return head
        rate, left = rate_and_left(
            self.done - self._start_done, self.total - self._start_done, max(time.perf_counter() - self._first, 1e-9)
        )
        return f"{head} ({rate:.1f} trees/s, about {left:.0f} s left)"

    def close(self) -> None:
        """Close the tqdm bar, or log the final :meth:`line` when there is none."""
        if self._bar is not None:
            self._bar.close()
        else:
            log.info("%s", self.line())
