"""``ltr server start | status | stop``: a Spark Connect server kept running on this machine for a work directory, so
that every later ``ltr`` command connects to it (``spark.remote: auto``) instead of starting a JVM of its own.

The server is PySpark's own (``spark-submit --class org.apache.spark.sql.connect.service.SparkConnectServer``),
bound to the loopback address only, on ``spark.master`` (default ``local[*]``) with the Spark properties a classic
session of this config would have (:func:`pipelines.core.session.session_properties`: the FAIR scheduler, the
workers' threads, the Python of its workers). It runs in a process group of its own, detached from the command that
started it, until ``ltr server stop`` (or the machine's shutdown). Its record (pid, URL, versions) and log lie in
``<work_dir>/connect/``; the record is what ``auto`` reads, and it is trusted only while its process lives and its
port answers. It is written as the server's process starts (``state: starting``) and again once its port answers
(``running``): a command that finds a server starting exits 75 (``EX_TEMPFAIL``: run it again) rather than running
classic beside it, and a second ``ltr server start`` waits for it.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from pipelines.core.config import Config, ConfigError, SparkConfig
from pipelines.core.connect import answers
from pipelines.core.errors import BusyError, LtrError

log = logging.getLogger(__name__)

#: The Connect server's class (in PySpark's own jars).
SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"

#: How soon the server cancels the jobs of a client that is gone (SIGKILLed, its machine lost), which tells it
#: nothing: a client's stream of results ends every ``senderMaxStreamDuration`` and the client attaches again; an
#: operation left unattached for ``detachedTimeout`` is abandoned and its jobs cancelled, looked for every
#: ``maintenanceInterval``. Spark's defaults (2 min, 5 min, 30 s) let a lost client's jobs run up to 7.5 min; these,
#: about a minute. A client paused for longer than that (a debugger) finds its job cancelled, and starts it again from
#: its checkpoints. A value set outside the config (spark-defaults.conf) or in ``spark.conf`` wins.
ORPHAN_LIMITS = {
    "spark.connect.execute.reattachable.senderMaxStreamDuration": "30s",
    "spark.connect.execute.manager.detachedTimeout": "30s",
    "spark.connect.execute.manager.maintenanceInterval": "5s",
}


class ServerError(LtrError):
    """The server could not be started (exit 1; its log names the cause)."""


class ServerStarting(BusyError):
    """The work_dir's server is starting: a command that would use it exits 75 (run it again in a few seconds)."""


def server_dir(work_dir: str) -> Path | None:
    """``<work_dir>/connect``, where the server's record and log lie; None for a work_dir on an object store."""
    if "://" in work_dir and not work_dir.startswith("file://"):
        return None
    return Path(work_dir.removeprefix("file://")) / "connect"


def _record(work_dir: str) -> dict[str, Any] | None:
    where = server_dir(work_dir)
    path = where / "server.json" if where else None
    if path is None or not path.is_file():
        return None
    try:
        return dict(json.loads(path.read_text()))
    except (OSError, ValueError):
        return None


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie that nobody reaped yet does not: a stopped server whose parent was the
    ``ltr server start`` that has ended waits for init)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's process: alive
        return True
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except (OSError, IndexError):
        return True


def _answers(port: int, timeout: float = 1.0) -> bool:
    return answers("127.0.0.1", port, timeout)


def _write_record(where: Path, rec: dict[str, Any]) -> None:
    """``server.json`` replaced whole (a reader sees the old record or the new)."""
    tmp = where / f".server.json.{os.getpid()}"
    tmp.write_text(json.dumps(rec, indent=1))
    os.replace(tmp, where / "server.json")


def running(work_dir: str) -> dict[str, Any] | None:
    """The record of the server ``ltr server start`` runs for ``work_dir``, if its process lives and its port
    answers (None otherwise)."""
    rec = _record(work_dir)
    if rec is None or not _alive(int(rec["pid"])) or not _answers(int(rec["port"])):
        return None
    return rec


def starting(work_dir: str) -> dict[str, Any] | None:
    """The record of the work_dir's server while it starts: its process lives, its port does not answer yet (None
    otherwise, a record of a server that died while starting included)."""
    rec = _record(work_dir)
    if rec is None or rec.get("state") != "starting" or not _alive(int(rec["pid"])) or _answers(int(rec["port"])):
        return None
    return rec


def session_config(cfg: Config) -> SparkConfig:
    """``cfg.spark`` with ``remote: auto`` resolved: ``$SPARK_REMOTE``, else the work_dir's running server, else ""
    (a classic session).

    Raises
    ------
    ServerStarting
        The work_dir's server is starting (exit 75): the command would otherwise start a classic session beside it.
    """
    if cfg.spark.remote != "auto":
        return cfg.spark
    url = os.environ.get("SPARK_REMOTE", "")
    if not url:
        rec = running(cfg.work_dir)
        if rec is None and (rec := starting(cfg.work_dir)) is not None:
            raise ServerStarting(
                f"the Spark Connect server of work_dir {cfg.work_dir} is starting (pid {rec['pid']}, {rec['url']}; "
                f"log {rec['log']}): run the command again once `ltr server status` says it runs"
            )
        url = rec["url"] if rec else ""
    return replace(cfg.spark, remote=url)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def server_properties(cfg: Config, master: str, port: int, external: dict[str, str]) -> dict[str, str]:
    """The Spark properties ``ltr server start`` gives the server: a classic session's of ``cfg``
    (:func:`pipelines.core.session.session_properties`), :data:`ORPHAN_LIMITS` where neither the config nor
    ``external`` (:func:`pipelines.core.session.external_properties`) sets them, its address (loopback, ``port``) and
    name."""
    from pipelines.core.session import session_properties

    props = session_properties(cfg.spark, master, external)
    props = {**{k: v for k, v in ORPHAN_LIMITS.items() if k not in external}, **props}
    props.update(
        {
            "spark.connect.grpc.binding.address": "127.0.0.1",
            "spark.connect.grpc.binding.port": str(port),
            "spark.app.name": f"{cfg.spark.app_name}-server",
        }
    )
    return props


def start(cfg: Config, port: int = 0, wait: float = 180.0) -> dict[str, Any]:
    """Start the server of ``cfg.work_dir`` (or find it running); its record.

    Raises
    ------
    ConfigError
        A work_dir on an object store, or a port already taken (exit 2).
    ServerError
        The server exited or did not answer within ``wait`` seconds (its log's last lines; exit 1).
    """
    import pyspark

    from pipelines.core.session import external_properties

    where = server_dir(cfg.work_dir)
    if where is None:
        raise ConfigError(f"work_dir={cfg.work_dir} is not on this machine: a local server keeps its record there")
    rec = running(cfg.work_dir) or _wait_for_start(cfg.work_dir, wait)
    if rec is not None:
        return {**rec, "already": True}
    if port and _answers(port):
        raise ConfigError(f"port {port} is taken on 127.0.0.1: choose another with --port, or 0 for a free one")
    port = port or _free_port()
    where.mkdir(parents=True, exist_ok=True)
    master = cfg.spark.master or "local[*]"
    home = Path(pyspark.__file__).resolve().parent
    cmd = [str(home / "bin" / "spark-submit"), "--class", SERVER_CLASS, "--master", master]
    for k, v in server_properties(cfg, master, port, external_properties()).items():
        cmd += ["--conf", f"{k}={v}"]
    # the Python of the server's workers: its PYSPARK_PYTHON (spark.pyspark.python alone did not reach them)
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
    for k in ("SPARK_REMOTE", "PYSPARK_GATEWAY_PORT", "PYSPARK_GATEWAY_SECRET"):
        env.pop(k, None)
    log_path = where / "server.log"
    with open(log_path, "wb") as out:
        proc = subprocess.Popen(
            cmd, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
        )
    rec = {
        "pid": proc.pid,
        "port": port,
        "url": f"sc://127.0.0.1:{port}",
        "master": master,
        "spark": pyspark.__version__,
        "python": sys.executable,
        "started": time.time(),
        "log": str(log_path),
        "state": "starting",
    }
    _write_record(where, rec)
    deadline = time.monotonic() + wait
    while not _answers(port, timeout=0.5):  # the log's "started" line is INFO, which the project's log4j leaves out
        if proc.poll() is not None or time.monotonic() > deadline:
            if proc.poll() is None:
                _stop_group(proc.pid)
            (where / "server.json").unlink(missing_ok=True)
            tail = " | ".join(log_path.read_text(errors="replace").strip().splitlines()[-3:])
            raise ServerError(f"the Spark Connect server did not start ({log_path}): {tail[-600:]}")
        time.sleep(0.25)
    rec["state"] = "running"
    _write_record(where, rec)
    return rec


def _wait_for_start(work_dir: str, wait: float) -> dict[str, Any] | None:
    """The record of a server another ``ltr server start`` is starting for ``work_dir``, once it answers (None when
    none is starting, or it died or did not answer within ``wait`` seconds: then a new one is started)."""
    deadline = time.monotonic() + wait
    while starting(work_dir) is not None and time.monotonic() < deadline:
        time.sleep(0.25)
    return running(work_dir)


def _stop_group(pid: int, grace: float = 30.0) -> None:
    """SIGTERM the server's process group (the JVM shuts down cleanly, its Python workers with it), then SIGKILL
    what is left after ``grace`` seconds."""
    try:
        os.killpg(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace
    while _alive(pid) and time.monotonic() < deadline:
        try:
            os.waitpid(pid, os.WNOHANG)  # a child of this process: reaped here
        except ChildProcessError:
            pass
        time.sleep(0.2)
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def stop(cfg: Config) -> dict[str, Any] | None:
    """Stop the work_dir's server; its record (None when none was running)."""
    rec = _record(cfg.work_dir)
    where = server_dir(cfg.work_dir)
    if rec is None or where is None:
        return None
    if _alive(int(rec["pid"])):
        _stop_group(int(rec["pid"]))
    (where / "server.json").unlink(missing_ok=True)
    return rec
