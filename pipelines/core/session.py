"""The one SparkSession builder every job and test uses."""

from __future__ import annotations

import logging
import os
import re
import shlex
import sys
import warnings
from pathlib import Path

from pyspark.sql import SparkSession

from pipelines.core.config import ConfigError, SparkConfig
from pipelines.core.connect import (
    answers,
    check_workers,
    conf_value,
    default_parallelism,
    kind,
    remote_url,
    set_log_level,
)
from pipelines.core.keys import computing_spark
from pipelines.core.threads import apply as apply_threads
from pipelines.core.threads import executor_thread_environment

log = logging.getLogger(__name__)

LOG4J_CONF = Path(__file__).resolve().parent / "log4j2.properties"


def launched_by_spark_submit() -> bool:
    """True when spark-submit started this Python driver (its JVM is already running)."""
    return bool(os.environ.get("PYSPARK_GATEWAY_PORT"))


def _submit_properties() -> dict[str, str]:
    """The properties of spark-submit's JVM, which started this process. Imported here, not at the top: the classic
    API is absent from a pure Spark Connect client (the ``pyspark-client`` package has no ``SparkContext``)."""
    from pyspark import SparkConf, SparkContext

    SparkContext._ensure_initialized()  # connects to spark-submit's JVM; SparkConf then sees its properties
    return dict(SparkConf().getAll())


def resolve_master(cfg: SparkConfig) -> str:
    """The master URL: the config's, else spark-submit's ``--master``, else ``local[*]``."""
    if cfg.master:
        return cfg.master
    if launched_by_spark_submit():
        return _submit_properties().get("spark.master", "local[*]")
    return "local[*]"


def jvm_master(cfg: SparkConfig) -> str:
    """The master of the JVM this process starts for ``cfg``: a classic session's, a ``local[N]`` Connect server's,
    or "" for a client of a Connect server elsewhere (no JVM here)."""
    url = remote_url(cfg.remote)
    if url:
        return "" if url.startswith("sc://") else url
    return resolve_master(cfg)


def _read_properties(path: str) -> dict[str, str]:
    """``spark-defaults.conf``: one ``key value`` (or ``key=value``) per line, ``#`` comments."""
    out: dict[str, str] = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            parts = re.split(r"\s*=\s*|\s+", line, maxsplit=1)
            if len(parts) == 2:
                out[parts[0]] = parts[1].strip()
    return out


#: spark-submit options that are Spark properties (PYSPARK_SUBMIT_ARGS may carry them).
_SUBMIT_FLAGS = {
    "--master": "spark.master",
    "--driver-memory": "spark.driver.memory",
    "--executor-memory": "spark.executor.memory",
    "--executor-cores": "spark.executor.cores",
    "--num-executors": "spark.executor.instances",
    "--driver-java-options": "spark.driver.extraJavaOptions",
    "--name": "spark.app.name",
}


def external_properties() -> dict[str, str]:
    """Spark properties set outside this project's config, which a session never overrides.

    Under spark-submit: everything its JVM holds (``--conf``, its flags,
    ``spark-defaults.conf``). A plain Python driver (``ltr ...``):
    ``$SPARK_CONF_DIR/spark-defaults.conf`` (else ``$SPARK_HOME/conf``) and the
    ``--conf``/flags of ``PYSPARK_SUBMIT_ARGS``.
    """
    if launched_by_spark_submit():
        return _submit_properties()
    out: dict[str, str] = {}
    conf_dir = os.environ.get("SPARK_CONF_DIR") or (
        os.path.join(os.environ["SPARK_HOME"], "conf") if os.environ.get("SPARK_HOME") else ""
    )
    defaults = os.path.join(conf_dir, "spark-defaults.conf") if conf_dir else ""
    if defaults and os.path.isfile(defaults):
        out.update(_read_properties(defaults))
    args = shlex.split(os.environ.get("PYSPARK_SUBMIT_ARGS", ""))
    for i, a in enumerate(args[:-1]):
        if a == "--conf" and "=" in args[i + 1]:
            k, v = args[i + 1].split("=", 1)
            out[k] = v
        elif a in _SUBMIT_FLAGS:
            out[_SUBMIT_FLAGS[a]] = args[i + 1]
    return out


def session_properties(cfg: SparkConfig, master: str, external: dict[str, str] | None = None) -> dict[str, str]:
    """Spark properties for a session built from ``cfg``.

    Precedence: ``cfg.conf`` (``spark.conf`` of the YAML, or ``--set spark.conf=...``)
    > properties set outside the project (``external``: spark-submit, ``--conf``,
    ``spark-defaults.conf``) > the project's defaults below (the other ``spark.*``
    config fields), which fill in only what nobody set.
    """
    external = external or {}
    props = {
        "spark.sql.shuffle.partitions": str(cfg.shuffle_partitions),
        "spark.ui.enabled": str(cfg.ui).lower(),
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.sql.execution.arrow.maxRecordsPerBatch": str(cfg.arrow_max_records_per_batch),
        "spark.sql.session.timeZone": "UTC",
        "spark.python.worker.reuse": "true",
        "spark.driver.memory": cfg.driver_memory,
        "spark.sql.debug.maxToStringFields": "1000",  # plans with 136 feature columns, without warnings
        "spark.scheduler.mode": "FAIR",  # `ltr grid --parallel N`: concurrent node jobs share the slots
        # a cancelled task's Python worker (a training worker inside a tree, when ltr is stopped) is killed half a
        # second after the cancel instead of Spark's 2 s: it trained on meanwhile, and the checkpoints keep only
        # what a segment finished anyway
        "spark.python.task.killTimeout": "500ms",
    }
    # the executors' Python workers share their machine's cores without spinning them away (core.threads): the
    # settings, or the wait policy the user chose in this process's environment
    for k, v in executor_thread_environment().items():
        props[f"spark.executorEnv.{k}"] = v
    if LOG4J_CONF.is_file():
        opt = f"-Dlog4j2.configurationFile={LOG4J_CONF.as_uri()}"
        props["spark.driver.extraJavaOptions"] = opt
        props["spark.executor.extraJavaOptions"] = opt
    if master.startswith("local"):
        # Python workers must run the driver's interpreter (else: No module named pandas).
        props["spark.pyspark.python"] = sys.executable
        props["spark.pyspark.driver.python"] = sys.executable
    kept = sorted(k for k in props if k in external and external[k] != props[k])
    if kept:
        log.debug("keeping the Spark properties set outside the config: %s", ", ".join(kept))
    props = {k: v for k, v in props.items() if k not in external}
    props.update(cfg.conf)
    return props


def build_session(cfg: SparkConfig) -> SparkSession:
    """Build (or get) the SparkSession described by ``cfg``: a Spark Connect one where ``spark.remote``
    (``--remote``) or ``$SPARK_REMOTE`` names a server (:func:`connect_session`), else a classic one.

    Local masters pin the Python workers to ``sys.executable``; cluster masters
    keep whatever ``PYSPARK_PYTHON`` / ``spark.pyspark.python`` the user set.
    Nothing set by spark-submit, ``--conf`` or ``spark-defaults.conf`` is
    overridden (:func:`session_properties`).
    """
    url = remote_url(cfg.remote)
    if url:
        return connect_session(cfg, url)
    master = resolve_master(cfg)
    computing_spark(None)
    if cfg.ship_env:
        log.warning(
            "spark.ship_env is for Spark Connect sessions: a classic session's executors get an environment with "
            "spark-submit --archives ENV#env --conf spark.pyspark.python=./env/bin/python (how-to: cluster)"
        )
    apply_threads()  # this process and what it starts (the JVM, a local session's Python workers) inherit them
    if master.startswith("local"):
        os.environ["PYSPARK_PYTHON"] = sys.executable
        os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # one machine: bind to loopback, no warning
    external = external_properties()
    builder = SparkSession.builder.master(master)
    if "spark.app.name" not in external:
        builder = builder.appName(cfg.app_name)
    for k, v in session_properties(cfg, master, external).items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    _started(spark, cfg, master)
    return spark


def _started(spark: SparkSession, cfg: SparkConfig, where: str) -> None:
    set_log_level(spark, cfg.log_level)
    log.info(
        "spark %s %s session on %s (%d cores, %s shuffle partitions, %s scheduler)",
        spark.version,
        kind(spark),
        where,
        default_parallelism(spark),
        spark.conf.get("spark.sql.shuffle.partitions"),
        conf_value(spark, "spark.scheduler.mode", "FIFO"),
    )


#: Properties a Spark Connect client may set on its server-side session (the rest are the server's).
_CONNECT_SESSION_PROPERTIES = ("spark.sql.", "spark.python.")


def connect_session(cfg: SparkConfig, url: str) -> SparkSession:
    """A Spark Connect session on ``url``: ``sc://HOST:PORT`` (a running server), or ``local[N]`` (a server started
    in this process, with the properties a classic local session would have).

    A server keeps its own static properties (memory, the Python of its workers, the scheduler): only the
    session's SQL and Python properties of ``cfg`` are set on it, and the rest of ``spark.conf`` is said once as
    not applied.

    Raises
    ------
    ConfigError
        A server that does not answer (exit 2), or one whose Spark is older than this client's.
    """
    if url.startswith("sc://"):
        _check_answers(url)
    apply_threads()
    os.environ.pop("SPARK_CONNECT_MODE_ENABLED", None)
    builder = SparkSession.builder.remote(url)
    if url.startswith("local"):
        # the server runs in this process: the properties a classic local session has, as its server's
        os.environ["PYSPARK_PYTHON"] = sys.executable
        os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        props = session_properties(cfg, url, external_properties())
        builder = builder.appName(cfg.app_name)
    else:
        props = {
            k: v
            for k, v in session_properties(cfg, url, {}).items()
            if k.startswith(_CONNECT_SESSION_PROPERTIES) and (k in cfg.conf or not k.startswith("spark.python."))
        }
        ignored = sorted(k for k in cfg.conf if k not in props)
        if ignored:
            log.warning("Spark Connect: the server keeps its own %s (not applied)", ", ".join(ignored))
    for k, v in props.items():
        builder = builder.config(k, v)
    with warnings.catch_warnings():
        # a local server takes the static properties at its start; the client then tries each again as a
        # session property and warns that it cannot (CANNOT_MODIFY_CONFIG): nothing is lost
        warnings.filterwarnings("ignore", message="Failed to set", category=UserWarning)
        spark = builder.getOrCreate()
    client = __import__("pyspark").__version__
    if _version(spark.version)[:2] < _version(client)[:2]:
        raise ConfigError(
            f"the Spark Connect server at {url} runs Spark {spark.version}, older than this client's {client}: "
            "use a server of the same version or newer"
        )
    computing_spark(spark.version)  # the keys name the server's Spark, which computes, not this client's package
    if url.startswith("sc://"):  # (a server in this process runs this interpreter in its workers)
        check_workers(spark, url, cfg.ship, cfg.ship_env)
    elif cfg.ship_env:
        log.warning("spark.ship_env is not shipped to a server in this process: its workers run this interpreter")
    _started(spark, cfg, url)
    return spark


def _check_answers(url: str, timeout: float = 5.0) -> None:
    """A TCP connection to the server of ``url`` (``sc://HOST[:PORT][/;params]``), refused in one line when nothing
    listens there: PySpark's client would retry for minutes before it said so."""
    from urllib.parse import urlparse

    parsed = urlparse("http://" + url.removeprefix("sc://").split(";", 1)[0])
    if not answers(parsed.hostname or "localhost", parsed.port or 15002, timeout):
        raise ConfigError(
            f"no Spark Connect server answers at {url}: start one (`ltr server start`, or "
            "`sbin/start-connect-server.sh` of a Spark install of the client's version, or --remote 'local[2]' for "
            "a server in this process)"
        )


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", text)[:3])
