"""The suite's shared Spark session survives a dead JVM (issue 30), tested the way it happens: a real pytest
run in another process whose first test kills its session's JVM with SIGKILL (its own session: this
process's shared one is never touched), and whose later tests must still get a working session."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from pipelines.testing.processes import ROOT

pytestmark = pytest.mark.spark  # an inner pytest run starts its own sessions

INNER = """
import os
import signal


def test_a_kills_its_jvm(spark):
    assert spark.range(3).count() == 3
    os.kill(spark.sparkContext._gateway.proc.pid, signal.SIGKILL)
    spark.sparkContext._gateway.proc.wait()
    spark.range(3).count()  # the JVM is gone: this test fails, and only this one


def test_b_gets_a_new_session(spark):
    assert spark.range(5).count() == 5


def test_c_stops_the_session(spark):
    spark.stop()


def test_d_after_a_stop(spark):
    assert spark.range(7).count() == 7
"""


def test_a_dead_jvm_costs_one_test(tmp_path):
    (tmp_path / "conftest.py").write_text(
        "from tests.conftest import *  # noqa: F403\nfrom tests.conftest import _JVM_LOG  # noqa: F401\n"
    )
    (tmp_path / "test_inner.py").write_text(INNER)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_XDIST", "PYTEST_ADDOPTS"))}
    env.update(PYTHONPATH=str(ROOT), LTR_TEST_JVM_LOGS=str(tmp_path / "logs"))  # a plain pytest run, not xdist's
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-o", "log_level=WARNING", "-rA", "test_inner.py"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=400,
    )
    out = proc.stdout + proc.stderr
    assert "1 failed, 3 passed" in out, out[-6000:]
    assert "FAILED test_inner.py::test_a_kills_its_jvm" in out, out[-6000:]
    # the next test's setup says what it found and that it starts a new session (with the old JVM's log)
    assert "the shared Spark session is gone (its JVM (pid" in out and "killed by signal SIGKILL" in out, out[-6000:]
    assert "this process still holds the JVM's stdin pipe" in out, out[-6000:]
    assert "the shared Spark session is gone (a test stopped it)" in out, out[-6000:]
    # the failed test's report carries its JVM's output and the session's state
    assert "JVM log (" in out and "session state after the test: its JVM (pid" in out, out[-6000:]
    logs = sorted(p.name for p in (tmp_path / "logs").iterdir())
    assert {"jvm-1.log", "jvm-2.log", "gc-jvm-1.log", "gc-jvm-2.log"} <= set(logs), logs
