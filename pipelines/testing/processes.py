"""Processes the tests and the benchmarks start on this machine: the checkout's root, the options of every JVM
they start, free ports, a process stopped with its whole tree, and a standalone Spark cluster on loopback. Process
trees are walked and killed with :mod:`pipelines.core.proctree`, as the product does."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import cast

import pyspark

from pipelines.core.proctree import kill_tree, signal_tree

#: The source checkout: the folder above ``pipelines/`` (``jobs/``, ``conf/``, ``tests/`` beside it).
ROOT = Path(__file__).resolve().parents[2]
SPARK_HOME = Path(pyspark.__file__).resolve().parent
SPARK_BIN = SPARK_HOME / "bin"
#: Options of every JVM the tests and benchmarks start (the tests' shared session's; through ``SPARK_SUBMIT_OPTS``,
#: which ``tests/conftest.py`` sets, every driver a test's subprocess or spark-submit starts; a cluster's daemons
#: and executors where a test passes them): no C2 compiler, serial GC. Tiny jobs on 2 cores spend more CPU
#: compiling and collecting than computing (benchmarks/RESULTS.md); no result depends on the JIT.
QUICK_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


def free_port() -> int:
    """A TCP port free on loopback now (another process may take it before it is bound: prefer port 0)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http(url: str, seconds: float, proc: subprocess.Popen | None = None) -> None:
    """Until ``url`` answers 200: TimeoutError after ``seconds``, RuntimeError once ``proc`` (its server) exits."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            if proc is not None and proc.poll() is not None:
                raise RuntimeError(f"the server of {url} exited with status {proc.returncode}") from None
            if time.monotonic() > deadline:
                raise TimeoutError(f"{url} did not answer within {seconds:.0f} s") from None
            time.sleep(0.3)


def mlflow_ui(
    uri: str, port: int, workers: int | None = None, cwd: str | os.PathLike | None = None
) -> subprocess.Popen:
    """``mlflow ui`` on ``127.0.0.1:port`` over the tracking store ``uri``, in a session of its own (stop it with
    :func:`stop_process`), its GenAI job runner off; answering once :func:`wait_http` of ``/health`` returns.
    ``cwd``: its working directory (where it serves artifacts from, ``./mlartifacts``)."""
    cmd = [str(Path(sys.executable).with_name("mlflow")), "ui", "--backend-store-uri", uri]
    cmd += ["--host", "127.0.0.1", "--port", str(port)] + (["--workers", str(workers)] if workers else [])
    return subprocess.Popen(
        cmd,
        env={**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"},
        cwd=cwd,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def stop_process(proc: subprocess.Popen, grace: float = 10.0) -> None:
    """SIGTERM ``proc``'s tree (a JVM shuts down cleanly), then after ``grace`` s freeze and SIGKILL whatever is
    left of it (:func:`pipelines.core.proctree.kill_tree`: an executor's PySpark daemon runs in a process group of
    its own, which a group kill would miss), and reap it."""
    if proc.poll() is None:
        signal_tree(proc.pid, sig=signal.SIGTERM)
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            pass
    kill_tree(proc.pid)
    proc.wait()


def isolated_env(conf_dir: Path) -> dict[str, str]:
    """The environment of the cluster's processes and of spark-submit: nothing that leads to the project."""
    venv_bin = str(Path(sys.executable).parent)
    env = {
        k: v
        for k, v in os.environ.items()
        if k
        not in (
            "PYTHONPATH",
            "PYSPARK_PYTHON",
            "PYSPARK_DRIVER_PYTHON",
            "VIRTUAL_ENV",
            "PYSPARK_SUBMIT_ARGS",
            "SPARK_CONF_DIR",
            "PYSPARK_GATEWAY_PORT",
            "PYSPARK_GATEWAY_SECRET",
        )
    }
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if p and p != venv_bin)
    env.update(
        SPARK_HOME=str(SPARK_HOME),
        SPARK_LOCAL_IP="127.0.0.1",
        SPARK_CONF_DIR=str(conf_dir),
        SPARK_DAEMON_JAVA_OPTS=QUICK_JVM,
        SPARK_SUBMIT_OPTS=QUICK_JVM,
    )
    return env


class StandaloneCluster:
    """``spark-class`` master + workers on loopback; :meth:`stop` ends every process tree it started."""

    def __init__(self, root: Path, workers: int = 2, memory: str = "1g", env: dict[str, str] | None = None) -> None:
        """``workers`` one-core workers of ``memory`` each; ``env``: the processes' environment (default:
        :func:`isolated_env`, nothing that leads to the project: executors import it only from an archive)."""
        self.root = root
        self.procs: list[subprocess.Popen] = []
        self.logs: list[Path] = []
        conf = root / "conf"
        conf.mkdir(parents=True)  # an empty SPARK_CONF_DIR: no spark-defaults.conf of this machine
        #: Every JVM's temporary files (``java.io.tmpdir``) and the workers' local dirs (``SPARK_LOCAL_DIRS``:
        #: shuffle files, the fetched-files cache) stay under ``root``, removed by :meth:`stop`. An application's
        #: ``--archives`` are copied into a ``spark-*`` temporary folder by the driver and by every executor, and
        #: an executor the worker kills at the application's end leaves its copy behind: in ``/tmp`` that was
        #: a gigabyte a run, kept until the machine is wiped (pass :attr:`tmp_option` to the executors).
        self.tmp, self.local = root / "tmp", root / "local"
        self.tmp.mkdir()
        self.local.mkdir()
        self.tmp_option = f"-Djava.io.tmpdir={self.tmp}"
        self._daemons_tmp: set[str] = set()
        self.env = isolated_env(conf) if env is None else {**env, "SPARK_CONF_DIR": str(conf)}
        self.env["SPARK_LOCAL_DIRS"] = str(self.local)
        for k in ("SPARK_DAEMON_JAVA_OPTS", "SPARK_SUBMIT_OPTS"):
            self.env[k] = f"{self.env.get(k, '')} {self.tmp_option}".strip()
        # port 0: the master picks free ports and logs them (no race with other processes for a port)
        self._start(
            "master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", "0", "--webui-port", "0"
        )
        self.url, self.web_port = self._master_address()
        self.work_dirs = []
        for i in range(workers):
            wd = root / f"worker{i}"
            wd.mkdir(parents=True, exist_ok=True)
            self.work_dirs.append(wd)
            self._start(
                f"worker{i}",
                "org.apache.spark.deploy.worker.Worker",
                self.url,
                "--host",
                "127.0.0.1",
                "--port",
                "0",
                "--webui-port",
                "0",
                "--cores",
                "1",
                "--memory",
                memory,
                "--work-dir",
                str(wd),
            )

    def _master_address(self, timeout: float = 120.0) -> tuple[str, int]:
        """The master's URL and web UI port, from its log."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            text = self.logs[0].read_text(errors="replace")
            url = re.search(r"Starting Spark master at (spark://\S+)", text)
            web = re.search(r"MasterWebUI.* started at http://\S+:(\d+)", text)
            if url and web:
                return url.group(1), int(web.group(1))
            if self.procs[0].poll() is not None:
                break
            time.sleep(0.5)
        raise RuntimeError(f"the standalone master did not start in {timeout:.0f} s:\n{self.tail()}")

    def _start(self, name: str, cls: str, *args: str) -> None:
        out = self.root / f"{name}.log"
        self.logs.append(out)
        with open(out, "wb") as f:
            self.procs.append(
                subprocess.Popen(
                    [str(SPARK_BIN / "spark-class"), cls, *args],
                    env=self.env,
                    stdout=f,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    start_new_session=True,
                )
            )

    def state(self) -> dict:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.web_port}/json/", timeout=5) as r:
            return json.load(r)

    def wait_for_workers(self, n: int, timeout: float = 180.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            dead = [cast("list[str]", p.args)[1] for p in self.procs if p.poll() is not None]  # the class
            if dead:
                raise RuntimeError(f"{dead} exited:\n{self.tail()}")
            try:
                alive = [w for w in self.state().get("workers", []) if w.get("state") == "ALIVE"]
                if len(alive) >= n:
                    self._daemons_tmp = set(os.listdir(self.tmp))
                    return
            except OSError:  # the master's web UI is not up yet
                pass
            time.sleep(1.0)
        raise TimeoutError(f"fewer than {n} workers registered with {self.url} in {timeout:.0f} s:\n{self.tail()}")

    def tail(self, chars: int = 3000) -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-chars:]}" for p in self.logs if p.exists())

    def clean(self) -> None:
        """Remove what finished applications left on disk: executors' folders (each holds its unpacked
        ``--archives``) and temporary files; not what the daemons had made by :meth:`wait_for_workers` (the
        workers remove an application's local dirs themselves). Run it between applications."""
        for wd in self.work_dirs:
            for app in wd.glob("app-*"):
                shutil.rmtree(app, ignore_errors=True)
        for child in self.tmp.iterdir():
            if child.name in self._daemons_tmp:
                continue
            if child.is_dir():
                shutil.rmtree(child, ignore_errors=True)
            else:
                child.unlink(missing_ok=True)

    def stop(self) -> None:
        """Stop every process tree, workers (and their executors) first, then the master; then remove the
        work, temporary and local folders (the logs and ``conf`` stay for :meth:`tail`)."""
        for p in reversed(self.procs):
            stop_process(p)
        for d in (*self.work_dirs, self.tmp, self.local):
            shutil.rmtree(d, ignore_errors=True)
