"""The study under a real scheduler: Airflow 3 (api-server, scheduler, dag-processor, LocalExecutor with
parallelism 3) on PostgreSQL, an ``mlflow server`` on PostgreSQL with served artifacts, the DAG file copied
into Airflow's dags folder, runs triggered through Airflow's CLI (``pipelines/testing/deployment.py`` starts and stops
everything). What ``dag.test()`` cannot show: mapped training tasks running at once, a task killed (its whole
process tree, SIGKILL) and retried by Airflow, MLflow children made and finished by concurrent processes.

Skipped, with the reason, where PostgreSQL's server binaries or the ``[deploy]`` extra are missing.
Tiny study: 40 generated queries, fold 1, LambdaMART-200, MSE-10 and q_nrel-10 (3 units).

The default store (``sqlite:///<work_dir>/mlflow.db``) under concurrent writers is tested in
``tests/tracking/test_tracking.py`` with real processes; a second study here on that store (90 s in CI) tested the
same MLflow calls through the same DAG again, and was dropped to keep CI inside its budget.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from collections import deque
from pathlib import Path
from urllib.parse import quote

import pytest

from pipelines.core.proctree import alive, kill_tree, tree_pids
from pipelines.store.lease import read_lease
from pipelines.testing.deployment import Deployment, missing
from tests.helpers import files_holding, freeze_if, lower_priority, tiny_study

#: spark: the DAG's spark-submits; deployment: PostgreSQL, an MLflow server, Airflow; slow: minutes. Started after
#: the other slow modules (the lowest rank), so that it runs beside the light tests: beside the standalone-cluster
#: module, on a slow machine, its concurrent-units test ran past its limit (benchmarks/RESULTS.md, "What CI's
#: settings rest on").
pytestmark = [
    pytest.mark.spark,
    pytest.mark.deployment,
    pytest.mark.slow(minutes=0.5),
    pytest.mark.skipif(bool(missing()), reason=missing() or "ok"),
]

#: The killer catches fold 1's LambdaMART unit between trees 3 and TREES (in steps: see Killer). 60 trees of 40
#: queries take well under a second once a worker has its rows, and the units reach their trees together (the
#: workers read their rows without a shuffle), so on a loaded machine the killer's thread could let the unit run
#: from no checkpoint to its last tree between two steps. 200 trees make that window more than three times longer
#: than the unit's unfrozen time at the same pace.
TREES, SWITCH = 200, 10
STUDY = tiny_study(
    "generate.queries=40",
    "generate.workers=1",
    "spark.shuffle_partitions=2",
    f"grid.trees={TREES}",
    f"grid.switch_points=[{SWITCH}]",
    "train.checkpoint_every=3",
    f"report.table2_sizes=[{SWITCH}]",
)


@pytest.fixture(scope="module")
def deployment():
    d = Deployment(
        parallelism=3,
        env={
            "LTR_TASK_RETRIES": "2",
            "LTR_RETRY_DELAY_S": "1",
            "LTR_TRAINING_SLOTS": "3",
            "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false",
        },
    )  # MLflow's GenAI job runner: 8 idle processes
    saved = {k: os.environ.get(k) for k in ("MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD")}
    try:
        d.start()
        os.environ.update(d.credentials())  # this process reads every run as the server's admin
        yield d
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        d.stop()  # every process, also when a test failed


def _children(client, experiment: str) -> tuple[list, list]:
    exp = client.get_experiment_by_name(experiment)
    runs = client.search_runs([exp.experiment_id], max_results=1000)
    return (
        [r for r in runs if r.data.tags.get("ltr.kind") == "grid"],
        [r for r in runs if r.data.tags.get("ltr.kind") == "child"],
    )


def _command_lines(d: Deployment, stop: threading.Event, out: set[str]) -> None:
    """Every 0.2 s until ``stop``: the command line of every process of the deployment's services' trees and of
    every process whose command line names its folder (the task processes' spark-submits and drivers)."""
    import psutil

    while not stop.wait(0.2):
        pids = {p for s in d.service_pids() for p in tree_pids(s)}
        for p in psutil.process_iter(["pid", "cmdline"]):
            try:
                cmd = " ".join(p.info["cmdline"] or [])
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
            if p.info["pid"] in pids or str(d.root) in cmd:
                out.add(cmd)


def _overlapping(tis: list[dict]) -> int:
    """The most training tasks that ran at one moment (from their final tries' start and end)."""
    spans = [(t["start_date"], t["end_date"]) for t in tis if t["task_id"] == "train" and t["start_date"]]
    return max(sum(1 for a, b in spans if a <= s < b) for s, _ in spans)


#: The LambdaMART unit's progress line, logged at its first tree (only that unit trains TREES trees).
FIRST_TREE = re.compile(rf"fold 1: \d+/{TREES} trees")


class Killer:
    """Once fold 1's LambdaMART unit has committed a checkpoint and is not done, kill its task process and
    everything below it (spark-submit's JVM, the Python driver, PySpark's daemon and workers, in process
    groups of their own; :mod:`pipelines.core.proctree`), and remember the checkpoint it stopped at.

    Called every 50 ms by a thread of its own (:meth:`watch`). The task process is found as soon as its spark-submit
    runs; once its workers have built a tree (the try's progress line, :meth:`training`) or committed a checkpoint,
    the unit runs in steps: each call freezes the whole tree, reads the node's checkpoints
    (:func:`tests.helpers.freeze_if`), and either kills it (a checkpoint, not the last tree) or lets it go on until
    the next call. So "a checkpoint committed and the unit not finished" is seen in one frozen state, however slowly
    this thread is scheduled (a killer that froze the unit once it saw a checkpoint let it finish in between on a
    loaded machine). Each step stops the processes of the last one first (``known``): else the unit runs on while
    the step reads every process of a loaded machine, and can reach its last tree within one step. And the unit's
    processes get the lowest CPU priority once its driver holds the lease (``lowered``): at nice 19 the unit yields
    the core to this thread as it wakes, where a busy machine would otherwise let it run its 200 trees while this
    thread waits for a core. A
    try that ends by itself (a loaded machine can fail one) is not the process to freeze any more: the killer looks
    for the next try's (``tasks``), instead of freezing a dead tree while the retry trains unwatched. What every
    step saw is kept (``trace``) and is in the error if the unit still gets away.

    Not before the first tree: a stop and continue while XGBoost's workers join their tracker fails their
    ``recv`` with EINTR (Linux does not restart a socket call with a timeout after SIGSTOP/SIGCONT, signal(7)),
    and XGBoost gives up ("Failed to bootstrap the communication group ... recv Interrupted system call"): steps
    from the lease on failed a try that way, and its job-level retry too."""

    def __init__(self, work: Path, logs: Path) -> None:
        self.work, self.node, self.done_at, self.killed, self.unit, self.task = work, None, None, 0, None, None
        self.logs = logs  # Airflow's logs of the train task (map_index=*/attempt=N.log)
        self.trained = -1  # the try (its number) whose first tree was seen in its log: read no more then
        self.known: set[int] = set()  # the task's tree at the last step: stopped first at the next one
        self.lowered: set[int] = set()  # the task's processes given the lowest CPU priority (nice 19)
        self.trace: deque[str] = deque(maxlen=30)  # what the last steps saw (in the error if the unit gets away)
        self.tasks: list[int] = []  # the unit's task processes seen, one a try (one, unless a try failed by itself)
        self.t0 = time.monotonic()

    def __call__(self) -> None:
        import psutil

        if self.killed:
            return
        if self.node is None:
            if not (self.work / "curricula").exists():
                return
            from pipelines.core.config import load_config
            from pipelines.data.dataset import open_dataset
            from pipelines.study.design import plan_fold

            try:
                fp = plan_fold(
                    load_config(None, [f"work_dir={self.work}", *STUDY]), open_dataset(str(self.work / "dataset")), 1
                )
            except Exception:  # noqa: BLE001 - the curricula are being written: next poll
                return
            if fp.provisional:
                return
            self.unit = next(i for i in range(len(fp.plan.units())) if fp.unit_label(i).endswith("-> lambdamart"))
            self.node = fp.plan.units()[self.unit][0]
            from pipelines.store.checkpoints import CheckpointStore

            self.store = CheckpointStore(str(self.work / "checkpoints"))
        if self.task is not None and not alive(self.task):  # that try ended without us (Airflow retries it)
            self.trace.append(f"{time.monotonic() - self.t0:.3f}s task process {self.task} ended: the next try's")
            self.task, self.known, self.lowered = None, set(), set()
        if self.task is None:  # the unit's task process, found before it checkpoints
            for p in psutil.process_iter(["cmdline"]):
                cmd = p.info["cmdline"] or []
                if (
                    "org.apache.spark.deploy.SparkSubmit" in cmd
                    and "org.apache.spark.launcher.Main" not in cmd  # spark-class's launcher, not spark-submit
                    and f"1:{self.unit}" in cmd
                    and str(self.work) in " ".join(cmd)
                ):
                    try:
                        while p is not None and p.name() in ("bash", "sh", "dash", "java"):
                            p = p.parent()  # up from spark-submit's scripts (and subshells) to what ran them
                    except psutil.NoSuchProcess:  # a subshell ended meanwhile: the next poll
                        return
                    self.task = p.pid if p is not None else None  # the Airflow task process
                    self.tasks.append(self.task)
                    self.trace.append(f"{time.monotonic() - self.t0:.3f}s try {len(self.tasks)}: process {self.task}")
                    return
            return
        lease, seen = read_lease(self.store, self.node), self.store.latest(self.node)
        trees = self.training()
        self.trace.append(f"{time.monotonic() - self.t0:.3f}s lease={lease is not None} latest={seen} trees={trees}")
        if not trees and not seen:
            if lease is not None:  # nice 19 from here on (a priority is no stop: it breaks nothing)
                lower_priority(tree_pids(self.task), self.lowered)
            return  # no tree built yet (a stop would break its workers' start, see above): it runs freely
        if freeze_if(self.task, lambda: self.store.latest(self.node) is not None, self.known, self.lowered) is None:
            self.trace.append(f"{time.monotonic() - self.t0:.3f}s frozen {len(self.known)}, no checkpoint: let go")
            return  # no checkpoint yet: the unit goes on until the next call
        latest = self.store.latest(self.node) or 0  # the checkpoint the frozen unit had committed
        if latest >= TREES:
            kill_tree(self.task)
            raise AssertionError(
                "fold 1's LambdaMART unit finished within one step of the killer; its last steps:\n"
                + "\n".join(self.trace)
            )
        killed = kill_tree(self.task)
        if not killed:  # the task process ended meanwhile: the next poll finds the next try's
            return
        self.killed, self.done_at = len(killed), latest

    def training(self) -> bool:
        """Whether this try of the unit has built a tree: its driver's first progress line (``fold 1: k/TREES
        trees``, logged at the first tree) is in the try's Airflow log. Only the LambdaMART unit trains TREES trees;
        the try's attempt number is the count of its task processes seen (as the test asserts)."""
        if self.trained == len(self.tasks):
            return True
        for log in self.logs.glob(f"map_index=*/attempt={len(self.tasks)}.log"):
            try:
                if FIRST_TREE.search(log.read_text(errors="replace")):
                    self.trained = len(self.tasks)
                    return True
            except OSError:
                continue
        return False

    def watch(self, stop: threading.Event) -> threading.Thread:
        """Call this killer every 50 ms until it has killed or ``stop`` is set; an error it raises is kept in
        ``self.error`` (the test raises it)."""
        self.error: BaseException | None = None

        def loop() -> None:
            while not stop.is_set() and not self.killed:
                try:
                    self()
                except BaseException as e:  # noqa: BLE001 - handed to the test's thread
                    self.error = e
                    return
                stop.wait(0.05)

        t = threading.Thread(target=loop, name="killer", daemon=True)
        t.start()
        return t


#: The study's own wait (900 s) and then the sequential oracle grid: the suite's 600 s default cut this test in the
#: oracle's first Spark job on a loaded machine (benchmarks/RESULTS.md, "What CI's settings rest on").
@pytest.mark.timeout(1500)
def test_concurrent_units_one_run_per_child_and_a_killed_task_resumed_by_airflow(deployment, spark, tmp_path):
    import mlflow

    d = deployment
    work = d.root / "work"
    study = [f"work_dir={work}", *STUDY, "grid.experiment=deploy"]  # the server: the connection mlflow_default
    d.trigger("study", {"set": study})
    killer, stop = Killer(work, d.task_log_dir("study", "train")), threading.Event()
    watcher = killer.watch(stop)
    commands: set[str] = set()  # every command line of the deployment's processes while the study runs (ps)
    seen = threading.Thread(target=_command_lines, args=(d, stop, commands), daemon=True)
    seen.start()
    try:
        state = d.wait_run("study", 900)
    finally:
        stop.set()
        watcher.join(30)
        seen.join(30)
    if killer.error is not None:
        raise killer.error
    tis = d.task_instances("study")
    assert state == "success", d.states("study")
    assert killer.killed >= 4, "the task's tree: task process, JVM, Python driver, PySpark daemon/worker"
    # no password on any command line (what `ps` shows every user), raw or URL-quoted, while the study ran
    assert len(commands) > 20 and any("SparkSubmit" in c for c in commands), len(commands)
    leaked = {n for n, pw in d.passwords.items() for c in commands if pw in c or quote(pw) in c}
    assert not leaked, leaked
    # nor in any file of the deployment but its secrets: task logs, service logs, work_dir, artifacts, databases
    assert files_holding(d.root, *(pw.encode() for pw in d.passwords.values()), skip=d.secrets) == []

    # (a) the mapped training tasks ran at once (the LocalExecutor's 3 slots), labelled by what they train
    trains = [t for t in tis if t["task_id"] == "train"]
    assert len(trains) == 3 and _overlapping(tis) >= 2, trains
    assert {t["rendered_map_index"] for t in trains} == {
        f"fold 1: lambdamart 0..{TREES} -> lambdamart",
        f"fold 1: mse 0..{SWITCH} -> mse-{SWITCH}",
        f"fold 1: lambdamart@q_nrel.0 0..{SWITCH} -> q_nrel-{SWITCH}",
    }

    # (c) the killed task was retried by Airflow and continued from its checkpoints
    killed = next(t for t in trains if t["rendered_map_index"] == f"fold 1: lambdamart 0..{TREES} -> lambdamart")
    # the try after the killed one (the second, unless an earlier try failed by itself: the killer's trace says)
    assert killed["try_number"] == len(killer.tasks) + 1, (killed, killer.tasks)
    # every try of it, in Airflow's history, one after the other (the timeline bench_deploy --timeline prints)
    tries = [t for t in d.timeline("study") if t["task"] == f"train[{killed['map_index']}]"]
    assert [t["try"] for t in tries] == list(range(1, killed["try_number"] + 1)), tries
    assert all(a["end"] <= b["start"] for a, b in zip(tries, tries[1:])) and tries[-1]["state"] == "success", tries
    retry_log = d.task_log("study", "train", killed["map_index"], len(killer.tasks) + 1)
    built = [int(n) for n in re.findall(r"trained 1 nodes \((\d+) trees\)", retry_log)]
    # from the checkpoint seen before the kill, or a later one committed before the kill landed
    assert len(built) == 1 and 0 < built[0] <= TREES - killer.done_at, (built, killer.done_at)

    # (b) one parent, every child exactly once and FINISHED (none left RUNNING by the killed attempt)
    client = mlflow.MlflowClient(d.mlflow_uri)
    parents, children = _children(client, "deploy")
    assert [p.info.status for p in parents] == ["FINISHED"]
    names = sorted(c.info.run_name for c in children)
    assert names == sorted(f"fold1/{s}" for s in ("lambdamart", f"mse-{SWITCH}", f"q_nrel-{SWITCH}")), names
    assert {c.info.status for c in children} == {"FINISHED"}
    # artifacts through the server (mlflow-artifacts:/), none in the tasks' work_dir
    assert all(c.info.artifact_uri.startswith("mlflow-artifacts:/") for c in children)
    assert not (work / "mlartifacts").exists()
    assert "report/report.md" in {a.path for a in client.list_artifacts(parents[0].info.run_id, "report")}
    # the parent run the DAG's tasks got from grid_setup's record (this run's folder in work_dir/airflow)
    assert json.loads((work / "airflow" / "study" / "grid_setup.json").read_text())["parent_run_id"] == (
        parents[0].info.run_id
    )

    # ... and the results equal a sequential `ltr grid` of the same study on the same data (what `ltr grid`
    # runs, in this process's Spark session: one JVM start less in CI)
    from pipelines.app.grid import run_grid
    from pipelines.core.config import load_config

    seq = tmp_path / "seq"
    run_grid(
        spark, load_config(None, [f"work_dir={seq}", *STUDY, "grid.experiment=deploy", f"grid.data={work / 'dataset'}"])
    )
    seq_client = mlflow.MlflowClient(f"sqlite:///{seq}/mlflow.db")
    _, seq_children = _children(seq_client, "deploy")
    for c in children:
        twin = next(s for s in seq_children if s.info.run_name == c.info.run_name)
        for m in ("ndcg_at_10_test", "ndcg_at_10_vali"):
            ours = [(x.step, x.value) for x in client.get_metric_history(c.info.run_id, m)]
            theirs = [(x.step, x.value) for x in seq_client.get_metric_history(twin.info.run_id, m)]
            assert sorted(ours) == sorted(theirs), (c.info.run_name, m)  # each step logged once, same values


@pytest.mark.timeout(900)  # the run's own wait is 600 s
def test_a_second_run_of_the_finished_study_trains_nothing(deployment):
    """Triggered again with the same params: the steps whose inputs did not change are skipped, no unit is
    mapped (no training application starts), no run is made or touched."""
    import mlflow

    d = deployment
    work = d.root / "work"
    if d.run_state("study") != "success":
        pytest.skip("the first study did not succeed")
    client = mlflow.MlflowClient(d.mlflow_uri)
    before = {r.info.run_id: r.info.end_time for r in _children(client, "deploy")[1]}
    ckpt = {str(p): p.stat().st_mtime_ns for p in (work / "checkpoints").rglob("*") if p.is_file()}
    study = [f"work_dir={work}", *STUDY, "grid.experiment=deploy"]  # the server: the connection mlflow_default
    d.trigger("again", {"set": study})
    assert d.wait_run("again", 600) == "success", d.states("again")
    states = d.states("again")
    for t in ("generate", "ingest", "record_ingest", "difficulty", "train"):
        assert states[t].startswith("skipped"), states
    for t in ("grid_setup", "parent", "units", "report"):
        assert states[t].startswith("success"), states
    assert {str(p): p.stat().st_mtime_ns for p in (work / "checkpoints").rglob("*") if p.is_file()} == ckpt
    parents, children = _children(client, "deploy")
    assert len(parents) == 1 and {r.info.run_id: r.info.end_time for r in children} == before


@pytest.mark.timeout(600)
def test_the_tracking_server_is_closed_and_bad_credentials_fail_the_first_task_in_one_line(deployment):
    """The production layout is closed: a request without credentials gets 401. A run whose MLflow connection has
    a wrong password fails its first task (no retry) with one line naming the connection; a run that puts a
    password in its params fails there too, naming where credentials go, and the password is in no task log."""
    import urllib.request

    d = deployment
    assert d.mlflow_api("experiments/search?max_results=1", auth=("", "")) == 401
    assert d.mlflow_api("experiments/search?max_results=1", auth=("ltr", "wrong-password-0")) == 401
    assert d.mlflow_api("experiments/search?max_results=1") == 200  # the admin
    with urllib.request.urlopen(f"{d.mlflow_uri}/health", timeout=5) as r:  # open: a load balancer's probe
        assert r.status == 200
    study = [f"work_dir={d.root / 'work-bad'}", *STUDY, "grid.experiment=deploy-bad"]
    planted = d.passwords["ltr"]
    runs = {
        "wrong": ({"set": study, "mlflow_conn_id": "mlflow_wrong"}, "refused the credentials of the Airflow "
                  "connection 'mlflow_wrong' (UNAUTHENTICATED)"),
        "leaky": ({"set": [*study, f"tracking.uri=http://ltr:{planted}@127.0.0.1:{d.mlflow_port}"]},
                  "holds a credential, which the Airflow UI shows"),
    }  # fmt: skip
    for run_id, (conf, _) in runs.items():
        d.trigger(run_id, conf)
    for run_id, (_, says) in runs.items():
        assert d.wait_run(run_id, 300) == "failed", d.states(run_id)
        states = d.states(run_id)
        assert states["study"] == "failed (try 1)", states  # not retried
        assert all(s.split()[0] in ("upstream_failed", "None", "skipped") for t, s in states.items() if t != "study")
        log = d.task_log(run_id, "study", -1, 1)
        lines = [x for x in log.splitlines() if says in x]
        assert lines, log[-3000:]
        assert planted not in log and quote(planted) not in log
    assert d.mlflow_api("experiments/get-by-name?experiment_name=deploy-bad") == 404  # nothing was made
