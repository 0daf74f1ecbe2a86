"""spark-submit on a real standalone cluster with the packed environment (docs/tutorials/cluster.md).

A master and two one-core workers started with ``spark-class`` on loopback, each worker in its own
work directory; the environment packed by ``ltr pack`` and shipped with ``--archives ...#env``;
the executors run ``./env/bin/python`` (``spark.pyspark.python``), the client-mode driver the
project's interpreter. The README's main job, ``spark-submit jobs/run.py --src <letor>`` (ingest ->
difficulty -> a tiny grid, which builds its q_nrel curriculum and trains with 2 barrier workers on the two
executors -> report), must give what the same job gives on ``local[2]`` (an oracle test:
distributed == local), here through a Spark Connect server on ``local[2]``. One application, not one per step:
each application on the cluster costs about a minute on 2 cores before it computes anything (the driver and both
executors unpack the archive, the executors' Python workers start and compile), and the step jobs
(``jobs/ingest.py`` ...) run the same ``pipelines.app.cli`` commands that ``ltr run`` calls.

The cluster's processes have no PYTHONPATH, PYSPARK_PYTHON nor the project's virtual environment on
their PATH: the executors can import :mod:`pipelines` only from the archive.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from pipelines.data.curricula import QUERIES
from pipelines.testing.processes import (
    QUICK_JVM,
    ROOT,
    SPARK_BIN,
    StandaloneCluster,
    free_port,
    isolated_env,
    stop_process,
)
from tests.helpers import (
    path_results,
    pyspark_client_python,
    python_without_libraries,
    python_without_project,
    set_args,
    shell_script,
    tiny_study,
    without_java,
)

#: spark: a standalone cluster, spark-submit and ltr subprocesses; slow: minutes, started first
pytestmark = [pytest.mark.spark, pytest.mark.slow(minutes=6)]

log = logging.getLogger(__name__)


FOLD = 1
#: The study of both runs (cluster and local): the tiny study on 2 barrier workers of one thread.
STUDY = tiny_study(
    "spark.shuffle_partitions=2",
    "train.workers=2",
    "train.nthread=1",
    "train.checkpoint_every=2",
    "train.tracker_timeout=300",
    "grid.experiment=cluster",
    "grid.extra_paths={listnet: 'mse:2,listnet:2'}",
    f"grid.folds=[{FOLD}]",
    "report.table2_sizes=[2]",
)
#: Left out of the test's archive (``ltr pack --exclude``): PySpark's jars and NCCL (GPU only).
PACK_EXCLUDE = ["lib/python3.*/site-packages/pyspark/jars/*", "lib/python3.*/site-packages/nvidia/*"]


# ------------------------------------------------------------ ltr pack: bad input, before anything is built
def _no_build(monkeypatch) -> None:
    import pipelines.app.pack

    def refuse(*a, **k):
        raise AssertionError("a bad argument must be refused before the environment is built")

    monkeypatch.setattr(pipelines.app.pack, "_run", refuse)


@pytest.mark.parametrize(
    "make_args, message",
    [
        (lambda t: ["--out", str(t / "missing" / "env.tar.gz")], "directory {t}/missing does not exist"),
        (lambda t: ["--out", str(t / "env.zip")], "the archive name must end in .tar.gz or .tgz"),
        (lambda t: ["--out", str(t / "env.tar")], "Hadoop's Java untar, which refuses bin/python's link"),
        (lambda t: (t / "d.tar.gz").mkdir() or ["--out", str(t / "d.tar.gz")], "is a directory; give the archive's"),
        (lambda t: ["--out", str(t / "e.tgz"), "--source", str(t)], "no setup.py there"),
        (lambda t: ["--out", str(t / "e.tgz"), "--constraints", str(t / "lock.txt")], "lock.txt: no such file"),
        (lambda t: ["--out", str(t / "e.tgz"), "--python-prefix", "usr"], "must be an absolute path"),
        (lambda t: ["--out", str(t / "e.tar.gz"), "--compress-level", "12"], "--compress-level must be in 0..9"),
        (lambda t: ["--out", str(t / "e.tar.gz"), "--installer", "conda"], "--installer conda: use one of auto, uv"),
    ],
)
def test_pack_bad_arguments_exit_2_in_one_line(tmp_path, capsys, monkeypatch, make_args, message):
    from pipelines.app.cli import main

    _no_build(monkeypatch)
    assert main(["pack", *make_args(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("ltr pack: error: "), err
    assert message.format(t=tmp_path) in err


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs Linux /proc (a directory nobody can write in)")
def test_pack_unwritable_directory_exits_2(capsys, monkeypatch):
    from pipelines.app.cli import main

    _no_build(monkeypatch)
    assert main(["pack", "--out", "/proc/ltr-env.tar.gz"]) == 2  # root passes os.access; creating a file fails
    assert "ltr pack: error: --out /proc/ltr-env.tar.gz: cannot write in /proc" in capsys.readouterr().err


@pytest.fixture(scope="module")
def packed_env(tmp_path_factory):
    """``ltr pack`` once for this module: a fresh venv, install of the project from the source tree with
    constraints.txt (uv, from the ``test`` extra; not byte-compiled), the archive; removed afterwards. Without
    PySpark's jars (the executors' Python workers use the cluster's Spark, the driver the project's
    installation) and NCCL (CPU only).

    gzip level 1 (the command's default is 4): 0.40 GiB, against 1.07 GiB at level 0 (stored blocks), which
    was 14 s faster to write and had nothing to inflate. Disk decides: an application copies the archive
    into a temporary folder on the driver and on each executor, and unpacks it three times (1.07 GiB each),
    so at level 0 the module peaked at +12 GB of disk here (+7.3 GB at level 1), enough to fill a CI machine
    (stop 47; RESULTS.md, "The cluster test's disk")."""
    out = tmp_path_factory.mktemp("pack") / "ltr-env.tar.gz"
    t0 = time.perf_counter()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pipelines.app.cli",
            "pack",
            "--out",
            str(out),
            "--compress-level",
            "1",
            "--no-compile",
            *[a for p in PACK_EXCLUDE for a in ("--exclude", p)],
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1500,
    )
    assert proc.returncode == 0, proc.stderr[-5000:]
    info = json.loads(proc.stdout.strip().splitlines()[-1])
    assert info["out"] == str(out) and out.stat().st_size == info["bytes"]
    log.warning("ltr pack: %.0f s, %.0f MiB", time.perf_counter() - t0, info["bytes"] / 2**20)
    yield out
    out.unlink(missing_ok=True)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = StandaloneCluster(tmp_path_factory.mktemp("standalone"))
    try:
        c.wait_for_workers(2)
        yield c
    finally:
        c.stop()


class ConnectServer:
    """A Spark Connect server in a process of its own (``spark-submit --class ...SparkConnectServer``, as
    ``sbin/start-connect-server.sh`` runs it) on ``local[2]`` and a free loopback port; its Python workers run the
    project's interpreter without its libraries or the project (:func:`tests.helpers.python_without_libraries`):
    a client ships both, an environment (``spark.ship_env``) and the project's code (``spark.ship: auto``).
    :meth:`stop` ends its process tree."""

    def __init__(self, root: Path) -> None:
        self.port, self.log = free_port(), root / "connect-server.log"
        python = str(python_without_libraries(root / "python"))
        # the Python of the server's UDF workers: with spark.pyspark.python alone they ran the machine's python3
        env = {**isolated_env(root), "PYSPARK_PYTHON": python}
        with open(self.log, "wb") as f:
            self.proc = subprocess.Popen(
                [
                    str(SPARK_BIN / "spark-submit"),
                    "--class",
                    "org.apache.spark.sql.connect.service.SparkConnectServer",
                    "--master",
                    "local[2]",
                    *("--conf", "spark.connect.grpc.binding.address=127.0.0.1"),
                    *("--conf", f"spark.connect.grpc.binding.port={self.port}"),
                    *("--conf", f"spark.pyspark.python={python}"),
                    *("--conf", "spark.scheduler.mode=FAIR"),
                    *("--conf", "spark.ui.enabled=false"),
                ],
                env=env,
                cwd=root,  # (the workers' first path entry: not the checkout)
                stdout=f,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        self.url = f"sc://127.0.0.1:{self.port}"

    def wait(self, seconds: float = 180) -> None:
        deadline = time.monotonic() + seconds
        while "Spark Connect server started" not in self.log.read_text(errors="replace"):
            assert self.proc.poll() is None, f"the Connect server exited:\n{self.log.read_text()[-3000:]}"
            assert time.monotonic() < deadline, f"no Connect server after {seconds} s:\n{self.log.read_text()[-3000:]}"
            time.sleep(0.5)

    def stop(self) -> None:
        stop_process(self.proc)


@pytest.fixture(scope="module")
def client_python(tmp_path_factory):
    """The Python of a Spark Connect user's environment: ``pyspark-client``, no PySpark
    (:func:`tests.helpers.pyspark_client_python`)."""
    return pyspark_client_python(tmp_path_factory.mktemp("client") / "venv")


@pytest.fixture(scope="module")
def connect_server(tmp_path_factory):
    """Started while the cluster's job runs (its JVM's start is the fixed cost a warm server saves); the local
    reference of the cluster's results."""
    server = ConnectServer(tmp_path_factory.mktemp("connect"))
    try:
        yield server
    finally:
        server.stop()


def _spark_submit(
    master: str, job: str, args: list[str], log_dir: Path, env: dict[str, str], conf: list[str], timeout: float = 900
) -> str:
    """``spark-submit jobs/<job>.py`` in its own process group (stopped whatever happens); its output."""
    cmd = [
        str(SPARK_BIN / "spark-submit"),
        "--master",
        master,
        "--deploy-mode",
        "client",
        "--conf",
        "spark.task.maxFailures=1",
        *conf,
        str(ROOT / "jobs" / f"{job}.py"),
        *args,
    ]
    out_path = log_dir / f"submit-{job}.log"
    t0 = time.perf_counter()
    with open(out_path, "wb") as f:
        proc = subprocess.Popen(
            cmd,
            cwd=log_dir,
            env=env,
            stdout=f,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            pass
        finally:
            stop_process(proc)
    out = out_path.read_text(errors="replace")
    assert proc.returncode == 0, f"spark-submit --master {master} {job} exited {proc.returncode}:\n{out[-6000:]}"
    log.warning("spark-submit --master %s %s: %.0f s", master, job, time.perf_counter() - t0)
    return out


def _on_cluster(cluster: StandaloneCluster, archive: Path, job: str, args: list[str]) -> str:
    """A job on the cluster with the archive; removes the executors' application directories afterwards
    (each holds an unpacked copy of the environment)."""
    conf = [
        "--archives",
        f"{archive}#env",
        "--conf",
        "spark.pyspark.python=./env/bin/python",
        "--conf",
        f"spark.pyspark.driver.python={sys.executable}",
        "--conf",
        "spark.executor.memory=1g",
        "--conf",
        f"spark.executor.extraJavaOptions={QUICK_JVM} {cluster.tmp_option}",
        "--conf",
        "spark.files.useFetchCache=false",  # one copy of the archive fewer per executor host (disk, not time)
    ]
    try:
        out = _spark_submit(cluster.url, job, args, cluster.root, cluster.env, conf)
    except AssertionError as e:
        raise AssertionError(f"{e}\n{cluster.tail()}") from None
    apps = [a for wd in cluster.work_dirs for a in wd.glob("app-*")]
    # every worker ran an executor of this application, and it unpacked the archive as ./env
    assert len(apps) == len(cluster.work_dirs) and all(any(a.glob("*/env/bin/python")) for a in apps), apps
    cluster.clean()
    return out


def _env_archive(root: Path) -> tuple[Path, Path]:
    """An environment for ``spark.ship_env`` in the layout of ``ltr pack``'s archives (``bin/python`` at its root),
    light enough for every CI run: its ``bin/python`` runs this interpreter with its libraries but without the
    project (:func:`tests.helpers.python_without_project`, so the project's code is still shipped on its own), and
    leaves a mark in a folder at each start: proof that the server's tasks ran the shipped environment. (The packed
    environment itself is what the cluster's run ships, with ``--archives``.) The archive and the marks' folder."""
    import tarfile

    marks = root / "marks"
    marks.mkdir(parents=True)
    python = shell_script(root / "python", f'touch "{marks}/$$"', f'exec {python_without_project(root / "bare")} "$@"')
    archive = root / "env.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(python, "bin/python")
    return archive, marks


#: A file plug-in (the example ListNet): the driver reads it, each executor runs the same bytes (the packed
#: environment does not hold it), and its path trains there as the built-ins' do.
PLUGIN = ROOT / "examples" / "plugins" / "listnet.py"


def _run_args(work: Path, letor: Path) -> list[str]:
    """``ltr run``'s arguments, everything under ``work``: ingest ``letor`` (no generate), then the rest."""
    return ["--src", str(letor), "--plugin", str(PLUGIN), *set_args([f"work_dir={work}", *STUDY])]


def _grid_results(work: Path) -> dict[str, tuple[bytes, list[float], list[float]]]:
    """Every grid path's model and vali/test curves, from the checkpoints."""
    from pipelines.plugins.run_config import load_run_config

    return path_results(load_run_config(None, [f"work_dir={work}", *STUDY], [str(PLUGIN)]), FOLD, str(work / "dataset"))


def _child_finals(work: Path) -> dict[str, float]:
    """Final test NDCG of every child run of the grid, from MLflow."""
    from mlflow.tracking import MlflowClient

    from pipelines.core.layout import mlflow_uri

    client = MlflowClient(mlflow_uri(str(work)))
    exp = client.get_experiment_by_name("cluster")
    return {
        r.data.tags["mlflow.runName"]: r.data.metrics["ndcg_at_10_test"]
        for r in client.search_runs([exp.experiment_id])
        if "ndcg_at_10_test" in r.data.metrics
    }


@pytest.mark.timeout(2400)
def test_jobs_on_a_standalone_cluster_with_the_packed_env_equal_local(
    packed_env, cluster, connect_server, client_python, tmp_path
):
    """The README's main job on the standalone cluster (2 executors, the packed environment) and through Spark
    Connect on a server of its own on ``local[2]`` (the local reference), from a client of the ``pyspark-client``
    package, a minor older than the server, in an environment of its own, with no Java to start: any classic-only
    call or import fails it. The same dataset, scores, curricula, trees, MLflow finals and table 1. The classic
    local run of the same job is ``tests/app/test_cli.py``'s (``ltr run``)."""
    from pipelines.data.generate import generate

    t0 = time.perf_counter()
    letor = tmp_path / "letor"
    generate(str(letor), queries=40, seed=7, workers=1)  # ltr generate --queries 40 --workers 1
    remote, local = tmp_path / "cluster", tmp_path / "connect"
    remote.mkdir()
    local.mkdir()
    out = _on_cluster(cluster, packed_env, "run", _run_args(remote, letor))
    assert f"session on {cluster.url} (2 cores" in out  # the cluster, not a local master
    t1 = time.perf_counter()
    connect_server.wait()
    env, marks = _env_archive(tmp_path / "env")
    client_env = without_java()
    client_env.pop("PYTHONDONTWRITEBYTECODE", None)  # (its libraries' bytecode written once, not compiled each import)
    run = ["run", "--remote", connect_server.url, *_run_args(local, letor), "--set", f"spark.ship_env={env}"]
    proc = subprocess.run(
        [client_python, "-m", "pipelines.app.cli", *run],
        env=client_env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-6000:]
    assert f"Spark Connect session on {connect_server.url} (2 cores" in proc.stderr, proc.stderr[-3000:]
    # the server's workers had neither the libraries nor the project: the client shipped an environment, whose
    # Python ran the tasks, and the project's code
    assert f"shipped the environment {env}" in proc.stderr, proc.stderr[-3000:]
    assert any(marks.iterdir()), "no task of the server ran the shipped environment's Python"
    assert "cannot import this project (ModuleNotFoundError: No module named 'pipelines'): shipped" in proc.stderr
    assert "the server's workers run this project from the session's artifact ltr-" in proc.stderr
    # the client's PySpark was the Connect client package alone: no classic API in it
    probe = subprocess.run(
        [str(client_python), "-c", "from pyspark import SparkContext"], capture_output=True, text=True, env=client_env
    )
    assert "cannot import name 'SparkContext'" in probe.stderr, probe
    log.warning("cluster run %.0f s, Connect run on local[2] %.0f s", t1 - t0, time.perf_counter() - t1)

    def doc(work: Path, rel: str) -> dict:
        return json.loads((work / rel).read_text())

    # ingest: the same dataset (content fingerprint, counts)
    a, b = doc(remote, "dataset/_manifest.json"), doc(local, "dataset/_manifest.json")
    assert a["fingerprint"] == b["fingerprint"] and (a["rows"], a["queries"]) == (b["rows"], b["queries"])
    # difficulty: the same scores
    a, b = doc(remote, "difficulty/_difficulty.json"), doc(local, "difficulty/_difficulty.json")
    assert a["content_fingerprint"] == b["content_fingerprint"] and a["key"] == b["key"]
    # the grid's curriculum (built on the cluster): the same stages and the same queries in them
    cur = f"curricula/fold{FOLD}/q_nrel"
    a, b = doc(remote, f"{cur}/_curriculum.json"), doc(local, f"{cur}/_curriculum.json")
    assert a["key"] == b["key"] and a["stages"] == b["stages"]
    assert pq.read_table(remote / cur / QUERIES).equals(pq.read_table(local / cur / QUERIES))
    # the grid on 2 executors (2 barrier workers) == on local[2]: every path's trees and curves, and the final
    # NDCG MLflow has for every child run
    ga, gb = _grid_results(remote), _grid_results(local)
    assert ga.keys() == gb.keys() and len(ga) == 4  # baseline, MSE-2, q_nrel-2 and the plug-in's ListNet
    for name in ga:
        assert ga[name] == gb[name], name
    fa, fb = _child_finals(remote), _child_finals(local)
    assert fa == fb and len(fa) == 4
    # the report: the same table 1, every number
    a, b = doc(remote, "report/table1.json"), doc(local, "report/table1.json")
    assert a == b and len(a) == 4


def test_packed_archive_is_a_relocatable_non_editable_env(packed_env):
    """The project installed as files (no editable .pth), bin/python a link to the base interpreter,
    pyvenv.cfg naming its home, the excluded files absent."""
    import tarfile

    names, links = set(), {}
    with tarfile.open(packed_env) as tar:
        for m in tar:
            names.add(m.name)
            if m.issym():
                links[m.name] = m.linkname
    site = next(n.rsplit("/", 3)[0] for n in names if n.endswith("site-packages/pipelines/app/cli.py"))
    assert f"{site}/pipelines/app/pack.py" in names and f"{site}/udfs/metrics.py" in names
    assert not [n for n in names if "__editable__" in n], "an editable install cannot run on the executors"
    assert "pyvenv.cfg" in names and "bin/ltr" in names
    python = links["bin/python"]  # python -> python3.11 -> /usr/bin/python3.11
    while not os.path.isabs(python):
        python = links[f"bin/{python}"]
    assert os.path.realpath(python) == os.path.realpath(sys.executable)
    assert not [n for n in names if "/pyspark/jars/" in n or "/nvidia/" in n]  # PACK_EXCLUDE
    assert f"{site}/pyspark/__init__.py" in names and f"{site}/xgboost/__init__.py" in names
