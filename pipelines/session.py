"""The one SparkSession builder every job and test uses."""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

from pyspark import SparkConf, SparkContext
from pyspark.sql import SparkSession

from pipelines.config import SparkConfig

log = logging.getLogger(__name__)

LOG4J_CONF = Path(__file__).resolve().parent / "log4j2.properties"


def launched_by_spark_submit() -> bool:
    """True when spark-submit started this Python driver (its JVM is already running)."""
    return bool(os.environ.get("PYSPARK_GATEWAY_PORT"))


def resolve_master(cfg: SparkConfig) -> str:
    """The master URL: the config's, else spark-submit's ``--master``, else ``local[*]``."""
    if cfg.master:
        return cfg.master
    if launched_by_spark_submit():
        SparkContext._ensure_initialized()  # connects to spark-submit's JVM; SparkConf then sees its properties
        return SparkConf().get("spark.master", "local[*]")
    return "local[*]"


def session_properties(cfg: SparkConfig, master: str) -> dict[str, str]:
    """Spark properties for a session built from ``cfg`` (``cfg.conf`` wins)."""
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
    }
    if LOG4J_CONF.is_file():
        opt = f"-Dlog4j2.configurationFile={LOG4J_CONF.as_uri()}"
        props["spark.driver.extraJavaOptions"] = opt
        props["spark.executor.extraJavaOptions"] = opt
    if master.startswith("local"):
        # Python workers must run the driver's interpreter (else: No module named pandas).
        props["spark.pyspark.python"] = sys.executable
        props["spark.pyspark.driver.python"] = sys.executable
    props.update(cfg.conf)
    return props


def build_session(cfg: SparkConfig) -> SparkSession:
    """Build (or get) the SparkSession described by ``cfg``.

    Local masters pin the Python workers to ``sys.executable``; cluster masters
    keep whatever ``PYSPARK_PYTHON`` / ``spark.pyspark.python`` the user set.
    """
    master = resolve_master(cfg)
    if master.startswith("local"):
        os.environ["PYSPARK_PYTHON"] = sys.executable
        os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # one machine: bind to loopback, no warning
    builder = SparkSession.builder.master(master).appName(cfg.app_name)
    for k, v in session_properties(cfg, master).items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(cfg.log_level)
    log.info("spark %s session on %s (%d task slots)", spark.version, master,
             spark.sparkContext.defaultParallelism)
    return spark


def task_slots(spark: SparkSession) -> int:
    """Number of tasks the session can run at once (cores over all executors)."""
    return int(spark.sparkContext.defaultParallelism)
