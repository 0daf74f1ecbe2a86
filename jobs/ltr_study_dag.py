"""Airflow 3 DAG ``ltr_study``: the whole study, one spark-submit job per step.

::

    study -> generate? -> generate -> ingest? -> ingest -> record_ingest -> difficulty? -> difficulty
          -> grid_setup -> parent -> units -> train (one task per unit of the plan, every fold, mapped) -> report

Trigger it with params (every one optional)::

    airflow dags trigger ltr_study --conf '{"conf": "conf/paper.yaml", "src": "/data/MSLR-WEB30K",
                                            "set": ["work_dir=/data/ltr"], "spark_conn_id": "spark_default"}'

* ``conf``: the YAML config (empty: ``conf/default.yaml``), passed as ``--conf`` to every job;
* ``set``: ``section.key=value`` overrides, passed as ``--set`` to every job;
* ``src``: the LETOR folder to ingest; empty: the data are generated as ``ltr run`` does
  (``ltr generate --out <work_dir>/letor``, ``generate.queries`` / ``generate.seed``);
* ``spark_conn_id``: the Airflow Spark connection (default ``spark_default``, e.g. from
  ``AIRFLOW_CONN_SPARK_DEFAULT='{"conn_type": "spark", "host": "yarn"}'``): master, deploy mode,
  ``spark-binary``, queue;
* ``spark_conf``, ``archives``, ``py_files``, ``files``, ``jars``, ``driver_memory``, ``executor_memory``,
  ``executor_cores``, ``num_executors``, ``total_executor_cores``: passed to every spark-submit;
* ``train_timeout_base_s``, ``train_timeout_per_tree_s``: a training task's time limit, base + per tree of
  its unit.

The deployment's own settings are environment variables read where this file is parsed (Airflow fixes
retries and concurrency then): ``LTR_TASK_RETRIES`` (3), ``LTR_RETRY_DELAY_S`` (60, exponential back-off up
to ``LTR_MAX_RETRY_DELAY_S``, 900), ``LTR_TRAINING_SLOTS`` (2 training tasks of a run at once),
``LTR_TRAINING_POOL`` (an Airflow pool for them; empty: ``default_pool``), ``LTR_JOBS_DIR`` (the jobs'
scripts; default: the installed package's). Nothing is configured by editing this file, which may be
copied alone into Airflow's dags folder.

**How the steps run: SparkSubmitOperator on ``jobs/<step>.py``, not the Python API in the task.**
The jobs are Spark applications that users launch with ``spark-submit`` on clusters: submitting
the same thin scripts keeps one way of running a step (its driver, memory and master come from
the Spark connection and ``spark-submit``, as on the command line), keeps the JVM, the Spark
driver and XGBoost's tracker out of the Airflow worker's process (a task can be killed or retried
without leaving a SparkContext behind in it), and lets the mapped training tasks run as concurrent
Spark applications. Calling ``pipelines`` inside the task would tie every step to a local
SparkSession in the worker. The few decisions that need no Spark run in the worker as small
Python tasks (``study``, ``generate?``, ``ingest?``, ``record_ingest``, ``difficulty?``): they
resolve the config, and compare keys of inputs to decide whether a step is up to date. So the
project is installed in Airflow's environment (``pip install -e ".[airflow]"``), and the
worker's ``PATH`` must have ``spark-submit`` and the project's ``python3`` (the driver's Python;
on a cluster, ship the environment as the README says). A job's exit code 2 (bad input or
configuration) fails its task without retries; other failures are retried (``LTR_TASK_RETRIES``), and a
failed, timed-out or killed task has spark-submit's whole process tree killed first, so that no driver keeps
training (and holding its nodes' leases) beside the retry.

**Idempotent and retry-safe.** Every job writes its outputs atomically, and:

* ``generate?`` skips generation when ``<work_dir>/letor/generate.json`` records the configured
  queries and seed (and removes a stale one before regenerating, so a crash leaves no record);
* ``ingest?`` skips ingest when the key of its inputs (the source listing: names, sizes,
  modification times; the ingest and dataset settings; the output path and the ingest format),
  taken before the ingest, equals the one in ``<work_dir>/_ingest_key.json``, which
  ``record_ingest`` writes after a successful ingest with the dataset's content fingerprint, and
  the dataset still has that fingerprint. (The dataset's ``_manifest.json`` records the source's
  names and sizes and the *content* fingerprint, which takes a full read of the source to
  compare, but neither modification times nor the ingest settings: hence the key file.);
* ``difficulty?`` skips the scores when ``_difficulty.json`` holds the key that ``ltr grid``
  itself checks (dataset fingerprint, feature roles, settings, metric conventions, code);
* ``ltr grid --setup-only`` finds or creates the study's one MLflow parent run, computes the
  curricula (cached by key) and makes every child run of the study once (SCHEDULED); it prints the parent
  run id and writes it to ``<work_dir>/airflow/<run id>/grid_setup.json``, which ``parent`` reads when the
  driver's output does not come back (cluster deploy mode); ``units`` cuts every fold's plan into its
  independent units (a root node with every node below it: ``ltr grid --plan`` shows them as the
  unindented lines) and ``ltr grid --unit F:I ...`` trains one unit under that parent from the
  checkpoints, opening and finishing only the children whose paths end in it, so units run at once
  without two runs of a child, a retry continues from the last checkpoint and the same run ids, and a
  re-run of the DAG trains nothing new (when the study is finished, ``units`` maps no task at all); the
  parent is FINISHED once every unit of every fold is;
* ``report`` rebuilds the tables and figures from MLflow for that parent run (all folds), logged to it
  under ``report/``; it runs once every unit has succeeded.

Paths: ``work_dir`` is a local path (as for ``ltr run``); relative paths in ``conf`` and ``set``
resolve against the Airflow worker's working directory, for the Python tasks and the jobs alike
(prefer absolute ones). The generated data, the key files and the jobs' driver run on the worker.

Skipping is Airflow's short-circuit: a ``@task.short_circuit`` with
``ignore_downstream_trigger_rules=False`` skips just the step after it, and the steps further
down run with ``trigger_rule="none_failed"``. ``max_active_runs=1``: two runs of one study would
share its checkpoints and parent run.
"""

from __future__ import annotations

import json
import os
from datetime import timedelta
from typing import Any

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import DAG, Param, task

from pipelines.config import jobs_dir

#: The jobs' scripts: the installed package's (or ``$LTR_JOBS_DIR``), wherever this file was copied.
JOBS = str(jobs_dir())
#: A job's exit code for bad input or configuration (``pipelines.cli``): retrying cannot help.
EXIT_USAGE = 2


def _env_number(name: str, default: float) -> float:
    text = os.environ.get(name, "")
    try:
        return float(text) if text.strip() else default
    except ValueError:
        raise ValueError(f"${name}={text!r}: expected a number") from None


# The deployment's settings (environment of the dag-processor and workers; Airflow reads task retries, pools
# and concurrency when it parses the file, before any run's params exist):
#: Retries of every Spark step (training resumes from its checkpoints), with exponential back-off.
RETRIES = int(_env_number("LTR_TASK_RETRIES", 3))
RETRY_DELAY = timedelta(seconds=_env_number("LTR_RETRY_DELAY_S", 60))
MAX_RETRY_DELAY = timedelta(seconds=_env_number("LTR_MAX_RETRY_DELAY_S", 900))
#: The Airflow pool the training tasks take a slot of (``airflow pools set ltr_training 2 "..."``); bounds the
#: spark-submits of every study at once. Empty: ``default_pool`` (a pool that does not exist would leave the
#: tasks scheduled forever: Airflow only logs it).
TRAINING_POOL = os.environ.get("LTR_TRAINING_POOL", "") or "default_pool"
#: Training applications of one study at once (memory per application at MSLR-WEB30K's size:
#: benchmarks/RESULTS.md, "Memory").
TRAINING_SLOTS = int(_env_number("LTR_TRAINING_SLOTS", 2))


def _fail(msg: str) -> BaseException:
    from airflow.sdk.exceptions import AirflowFailException

    return AirflowFailException(msg)


class LtrSubmitOperator(SparkSubmitOperator):
    """``spark-submit jobs/<step>.py ARGS`` on the run's ``params.spark_conn_id`` connection.

    ``application_args`` may hold lists (the XCom of an argument list): they are spliced in. The run's
    Spark params (``spark_conf``, ``archives``, memory...) are applied to the submit. ``unit_label``: what a
    mapped training task trains (its label in the Grid view); ``timeout_s``: its ``execution_timeout``.
    Returns (as its XCom) the last JSON object the job printed with a ``parent_run_id`` (what
    ``ltr grid --setup-only`` prints), or None (deploy mode ``cluster``: ``parent`` reads the record).
    Exit code 2 fails the task without retries.
    """

    #: run params passed to spark-submit (empty or null: the Spark connection's or spark-defaults' value)
    SUBMIT_PARAMS = {
        "archives": "_archives",
        "py_files": "py_files",
        "files": "files",
        "jars": "jars",
        "driver_memory": "_driver_memory",
        "executor_memory": "_executor_memory",
        "executor_cores": "_executor_cores",
        "num_executors": "_num_executors",
        "total_executor_cores": "_total_executor_cores",
    }

    def __init__(self, *, unit_label: str = "", timeout_s: float | None = None, **kwargs: Any) -> None:
        if timeout_s:  # a unit's own limit (mapped: one per unit)
            kwargs["execution_timeout"] = timedelta(seconds=float(timeout_s))
        super().__init__(**kwargs)
        self.unit_label = unit_label  # what the task trains, for the Grid view (map_index_template)

    def execute(self, context: Any) -> dict[str, Any] | None:
        params = context["params"]
        self._conn_id = params.get("spark_conn_id") or self._conn_id
        self.conf = {**(self.conf or {}), **{str(k): str(v) for k, v in (params.get("spark_conf") or {}).items()}}
        for name, attr in self.SUBMIT_PARAMS.items():
            if params.get(name) not in (None, ""):
                setattr(self, attr, params[name])
        # an argument that is a list (an XCom of arguments) is spliced in
        self.application_args = [
            str(b) for a in self.application_args or [] for b in (a if isinstance(a, (list, tuple)) else [a])
        ]
        hook = self._hook = self._get_hook()
        self._tree = None
        printed: list[str] = []
        process_log = hook._process_spark_submit_log

        def tee(lines):
            for line in lines:
                self._remember_tree()
                if line.lstrip().startswith("{"):
                    printed.append(line.strip())
                yield line

        hook._process_spark_submit_log = lambda lines: process_log(tee(lines))
        try:
            super().execute(context)
        except BaseException as e:  # a failure, Airflow's execution_timeout, a kill: no application left behind
            self._kill_tree()
            sp = getattr(hook, "_submit_sp", None)
            if sp is not None and sp.returncode == EXIT_USAGE:
                raise _fail(
                    f"{os.path.basename(self.application)} exited with code {EXIT_USAGE} (bad input or "
                    f"configuration, see the log above): not retried"
                ) from e
            raise
        for line in reversed(printed):
            try:
                doc = json.loads(line)
            except ValueError:
                continue
            if isinstance(doc, dict) and "parent_run_id" in doc:
                return doc
        return None

    def on_kill(self) -> None:
        self._kill_tree()
        super().on_kill()

    def _remember_tree(self) -> None:
        """Record spark-submit's process tree (at most every 2 s, while its log is read), so that a kill also
        reaches processes whose parent already died (:class:`pipelines.proctree.ProcessTree`)."""
        from pipelines.proctree import ProcessTree

        sp = getattr(getattr(self, "_hook", None), "_submit_sp", None)
        if sp is None:
            return
        if getattr(self, "_tree", None) is None or self._tree.root != sp.pid:
            self._tree = ProcessTree(sp.pid)
        self._tree.remember(every=2.0)

    def _kill_tree(self) -> None:
        """Freeze, then SIGKILL spark-submit's whole process tree (its JVM, the Python driver, PySpark's workers:
        these run in process groups of their own, so the tree is walked) and the processes remembered from it,
        so that neither a timed-out nor a killed task leaves a driver training, and holding the leases of its
        nodes, beside its retry (:func:`pipelines.proctree.kill_tree`)."""
        self._remember_tree()
        tree = getattr(self, "_tree", None)
        if tree is not None:
            tree.kill()


# ----------------------------------------------------------------- decisions (no Spark)
def _load(study: dict[str, Any]) -> Any:
    """The run's :class:`pipelines.config.Config`."""
    from pipelines.config import load_config

    return load_config(study["conf"] or None, study["set"])


def resolve_study(params: dict[str, Any], run_id: str | None = None) -> dict[str, Any]:
    """The run's config (``params.conf`` + ``params.set``), checked, and every job's arguments.

    ``params``, ``run_id``: the run's params and id (Airflow passes them to a task callable by these names).
    """
    from pipelines.config import ConfigError, load_config
    from pipelines.layout import Layout

    conf, overrides, src = params.get("conf") or "", list(params.get("set") or []), params.get("src") or ""
    try:
        cfg = load_config(conf or None, overrides)
    except ConfigError as e:
        raise _fail(f"params conf/set: {e}") from None
    if not cfg.grid.folds:
        raise _fail("grid.folds is empty: the study has no fold to train")
    common = (["--conf", conf] if conf else []) + [a for o in overrides for a in ("--set", o)]
    layout = Layout.of(cfg)
    work, letor, data, difficulty = cfg.work_dir, layout.letor, layout.data, layout.difficulty
    timeouts = {k: params.get(k) for k in ("train_timeout_base_s", "train_timeout_per_tree_s")}
    bad = {k: v for k, v in timeouts.items() if not isinstance(v, (int, float)) or v < 0}
    if bad:
        raise _fail(f"params {bad}: expected seconds >= 0 (0: no limit)")
    # where grid_setup writes its summary (the parent run id) for the tasks after it, whatever the deploy mode
    setup_record = layout.airflow_record(run_id, "grid_setup.json")
    return {
        "conf": conf,
        "set": overrides,
        "work_dir": work,
        "generate": not src,
        "src": src or letor,
        "data": data,
        "difficulty": difficulty,
        "folds": list(cfg.grid.folds),
        "setup_record": setup_record,
        "ingest_record": layout.ingest_key,
        **timeouts,
        "generate_args": ["--out", letor, *common],
        "ingest_args": ["--src", src or letor, "--out", data, *common],
        "difficulty_args": ["--data", data, "--out", difficulty, *common],
        "setup_args": ["--setup-only", "--result", setup_record, *common],
        "grid_args": common,
        "report_args": common,
    }


def generate_needed(study: dict[str, Any]) -> bool:
    """True unless ``src`` was given or ``<work_dir>/letor`` already holds this config's data."""
    if not study["generate"]:
        return False
    cfg = _load(study)
    record = os.path.join(study["src"], "generate.json")
    try:
        with open(record) as f:
            done = json.load(f)
    except (OSError, ValueError):
        done = {}
    if done.get("queries") == cfg.generate.queries and done.get("seed") == cfg.generate.seed:
        return False
    if os.path.exists(record):  # regenerating: a crash must not leave the old record behind
        os.remove(record)
    return True


def _listing(src: str) -> list[list[Any]]:
    """(name relative to src, size, mtime in ns) of every file under ``src`` (a folder or one file)."""
    import pyarrow.fs as pafs

    from udfs.letor_chunks import to_uri

    fs, root = pafs.FileSystem.from_uri(to_uri(src))
    info = fs.get_file_info(root)
    if info.type == pafs.FileType.NotFound:
        raise _fail(f"params.src {src}: no such file or directory")
    if info.type == pafs.FileType.File:
        return [[info.base_name, info.size, info.mtime_ns]]
    files = fs.get_file_info(pafs.FileSelector(root, recursive=True))
    return sorted([f.path[len(root) :].lstrip("/"), f.size, f.mtime_ns] for f in files if f.type == pafs.FileType.File)


def ingest_key(study: dict[str, Any]) -> str:
    """Hash of what determines the dataset: source listing, ingest and dataset settings, output, format."""
    from dataclasses import asdict

    from pipelines.config import load_dataset_spec
    from pipelines.ingest import FORMAT_VERSION
    from pipelines.keys import ingest_key as key_of
    from udfs.letor_chunks import to_uri

    cfg = _load(study)
    doc = {
        "src": to_uri(study["src"]),
        "files": _listing(study["src"]),
        "out": to_uri(study["data"]),
        "ingest": asdict(cfg.ingest),
        "dataset": asdict(load_dataset_spec(cfg.dataset)),
        "format_version": FORMAT_VERSION,
    }
    return key_of(doc)


def _dataset_fingerprint(data: str) -> str | None:
    from pipelines.dataset import DatasetError, open_dataset

    try:
        return open_dataset(data).fingerprint
    except (DatasetError, OSError, ValueError, KeyError):
        return None


def ingest_needed(study: dict[str, Any]) -> str:
    """The key of the ingest's inputs (:func:`ingest_key`) when the dataset must be (re)written; "" (skip)
    when it was ingested from exactly these inputs and still has the fingerprint recorded then.
    The key is taken before the ingest starts, so a source that changes while it runs is ingested again."""
    path = study["ingest_record"]
    try:
        with open(path) as f:
            done = json.load(f)
    except (OSError, ValueError):
        done = {}
    key = ingest_key(study)
    fingerprint = done.get("fingerprint")
    if done.get("key") == key and fingerprint and fingerprint == _dataset_fingerprint(study["data"]):
        return ""
    if os.path.exists(path):  # the dataset is about to change: its record goes first
        os.remove(path)
    return key


def record_ingest(study: dict[str, Any], key: str) -> dict[str, Any]:
    """After a successful ingest, write ``<work_dir>/_ingest_key.json`` (atomically): the inputs' ``key``
    and the dataset's content fingerprint."""
    from pipelines.storage import write_file_atomic

    fp = _dataset_fingerprint(study["data"])
    if fp is None:
        raise RuntimeError(f"ingest succeeded but {study['data']} has no readable _manifest.json")
    doc = {"key": key, "fingerprint": fp, "src": study["src"], "data": study["data"]}
    write_file_atomic(study["ingest_record"], json.dumps(doc, indent=2, sort_keys=True).encode())
    return doc


def difficulty_needed(study: dict[str, Any]) -> bool:
    """False when the stored scores carry the key ``ltr grid`` checks (:func:`pipelines.prepare.ensure_difficulty`)."""
    from pipelines.dataset import open_dataset
    from pipelines.difficulty import difficulty_inputs, stored_summary
    from pipelines.keys import difficulty_key

    cfg = _load(study)
    key = difficulty_key(**difficulty_inputs(open_dataset(study["data"]), cfg.difficulty, cfg.metric))
    return stored_summary(study["difficulty"], key) is None


def study_parent(study: dict[str, Any], setup: dict[str, Any] | None) -> dict[str, Any]:
    """The study's parent run: what ``grid_setup`` printed (``setup``), else what it wrote to
    ``study["setup_record"]`` (a driver in cluster deploy mode prints nowhere the task sees). Never a guess:
    without either this fails, and the units and the report never describe another study."""
    from pipelines.storage import read_json

    doc = setup or {}
    if not doc.get("parent_run_id"):
        try:
            doc = read_json(os.path.dirname(study["setup_record"]), os.path.basename(study["setup_record"]))
        except (OSError, ValueError) as e:
            raise _fail(
                f"grid_setup printed no parent run id and its record {study['setup_record']} cannot be "
                f"read ({e}): is work_dir storage the Airflow workers reach?"
            ) from None
    if not str(doc.get("parent_run_id") or "").strip():
        raise _fail(f"grid_setup recorded no parent run id ({doc})")
    return {"parent_run_id": str(doc["parent_run_id"]), "finished": bool(doc.get("finished"))}


def unit_args(study: dict[str, Any], parent: dict[str, Any]) -> list[dict[str, Any]]:
    """One mapped ``train`` task per unfinished unit of work of the study's plan: its arguments
    (``ltr grid --unit F:I ...``), its label (what it trains) and its time limit; none when the study is
    finished, so a re-run of a finished study starts no training application.

    A unit is a root node of a fold's plan with every node below it (:meth:`pipelines.plan.Plan.units`):
    no two units share a node and each path lies within one, so the units of all folds run in any
    order, at once or one by one; each logs to and finishes the MLflow children whose paths end in it
    (made by ``grid_setup``), the last to finish ends the study's parent run FINISHED. Planned from the
    config and the dataset's manifest (no Spark), as ``ltr grid --plan`` does. A unit whose children are
    all FINISHED in MLflow is not mapped. A task is told its unit's place (fold, index), never node keys:
    ``ltr grid`` computes the keys itself, with the code and environment that train (keys computed
    here, in Airflow's environment, could differ and train nothing).

    Time limit: ``train_timeout_base_s + train_timeout_per_tree_s x`` the unit's trees (0: none); a task
    past it is killed (its whole process tree) and retried from its checkpoints.
    """
    from pipelines.dataset import open_dataset
    from pipelines.study import plan_fold, unfinished_units
    from pipelines.tracking import Tracker

    if parent.get("finished"):  # every child of every fold FINISHED
        return []
    cfg = _load(study)
    ds = open_dataset(study["data"])
    plans = {f: plan_fold(cfg, ds, f) for f in study["folds"]}
    existing = Tracker.for_config(cfg, create=False).child_runs(parent["parent_run_id"])
    out = []
    for f in study["folds"]:
        every = plans[f].plan.units()
        for unit in unfinished_units(plans[f], existing):
            i = every.index(unit)
            base, per_tree = study["train_timeout_base_s"], study["train_timeout_per_tree_s"]
            out.append(
                {
                    "application_args": ["--unit", f"{f}:{i}", *study["grid_args"]],
                    "unit_label": plans[f].unit_label(i)[:240],  # Airflow keeps 250 characters
                    "timeout_s": (base + per_tree * plans[f].unit_trees(i)) if base or per_tree else None,
                }
            )
    return out


# ----------------------------------------------------------------------------- the DAG
def _submit(step: str, **kwargs: Any) -> dict[str, Any]:
    return {
        "application": os.path.join(JOBS, f"{step}.py"),
        "name": f"ltr-{step}",
        "conn_id": "spark_default",
        **kwargs,
    }


with DAG(
    dag_id="ltr_study",
    description="curriculum and continuation learning-to-rank study: ingest, difficulty, grid by plan units, report",
    schedule=None,
    catchup=False,
    max_active_runs=1,
    tags=["ltr", "spark", "mlflow"],
    doc_md=__doc__,
    default_args={
        "retries": RETRIES,
        "retry_delay": RETRY_DELAY,
        "retry_exponential_backoff": True,
        "max_retry_delay": MAX_RETRY_DELAY,
    },
    params={
        "conf": Param("", type="string", description="YAML config; empty: conf/default.yaml"),
        "set": Param(
            [],
            type="array",
            items={"type": "string"},
            description="section.key=value overrides, passed as --set to every step",
        ),
        "src": Param("", type="string", description="LETOR folder to ingest; empty: generate data as `ltr run`"),
        "spark_conn_id": Param("spark_default", type="string", description="Airflow Spark connection"),
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
    },
) as dag:
    study = task(resolve_study, task_id="study", multiple_outputs=True)()
    gen_check = task.short_circuit(generate_needed, task_id="generate_needed", ignore_downstream_trigger_rules=False)(
        study
    )
    generate = LtrSubmitOperator(task_id="generate", **_submit("generate", application_args=study["generate_args"]))
    ingest_check = task.short_circuit(
        ingest_needed, task_id="ingest_needed", ignore_downstream_trigger_rules=False, trigger_rule="none_failed"
    )(study)
    ingest = LtrSubmitOperator(task_id="ingest", **_submit("ingest", application_args=study["ingest_args"]))
    recorded = task(record_ingest, task_id="record_ingest")(study, ingest_check)
    diff_check = task.short_circuit(
        difficulty_needed,
        task_id="difficulty_needed",
        ignore_downstream_trigger_rules=False,
        trigger_rule="none_failed",
    )(study)
    difficulty = LtrSubmitOperator(
        task_id="difficulty", **_submit("difficulty", application_args=study["difficulty_args"])
    )
    setup = LtrSubmitOperator(
        task_id="grid_setup", trigger_rule="none_failed", **_submit("grid", application_args=study["setup_args"])
    )
    parent = task(study_parent, task_id="parent", multiple_outputs=True)(study, setup.output)
    units = task(unit_args, task_id="units")(study, parent)
    train = LtrSubmitOperator.partial(
        task_id="train",
        map_index_template="{{ task.unit_label }}",
        pool=TRAINING_POOL,
        max_active_tis_per_dagrun=TRAINING_SLOTS,
        **_submit("grid"),
    ).expand_kwargs(units)
    # none_failed: after a finished study, train is mapped over no unit (skipped) and the report still runs;
    # a unit that failed for good (retries spent) leaves the report upstream_failed: it never reports a part
    report = LtrSubmitOperator(
        task_id="report",
        trigger_rule="none_failed",
        **_submit("report", application_args=["--run-id", parent["parent_run_id"], study["report_args"]]),
    )
    gen_check >> generate >> ingest_check >> ingest >> recorded >> diff_check >> difficulty
    difficulty >> setup >> parent >> units >> train >> report
