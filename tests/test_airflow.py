"""The Airflow DAG ``ltr_study`` (jobs/ltr_study_dag.py), run end to end with ``dag.test()``.

Needs the ``[airflow]`` extra (skipped without Airflow), Java, and ``spark-submit`` (the venv's
``bin``, put on PATH while these tests run). Airflow reads its settings when imported, so its
environment (a temporary AIRFLOW_HOME, the DAGs folder, the Spark connection) is set before the
import; everything is restored when the module is done.
The study itself, end to end, under a real scheduler (concurrent units, a killed task retried, a re-run
that trains nothing): ``tests/test_deploy.py``.
"""

from __future__ import annotations

import atexit
import importlib.util
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

from tests.spark_holder import QUICK_JVM

JOBS = Path(__file__).resolve().parent.parent / "jobs"

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


def test_the_parent_run_comes_from_grid_setup_or_its_record_never_a_guess(dag, tmp_path):
    """In cluster deploy mode the driver's output does not reach the task: the parent run id is read from the
    record ``ltr grid --setup-only --result`` writes; with neither, the task fails (the report never reads
    "the latest grid" of the experiment, which may be another study)."""
    from airflow.sdk.exceptions import AirflowFailException

    mod = sys.modules[dag.get_task("parent").python_callable.__module__]
    study = mod.resolve_study(
        {
            "conf": "",
            "set": [f"work_dir={tmp_path}"],
            "src": "",
            "train_timeout_base_s": 60,
            "train_timeout_per_tree_s": 1,
        },
        "manual__2026-11-24T10:00:00+00:00",
    )
    record = Path(study["setup_record"])
    assert record.parent == tmp_path / "airflow" / "manual__2026-11-24T10_00_00_00_00"
    assert study["setup_args"][:3] == ["--setup-only", "--result", str(record)]
    with pytest.raises(AirflowFailException, match="printed no parent run id and its record"):
        mod.study_parent(study, None)
    record.parent.mkdir(parents=True)
    record.write_text(json.dumps({"parent_run_id": "", "finished": False}))
    with pytest.raises(AirflowFailException, match="recorded no parent run id"):
        mod.study_parent(study, None)
    record.write_text(json.dumps({"parent_run_id": "abc123", "finished": True}))
    assert mod.study_parent(study, None) == {"parent_run_id": "abc123", "finished": True}
    assert mod.study_parent(study, {"parent_run_id": "printed", "finished": False})["parent_run_id"] == "printed"
    with pytest.raises(AirflowFailException, match="train_timeout_base_s"):
        mod.resolve_study(
            {
                "conf": "",
                "set": [f"work_dir={tmp_path}"],
                "src": "",
                "train_timeout_base_s": -1,
                "train_timeout_per_tree_s": 1,
            },
            "r",
        )
