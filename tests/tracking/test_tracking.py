"""The MLflow SQLite store under concurrent writers, as the Airflow DAG's mapped training tasks use it.

Each mapped task (``ltr grid --fold F --node K``) is its own process: it finds the study's parent run
(and sets it RUNNING), creates its children and streams their curves at every checkpoint, all into
the one ``<work_dir>/mlflow.db``. ``ltr grid --fold 1 & ltr grid --fold 2 &`` on a fresh work directory
also opens a store that does not exist yet from two processes at once. Real MLflow, real processes.
"""

from __future__ import annotations

import multiprocessing as mp
import os

import pytest

from pipelines.core.config import load_config
from pipelines.core.layout import mlflow_uri
from pipelines.tracking.runs import TAG_CHILD_KEY, TAG_PARENT, Tracker, sqlite_path, tracking_uri

#: several writer processes, no Spark (.ci/run leaves these out on the other Pythons)
pytestmark = pytest.mark.processes

WRITERS = 3
CHECKPOINTS = 8
EVERY = 25  # trees per checkpoint: one curve batch per split per checkpoint


def _writer(uri: str, artifacts: str, i: int, barrier, out) -> None:
    try:
        barrier.wait(120)  # every process opens the store at once (a fresh one in the first test)
        t = Tracker(uri, "concurrent", artifacts)
        parent, _ = t.find_or_create_parent("grid-key", "study", {"folds": [1, 2]})
        rid = t.client.create_run(
            t.experiment_id, run_name=f"child{i}", tags={TAG_PARENT: parent, TAG_CHILD_KEY: f"key{i}"}
        ).info.run_id
        t.log_params(rid, {f"p{j}": j for j in range(150)})
        for c in range(CHECKPOINTS):
            steps = list(range(c * EVERY + 1, (c + 1) * EVERY + 1))
            for split in ("vali", "test"):
                t.log_history(rid, f"ndcg_at_10_{split}", steps, [i + s / 1e4 for s in steps])
        t.log_metrics(rid, {"final_ndcg_at_10_test": float(i)})
        t.log_text(rid, f'{{"writer": {i}}}', "training.json")
        t.finish(rid)
        out.put((i, parent, rid, None))
    except BaseException as e:  # reported to the test, which names it
        out.put((i, None, None, f"{type(e).__name__}: {e}"))


def _run_writers(uri: str, artifacts: str) -> list[tuple[int, str, str]]:
    ctx = mp.get_context("spawn")
    barrier, out = ctx.Barrier(WRITERS), ctx.Queue()
    procs = [ctx.Process(target=_writer, args=(uri, artifacts, i, barrier, out)) for i in range(WRITERS)]
    for p in procs:
        p.start()
    results = [out.get(timeout=300) for _ in procs]
    for p in procs:
        p.join(60)
    errors = [f"writer {i}: {err}" for i, _, _, err in results if err]
    assert not errors, "\n".join(errors)
    return sorted((i, parent, rid) for i, parent, rid, _ in results)


def _check(uri: str, artifacts: str, results: list[tuple[int, str, str]]) -> None:
    parents = {parent for _, parent, _ in results}
    assert len(parents) == 1, f"the writers found or made {len(parents)} parent runs: {parents}"
    t = Tracker(uri, "concurrent", artifacts, create=False)
    children = t.child_runs(parents.pop())
    assert sorted(children) == [f"key{i}" for i in range(WRITERS)]
    want = list(range(1, CHECKPOINTS * EVERY + 1))
    for i, _, rid in results:
        assert children[f"key{i}"] == (rid, "FINISHED")
        for split in ("vali", "test"):
            hist = sorted((m.step, m.value) for m in t.client.get_metric_history(rid, f"ndcg_at_10_{split}"))
            assert [s for s, _ in hist] == want, f"writer {i}, {split}: {len(hist)} of {len(want)} points"
            assert all(v == i + s / 1e4 for s, v in hist)
        run = t.client.get_run(rid)
        assert len(run.data.params) == 150 and run.data.metrics["final_ndcg_at_10_test"] == i
        assert t.load_json(rid, "training.json") == {"writer": i}


def test_concurrent_processes_open_a_fresh_store(tmp_path):
    """Three processes open a store no one has made yet: one schema, one experiment, one parent run."""
    work = tmp_path / "work"
    uri, artifacts = mlflow_uri(str(work)), str(work / "mlartifacts")
    assert not os.path.exists(work)
    _check(uri, artifacts, _run_writers(uri, artifacts))


def test_concurrent_tasks_stream_curves_into_one_store(tmp_path):
    """The DAG's case: ``grid_setup`` made the store and the parent; the mapped tasks then write at once."""
    uri, artifacts = mlflow_uri(str(tmp_path)), str(tmp_path / "mlartifacts")
    t = Tracker(uri, "concurrent", artifacts)
    parent, resumed = t.find_or_create_parent("grid-key", "study", {"folds": [1, 2]})
    assert not resumed
    results = _run_writers(uri, artifacts)
    assert {p for _, p, _ in results} == {parent}
    _check(uri, artifacts, results)


def test_the_tracking_uri_and_the_sqlite_path_are_decided_once(tmp_path):
    """``tracking.uri``, else the work directory's SQLite store; the report's store check reads the same."""
    cfg = load_config(None, [f"work_dir={tmp_path}"])
    assert tracking_uri(cfg) == f"sqlite:///{tmp_path}/mlflow.db"
    assert sqlite_path(tracking_uri(cfg)) == f"{tmp_path}/mlflow.db"
    cfg = load_config(None, [f"work_dir={tmp_path}", "tracking.uri=http://mlflow:5000"])
    assert tracking_uri(cfg) == "http://mlflow:5000" and sqlite_path(tracking_uri(cfg)) == ""
