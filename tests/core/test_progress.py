"""Driver-side progress of a Spark job (no Spark here: fake task sources, a fake clock, a fake context)."""

from __future__ import annotations

import logging
import threading

import pytest

from pipelines.core import spark_progress as progress
from pipelines.core.spark_progress import JobProgress, TaskCounts, format_seconds, rate_and_left, spark_progress


class Clock:
    def __init__(self, t: float = 100.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def _lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == progress.log.name and r.levelno == logging.INFO]


def test_rate_and_time_left():
    assert rate_and_left(50, 100, 10.0) == (5.0, 10.0)  # half in 10 s: 5 per second, 50 / 5 = 10 s left
    assert rate_and_left(30, 120, 15.0) == (2.0, 45.0)  # 30 / 15 = 2 per second, (120 - 30) / 2 = 45 s
    assert rate_and_left(100, 100, 10.0) == (10.0, 0.0)
    assert rate_and_left(0, 100, 10.0) == (None, None)  # no rate from nothing done
    assert rate_and_left(5, 100, 0.0) == (None, None)


def test_format_seconds():
    assert [format_seconds(s) for s in (0.4, 42, 200, 3599, 7500)] == [
        "0 s",
        "42 s",
        "3 min 20 s",
        "59 min 59 s",
        "2 h 05 min",
    ]


def test_bytes_counted_by_the_tasks_lines_and_final_line(caplog):
    """MB done and rows as the tasks counted them; the final line has the total, rates and no time left."""
    clock = Clock()
    state = {"tasks": TaskCounts(0, 0), "counted": (0, 0)}
    p = JobProgress(
        "ingest",
        lambda: state["tasks"],
        total=400e6,
        unit="MB",
        scale=1e6,
        counted=lambda: state["counted"],
        log_s=10.0,
        tty=False,
        clock=clock,
    )
    with caplog.at_level(logging.INFO, logger=progress.log.name):
        p.poll()  # at t0: too early for a line
        clock.t += 10
        p.poll()  # the job has not started yet
        clock.t += 5
        state["tasks"], state["counted"] = TaskCounts(10, 40), (100e6, 50_000)
        p.poll()  # 5 s since the last line: none
        clock.t += 5
        p.poll()
        clock.t += 20
        state["tasks"], state["counted"] = TaskCounts(40, 40), (400e6, 200_000)
        p.stop(ok=True)
    assert _lines(caplog) == [
        "ingest: 0.0/400.0 MB (0%), waiting for tasks",
        # 100 MB in 20 s: 5.0 MB/s, 300 MB left: 60 s; 50,000 rows in 20 s
        "ingest: 100.0/400.0 MB (25%, 10/40 tasks), 5.0 MB/s, 2,500 rows/s, about 1 min 0 s left",
        "ingest: 400.0/400.0 MB (100%, 40/40 tasks) in 40 s, 200,000 rows, 10.0 MB/s, 5,000 rows/s",
    ]


def test_tasks_with_rows_estimated_from_the_known_row_count(caplog):
    clock = Clock()
    tasks = iter([TaskCounts(5, 20), TaskCounts(20, 20)])
    p = JobProgress("difficulty", lambda: next(tasks), rows=1_000_000, log_s=0.0, tty=False, clock=clock)
    with caplog.at_level(logging.INFO, logger=progress.log.name):
        clock.t += 10
        p.poll()
        clock.t += 30
        p.stop(ok=True)
    assert _lines(caplog) == [
        # 5 of 20 tasks in 10 s: 0.5 tasks/s, 15 left: 30 s; a quarter of 1M rows in 10 s: ~25,000 rows/s
        "difficulty: 5/20 tasks (25%), 0.5 tasks/s, ~25,000 rows/s, about 30 s left",
        "difficulty: 20/20 tasks (100%) in 40 s, ~1,000,000 rows, 0.5 tasks/s, ~25,000 rows/s",
    ]


def test_the_thread_polls_and_stops(caplog):
    """A real thread, polled fast: intermediate lines come while the job runs, none after it stopped."""
    polled = threading.Event()
    n = {"polls": 0}

    def tasks() -> TaskCounts:
        n["polls"] += 1
        if n["polls"] >= 3:
            polled.set()
        return TaskCounts(min(n["polls"], 9), 10)

    with caplog.at_level(logging.INFO, logger=progress.log.name):
        p = JobProgress("job", tasks, poll_s=0.01, log_s=0.0, tty=False).start()
        assert polled.wait(10)
        p.stop(ok=True)
        assert p._thread is not None and not p._thread.is_alive()
        after = n["polls"]
    lines = _lines(caplog)
    assert any(" left" in line for line in lines[:-1]), lines
    assert lines[-1].startswith("job: 10/10 tasks (100%) in ") and " left" not in lines[-1]
    threading.Event().wait(0.05)
    assert n["polls"] == after  # stopped: nothing polls any more


def test_a_broken_source_is_logged_once_and_never_raises(caplog):
    def broken() -> TaskCounts:
        raise RuntimeError("tracker gone")

    p = JobProgress("job", broken, log_s=0.0, tty=False)
    with caplog.at_level(logging.DEBUG, logger=progress.log.name):
        p.poll()
        p.poll()
        p.stop(ok=True)
    debug = [r for r in caplog.records if r.levelno == logging.DEBUG]
    assert [r.getMessage() for r in debug] == [
        "job: cannot read the job's progress",
        "job: cannot read the job's final progress",
    ]
    assert _lines(caplog) == ["job: done in 0 s"]


class FakeTracker:
    def __init__(self) -> None:
        self.jobs: dict[str, list[int]] = {}

    def getJobIdsForGroup(self, group):  # noqa: N802 (Spark's name)
        return self.jobs.get(group, [])

    def getJobInfo(self, job_id):  # noqa: N802
        return None


class FakeContext:
    def __init__(self) -> None:
        self.props: dict[str, str | None] = {}
        self.tracker = FakeTracker()

    def getLocalProperty(self, key):  # noqa: N802
        return self.props.get(key)

    def setLocalProperty(self, key, value):  # noqa: N802
        self.props[key] = value

    def statusTracker(self):  # noqa: N802
        return self.tracker


class FakeSpark:
    def __init__(self) -> None:
        self.sparkContext = FakeContext()


def test_a_failing_job_stops_the_thread_restores_the_group_and_says_where_it_stopped(caplog):
    spark = FakeSpark()
    with caplog.at_level(logging.INFO, logger=progress.log.name), pytest.raises(ValueError, match="job failed"):
        with spark_progress(spark, "ingest", total=10e6, unit="MB", scale=1e6, poll_s=0.01, tty=False) as p:
            assert p is not None
            group = spark.sparkContext.props[progress.JOB_GROUP]
            assert group is not None and group.startswith("ltr-ingest-")
            raise ValueError("job failed")
    assert p._thread is not None and not p._thread.is_alive()
    assert spark.sparkContext.props[progress.JOB_GROUP] is None  # the thread's job group is cleared again
    assert _lines(caplog)[-1].startswith("ingest: 0.0/10.0 MB (0%): stopped after ")


def test_the_callers_job_group_is_kept_and_its_earlier_jobs_are_not_counted():
    spark = FakeSpark()
    sc = spark.sparkContext
    sc.props[progress.JOB_GROUP] = "grid-node"
    sc.tracker.jobs["grid-node"] = [3, 4]
    with spark_progress(spark, "difficulty", poll_s=60, tty=False) as p:
        assert p is not None and sc.props[progress.JOB_GROUP] == "grid-node"
        assert p.tasks_source.before == frozenset({3, 4})  # type: ignore[attr-defined]
    assert sc.props[progress.JOB_GROUP] == "grid-node"


def test_no_spark_context_no_progress():
    class Connect:
        @property
        def sparkContext(self):  # noqa: N802
            raise RuntimeError("not supported on Spark Connect")

    with spark_progress(Connect(), "ingest") as p:
        assert p is None


def test_connect_progress_counts_each_operations_stages_and_a_done_one_whole():
    """Spark Connect's progress reports (``registerProgressHandler``): the latest of each operation's stages, and an
    operation that is done counts its stages' tasks as finished (a stage skipped for a reused shuffle reports none)."""
    from types import SimpleNamespace as Stage

    from pipelines.core.spark_progress import ConnectTasks

    reports = ConnectTasks()

    def report(op: str, stage: int, total: int, finished: int, done: bool = False) -> None:
        stages = [Stage(stage_id=stage, num_tasks=total, num_completed_tasks=finished)]
        reports(stages=stages, inflight_tasks=total - finished, operation_id=op, done=done)

    assert reports.counts() == TaskCounts(0, 0)
    report("a", 0, 4, 1)
    report("a", 0, 4, 3)
    report("b", 1, 2, 0)
    assert reports.counts() == TaskCounts(3, 6)
    report("b", 1, 2, 1, done=True)
    assert reports.counts() == TaskCounts(5, 6)
