"""What differs between a classic and a Spark Connect session lives in pipelines.core.connect, and a Connect URL that
cannot be used is refused in one line before any work. The whole chain on a Connect server (a separate process, with
a client that cannot start a JVM) is tests/scenarios/test_cluster.py's."""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pipelines.core.config import ConfigError
from pipelines.core.connect import is_local, remote_url
from pipelines.testing.processes import ROOT, free_port
from tests.helpers import python_without_project

#: What only a classic session has: the SparkContext and its JVM handles.
CLASSIC_ONLY = {"sparkContext", "_jsc", "_jvm", "_active_spark_context", "_gateway"}
OWNER = ROOT / "pipelines" / "core" / "connect.py"


def test_only_the_connect_module_reads_the_spark_context():
    """Any other module that read ``spark.sparkContext`` (or a JVM handle) would fail on Spark Connect."""
    found = []
    for package in ("pipelines", "udfs", "jobs"):
        for path in sorted((ROOT / package).rglob("*.py")):
            if path == OWNER:
                continue
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Attribute) and node.attr in CLASSIC_ONLY:
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno} .{node.attr}")
    assert not found, "classic-only Spark API outside pipelines/core/connect.py:\n" + "\n".join(found)


def test_remote_urls(monkeypatch):
    monkeypatch.delenv("SPARK_REMOTE", raising=False)
    assert remote_url("") == ""  # a classic session
    assert remote_url("sc://spark.example.com:15002/;token=x") == "sc://spark.example.com:15002/;token=x"
    assert remote_url("local[2]") == "local[2]"
    monkeypatch.setenv("SPARK_REMOTE", "sc://127.0.0.1:15002")
    assert remote_url("") == "sc://127.0.0.1:15002"  # Spark's own variable, as its clients read it
    assert remote_url("local[1]") == "local[1]"  # the config wins
    with pytest.raises(ConfigError, match=r"spark.remote='http://h:15002' is not a Spark Connect URL: give sc://"):
        remote_url("http://h:15002")
    assert is_local("local[*]") and is_local("local") and not is_local("local-cluster[2,1,1024]")


def test_a_server_that_does_not_answer_is_one_line_and_exit_2(small_letor, tmp_path, capsys):
    """PySpark's client retries an unanswered URL for minutes; ltr says so at once, naming the URL."""
    from pipelines.app.cli import main

    url = f"sc://127.0.0.1:{free_port()}"
    t0 = time.perf_counter()
    code = main(["ingest", "--remote", url, "--src", str(small_letor), "--out", str(tmp_path / "ds")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and time.perf_counter() - t0 < 30
    assert err[-1].startswith(f"ltr ingest: error: no Spark Connect server answers at {url}"), err
    assert "Traceback" not in "\n".join(err) and not Path(tmp_path / "ds").exists()


def _connect_session(host: str, master: str, **conf: str):
    """A stand-in for a Spark Connect session (its type's module is Connect's) that answers what connect.py asks."""
    from types import SimpleNamespace

    cls = type("SparkSession", (), {"__module__": "pyspark.sql.connect.session"})
    spark = cls()
    spark.client = SimpleNamespace(host=host)
    values = {"spark.master": master, **{k.replace("_", "."): v for k, v in conf.items()}}
    spark.conf = SimpleNamespace(get=lambda key, default=None: values.get(key, default))
    return spark


def test_a_connect_sessions_parallelism_and_slots_come_from_the_servers_configuration():
    from pipelines.core.connect import default_parallelism, task_slots

    assert default_parallelism(_connect_session("h", "local")) == 1
    assert default_parallelism(_connect_session("h", "local[3]")) == 3
    assert task_slots(_connect_session("h", "local[4]", spark_task_cpus="2")) == 2
    cluster = _connect_session("h", "spark://m:7077", spark_executor_instances="3", spark_executor_cores="4")
    assert default_parallelism(cluster) == 12 and task_slots(cluster) == 12
    assert default_parallelism(_connect_session("h", "spark://m:7077", spark_default_parallelism="7")) == 7
    scaling = _connect_session("h", "yarn", spark_sql_shuffle_partitions="16")  # executors that come and go
    assert default_parallelism(scaling) == 16 and task_slots(scaling) is None


@pytest.mark.parametrize(
    "host, master, where, in_stage",
    [
        ("127.0.0.1", "local[2]", "auto", False),  # a server on this machine's loopback, one JVM: reached here
        ("localhost", "local[*]", "auto", False),
        ("127.0.0.1", "spark://h:7077", "auto", True),  # a cluster's executors elsewhere
        ("spark.example.com", "local[*]", "auto", True),  # a server on another machine: its loopback is not ours
        ("spark.example.com", "yarn", "driver", False),  # the setting decides
        ("127.0.0.1", "local[2]", "stage", True),
    ],
)
def test_the_tracker_runs_where_the_workers_reach_it(host, master, where, in_stage):
    from pipelines.core.connect import is_connect, server_here
    from pipelines.execution.barrier_job import tracker_in_stage

    spark = _connect_session(host, master)
    assert is_connect(spark) and server_here(spark) == (host in ("127.0.0.1", "localhost"))
    assert tracker_in_stage(spark, where) is in_stage


# ------------------------------------------------------------ the server's workers run this project
class _Server:
    """A stand-in Connect session: ``range(...).mapInArrow(f, schema).collect()`` runs ``f`` as a server's Python
    worker would, pickled (PySpark's cloudpickle) into a fresh interpreter, with the project or without it
    (:func:`tests.helpers.python_without_project`); ``addArtifacts(zip, pyfile=True)`` puts the zip on its path."""

    def __init__(self, tmp_path: Path, importable: bool) -> None:
        tmp_path.mkdir()
        self.tmp, self.env = tmp_path, dict(os.environ)
        self.python = sys.executable if importable else str(python_without_project(tmp_path / "py"))
        self.shipped: list[str] = []

    def range(self, *_a, **_k):
        return self

    def mapInArrow(self, f, schema):
        self.f = f
        return self

    def addArtifacts(self, path, pyfile=False):
        assert pyfile and path.endswith(".zip")
        self.shipped.append(shutil.copy(path, self.tmp))

    def collect(self):
        from pyspark import cloudpickle

        (self.tmp / "f.pkl").write_bytes(cloudpickle.dumps(self.f))
        code = (
            "import json, pickle, sys; sys.path[1:1] = sys.argv[2:]; f = pickle.load(open(sys.argv[1], 'rb')); "
            "print(json.dumps([b.to_pylist() for b in f(iter([]))][0]))"
        )
        out = subprocess.run(
            [self.python, "-c", code, str(self.tmp / "f.pkl"), *self.shipped],
            env=self.env,
            cwd=self.tmp,
            capture_output=True,
            text=True,
            check=True,
        )
        return json.loads(out.stdout.splitlines()[-1])


@pytest.mark.processes  # four Python processes, one a stand-in worker
def test_the_project_is_shipped_to_workers_that_cannot_import_it_and_refused_in_one_line_when_it_does_not_help(
    tmp_path, monkeypatch
):
    """:func:`pipelines.core.connect.check_workers`, before any job of a Connect session: its one task travels by
    value (a worker without the project can run it) and reports what the worker imports and runs; ``spark.ship``
    says whether the project's zip is added to the session when the workers cannot import it."""
    from pipelines.core import keys
    from pipelines.core.connect import check_workers

    url = "sc://spark.example:15002"
    same = _Server(tmp_path / "same", importable=True)
    check_workers(same, url)  # the same code: nothing shipped, nothing said
    assert same.shipped == []

    bare = _Server(tmp_path / "bare", importable=False)
    check_workers(bare, url)  # auto: shipped, then the workers run the same code from the zip
    assert [Path(p).name[:4] for p in bare.shipped] == ["ltr-"]
    with pytest.raises(ConfigError) as e:
        check_workers(_Server(tmp_path / "never", importable=False), url, "never")
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(f"the Python workers of the Spark Connect server at {url} (")
    assert "cannot import this project (ModuleNotFoundError: No module named 'pipelines'): spark.ship is never" in msg
    assert "ltr pack" in msg and "ltr server start" in msg

    # other code there: this client's sources said to be other bytes and another identity; shipping cannot help
    # a worker that holds the other code (here: the checkout, ahead of the zip on its path)
    monkeypatch.setattr(keys, "source_files", lambda roots: {"pipelines.kernel.loop": ("x.py", "0" * 64)})
    real = keys.worker_identity()
    monkeypatch.setattr(keys, "worker_identity", lambda: {**real, "sources": "f" * 20})
    other = _Server(tmp_path / "other", importable=True)
    with pytest.raises(ConfigError) as e:
        check_workers(other, url)
    assert f"run other code than this client (sources: sources {real['sources'][:12]} (xgboost " in str(e.value)
    assert "there, sources ffffffffffff (xgboost" in str(e.value) and "even with the project shipped" in str(e.value)
    assert len(other.shipped) == 1


@pytest.mark.parametrize(
    "name, message",
    [
        ("env.zip", "spark.ship_env {p}: expected an `ltr pack` archive (.tar.gz or .tgz)"),
        ("missing.tar.gz", "spark.ship_env {p}: no such file (`ltr pack --out {p}` builds one)"),
    ],
)
def test_an_environment_to_ship_that_is_not_an_archive_is_refused_in_one_line_before_anything_is_sent(
    tmp_path, name, message
):
    from pipelines.core.connect import env_archive, ship_env

    (tmp_path / "env.zip").write_bytes(b"PK")
    path = str(tmp_path / name)

    class Refuses:  # a session that must not be reached
        def addArtifacts(self, *a, **k):  # noqa: N802 - PySpark's name
            raise AssertionError("sent before the check")

    with pytest.raises(ConfigError) as e:
        ship_env(Refuses(), path)
    assert str(e.value) == message.format(p=path)
    (tmp_path / "env.tgz").write_bytes(b"")
    assert env_archive(str(tmp_path / "env.tgz")) == str(tmp_path / "env.tgz")
