"""Faults and concurrency of a real grid: kill -9 mid-node and restart, ``--parallel 2`` == sequential,
``ltr grid --plan``."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from pipelines.app.grid import run_grid
from pipelines.core.config import load_config
from pipelines.core.layout import Layout
from pipelines.core.proctree import alive, kill_tree, python_workers, signal_pids
from pipelines.execution.executor import states_of
from pipelines.plan.trie import DONE
from pipelines.store.checkpoints import CheckpointStore
from pipelines.store.results import path_result
from pipelines.study.design import plan_fold, show_plan
from pipelines.testing.processes import ROOT
from pipelines.tracking.runs import Tracker
from tests.helpers import cli_env, committed_files, freeze_if, run_in_steps, set_args, tiny_study, wait_for_file

#: spark: ltr subprocesses besides the shared session; slow: minutes, started first
pytestmark = [pytest.mark.spark, pytest.mark.slow(minutes=5)]

OVERRIDES = tiny_study(
    "grid.experiment=kill",
    "grid.trees=12",
    "grid.switch_points=[4]",
    # a self-paced segment too: its node checkpoints at each of its selections (every 3 trees, beside the others'
    # every 2), and a kill that lands in it resumes from the margins its last choice was made from
    "grid.extra_paths={st: 'noisy_lambdamart:12', sp: 'lambdamart@selfpaced:12'}",
    "selfpaced.every=3",
    "train.checkpoint_every=2",
    "components.noisy_lambdamart.anneal=12",
    # one thread per worker everywhere: the trees of `--parallel 2` (two jobs, one thread each) must equal the
    # sequential `straight` grid's bit for bit (histograms summed in another order give other leaves), so that
    # test_parallel_jobs_equal_one_job compares with the module's `straight` instead of training a grid of its own
    "train.nthread=1",
    sections=["grid", "train"],  # no report here
)


def _cfg(work: Path, *extra: str):
    return load_config(None, [f"work_dir={work}", *OVERRIDES, *extra])


def _plan(cfg, ds_path):
    from pipelines.data.dataset import open_dataset

    return plan_fold(cfg, open_dataset(ds_path), 1), CheckpointStore(Layout.of(cfg).checkpoints)


def _results(cfg, ds_path):
    fp, store = _plan(cfg, ds_path)
    return {p.label: path_result(store, p.label, fp.plan.chains[p.label]) for p in fp.paths}, fp, store


def _histories(cfg, summary):
    t = Tracker.for_config(cfg)
    out = {}
    for r in t.children(summary["parent_run_id"]):
        h = t.client.get_metric_history(r.info.run_id, "ndcg_at_10_test")
        out[r.data.tags["mlflow.runName"]] = sorted((m.step, m.value) for m in h)
    return out


@pytest.fixture(scope="module")
def straight(spark_holder, small_dataset, tmp_path_factory):
    spark = spark_holder.get()
    cfg = _cfg(tmp_path_factory.mktemp("straight") / "work")
    summary = run_grid(spark, cfg, data=small_dataset)
    return cfg, summary


@pytest.mark.parametrize("how", ["SIGKILL to the tree", "SIGTERM to ltr"])
def test_kill_9_mid_node_then_restart_gives_identical_results(spark, small_dataset, straight, tmp_path, how):
    """``ltr grid`` stopped mid-node, then the same grid again (in-process): it resumes the stopped grid's parent
    run and child runs from their checkpoints, retrains no finished node, and its results and MLflow curves equal
    an uninterrupted grid's. Stopped by SIGKILL to its whole tree (a lost machine), or by SIGTERM to ``ltr``
    alone (``kill``, ``timeout``, a scheduler): then it exits 143 with its one line, retries no cancelled job,
    and every process of its tree ends with it (:mod:`pipelines.app.stop`)."""
    work = tmp_path / "work"
    cfg = _cfg(work)
    cmd = [
        # The whole tree at the lowest CPU priority (nice execs the command: the same pid; every process and thread
        # of the tree inherits it): its grid trains 36 checkpoint files in 2-3 s, and on a loaded CI machine this
        # test, at its own priority, once first froze it after the last node had ended (nothing left to resume).
        "nice",
        "-n",
        "19",
        sys.executable,
        "-m",
        "pipelines.app.cli",
        "grid",
        "--master",
        "local[2]",
        "--data",
        small_dataset,
        "--log-level",
        "WARNING",
        *set_args(OVERRIDES),
        "--set",
        f"work_dir={work}",
    ]
    env = cli_env()
    proc = subprocess.Popen(
        cmd, cwd=ROOT, env=env, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    ckpt = work / "checkpoints"
    want = random.Random(os.getpid()).randint(3, 8)  # committed checkpoints before the kill
    wait_for_file(proc, ckpt, "*/t*/_checkpoint.json", "the grid")  # the first checkpoint; from there on, in steps
    frozen = run_in_steps(
        proc.pid,
        lambda: committed_files(ckpt) >= 2 * want,
    )
    if how == "SIGKILL to the tree":
        _kill_tree(proc)  # the driver, its JVM and PySpark's Python workers, mid-node (frozen since the look)
    else:
        _stop_tree(proc, frozen)
    fp, store = _plan(cfg, small_dataset)
    before = states_of(fp.plan, store)
    finished = {k for k, s in before.items() if s.state == DONE}
    assert len(finished) < len(fp.plan.nodes)  # killed before the end
    stamps = {p: p.stat().st_mtime_ns for k in finished for p in (ckpt / k).glob("trees-*.json")}

    t = Tracker.for_config(cfg)
    (killed_parent,) = t.client.search_runs([t.experiment_id], "tags.`ltr.kind` = 'grid'")
    started = {r.info.run_id for r in t.children(killed_parent.info.run_id)}
    assert started  # a child is created RUNNING when its first node starts

    resumed = run_grid(spark, cfg, data=small_dataset)  # `--data X` there, cfg.grid.data empty here: one grid
    assert resumed["resumed"] and resumed["parent_run_id"] == killed_parent.info.run_id
    assert started <= {r.info.run_id for r in t.children(resumed["parent_run_id"])}  # the same child runs
    assert len(t.children(resumed["parent_run_id"])) == len(fp.children)
    assert resumed["trees_built"] == sum(s.trees_left(fp.plan.node(k)) for k, s in before.items())
    assert all(p.stat().st_mtime_ns == t for p, t in stamps.items())  # finished nodes were not retrained
    ours, _, _ = _results(cfg, small_dataset)
    theirs, _, _ = _results(straight[0], small_dataset)
    assert ours.keys() == theirs.keys()
    for name in ours:
        a, b = ours[name], theirs[name]
        assert (a.model, a.trees, a.vali, a.test, a.test_ndcg) == (b.model, b.trees, b.vali, b.test, b.test_ndcg)
    assert _histories(cfg, resumed) == _histories(*straight)  # MLflow: the same curves, logged once


def test_parallel_jobs_equal_one_job(spark, small_dataset, straight, tmp_path):
    """``--parallel 2`` == the module's sequential grid (``straight``: the same study, one job at a time)."""
    cfg = _cfg(tmp_path / "work")
    summary = run_grid(spark, cfg, data=small_dataset, parallel=2)
    assert summary["trained"] == 5
    a, _, _ = _results(cfg, small_dataset)
    b, _, _ = _results(straight[0], small_dataset)
    assert a.keys() == b.keys() and len(a) == 5
    for name in a:
        assert a[name].model == b[name].model and a[name].test == b[name].test, name
    assert _histories(cfg, summary) == _histories(*straight)


def test_plan_command_prints_states_without_training(straight, small_dataset, capsys):
    from pipelines.app.cli import main

    cfg, _ = straight
    text = show_plan(cfg, small_dataset)
    assert text.startswith("fold 1: 7 nodes, ") and "(" in text and "done" in text and "to do" not in text
    assert "ends: mse-4" in text and "noisy_lambdamart 0..12" in text
    args = [
        "grid",
        "--plan",
        "--data",
        small_dataset,
        *set_args(OVERRIDES),
        "--set",
        f"work_dir={cfg.work_dir}",
        "--set",
        "train.eta=0.07",
    ]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "(0 done)" in out and "  done" not in out  # other hyperparameters: other keys, nothing reusable
    # and it says why, under each node: the input that changed since the experiment's last run
    assert "key changed since the last run" in out and "context.train.eta: 0.05 -> 0.07" in out
    assert (
        main(
            [
                "grid",
                "--data",
                small_dataset,
                *set_args(OVERRIDES),
                "--set",
                f"work_dir={cfg.work_dir}",
                "--node",
                "0123456789abcdef0123",
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert "--node 0123456789abcdef0123: no plan node of fold(s) [1] has this key" in err and "ltr grid --plan" in err


def _kill_tree(proc: subprocess.Popen) -> None:
    """Freeze, then SIGKILL ``proc``'s whole tree (:func:`pipelines.core.proctree.kill_tree`: PySpark's daemon runs
    its workers in a process group of their own, so a worker inside a barrier task would outlive a group kill
    by a moment and could commit one more checkpoint after the test has read the states), and reap it."""
    kill_tree(proc.pid)
    proc.wait()


def _stop_tree(proc: subprocess.Popen, frozen: set[int]) -> None:
    """SIGTERM to ``proc`` alone, then let its ``frozen`` tree go on but for the Python workers that train: it
    exits 143 with the stop's one line and no traceback, within 60 s, without retrying the job it cancelled, and
    no process of its tree is left.

    The workers stay frozen, as a worker in the middle of a long tree would be (2.4 s a tree at Istella's size):
    Spark kills a cancelled task's Python worker after ``spark.python.task.killTimeout`` (half a second, set by
    :func:`pipelines.core.session.session_properties`) and not before, and this tiny grid's workers, let go, can
    finish the whole grid in that time (so nothing would be left to resume)."""
    trainers = frozen & set(python_workers(proc.pid))
    assert trainers, "no Python worker was training"
    signal_pids(frozen - trainers, signal.SIGCONT)
    # at once: the kernel may then hand SIGTERM to another thread of the driver than its main thread, which still
    # has the SIGCONT pending (2 runs of 3 before :func:`pipelines.app.stop._watch`, and the main thread, waiting
    # for the job's results, waited for ever)
    os.kill(proc.pid, signal.SIGTERM)
    try:
        _, err = proc.communicate(timeout=60)
        err = err.decode()
        assert proc.returncode == 143, err[-3000:]
        assert "ltr grid: stopped (SIGTERM)" in err and "starting again" not in err, err
        # no traceback, and no error of Spark stopped under a task still running (the cancelled task ends
        # only once Spark has killed its frozen worker, 2 s after the cancel)
        assert "Traceback" not in err and "ERROR" not in err, err
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and any(alive(p) for p in frozen):
            time.sleep(0.05)
        assert not [p for p in frozen if alive(p)]  # its JVM and Python workers ended with it
    except subprocess.TimeoutExpired:
        raise AssertionError("ltr grid did not end within 60 s of SIGTERM") from None
    finally:
        signal_pids({p for p in frozen if alive(p)}, signal.SIGKILL)
        proc.wait()


def _all_executors(cores: int, **conf: str) -> str:
    """``--set spark.conf=...`` that makes a `local-cluster` application wait (up to 3 minutes) until executors
    with ``cores`` cores in all have registered: on a loaded machine the second executor may register
    seconds after the first job is planned, and the automatic worker count would see one barrier slot.
    (Standalone's ratio counts against ``spark.cores.max``, so that is set too.)"""
    return "spark.conf=" + json.dumps(
        {
            "spark.cores.max": str(cores),
            "spark.scheduler.minRegisteredResourcesRatio": "1.0",
            "spark.scheduler.maxRegisteredResourcesWaitingTime": "180s",
            **conf,
        }
    )


def test_killed_executor_worker_is_retried_from_checkpoints(spark, small_dataset, tmp_path):
    """kill -9 the executors' Python workers mid-node on a two-JVM `local-cluster` master: the job is
    started again from the last checkpoints (nothing hangs), and the results equal an uninterrupted run."""
    work = tmp_path / "work"
    extra = [
        "grid.strategies=[]",
        "grid.extra_paths={}",
        "grid.trees=120",
        "grid.switch_points=[60]",
        "grid.mse=false",
        "train.workers=2",
        "train.nthread=1",
        "train.tracker_timeout=120",
    ]
    cmd = [
        sys.executable,
        "-m",
        "pipelines.app.cli",
        "grid",
        "--master",
        "local-cluster[2,1,1024]",
        "--data",
        small_dataset,
        "--log-level",
        "WARNING",
        *set_args([*OVERRIDES, *extra, f"work_dir={work}", "train.checkpoint_every=5", _all_executors(2)]),
    ]
    env = cli_env()
    proc = subprocess.Popen(
        cmd, cwd=ROOT, env=env, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    killed = False
    try:
        deadline = time.time() + 300
        ckpt = work / "checkpoints"
        wait_for_file(proc, ckpt, "*/trees-*.json", "the grid", 300)  # the barrier job's first checkpoint, then steps
        frozen = run_in_steps(proc.pid, lambda: len(list(ckpt.glob("*/trees-*.json"))) >= 3)  # 15 of 120 trees
        workers = python_workers(proc.pid)  # the barrier tasks' workers (and idle ones: harmless)
        signal_pids(workers, signal.SIGKILL)
        killed = bool(workers)
        signal_pids(frozen, signal.SIGCONT)
        try:
            proc.wait(max(1.0, deadline - time.time()))
        except subprocess.TimeoutExpired:
            raise AssertionError("the grid hung after an executor's worker was killed") from None
    finally:
        if proc.poll() is None:
            _kill_tree(proc)
    err = proc.stderr.read().decode()
    assert killed, "no executor worker was found to kill"
    assert proc.returncode == 0, err[-3000:]
    assert "starting again from the last checkpoints" in err  # the job was retried, not restarted from tree 0
    cfg = _cfg(work, *extra)
    base = _cfg(tmp_path / "local", *extra)
    run_grid(spark, base, data=small_dataset)
    a, _, _ = _results(cfg, small_dataset)
    b, _, _ = _results(base, small_dataset)
    assert a.keys() == b.keys()
    for name in a:
        assert a[name].model == b[name].model and a[name].test == b[name].test, name


def test_a_two_worker_train_killed_on_a_cluster_resumes_on_one_worker_with_the_same_trees(
    spark, small_dataset, tmp_path
):
    """kill -9 an `ltr train` of 2 barrier workers x 2 threads (automatic sizing from the barrier slots of
    `local-cluster[2,2,1024]` with spark.task.cpus=2) half-way; resume it on `local[2]` with 1 worker: the
    model equals a clean 1-worker run (the fold's global cuts: the trees do not depend on the worker count)."""
    from pipelines.app.train import run_train
    from pipelines.core.config import load_config

    path = "mse:10,lambdamart:20"
    over = tiny_study(
        "train.checkpoint_every=2", "train.tracker_timeout=120", "spark.shuffle_partitions=2", sections=["train"]
    )
    work = tmp_path / "work"
    cmd = [
        sys.executable,
        "-m",
        "pipelines.app.cli",
        "train",
        "--master",
        "local-cluster[2,2,1024]",
        "--data",
        small_dataset,
        "--fold",
        "1",
        "--path",
        path,
        "--out",
        str(tmp_path / "killed"),
        "--log-level",
        "INFO",
        *set_args([*over, f"work_dir={work}", _all_executors(4, **{"spark.task.cpus": "2"})]),
    ]
    env = cli_env()
    proc = subprocess.Popen(
        cmd, cwd=ROOT, env=env, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    ckpt = work / "checkpoints"
    try:
        wait_for_file(proc, ckpt, "*/trees-*.json", "the train")  # the executors' first checkpoint, then steps
        run_in_steps(proc.pid, lambda: len(list(ckpt.glob("*/trees-*.json"))) >= 6)  # 12 of 30 trees, frozen
        _kill_tree(proc)
    finally:
        if proc.poll() is None:
            _kill_tree(proc)
    err = proc.stderr.read().decode()
    assert "training on 2 workers x 2 threads (auto; 2 barrier task slots" in err, err[-3000:]
    metas = [json.loads(p.read_text()) for p in ckpt.glob("*/t*/_checkpoint.json")]
    assert metas and {m["shards"] for m in metas} == {2} and not all(m["done"] for m in metas)

    cfg = load_config(None, [*over, f"work_dir={work}", "train.workers=1", f"train.path={path}"])
    resumed = run_train(spark, small_dataset, 1, path, [], cfg.train, cfg.metric, str(tmp_path / "resumed"), str(ckpt))
    assert 0 < resumed["training"]["trees"] < 30  # continued from the 2-worker checkpoints
    clean = run_train(
        spark, small_dataset, 1, path, [], cfg.train, cfg.metric, str(tmp_path / "clean"), str(tmp_path / "clean-ckpt")
    )
    assert clean["training"]["trees"] == 30 and clean["training"]["jobs"][0]["workers"] == 1
    a, b = ((tmp_path / d / "model.json").read_bytes() for d in ("resumed", "clean"))
    ta, tb = (json.loads(m)["learner"]["gradient_booster"]["model"]["trees"] for m in (a, b))
    assert len(ta) == len(tb) == 30
    for x, y in zip(ta, tb, strict=True):  # the same splits; leaves up to the summation order of histograms
        assert x["split_indices"] == y["split_indices"] and x["left_children"] == y["left_children"]
        np.testing.assert_allclose(x["base_weights"], y["base_weights"], rtol=1e-5, atol=1e-7)
    for split in ("vali", "test"):
        key = f"{split}_ndcg_at_10"
        assert resumed["final"][key] == pytest.approx(clean["final"][key], abs=1e-6)


def test_two_processes_on_one_node_one_trains_the_other_waits_or_stops(spark, small_dataset, tmp_path, caplog):
    """Process A (`ltr train`) holds a node's lease; process B (this one) on the same checkpoints: with no wait it
    stops at once with one line naming A, before writing anything; with a wait it gets the lease once A
    released it, finds the node done and trains nothing. The result equals a single run's."""
    import logging

    from pipelines.app.train import run_train
    from pipelines.core.config import load_config
    from pipelines.store.lease import LeaseHeld

    path = "lambdamart:60"
    over = tiny_study("train.checkpoint_every=5", "spark.shuffle_partitions=2", sections=["train"])
    work = tmp_path / "work"
    cmd = [
        sys.executable,
        "-m",
        "pipelines.app.cli",
        "train",
        "--master",
        "local[1]",
        "--data",
        small_dataset,
        "--fold",
        "1",
        "--path",
        path,
        "--out",
        str(tmp_path / "a"),
        "--log-level",
        "WARNING",
        *set_args([*over, f"work_dir={work}"]),
    ]
    env = cli_env()
    proc = subprocess.Popen(
        cmd, cwd=ROOT, env=env, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    ckpt = work / "checkpoints"
    cfg = load_config(None, [*over, f"work_dir={work}", f"train.path={path}"])
    try:
        # A is frozen as soon as its driver holds the node's lease, before its barrier job starts: seconds before
        # its first tree (14.9 s from the start to the lease, 27.1 s to the first checkpoint, 27.9 s to the exit
        # on this project's 2-core machine; CI once saw A finish between its first checkpoint and the freeze).
        wait_for_file(proc, ckpt, "*/_lease.json", "A")
        frozen = freeze_if(proc.pid, lambda: bool(list(ckpt.glob("*/_lease.json"))))  # for B's first try
        assert frozen is not None, "A released the node before it was frozen"
        try:
            before = {p: p.stat().st_mtime_ns for p in ckpt.rglob("*")}
            with pytest.raises(
                LeaseHeld,
                match=rf"node \w+ is being written by another process: host \S+ pid "
                rf"{proc.pid} \(fold 1: the same `ltr train` command\) holds its "
                "lease until",
            ):
                run_train(spark, small_dataset, 1, path, [], cfg.train, cfg.metric, str(tmp_path / "b"), str(ckpt))
            assert {p: p.stat().st_mtime_ns for p in ckpt.rglob("*")} == before  # B wrote nothing
            # B again, willing to wait: it waits (A still frozen), and once A goes on and finishes, gets the lease
            waiting = replace_train(cfg, lease_wait=240.0)
            got: dict = {}
            b_thread = threading.Thread(
                target=lambda: got.update(
                    b=run_train(spark, small_dataset, 1, path, [], waiting, cfg.metric, str(tmp_path / "b"), str(ckpt))
                )
            )
            with caplog.at_level(logging.INFO, logger="pipelines.store.lease"):
                b_thread.start()
                deadline = time.time() + 120
                while (
                    time.time() < deadline
                    and b_thread.is_alive()
                    and not any("waiting for the lease held by host" in r.getMessage() for r in caplog.records)
                ):
                    time.sleep(0.05)
                assert any("waiting for the lease held by host" in r.getMessage() for r in caplog.records)
        finally:
            signal_pids(frozen, signal.SIGCONT)
        b_thread.join(240)
        assert proc.wait(60) == 0, proc.stderr.read().decode()[-3000:]
        b = got["b"]
    finally:
        if proc.poll() is None:
            _kill_tree(proc)
    assert b["training"]["trees"] == 0  # B found the node done: nothing trained twice
    assert not list(ckpt.glob("*/_lease.json"))  # released at the end
    run_train(spark, small_dataset, 1, path, [], cfg.train, cfg.metric, str(tmp_path / "c"), str(tmp_path / "clean"))
    models = [(tmp_path / d / "model.json").read_bytes() for d in ("a", "b", "c")]
    assert models[0] == models[1] == models[2]


def replace_train(cfg, **changes):
    from dataclasses import replace

    return replace(cfg.train, **changes)


def test_any_error_inside_a_barrier_task_is_one_line_naming_fold_node_path_and_cause(
    spark, small_dataset, tmp_path, monkeypatch, capsys
):
    """A plain ValueError raised by the worker loop inside the barrier task (not one of our error types):
    one line with the fold, the node, its paths, the cause and the resume command; the trace in a file."""
    from dataclasses import replace

    from pipelines.app import cli
    from pipelines.data.dataset import open_dataset
    from pipelines.execution.barrier_job import make_settings
    from pipelines.execution.executor import Execution, NodeFailed, execute_plan

    cfg = _cfg(tmp_path / "work", "grid.strategies=[]", "grid.extra_paths={}")
    ds = open_dataset(small_dataset)
    fp, store = _plan(cfg, small_dataset)
    bogus = replace(cfg.train, job_retries=0)
    object.__setattr__(bogus, "base_margin", "bogus")  # past the config's check: a plain ValueError in the task
    settings = make_settings(bogus, cfg.metric, ds, 1)
    how = Execution.from_config(bogus, workers=1, nthread=1, parallel=1, resume_hint="ltr grid --folds 1")
    with pytest.raises(NodeFailed) as err:
        execute_plan(spark, fp.plan, ds, {}, settings, store, how)
    msg = str(err.value)
    assert "\n" not in msg
    first = fp.plan.nodes[0]
    assert msg.startswith(f"fold 1: node {first.key} (")
    assert "ValueError: could not convert string to float: 'bogus'" in msg
    assert "paths " in msg and fp.paths[0].label in msg and msg.endswith("Resume with: ltr grid --folds 1")

    def failing(args):
        raise err.value

    monkeypatch.setattr(cli, "cmd_grid", failing)
    assert cli.main(["grid"]) == 1
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("ltr grid: error:")]
    assert len(lines) == 1 and "(full trace: " in lines[0]
    trace = lines[0].rsplit("(full trace: ", 1)[1].rstrip(")")
    assert "Traceback" in Path(trace).read_text() and "ValueError" in Path(trace).read_text()
    os.unlink(trace)
    # the same value from the config is refused up front, before any Spark job (exit 2)
    from pipelines.core.config import ConfigError

    with pytest.raises(ConfigError, match="train.base_margin"):
        make_settings(replace(cfg.train, base_margin="bogus"), cfg.metric, ds, 1)
