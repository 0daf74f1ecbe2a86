"""Progress of a long Spark job, seen from the driver: done/total with rate and time left.

``with spark_progress(spark, "ingest", total=n_bytes, unit="MB", scale=1e6, counted=...)`` runs the
job in its own job group (or the caller's, counting only the jobs started inside the block) while a
daemon thread polls Spark's status tracker every :data:`POLL_SECONDS` (completed/total tasks of those
jobs' stages) and shows ``label: done/total unit (pct, tasks), rate, rows/s, about T left``: a tqdm bar
on a terminal, otherwise a log line at most every :data:`LOG_SECONDS`, plus one final line (the total,
the time, the rows and the average rates, no time left).

What is done comes from one of two places:

* ``counted``: amounts the finished tasks counted themselves (accumulators: bytes and rows parsed),
  shown as they are (``rows/s``);
* otherwise the share of finished tasks times ``total`` (and times ``rows``, the known row count, for
  an estimated ``~rows/s``).

Progress is a display only: a failure of the poller (a status tracker that cannot be read, Spark
Connect, which has none) is logged once at debug level and never fails the job; the thread is stopped
and joined when the block ends, however it ends.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from pipelines.core.connect import JOB_GROUP, context, is_connect

log = logging.getLogger(__name__)

#: Seconds between two reads of the status tracker (tests set it small).
POLL_SECONDS = 2.0
#: Seconds between two progress lines in a log (not on a terminal, where a tqdm bar is redrawn every poll).
LOG_SECONDS = 10.0


def rate_and_left(done: float, total: float, seconds: float) -> tuple[float | None, float | None]:
    """The average rate ``done / seconds`` and the seconds left at that rate, ``(total - done) / rate``.

    Both are None while nothing is done or no time has passed (no rate from nothing); the time left is 0
    once ``done >= total``. Example: 50 of 100 in 10 s is 5.0 per second and 10 s left.
    """
    if done <= 0 or seconds <= 0:
        return None, None
    rate = done / seconds
    return rate, max(0.0, total - done) / rate


def format_seconds(seconds: float) -> str:
    """``42 s``, ``3 min 20 s``, ``2 h 05 min`` (rounded to whole seconds, or minutes from an hour on)."""
    s = round(seconds)
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60} s"
    m = round(seconds / 60)
    return f"{m // 60} h {m % 60:02d} min"


@dataclass(frozen=True)
class TaskCounts:
    """Finished and total tasks of the jobs being watched (0/0 before the first job started)."""

    done: int = 0
    total: int = 0


class SparkTasks:
    """Reads finished/total tasks of the Spark jobs of job group ``group`` that are not in ``before``.

    A job that succeeded counts all its stages' tasks as finished (a stage skipped because its shuffle
    output was reused never completes a task).
    """

    def __init__(self, sc: Any, group: str, before: frozenset[int] = frozenset()) -> None:
        self.tracker, self.group, self.before = sc.statusTracker(), group, before

    def __call__(self) -> TaskCounts:
        done = total = 0
        for job_id in self.tracker.getJobIdsForGroup(self.group):
            job = None if job_id in self.before else self.tracker.getJobInfo(job_id)
            if job is None:
                continue
            for stage_id in job.stageIds:
                stage = self.tracker.getStageInfo(stage_id)
                if stage is None:
                    continue
                total += stage.numTasks
                done += stage.numTasks if job.status == "SUCCEEDED" else min(stage.numCompletedTasks, stage.numTasks)
        return TaskCounts(done, total)


class ConnectTasks:
    """Finished/total tasks of the operations a Spark Connect session runs while it is registered as the session's
    progress handler (``registerProgressHandler``: the server reports each operation's stages as its results
    stream back; an operation that is done counts all its stages' tasks as finished)."""

    def __init__(self) -> None:
        self._ops: dict[str, dict[int, tuple[int, int]]] = {}
        self._lock = threading.Lock()

    def __call__(self, stages: Any, inflight_tasks: int, operation_id: str | None, done: bool) -> None:
        with self._lock:
            ops = self._ops.setdefault(operation_id or "", {})
            for st in stages or ():
                ops[int(st.stage_id)] = (int(st.num_tasks if done else st.num_completed_tasks), int(st.num_tasks))

    def counts(self) -> TaskCounts:
        with self._lock:
            pairs = [p for ops in self._ops.values() for p in ops.values()]
        return TaskCounts(sum(d for d, _ in pairs), sum(t for _, t in pairs))


class JobProgress:
    """Polls a task source in a daemon thread and shows the progress of one job (see the module's doc).

    Parameters
    ----------
    label
        First word of every line (``ingest``, ``difficulty``).
    tasks
        Returns the finished/total tasks now (:class:`SparkTasks`, or a fake in tests).
    total
        The whole amount in base units (bytes); None: the tasks are the amount.
    unit, scale
        How amounts are shown: ``amount / scale`` followed by ``unit`` (``MB``, 1e6).
    rows
        The job's known row count: rows done are estimated as the share of finished tasks times it
        (``~rows/s``). Ignored when ``counted`` is given.
    counted
        Returns ``(amount done, rows done)`` as the finished tasks counted them (accumulators); the
        amount in base units, capped at ``total``.
    poll_s, log_s
        Seconds between polls and between log lines; None: :data:`POLL_SECONDS`, :data:`LOG_SECONDS`.
    tty
        A tqdm bar instead of log lines; None: when stderr is a terminal.
    clock
        Seconds, for the rates (tests pass a fake one).
    """

    def __init__(
        self,
        label: str,
        tasks: Callable[[], TaskCounts],
        *,
        total: float | None = None,
        unit: str = "tasks",
        scale: float = 1.0,
        rows: int | None = None,
        counted: Callable[[], tuple[float, float]] | None = None,
        poll_s: float | None = None,
        log_s: float | None = None,
        tty: bool | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.label, self.tasks_source, self.total, self.unit, self.scale = label, tasks, total, unit, scale
        self.rows, self.counted, self.clock = rows, counted, clock
        self.poll_s = POLL_SECONDS if poll_s is None else poll_s
        self.log_s = LOG_SECONDS if log_s is None else log_s
        self.tty = sys.stderr.isatty() if tty is None else tty
        self.tasks = TaskCounts()
        self.counts: tuple[float, float] | None = None
        self.t0 = clock()
        self._last_log = self.t0
        self._broken = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._bar: Any = None

    # ---------------------------------------------------------------- what is done
    def _amounts(self, final: bool) -> tuple[float, float, float | None, bool]:
        """(done, total, rows done or None, rows estimated?) with done/total in shown units."""
        finished = final or (self.tasks.total > 0 and self.tasks.done >= self.tasks.total)
        share = 1.0 if finished else self.tasks.done / self.tasks.total if self.tasks.total else 0.0
        if self.total is None:
            total = float(self.tasks.total)
            done = total if final else float(self.tasks.done)
        else:
            total = self.total / self.scale
            if final:
                done = total
            elif self.counts is not None:
                done = min(self.counts[0], self.total) / self.scale
            else:
                done = share * total
        if self.counts is not None:
            return done, total, self.counts[1], False
        if self.rows is not None:
            return done, total, share * self.rows, True
        return done, total, None, False

    def line(self, final: bool = False, failed: bool = False) -> str:
        """``label: done/total unit (pct, tasks), rate, rows/s, about T left``; the final line says how long it
        took instead of the time left, a failed one where it stopped."""
        done, total, rows, estimated = self._amounts(final and not failed)
        seconds = self.clock() - self.t0
        digits = 0 if self.total is None else 1
        if not failed and not total and (final or self.total is None):  # no job seen (yet)
            head = f"{self.label}: {'done' if final else 'waiting for tasks'}"
            if not final:
                return head
        else:
            head = f"{self.label}: {done:.{digits}f}/{total:.{digits}f} {self.unit}"
        parts = []
        if total > 0:
            parts.append(f"{100 * done / total:.0f}%")
        if self.total is not None and self.tasks.total:
            parts.append(f"{self.tasks.done if not final or failed else self.tasks.total}/{self.tasks.total} tasks")
        if parts:
            head += f" ({', '.join(parts)})"
        if failed:
            return f"{head}: stopped after {format_seconds(seconds)}"
        if final:
            head += f" in {format_seconds(seconds)}"
        elif not self.tasks.total:
            return f"{head}, waiting for tasks"
        rate, left = rate_and_left(done, total, seconds)
        out = [head]
        if final and rows is not None:
            out.append(f"{'~' if estimated else ''}{rows:,.0f} rows")
        if rate is not None:
            out.append(f"{rate:.1f} {self.unit}/s")
        if rows is not None and seconds > 0 and rows > 0:
            out.append(f"{'~' if estimated else ''}{rows / seconds:,.0f} rows/s")
        if not final and left is not None:
            out.append(f"about {format_seconds(left)} left")
        return ", ".join(out)

    # ---------------------------------------------------------------- polling
    def poll(self) -> None:
        """Read the task source (and the counters), then redraw the bar or log :meth:`line` when due.

        Never raises: the first failure is logged at debug level, later ones are silent.
        """
        try:
            self.tasks = self.tasks_source()
            if self.counted is not None:
                self.counts = self.counted()
            if self._bar is not None:
                done, total, rows, estimated = self._amounts(False)
                self._bar.total = total
                self._bar.update(done - self._bar.n)
                if rows is not None:
                    rate = rows / max(self.clock() - self.t0, 1e-9)
                    self._bar.set_postfix_str(f"{'~' if estimated else ''}{rate:,.0f} rows/s", refresh=False)
                self._bar.refresh()
            elif self.clock() - self._last_log >= self.log_s:
                self._last_log = self.clock()
                log.info("%s", self.line())
        except Exception:  # a display: it must never fail the job
            if not self._broken:
                self._broken = True
                log.debug("%s: cannot read the job's progress", self.label, exc_info=True)

    def _loop(self) -> None:
        while not self._stop.wait(self.poll_s):
            self.poll()

    def start(self) -> JobProgress:
        """Start the clock, the bar (on a terminal) and the polling thread."""
        self.t0 = self._last_log = self.clock()
        if self.tty:
            from tqdm import tqdm

            total = self.total / self.scale if self.total is not None else None
            self._bar = tqdm(total=total, desc=self.label, unit=self.unit, dynamic_ncols=True)
        self._thread = threading.Thread(target=self._loop, name=f"progress-{self.label}", daemon=True)
        self._thread.start()
        return self

    def stop(self, ok: bool) -> None:
        """Stop and join the thread, then close the bar or log the final line (``ok``: the job succeeded)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=max(5.0, 2 * self.poll_s))
        if ok:  # the tasks' totals for the last line; accumulators are merged before the job returns
            try:
                self.tasks = max(self.tasks, self.tasks_source(), key=lambda t: t.total)
                if self.counted is not None:
                    self.counts = self.counted()
            except Exception:
                log.debug("%s: cannot read the job's final progress", self.label, exc_info=True)
        try:
            if self._bar is not None:
                if ok:
                    done, _, _, _ = self._amounts(True)
                    self._bar.update(done - self._bar.n)
                self._bar.close()
            else:
                log.info("%s", self.line(final=True, failed=not ok))
        except Exception:
            log.debug("%s: cannot show the job's final progress", self.label, exc_info=True)


@contextmanager
def spark_progress(spark: Any, label: str, **kw: Any) -> Iterator[JobProgress | None]:
    """Show the progress of the Spark jobs the block runs (keywords: those of :class:`JobProgress`).

    The block's jobs run in a job group of their own (the thread's local property, restored after), or in
    the caller's group, if the thread has one, counting only the jobs started inside the block. Yields the
    :class:`JobProgress`, or None where progress cannot be read. On Spark Connect the tasks are those the server
    reports for the block's operations (:class:`ConnectTasks`).
    """
    sc = context(spark)  # None on Spark Connect: no status tracker, the server's progress reports instead
    progress: JobProgress | None = None
    own_group = False
    reports: ConnectTasks | None = None
    if sc is None and is_connect(spark):
        try:
            reports = ConnectTasks()
            spark.registerProgressHandler(reports)
            progress = JobProgress(label, reports.counts, **kw).start()
        except Exception:
            log.debug("%s: no progress (the server's progress reports cannot be read)", label, exc_info=True)
    elif sc is not None:
        try:
            group = sc.getLocalProperty(JOB_GROUP)
            if group is None:
                group, own_group = f"ltr-{label}-{uuid.uuid4().hex[:12]}", True
                sc.setLocalProperty(JOB_GROUP, group)
                before: frozenset[int] = frozenset()
            else:
                before = frozenset(sc.statusTracker().getJobIdsForGroup(group))
            progress = JobProgress(label, SparkTasks(sc, group, before), **kw).start()
        except Exception:
            log.debug("%s: no progress (the status tracker cannot be read)", label, exc_info=True)
    ok = False
    try:
        yield progress
        ok = True
    finally:
        if progress is not None:
            progress.stop(ok)
        if reports is not None:
            try:
                spark.removeProgressHandler(reports)
            except Exception:
                log.debug("%s: cannot remove the progress handler", label, exc_info=True)
        if own_group and sc is not None:
            try:
                sc.setLocalProperty(JOB_GROUP, None)
            except Exception:
                log.debug("%s: cannot clear the job group", label, exc_info=True)
