"""The Airflow side of the study (needs the ``[airflow]`` extra): the spark-submit operator of its steps, and the
wrapper that turns a bad input of a decision task into a failure without retries.

:class:`LtrSubmitOperator` is the Spark provider's ``SparkSubmitOperator`` with what a study needs around it,
done through public ways:

* **the run's Spark settings** (``params.spark_conf``, ``archives``, memory and cores) go into the operator's
  ``conf`` as Spark properties (``spark.archives``, ``spark.driver.memory``...), which spark-submit reads as it
  reads its options; ``files``, ``py_files``, ``jars`` and ``application_args`` are the operator's own fields;
* **what a job hands on** (``ltr grid --setup-only``'s parent run id) is a file it writes (``--result``), read by
  the next task, in any deploy mode: nothing is parsed from spark-submit's output;
* **no application left behind**: a failed, timed-out or killed task freezes and kills every process the
  task's own process started for this submit, and everything below them
  (:meth:`pipelines.core.proctree.ProcessTree.from_now_on`; a thread remembers the tree every 2 s while the
  application runs, so processes whose parent died are killed too), so no driver keeps training (and
  holding its nodes' leases) beside the retry;
* **exit code 2** (bad input or configuration: :mod:`pipelines.app.cli`) fails the task without retries, read
  from the hook's error ("Error code is: 2").

One thing has no public way: the Spark connection of a run (``params.spark_conn_id``) is the operator's
``_conn_id`` (not a templated field). It is set in :meth:`LtrSubmitOperator.execute` only, and
``tests/scenarios/test_airflow.py`` pins it against the provider version.
"""

from __future__ import annotations

import functools
import os
import re
import threading
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import Param
from airflow.sdk.exceptions import AirflowFailException

from pipelines.app.study_tasks import (
    MLFLOW_CONN_DEFAULT,
    MLFLOW_CONN_PARAM,
    MlflowServer,
    StudyTaskError,
    mlflow_server,
    resolve_study,
    unit_args,
)
from pipelines.core.proctree import ProcessTree

#: A job's exit code for bad input or configuration (:mod:`pipelines.app.cli`): retrying cannot help.
EXIT_USAGE = 2
#: The run params applied to every spark-submit as Spark properties (empty or null: the connection's value).
SPARK_PROPERTIES = {
    "archives": "spark.archives",
    "driver_memory": "spark.driver.memory",
    "executor_memory": "spark.executor.memory",
    "executor_cores": "spark.executor.cores",
    "num_executors": "spark.executor.instances",
    "total_executor_cores": "spark.cores.max",
}
#: The run params that are the operator's own fields (comma-separated lists of paths or URIs).
SUBMIT_FIELDS = ("files", "py_files", "jars")
_EXIT = re.compile(r"Error code is: (\d+)")


def fail_fast(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` (a decision of :mod:`pipelines.app.study_tasks`) with :class:`~pipelines.app.study_tasks.StudyTaskError`
    turned into Airflow's failure without retries; its signature is kept (Airflow passes context by name)."""

    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> Any:
        """Call ``fn``; a :class:`~pipelines.app.study_tasks.StudyTaskError` becomes ``AirflowFailException``.

        Raises
        ------
        AirflowFailException
            With the message of the ``StudyTaskError`` that ``fn`` raised (Airflow does not retry it).
        """
        try:
            return fn(*args, **kwargs)
        except StudyTaskError as e:
            raise AirflowFailException(str(e)) from None

    return run


def mlflow_connection(conn_id: str) -> MlflowServer | None:
    """The MLflow tracking server of Airflow connection ``conn_id`` (None: there is none): ``http(s)://host[:port]``
    (the connection's schema ``https``, else http) and its login and password, which Airflow masks in task logs.
    Set it from a secrets backend, or ``AIRFLOW_CONN_MLFLOW_DEFAULT`` on the workers (docs/how-to/credentials.md)."""
    from airflow.sdk import BaseHook
    from airflow.sdk.exceptions import AirflowNotFoundException

    try:
        c = BaseHook.get_connection(conn_id)
    except AirflowNotFoundException:
        return None
    scheme = "https" if (c.schema or "").lower() == "https" or c.conn_type == "https" else "http"
    host = (c.host or "").split("://")[-1].rstrip("/")
    return MlflowServer(f"{scheme}://{host}{f':{c.port}' if c.port else ''}", c.login or "", c.password or "")


def use_mlflow_connection(params: dict[str, Any]) -> None:
    """The credentials of the run's MLflow connection (``params.mlflow_conn_id``) into this task's environment."""
    _, server = mlflow_server(params, mlflow_connection)
    if server is not None:
        server.apply()


def resolve_study_task(params: dict[str, Any], run_id: str | None = None) -> dict[str, Any]:
    """:func:`pipelines.app.study_tasks.resolve_study` with the run's MLflow connection read from Airflow."""
    return resolve_study(params, run_id, connection=mlflow_connection)


def unit_args_task(study: dict[str, Any], parent: dict[str, Any]) -> list[dict[str, Any]]:
    """:func:`pipelines.app.study_tasks.unit_args` (it reads the study's runs in MLflow) with the run's credentials."""
    use_mlflow_connection({MLFLOW_CONN_PARAM: study.get(MLFLOW_CONN_PARAM) or ""})
    return unit_args(study, parent)


class LtrSubmitOperator(SparkSubmitOperator):
    """``spark-submit jobs/<step>.py ARGS`` on the run's ``params.spark_conn_id`` connection.

    ``application_args`` may hold lists (the XCom of an argument list): they are spliced in. ``unit_label``: what
    a mapped training task trains (its label in the Grid view); ``timeout_s``: its ``execution_timeout``.
    Exit code 2 fails the task without retries.
    """

    def __init__(self, *, unit_label: str = "", timeout_s: float | None = None, **kwargs: Any) -> None:
        if timeout_s:  # a unit's own limit (mapped: one per unit)
            kwargs["execution_timeout"] = timedelta(seconds=float(timeout_s))
        super().__init__(**kwargs)
        self.unit_label = unit_label  # what the task trains, for the Grid view (map_index_template)
        self._tree: ProcessTree | None = None  # set when the submit starts (execute)

    def apply_params(self, params: dict[str, Any]) -> None:
        """The run's Spark settings onto this submit (see the module docstring)."""
        if params.get("spark_conn_id"):
            self._conn_id = params["spark_conn_id"]  # no public way: pinned by tests/scenarios/test_airflow.py
        conf = {str(k): str(v) for k, v in (params.get("spark_conf") or {}).items()}
        for name, prop in SPARK_PROPERTIES.items():
            if params.get(name) not in (None, ""):
                conf[prop] = str(params[name])
        self.conf = {**(self.conf or {}), **conf}
        for name in SUBMIT_FIELDS:
            if params.get(name) not in (None, ""):
                setattr(self, name, params[name])
        self.application_args = [
            str(b) for a in self.application_args or [] for b in (a if isinstance(a, (list, tuple)) else [a])
        ]

    def execute(self, context: Any) -> None:
        """Apply the run's params (:meth:`apply_params`) and run spark-submit, killing what it started if it fails.

        While the application runs, a thread remembers the task's process tree every 2 s. On any exception
        (a failed submit, Airflow's ``execution_timeout``, a kill) every process of that tree is killed before
        the exception propagates.

        Parameters
        ----------
        context : Any
            Airflow's task context; its ``"params"`` are the run params (:func:`study_params`).

        Raises
        ------
        AirflowFailException
            When spark-submit exited with code 2 (:data:`EXIT_USAGE`: bad input or configuration), so that
            Airflow does not retry the task.
        BaseException
            Any other exception of the submit, re-raised unchanged after the kill.
        """
        self.apply_params(context["params"])
        # the tracking server's credentials: in the environment spark-submit inherits, never in its arguments
        # (the provider's env_vars would put them on the command line on YARN and Kubernetes)
        use_mlflow_connection(context["params"])
        from pipelines.app.jvm import with_archive

        # the JVM spark-submit starts here (in client mode the driver's): Spark's class archive where it exists
        os.environ["SPARK_SUBMIT_OPTS"] = with_archive(os.environ.get("SPARK_SUBMIT_OPTS", ""))
        self._tree = ProcessTree.from_now_on(os.getpid())  # what this task process starts now: spark-submit
        stop = threading.Event()
        watcher = threading.Thread(target=self._remember, args=(stop,), name="ltr-process-tree", daemon=True)
        watcher.start()
        try:
            super().execute(context)
        except BaseException as e:  # a failure, Airflow's execution_timeout, a kill: no application left behind
            stop.set()
            self._tree.kill()
            code = _EXIT.search(str(e))
            if code and int(code.group(1)) == EXIT_USAGE:
                raise AirflowFailException(
                    f"{os.path.basename(self.application)} exited with code {EXIT_USAGE} (bad input or "
                    "configuration, see the log above): not retried"
                ) from e
            raise
        finally:
            stop.set()
            watcher.join(timeout=10)

    def _remember(self, stop: threading.Event) -> None:
        """Remember the task's process tree every 2 s while the application runs (tree memory: a worker whose
        parent died is still killed)."""
        while not stop.wait(2.0) and self._tree is not None:
            self._tree.remember()

    def on_kill(self) -> None:
        """Kill every process this submit started (when it has started), then the operator's own ``on_kill``."""
        if self._tree is not None:
            self._tree.kill()
        super().on_kill()


def study_params() -> dict[str, Param]:
    """The DAG's run params, with the descriptions the trigger form shows: the study's config (``conf``, ``set``,
    ``src``), the Spark connection and the settings of every spark-submit (:data:`SPARK_PROPERTIES`,
    :data:`SUBMIT_FIELDS`), and a training task's time limit (base + per tree of its unit)."""
    return {
        "conf": Param("", type="string", description="YAML config; empty: conf/default.yaml"),
        "set": Param(
            [],
            type="array",
            items={"type": "string"},
            description="section.key=value overrides, passed as --set to every step",
        ),
        "src": Param("", type="string", description="LETOR folder to ingest; empty: generate data as `ltr run`"),
        "spark_conn_id": Param("spark_default", type="string", description="Airflow Spark connection"),
        "spark_remote": Param(
            "",
            type="string",
            description="a Spark Connect server (sc://HOST:15002): every step runs as its client (--remote); "
            "empty: the Spark connection's master",
        ),
        MLFLOW_CONN_PARAM: Param(
            MLFLOW_CONN_DEFAULT,
            type="string",
            description="Airflow connection of the MLflow tracking server (host, port, schema http/https, login, "
            "password): the jobs' tracking.uri and credentials. A missing default connection: the config's "
            "tracking.uri and the workers' MLFLOW_TRACKING_USERNAME/PASSWORD. Never put a password in set.",
        ),
        "spark_conf": Param(
            {},
            type="object",
            description="Spark properties passed as --conf to every spark-submit "
            "(e.g. spark.pyspark.python, spark.task.cpus, spark.executor.memoryOverhead)",
        ),
        "archives": Param(
            "",
            type="string",
            description="--archives of every spark-submit, e.g. "
            "hdfs:///apps/ltr-env.tar.gz#env (the packed environment: `ltr pack`)",
        ),
        "py_files": Param("", type="string", description="--py-files of every spark-submit"),
        "files": Param("", type="string", description="--files of every spark-submit"),
        "jars": Param("", type="string", description="--jars of every spark-submit"),
        "driver_memory": Param("", type="string", description="--driver-memory (empty: the connection's or Spark's)"),
        "executor_memory": Param("", type="string", description="--executor-memory"),
        "executor_cores": Param(None, type=["null", "integer"], description="--executor-cores"),
        "num_executors": Param(None, type=["null", "integer"], description="--num-executors (YARN, Kubernetes)"),
        "total_executor_cores": Param(
            None, type=["null", "integer"], description="--total-executor-cores (standalone)"
        ),
        "train_timeout_base_s": Param(
            3600, type="number", minimum=0, description="each training task's time limit: this many seconds..."
        ),
        "train_timeout_per_tree_s": Param(
            30, type="number", minimum=0, description="...plus this many per tree of its unit (both 0: no limit)"
        ),
    }
