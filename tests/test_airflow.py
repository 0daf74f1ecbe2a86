"""The Airflow DAG ``ltr_study`` (jobs/ltr_study_dag.py), run end to end with ``dag.test()``.

Needs the ``[airflow]`` extra (skipped without Airflow), Java, and ``spark-submit`` (the venv's
``bin``, put on PATH while these tests run). Airflow reads its settings when imported, so its
environment (a temporary AIRFLOW_HOME, the DAGs folder, the Spark connection) is set before the
import; everything is restored when the module is done.
Tiny study: 40 generated queries, folds 1 and 2, LambdaMART-4, MSE-2 and q_nrel-2 per fold.
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
    # the jobs' driver JVMs: no C2 compiler, serial GC (measured: ~40% less CPU per tiny spark-submit)
    os.environ.setdefault("SPARK_SUBMIT_OPTS", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
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
    assert set(dag.params.keys()) >= {"conf", "set", "src", "spark_conn_id", "spark_conf", "archives",
                                      "executor_memory", "train_timeout_base_s", "train_timeout_per_tree_s"}
    train = dag.get_task("train")  # retried with back-off, a bounded number at once
    assert train.retries == 3 and train.retry_exponential_backoff and train.max_active_tis_per_dagrun == 2


def test_bad_config_fails_the_first_task_before_any_spark_job(dag, tmp_path):
    run = dag.test(run_conf={"src": "", "set": [f"work_dir={tmp_path}", "train.leaves=many"]})
    states = _states(run)
    assert str(run.state) == "failed" and states["study"] == "failed", states
    assert all(v in ("upstream_failed", "None") for k, v in states.items() if k != "study"), states


def _states(run) -> dict[str, str]:
    """task id (and map index) -> state of one DAG run."""
    return {t.task_id + (f"[{t.map_index}]" if t.map_index >= 0 else ""): str(t.state)
            for t in run.get_task_instances()}


def _checkpoints(work: Path) -> dict[str, int]:
    return {str(p.relative_to(work)): p.stat().st_mtime_ns for p in (work / "checkpoints").rglob("*") if p.is_file()}


def test_study_end_to_end_then_rerun_trains_nothing(dag, tmp_path):
    import mlflow

    work = tmp_path / "work"
    # every param given: dag.test() keeps the params of an earlier call on the DAG object as its defaults
    tiny = [f"work_dir={work}", "generate.queries=40", "generate.workers=1", "spark.shuffle_partitions=2",
            "grid.experiment=airflow-study", "grid.folds=[1,2]", "grid.trees=4", "grid.switch_points=[2]",
            "grid.strategies=[q_nrel]", "grid.extra_paths={}", "grid.extra_curricula={}", "grid.log_models=false",
            "train.leaves=4", "train.max_bin=32", "train.score_dist_trees=[2]", "report.permutations=100",
            "report.table2_sizes=[2]"]
    conf = {"conf": "", "src": "", "spark_conn_id": "spark_default", "set": tiny}

    first = dag.test(run_conf=conf)
    states = _states(first)
    assert str(first.state) == "success", states
    for t in ("study", "generate", "ingest", "record_ingest", "difficulty", "grid_setup", "units", "report"):
        assert states[t] == "success", states
    # training is mapped over the plan's units (a root node and the nodes below it), every fold's
    from pipelines.config import load_config
    from pipelines.dataset import open_dataset
    from pipelines.grid import plan_fold

    cfg, ds = load_config(None, tiny), open_dataset(str(work / "dataset"))
    fps = {f: plan_fold(cfg, ds, f) for f in (1, 2)}
    assert [len(fp.plan.units()) for fp in fps.values()] == [3, 3]  # LambdaMART, MSE, q_nrel's first stage
    trains = [ti for ti in first.get_task_instances() if ti.task_id == "train"]
    # labelled by what they train: the unit's root node and the paths that end in it
    assert sorted(ti.rendered_map_index for ti in trains) == sorted(fp.unit_label(i) for fp in fps.values()
                                                                    for i in range(3))
    assert "fold 1: mse 0..2 -> mse-2" in {ti.rendered_map_index for ti in trains}
    assert all(str(ti.state) == "success" for ti in trains), states
    assert json.loads((work / "_ingest_key.json").read_text())["fingerprint"].startswith("sha256:")

    client = mlflow.MlflowClient(f"sqlite:///{work}/mlflow.db")
    exp = client.get_experiment_by_name("airflow-study")
    parents = client.search_runs([exp.experiment_id], "tags.`ltr.kind` = 'grid'")
    assert len(parents) == 1  # every task of the study wrote to one parent run
    parent = parents[0]
    assert parent.info.status == "FINISHED"
    children = client.search_runs([exp.experiment_id], f"tags.`mlflow.parentRunId` = '{parent.info.run_id}'")
    assert sorted((c.data.tags["ltr.fold"], c.info.status) for c in children) == \
        [(f, "FINISHED") for f in ("1", "1", "1", "2", "2", "2")]  # LambdaMART, MSE-2, q_nrel-2 per fold
    assert (work / "report" / "report.md").is_file()
    assert "report/report.md" in {a.path for a in client.list_artifacts(parent.info.run_id, "report")}
    table = (work / "report" / "report.md").read_text()
    assert "[1/2 folds]" not in table  # every cell averages both folds

    ckpt = _checkpoints(work)
    assert ckpt
    second = dag.test(run_conf=conf)
    states = _states(second)
    assert str(second.state) == "success", states
    for t in ("generate", "ingest", "record_ingest", "difficulty"):  # inputs unchanged: skipped
        assert states[t] == "skipped", states
    for t in ("grid_setup", "units", "report"):
        assert states[t] == "success", states
    assert states["train"] == "skipped", states  # the study is finished: mapped over no unit, no spark-submit
    assert _checkpoints(work) == ckpt  # nothing trained: no checkpoint written or rewritten
    assert len(client.search_runs([exp.experiment_id], "tags.`ltr.kind` = 'grid'")) == 1
    again = client.search_runs([exp.experiment_id], f"tags.`mlflow.parentRunId` = '{parent.info.run_id}'")
    assert {(c.info.run_id, c.info.end_time) for c in again} == {(c.info.run_id, c.info.end_time) for c in children}
