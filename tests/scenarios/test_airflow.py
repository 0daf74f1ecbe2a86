"""The Airflow DAG ``ltr_study`` (jobs/ltr_study_dag.py), run end to end with ``dag.test()``.

Needs the ``[airflow]`` extra (skipped without Airflow), Java, and ``spark-submit`` (the venv's
``bin``, put on PATH while these tests run). Airflow reads its settings when imported, so its
environment (a temporary AIRFLOW_HOME, the DAGs folder, the Spark connection) is set before the
import; everything is restored when the module is done.
The study itself, end to end, under a real scheduler (concurrent units, a killed task retried, a re-run
that trains nothing): ``tests/scenarios/test_deploy.py``.
"""

from __future__ import annotations

import atexit
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile

import pytest

from pipelines.testing.processes import QUICK_JVM, ROOT

#: spark: the DAG's tasks spark-submit the jobs; deployment: Airflow; slow: minutes, started first
pytestmark = [pytest.mark.spark, pytest.mark.deployment, pytest.mark.slow(minutes=1)]

JOBS = ROOT / "jobs"

if importlib.util.find_spec("airflow") is None:  # before touching the environment
    pytest.skip("needs the [airflow] extra", allow_module_level=True)
# Airflow reads these when imported; they concern nothing but Airflow
_HOME = tempfile.mkdtemp(prefix="airflow-home-")
atexit.register(shutil.rmtree, _HOME, True)  # also when no test of this module runs
_AIRFLOW_ENV = {
    "AIRFLOW_HOME": _HOME,
    "AIRFLOW__CORE__DAGS_FOLDER": str(JOBS),
    "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
    "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": "local[1]"}),
}
_SAVED = {k: os.environ.get(k) for k in (*_AIRFLOW_ENV, "PATH", "SPARK_SUBMIT_OPTS")}
os.environ.update(_AIRFLOW_ENV)

airflow = pytest.importorskip("airflow")


@pytest.fixture(scope="module", autouse=True)
def airflow_env():
    """A fresh metadata database in the temporary AIRFLOW_HOME, spark-submit on PATH while this module
    runs; the environment restored afterwards."""
    from airflow.utils import db

    # spark-submit and the driver's python3: this interpreter's environment
    os.environ["PATH"] = os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")
    os.environ.setdefault("SPARK_SUBMIT_OPTS", QUICK_JVM)  # the jobs' driver JVMs (set by conftest already)
    try:
        if shutil.which("spark-submit") is None:
            pytest.skip("spark-submit is not on PATH")
        db.initdb()
        yield
    finally:
        for k, v in _SAVED.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        shutil.rmtree(_HOME, ignore_errors=True)


@pytest.fixture(scope="module")
def dag():
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(JOBS))
    assert bag.import_errors == {}  # every file of the folder parses, the other jobs/*.py included
    assert "ltr_study" in bag.dags
    return bag.dags["ltr_study"]


def test_dag_shape(dag):
    ids = {t.task_id for t in dag.tasks}
    assert {"study", "generate", "ingest", "difficulty", "grid_setup", "train", "report"} <= ids
    assert dag.get_task("train").upstream_task_ids == {"units"}
    assert set(dag.params.keys()) >= {
        "conf",
        "set",
        "src",
        "spark_conn_id",
        "spark_remote",
        "spark_conf",
        "archives",
        "executor_memory",
        "train_timeout_base_s",
        "train_timeout_per_tree_s",
    }
    train = dag.get_task("train")  # retried with back-off, a bounded number at once
    assert train.retries == 3 and train.retry_exponential_backoff and train.max_active_tis_per_dagrun == 2


def test_bad_config_fails_the_first_task_before_any_spark_job(dag, tmp_path):
    run = dag.test(run_conf={"src": "", "set": [f"work_dir={tmp_path}", "train.leaves=many"]})
    states = _states(run)
    assert str(run.state) == "failed" and states["study"] == "failed", states
    assert all(v in ("upstream_failed", "None") for k, v in states.items() if k != "study"), states


def _states(run) -> dict[str, str]:
    """task id (and map index) -> state of one DAG run."""
    return {
        t.task_id + (f"[{t.map_index}]" if t.map_index >= 0 else ""): str(t.state) for t in run.get_task_instances()
    }


FAKE_SUBMIT = """#!/bin/sh
# a spark-submit that starts a worker in a session of its own (as PySpark's daemon runs its workers), lives long
# enough for the operator to remember its tree, and exits with $LTR_FAKE_EXIT, orphaning the worker (whose
# output goes elsewhere: holding spark-submit's stdout, it would keep the hook reading until the task's timeout)
echo "fake spark-submit $*"
python3 -c 'import os, time; os.setsid(); time.sleep(600)' >/dev/null 2>&1 &
echo $! > "$LTR_FAKE_PID"
sleep 3
exit "$LTR_FAKE_EXIT"
"""


@pytest.mark.parametrize("code", [2, 1])
def test_a_failed_submit_leaves_no_process_and_exit_2_is_not_retried(tmp_path, monkeypatch, code):
    """The operator kills the whole tree below its task process, a worker orphaned by spark-submit's exit
    included (remembered while it ran); exit code 2 (bad input) fails without retries, other codes stay
    Airflow's retryable error."""
    from airflow.sdk.exceptions import AirflowException, AirflowFailException

    from pipelines.app.airflow import LtrSubmitOperator
    from pipelines.core.proctree import alive, kill_tree

    fake = tmp_path / "bin" / "spark-submit"
    fake.parent.mkdir()
    fake.write_text(FAKE_SUBMIT)
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("LTR_FAKE_PID", str(tmp_path / "worker.pid"))
    monkeypatch.setenv("LTR_FAKE_EXIT", str(code))
    op = LtrSubmitOperator(task_id="t", application=str(JOBS / "grid.py"), conn_id="spark_default")
    expected = AirflowFailException if code == 2 else AirflowException
    # a process this (task) process started before the submit, as the shared Spark session's JVM: not killed
    before = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        with pytest.raises(expected) as err:
            op.execute({"params": {"spark_conf": {"spark.task.cpus": "1"}, "driver_memory": "1g"}})
        assert before.poll() is None, "the operator killed a process its task had started before the submit"
    finally:
        kill_tree(before.pid)
        before.wait()
    assert ("not retried" in str(err.value)) == (code == 2)
    worker = int((tmp_path / "worker.pid").read_text())
    assert not alive(worker), "the orphaned worker of the failed submit still runs"
    assert op.conf == {"spark.task.cpus": "1", "spark.driver.memory": "1g"}


def test_the_run_connection_is_the_one_private_attribute_pinned_to_the_provider(monkeypatch):
    """``params.spark_conn_id`` has no public way into SparkSubmitOperator (``conn_id`` is no templated
    field): the operator sets ``_conn_id``. This fails when a provider release changes that."""
    from importlib.metadata import version

    from pipelines.app.airflow import LtrSubmitOperator

    monkeypatch.setenv("AIRFLOW_CONN_OTHER_SPARK", json.dumps({"conn_type": "spark", "host": "local[2]"}))
    assert version("apache-airflow-providers-apache-spark").split(".")[0] == "5", "check _conn_id again"
    op = LtrSubmitOperator(task_id="t", application=str(JOBS / "grid.py"), conn_id="spark_default")
    op.apply_params({"spark_conn_id": "other_spark", "archives": "env.tar.gz#env", "files": "a.txt"})
    hook = op._get_hook()
    assert hook._conn_id == "other_spark" and hook._connection["master"] == "local[2]"
    assert op.conf["spark.archives"] == "env.tar.gz#env" and op.files == "a.txt"
