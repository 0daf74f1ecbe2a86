"""What differs between a classic Spark session and a Spark Connect one: the only module that reads ``sparkContext``.

A classic session (``SparkSession.builder.master(...)``) runs its JVM in this process (or spark-submit's) and gives
the ``SparkContext``: the master, the default parallelism, Spark's count of task slots, thread-local job groups and
scheduler pools, the status tracker. A Spark Connect session (``--remote sc://host:15002``, ``spark.remote``,
``$SPARK_REMOTE``, or ``local[N]`` for a server in this process) is a gRPC client: none of that exists on it, and
what the code needs comes from the configuration the server exposes, from a one-task job that looks at an
executor, or from the user's config (``train.workers``). Everything else (DataFrames, Pandas UDFs, the barrier
``mapInArrow`` that trains) is the same API on both, so no other module asks which kind of session it has.
"""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import Iterator
from typing import Any

from pipelines.core.config import ConfigError

log = logging.getLogger(__name__)

#: The property a classic session's job groups travel in (``SparkContext.setJobGroup`` sets it).
JOB_GROUP = "spark.jobGroup.id"

_LOCAL = re.compile(r"local(?:\[(\*|\d+)(?:\s*,\s*\d+)?\])?$")
_said: set[str] = set()


def is_connect(spark: Any) -> bool:
    """Whether ``spark`` is a Spark Connect session (a client of a server) rather than a classic one."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def kind(spark: Any) -> str:
    """``"Spark Connect"`` or ``"classic"``: the words the first line of a command says."""
    return "Spark Connect" if is_connect(spark) else "classic"


def context(spark: Any) -> Any | None:
    """The session's SparkContext, or None on Spark Connect (which has none)."""
    if is_connect(spark):
        return None
    try:
        return spark.sparkContext
    except Exception:  # a session whose JVM is going
        return None


def master(spark: Any) -> str:
    """The master URL the session's jobs run on (on Connect: the server's ``spark.master``)."""
    sc = context(spark)
    if sc is not None:
        return str(sc.master or "")
    return str(spark.conf.get("spark.master", "") or "")


def is_local(url: str) -> bool:
    """One JVM (``local``, ``local[N]``, ``local[*]``); ``local-cluster[...]`` is a cluster (one worker a slot)."""
    return url == "local" or url.startswith("local[")


#: Host names of a Connect server on the machine of its client.
_THIS_MACHINE = ("localhost", "127.0.0.1", "::1", "[::1]")


def server_here(spark: Any) -> bool:
    """Whether the session's jobs run on this machine's JVM: a classic session, or a Connect server reached at a
    loopback address (``local[N]`` servers included). Where they do not, the executors cannot be assumed to reach
    this process."""
    if not is_connect(spark):
        return True
    host = str(getattr(spark.client, "host", "") or "")
    return host in _THIS_MACHINE


def conf_value(spark: Any, key: str, default: str | None = None) -> str | None:
    """A Spark property as the session sees it (classic: the SparkConf; Connect: the server's configuration)."""
    sc = context(spark)
    if sc is not None:
        return sc.getConf().get(key, default)
    try:
        value = spark.conf.get(key, default)
    except Exception:  # a server that will not say (a static property it keeps to itself)
        log.debug("the server does not expose %s", key, exc_info=True)
        return default
    return default if value is None else str(value)


def set_log_level(spark: Any, level: str) -> None:
    """Spark's own log level (``spark.log_level``). A Connect server logs as its own configuration says."""
    sc = context(spark)
    if sc is not None:
        sc.setLogLevel(level)
    else:
        log.debug("Spark Connect: the server's log4j configuration sets its log level (spark.log_level not applied)")


def answers(host: str, port: int, timeout: float) -> bool:
    """Whether something accepts a TCP connection at ``host:port`` within ``timeout`` seconds."""
    import socket

    try:
        socket.create_connection((host, port), timeout=timeout).close()
    except OSError:
        return False
    return True


#: The cores an executor of a session's ``local[*]`` server may use, asked once a session (id -> cores).
_CORES: dict[int, int] = {}


def _executor_cores(spark: Any) -> int:
    """The cores the Python workers of a local master may use, asked of one of them once a session (a one-task job:
    the server may be another machine than this client's)."""
    if id(spark) in _CORES:
        return _CORES[id(spark)]
    import pyarrow as pa

    def count(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pipelines.core.threads import usable_cpus

        for _ in batches:
            pass
        yield pa.RecordBatch.from_pydict({"cores": pa.array([usable_cpus()], pa.int64())})

    cores = int(spark.range(1, numPartitions=1).mapInArrow(count, "cores long").collect()[0]["cores"])
    _CORES[id(spark)] = cores
    return cores


def _probe(driver: dict[str, str], files: dict[str, Any]) -> Any:
    """The one task of :func:`check_workers`, as a function defined here (so pickled by value, not by a reference to
    this module, which the server's workers may not be able to import): it imports the project in the worker and
    yields one JSON row, ``{"python": ..., "error": ...}`` when it cannot, else ``{"python": ...}`` with ``"code"``
    (:func:`pipelines.core.keys.worker_code`, as a barrier task checks) where it may differ from the client's."""

    def probe(batches: Iterator[Any]) -> Iterator[Any]:
        import json
        import sys

        import pyarrow as pa

        for _ in batches:
            pass
        doc: dict[str, Any] = {"python": sys.executable}
        try:
            from pipelines.core.keys import worker_code

            code = worker_code(driver, files)
            if code is not None:
                doc["code"] = code
        except ImportError as e:
            doc["error"] = f"{type(e).__name__}: {e}"
        yield pa.RecordBatch.from_pydict({"doc": [json.dumps(doc)]})

    return probe


#: The packages a Spark Connect session ships to its server (:func:`project_zip`).
PACKAGES = ("pipelines", "udfs")


def project_zip(folder: str) -> str:
    """A zip of this project's packages (:data:`PACKAGES`: every file but compiled ones) in ``folder``, named by a
    digest of its content (``ltr-<12 hex>.zip``), its entries sorted and dated alike, so that the same code makes
    the same bytes. The Python workers of a server import from it (a session's ``pyfile`` artifact goes on their
    path); numba caches the kernels of a module in a zip, and the code identity reads the sources from it."""
    import hashlib
    import importlib
    import zipfile

    entries: dict[str, bytes] = {}  # path in the zip -> the file's bytes, read once
    for package in PACKAGES:
        base = os.path.dirname(os.path.dirname(importlib.import_module(package).__file__ or ""))
        for folder_, dirs, files in os.walk(os.path.join(base, package)):
            dirs[:] = [d for d in dirs if d != "__pycache__"]
            for name in files:
                if not name.endswith((".pyc", ".pyo")):
                    path = os.path.join(folder_, name)
                    with open(path, "rb") as f:
                        entries[os.path.relpath(path, base).replace(os.sep, "/")] = f.read()
    digest = hashlib.sha256()
    for rel in sorted(entries):
        digest.update(rel.encode() + b"\0" + hashlib.sha256(entries[rel]).digest())
    out = os.path.join(folder, f"ltr-{digest.hexdigest()[:12]}.zip")
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        for rel in sorted(entries):
            info = zipfile.ZipInfo(rel, (1980, 1, 1, 0, 0, 0))
            info.compress_type, info.external_attr = zipfile.ZIP_DEFLATED, 0o644 << 16
            z.writestr(info, entries[rel])
    return out


def ship_project(spark: Any) -> str:
    """Add :func:`project_zip` to the session as a Python artifact (``addArtifacts(..., pyfile=True)``): its tasks'
    Python workers import the project from it. Returns the artifact's name."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="ltr-ship-") as tmp:
        path = project_zip(tmp)
        spark.addArtifacts(path, pyfile=True)  # uploaded now: the file may go afterwards
        return os.path.basename(path)


#: The folder a shipped environment (``spark.ship_env``) is unpacked as, in the session's folder on each executor.
ENV_ALIAS = "ltr-env"


def env_archive(path: str) -> str:
    """``spark.ship_env``'s archive, checked before anything is sent: an existing ``.tar.gz`` or ``.tgz`` file (what
    ``ltr pack`` writes); its absolute path.

    Raises
    ------
    ConfigError
        No such file, or not such an archive.
    """
    full = os.path.abspath(os.path.expanduser(path))
    if not path.endswith((".tar.gz", ".tgz")):
        raise ConfigError(f"spark.ship_env {path}: expected an `ltr pack` archive (.tar.gz or .tgz)")
    if not os.path.isfile(full):
        raise ConfigError(f"spark.ship_env {path}: no such file (`ltr pack --out {path}` builds one)")
    return full


def ship_env(spark: Any, path: str) -> None:
    """Ship the environment ``path`` (:func:`env_archive`) to the session as an archive artifact, unpacked as
    :data:`ENV_ALIAS` in the session's folder on each executor, and make its ``bin/python`` the Python of the
    session's tasks (``spark.sql.execution.pyspark.python``, a session property): PySpark's way to bring a Python
    environment to a Connect server."""
    full = env_archive(path)
    t0 = time.perf_counter()
    spark.addArtifacts(f"{full}#{ENV_ALIAS}", archive=True)
    spark.conf.set("spark.sql.execution.pyspark.python", f"{ENV_ALIAS}/bin/python")
    log.info(
        "Spark Connect: shipped the environment %s (%.0f MiB) to the session in %.1f s; its Python runs the tasks",
        path,
        os.path.getsize(full) / 2**20,
        time.perf_counter() - t0,
    )


def check_workers(spark: Any, url: str, ship: str = "auto", env: str = "") -> None:
    """Before any job of a session on the Spark Connect server at ``url``: one task in the server's Python workers
    imports the project and compares its code with this client's (:func:`pipelines.core.keys.worker_identity`, as
    every barrier task does). ``ship`` (``spark.ship``): ``always`` ships the project's code to the session first
    (:func:`ship_project`); ``auto`` ships it when the workers cannot import the project or run other code, and
    looks again; ``never`` ships nothing. A server whose workers still cannot import the project, or run other code,
    is refused in one line naming their Python and what differs. ``env`` (``spark.ship_env``): an ``ltr pack``
    archive shipped first (:func:`ship_env`), whose Python then runs the tasks, the probe's too.

    Raises
    ------
    ConfigError
        The workers cannot import the project, cannot run the task, or run other code than this client.
    """
    from pipelines.core.keys import source_files, worker_identity, worker_roots

    driver = dict(worker_identity())
    probe = _probe(driver, source_files(worker_roots()))
    if env:
        ship_env(spark, env)
    shipped = None
    if ship == "always":
        shipped = ship_project(spark)
    why = _workers_differ(spark, url, probe, driver)
    if why is not None and ship == "auto":
        shipped = ship_project(spark)
        log.info("%s: shipped the project to the session as %s", why, shipped)
        why = _workers_differ(spark, url, probe, driver)
    if why is None:
        if shipped is not None:
            log.info("Spark Connect: the server's workers run this project from the session's artifact %s", shipped)
        return
    if shipped is not None:
        fix = f"even with the project shipped to the session ({shipped}): its workers lack libraries or hold other code"
    elif ship == "never":
        fix = "spark.ship is never: install this project and its libraries where the server's workers run"
    else:
        fix = "install this project and its libraries where the server's workers run"
    if env:
        how = f"the environment spark.ship_env {env} was shipped and differs: build it again with `ltr pack` here"
    else:
        how = "`ltr pack` builds such an environment; spark.ship_env ships it to the session"
    raise ConfigError(f"{why}: {fix} ({how}), or start the server from this environment (`ltr server start`)")


def _workers_differ(spark: Any, url: str, probe: Any, driver: dict[str, str]) -> str | None:
    """Why the workers of the server at ``url`` cannot run this client's code (None: they can): runs ``probe``
    (:func:`_probe`) in one task."""
    import json

    from pipelines.core.keys import code_differences, code_label

    try:
        rows = spark.range(1, numPartitions=1).mapInArrow(probe, "doc string").collect()
    except Exception as e:  # the task's own failure, as Spark reports it (a missing pyarrow, a worker that died)
        lines = [line.strip() for line in str(e).splitlines() if line.strip()]
        # the worker's exception (its traceback's last line, "ModuleNotFoundError: No module named 'pyarrow'"),
        # else the first line of the message
        raised = [line for line in lines if re.match(r"[\w.]*(Error|Exception)\b.*: ", line)]
        first = raised[-1] if raised else (lines[0] if lines else type(e).__name__)
        return f"the Python workers of the Spark Connect server at {url} cannot run this client's tasks ({first[:300]})"
    doc = json.loads(rows[0]["doc"])
    where = f"the Python workers of the Spark Connect server at {url} ({doc['python']})"
    if "error" in doc:
        return f"{where} cannot import this project ({doc['error']})"
    there = doc.get("code")
    if there is not None and there != driver:
        other = code_differences(there, driver)
        return (
            f"{where} run other code than this client ({', '.join(other)}: {code_label(there, other)} there, "
            f"{code_label(driver, other)} here)"
        )
    return None


def default_parallelism(spark: Any) -> int:
    """How many partitions a job spreads over by default: classic ``defaultParallelism``; on Connect
    ``spark.default.parallelism`` where the server sets it, else the cores of a local master (``local``: 1;
    ``local[N]``: N; ``local[*]``: the executor machine's), else the executors' cores (``spark.executor.instances`` x
    ``spark.executor.cores``), else ``spark.sql.shuffle.partitions``."""
    sc = context(spark)
    if sc is not None:
        return int(sc.defaultParallelism)
    set_ = conf_value(spark, "spark.default.parallelism")
    if set_:
        return int(set_)
    m = _LOCAL.match(master(spark))
    if m and is_local(master(spark)):
        if m.group(1) is None:  # "local": one core, as Spark runs it
            return 1
        return _executor_cores(spark) if m.group(1) == "*" else int(m.group(1))
    instances, cores = conf_value(spark, "spark.executor.instances"), conf_value(spark, "spark.executor.cores")
    if instances and cores:
        return int(instances) * int(cores)
    return int(conf_value(spark, "spark.sql.shuffle.partitions", "200") or "200")


def task_slots(spark: Any, wait: float = 60.0) -> int | None:
    """Barrier task slots: how many tasks of the default resource profile can run at once.

    Classic: Spark's own count (``maxNumConcurrentTasks``, what barrier stages are checked against, and what
    ``xgboost.spark`` asks), which honours ``spark.task.cpus``: 16 cores with ``spark.task.cpus=4`` are 4 slots,
    not 16 (``defaultParallelism`` counts cores). On a cluster whose executors have not registered yet (an
    application just started) it waits up to ``wait`` seconds for the first ones.

    Connect: the server's configuration, ``spark.task.cpus`` honoured: a local master's cores, or
    ``spark.executor.instances`` x ``spark.executor.cores``; None where it does not say (a cluster that scales
    its executors): the caller then needs ``train.workers``.
    """
    task_cpus = int(conf_value(spark, "spark.task.cpus", "1") or "1")
    sc = context(spark)
    if sc is None:
        url = master(spark)
        if is_local(url):
            return max(1, default_parallelism(spark) // task_cpus)
        instances, cores = conf_value(spark, "spark.executor.instances"), conf_value(spark, "spark.executor.cores")
        if instances and cores:
            return int(instances) * (int(cores) // task_cpus)
        return None
    jsc = sc._jsc.sc()  # noqa: SLF001 - no Python API for it (xgboost.spark does the same)
    deadline = time.monotonic() + wait
    while True:
        slots = int(jsc.maxNumConcurrentTasks(jsc.resourceProfileManager().resourceProfileFromId(0)))
        if slots > 0 or time.monotonic() >= deadline:
            break
        time.sleep(0.5)
    if slots < 1:
        log.warning("no executor registered after %.0f s: no task slot for training", wait)
    return slots


def job_group(spark: Any) -> str | None:
    """The job group this thread's jobs run in (classic), or the ``ltr-`` tag of this thread (Connect)."""
    sc = context(spark)
    if sc is not None:
        return sc.getLocalProperty(JOB_GROUP)
    return next((t for t in spark.getTags() if t.startswith("ltr-")), None)


def label_jobs(spark: Any, group: str | None, description: str = "") -> None:
    """Run this thread's next jobs under ``group`` (None: none), the unit SIGTERM and ``ltr grid`` cancel: a classic
    job group (``setJobGroup``), or a Connect tag (``addTag``; ``interruptTag`` cancels its jobs on the server).
    Connect tags are the thread's own, as job groups are."""
    sc = context(spark)
    if sc is not None:
        if group is None:
            sc.setLocalProperty(JOB_GROUP, None)
        elif description:
            sc.setJobGroup(group, description)
        else:
            sc.setLocalProperty(JOB_GROUP, group)
        return
    for t in spark.getTags():
        if t.startswith("ltr-"):
            spark.removeTag(t)
    if group is not None:
        spark.addTag(group)


def use_pool(spark: Any, name: str) -> None:
    """This thread's jobs in the FAIR scheduler pool ``name`` (``ltr grid --parallel``). A Connect client cannot
    choose a pool: its jobs run in the server's default pool (said once)."""
    sc = context(spark)
    if sc is not None:
        sc.setLocalProperty("spark.scheduler.pool", name)
    elif "pool" not in _said:
        _said.add("pool")
        log.info("Spark Connect: the parallel jobs run in the server's default scheduler pool")


def cancel_all(spark: Any) -> None:
    """Cancel every job this session started (SIGTERM): classic ``cancelAllJobs``, Connect ``interruptAll``."""
    sc = context(spark)
    if sc is not None:
        sc.cancelAllJobs()
    else:
        spark.interruptAll()


def active_context() -> Any | None:
    """This process's SparkContext, if PySpark is loaded and one is running (None otherwise; nothing is started):
    a classic session's, or the one a ``local[N]`` Connect server runs in this process."""
    import sys

    pyspark = sys.modules.get("pyspark")
    return getattr(getattr(pyspark, "SparkContext", None), "_active_spark_context", None)


#: The name Spark gives an executor's thread while it runs a task ("... for task 0.0 in stage 14.0 (TID 16)").
_TASK_THREAD = "Executor task launch worker for task "


def running_tasks(sc: Any) -> int:
    """Tasks still running (a cancelled job ends before its tasks do): the application's count, or the task threads
    of this driver's JVM (local masters run their executor there) where those are more. A cancelled task whose
    Python worker is busy ends when Spark kills that worker, ``spark.python.task.killTimeout`` (2 s) after the
    cancel, and meanwhile the application's count was 0 (measured on a training task): Spark stopped under it
    logged ``ERROR TaskContextImpl: Error in TaskCompletionListener ... broadcast_16 does not exist``."""
    jsc = sc._jsc.sc()
    counted = sum(int(i.numRunningTasks()) for i in jsc.statusTracker().getExecutorInfos())
    threads = sum(
        1 for t in sc._jvm.java.lang.Thread.getAllStackTraces().keySet() if str(t.getName()).startswith(_TASK_THREAD)
    )
    return max(counted, threads)


def active_connect_session() -> Any | None:
    """This process's Spark Connect session, if one was built (None otherwise; nothing is started)."""
    import sys

    mod = sys.modules.get("pyspark.sql.connect.session")
    if mod is None:
        return None
    try:
        return mod.SparkSession.getActiveSession() or getattr(mod.SparkSession, "_default_session", None)
    except Exception:
        return None


def remote_url(configured: str) -> str:
    """The Spark Connect URL a command uses: ``spark.remote`` (``--remote``), else ``$SPARK_REMOTE``; empty for a
    classic session. ``auto`` (the default) is resolved against the work_dir's server where a command knows it
    (:func:`pipelines.app.server.session_config`); here it is ``$SPARK_REMOTE``, else classic."""
    url = "" if configured == "auto" else configured
    url = url or os.environ.get("SPARK_REMOTE", "")
    if url and not (url.startswith("sc://") or is_local(url)):
        raise ConfigError(
            f"spark.remote={url!r} is not a Spark Connect URL: give sc://HOST:PORT (a server), or local[N] "
            "(a server in this process)"
        )
    return url
