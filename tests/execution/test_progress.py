"""Progress on the driver: the barrier tasks' events over TCP, a failed job named in one line, the count of a
resumed fold."""

from __future__ import annotations

import socket
import time

import pytest

from pipelines.execution.events import DriverGone, EventClient, EventServer


def test_events_reach_the_driver_over_tcp():
    got = []
    with EventServer("127.0.0.1", got.append) as srv:
        c = EventClient(*srv.address)
        for t in range(1, 4):
            c.send({"ev": "tree", "node": "n", "tree": t})
        c.close()
        for _ in range(100):
            if len(got) == 3:
                break
            import time

            time.sleep(0.02)
    assert [e["tree"] for e in got] == [1, 2, 3]
    dead = EventClient("127.0.0.1", 1, timeout=0.5)
    dead.send({"ev": "tree"})  # unreachable: one warning, training goes on
    dead.send({"ev": "tree"})


def _sends_after_the_listener_closed(client: EventClient) -> None:
    """``client`` connected to a listener whose end is then closed (the driver's process ended); then up to 50
    events, 10 ms apart (the closed end answers the first with a reset: a later send fails)."""
    with socket.create_server(("127.0.0.1", 0)) as srv:
        client.port = srv.getsockname()[1]
        client.send({"ev": "node_start", "node": "n", "tree": 0})
        conn, _ = srv.accept()
        conn.close()
    for t in range(1, 51):
        client.send({"ev": "tree", "node": "n", "tree": t})
        time.sleep(0.01)


def test_a_connect_clients_job_stops_when_its_client_is_gone_and_only_then():
    """A Spark Connect client's job (``driver_bound``) stops, in one line, once the connection it had to its client
    breaks, or when its first connection is refused (the client's process is gone); a classic driver's job trains on
    without reports, and a job whose client does not answer (a connect that times out) trains on too."""
    with pytest.raises(
        DriverGone,
        match=r"^the Spark Connect client at 127\.0\.0\.1:\d+ is gone \(.*\): this job stops "
        r"at tree \d+ of node n, its checkpoints kept$",
    ):
        _sends_after_the_listener_closed(EventClient("127.0.0.1", 0, timeout=2, driver_bound=True))
    _sends_after_the_listener_closed(EventClient("127.0.0.1", 0, timeout=2))  # classic: no error
    with socket.create_server(("127.0.0.1", 0)) as srv:
        port = srv.getsockname()[1]  # a port where the client's listener was: nothing listens there now
    with pytest.raises(DriverGone, match=r"is gone \(.*refused.*\): this job stops at node_start 0 of node n, its"):
        EventClient("127.0.0.1", port, timeout=2, driver_bound=True).send({"ev": "node_start", "node": "n", "tree": 0})
    EventClient("127.0.0.1", port, timeout=2).send({"ev": "tree"})  # classic: one warning, training goes on
    # a task's check-in before it loads its data: the same
    with pytest.raises(DriverGone, match=r"is gone \(.*refused.*\): this job stops before partition 1 starts, its"):
        EventClient("127.0.0.1", port, timeout=2, driver_bound=True).hello("job", 1)
    assert EventClient("127.0.0.1", port, timeout=2).hello("job", 1) is None  # classic: nobody can tell
    # a client that does not answer (a listener whose backlog is full drops the next connection's SYN: the connect
    # times out, as to a machine beyond a firewall that drops): one warning, training goes on
    with socket.create_server(("127.0.0.1", 0), backlog=0) as full:
        waiting = socket.create_connection(full.getsockname(), timeout=2)  # the one the backlog holds
        try:
            silent = EventClient(*full.getsockname(), timeout=0.3, driver_bound=True)
            silent.send({"ev": "tree"})
            silent.send({"ev": "tree"})
        finally:
            waiting.close()


def test_a_failed_job_is_named_in_one_line():
    from pipelines.execution.executor import _one_line

    spark_text = (
        "An error occurred while calling o715.getResult.\n: org.apache.spark.SparkException: Job aborted "
        "due to stage failure: Python worker exited unexpectedly (crashed)\n\tat org.apache.spark.X"
    )
    assert _one_line(RuntimeError(spark_text)) == (
        "SparkException: Job aborted due to stage failure: Python worker exited unexpectedly (crashed)"
    )
    py_text = (
        "PythonException: An exception was thrown from the Python worker\nTraceback (most recent call last):\n"
        '  File "x.py", line 3, in run\npipelines.checkpoints.CheckpointError: checkpoint x is unreadable\n'
        "\tat org.apache.spark.Y"
    )
    assert _one_line(RuntimeError(py_text)) == "CheckpointError: checkpoint x is unreadable"


def test_progress_of_a_resumed_fold_counts_from_its_done_trees(monkeypatch, caplog):
    """N/M over the whole fold; the rate from trees built since the first one arrived, never from one tree."""
    import logging

    from pipelines.execution import events as progress

    clock = iter([100.0, 100.0, 101.0, 101.0, 102.0, 102.0, 103.0, 103.0])
    monkeypatch.setattr(progress.time, "perf_counter", lambda: next(clock))
    d = progress.ProgressDisplay("fold 1", 8900, done=900, interval=0.0, tty=False)
    with caplog.at_level(logging.INFO, logger=progress.log.name):
        for _ in range(3):
            d.advance(1)
    assert [r.getMessage() for r in caplog.records] == [
        "fold 1: 901/8900 trees",  # the first tree after a resume: no rate yet (it was 44045.1 trees/s)
        "fold 1: 902/8900 trees (1.0 trees/s, about 7998 s left)",
        "fold 1: 903/8900 trees (1.0 trees/s, about 7997 s left)",
    ]
