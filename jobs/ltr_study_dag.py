"""Airflow 3 DAG ``ltr_study``: the whole study, one spark-submit job per step.

::

    study -> generate? -> generate -> ingest? -> ingest -> record_ingest -> difficulty? -> difficulty
          -> grid_setup -> units -> train (one task per unit of the plan, every fold, mapped) -> report

Trigger it with params (every one optional)::

    airflow dags trigger ltr_study --conf '{"conf": "conf/paper.yaml", "src": "/data/MSLR-WEB30K",
                                            "set": ["work_dir=/data/ltr"], "spark_conn_id": "spark_default"}'

* ``conf``: the YAML config (empty: ``conf/default.yaml``), passed as ``--conf`` to every job;
* ``set``: ``section.key=value`` overrides, passed as ``--set`` to every job;
* ``src``: the LETOR folder to ingest; empty: the data are generated as ``ltr run`` does
  (``ltr generate --out <work_dir>/letor``, ``generate.queries`` / ``generate.seed``);
* ``spark_conn_id``: the Airflow Spark connection (default ``spark_default``, e.g. from
  ``AIRFLOW_CONN_SPARK_DEFAULT='{"conn_type": "spark", "host": "yarn"}'``): master, deploy mode,
  ``spark-binary``, queue. Nothing is configured by editing this file.

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
configuration) fails its task without retries; other failures are retried as Airflow's
``core.default_task_retries`` says.

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
* ``ltr grid --setup-only`` finds or creates the study's one MLflow parent run and computes the
  curricula (cached by key); ``units`` cuts every fold's plan into its independent units (a root
  node with every node below it: ``ltr grid --plan`` shows them as the unindented lines) and
  ``ltr grid --fold F --node K ...`` trains one unit under that parent from the checkpoints, so a
  retry continues from the last checkpoint and a re-run of the DAG trains nothing new (when
  ``grid_setup`` finds the study finished, ``units`` maps no task at all); the parent is FINISHED
  once every unit of every fold is;
* ``report`` rebuilds the tables and figures from MLflow for the parent run that
  ``grid_setup`` printed (all folds), logged to it under ``report/``.

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
from typing import Any

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import DAG, Param, task

JOBS = os.path.dirname(os.path.abspath(__file__))
#: Written next to the data by ``record_ingest``: what the current dataset was ingested from.
INGEST_KEY = "_ingest_key.json"
#: A job's exit code for bad input or configuration (``pipelines.cli``): retrying cannot help.
EXIT_USAGE = 2


def _fail(msg: str) -> BaseException:
    from airflow.sdk.exceptions import AirflowFailException

    return AirflowFailException(msg)


class LtrSubmitOperator(SparkSubmitOperator):
    """``spark-submit jobs/<step>.py ARGS`` on the run's ``params.spark_conn_id`` connection.

    ``application_args`` may hold lists (the XCom of an argument list): they are spliced in.
    Returns (as its XCom) the last JSON object the job printed with a ``parent_run_id`` (what
    ``ltr grid --setup-only`` prints), or None. With the Spark connection's deploy mode ``cluster``
    the driver's output does not come back: the report then reads the experiment's latest
    FINISHED grid. Exit code 2 fails the task without retries.
    """

    def execute(self, context: Any) -> dict[str, Any] | None:
        self._conn_id = context["params"].get("spark_conn_id") or self._conn_id
        # an argument that is a list (an XCom of arguments) is spliced in
        self.application_args = [str(b) for a in self.application_args or []
                                 for b in (a if isinstance(a, (list, tuple)) else [a])]
        hook = self._hook = self._get_hook()
        printed: list[str] = []
        process_log = hook._process_spark_submit_log

        def tee(lines):
            for line in lines:
                if line.lstrip().startswith("{"):
                    printed.append(line.strip())
                yield line

        hook._process_spark_submit_log = lambda lines: process_log(tee(lines))
        try:
            super().execute(context)
        except Exception as e:
            sp = getattr(hook, "_submit_sp", None)
            if sp is not None and sp.returncode == EXIT_USAGE:
                raise _fail(f"{os.path.basename(self.application)} exited with code {EXIT_USAGE} (bad input or "
                            f"configuration, see the log above): not retried") from e
            raise
        for line in reversed(printed):
            try:
                doc = json.loads(line)
            except ValueError:
                continue
            if isinstance(doc, dict) and "parent_run_id" in doc:
                return doc
        return None


# ----------------------------------------------------------------- decisions (no Spark)
def _load(study: dict[str, Any]) -> Any:
    """The run's :class:`pipelines.config.Config`."""
    from pipelines.config import load_config

    return load_config(study["conf"] or None, study["set"])


def resolve_study(params: dict[str, Any]) -> dict[str, Any]:
    """The run's config (``params.conf`` + ``params.set``), checked, and every job's arguments.

    ``params``: the run's params (Airflow passes them to a task callable with that argument).
    """
    from pipelines.config import ConfigError, load_config

    conf, overrides, src = params.get("conf") or "", list(params.get("set") or []), params.get("src") or ""
    try:
        cfg = load_config(conf or None, overrides)
    except ConfigError as e:
        raise _fail(f"params conf/set: {e}") from None
    if not cfg.grid.folds:
        raise _fail("grid.folds is empty: the study has no fold to train")
    common = (["--conf", conf] if conf else []) + [a for o in overrides for a in ("--set", o)]
    work = cfg.work_dir
    letor = os.path.join(work, "letor")
    data = cfg.grid.data or os.path.join(work, "dataset")
    difficulty = cfg.grid.difficulty or os.path.join(work, "difficulty")
    return {
        "conf": conf, "set": overrides, "work_dir": work, "generate": not src, "src": src or letor,
        "data": data, "difficulty": difficulty, "folds": list(cfg.grid.folds),
        "generate_args": ["--out", letor, *common],
        "ingest_args": ["--src", src or letor, "--out", data, *common],
        "difficulty_args": ["--data", data, "--out", difficulty, *common],
        "setup_args": ["--setup-only", *common],
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
    return sorted([f.path[len(root):].lstrip("/"), f.size, f.mtime_ns] for f in files
                  if f.type == pafs.FileType.File)


def ingest_key(study: dict[str, Any]) -> str:
    """Hash of what determines the dataset: source listing, ingest and dataset settings, output, format."""
    import hashlib
    from dataclasses import asdict

    from pipelines.config import load_dataset_spec
    from pipelines.ingest import FORMAT_VERSION
    from udfs.letor_chunks import to_uri

    cfg = _load(study)
    doc = {"src": to_uri(study["src"]), "files": _listing(study["src"]), "out": to_uri(study["data"]),
           "ingest": asdict(cfg.ingest), "dataset": asdict(load_dataset_spec(cfg.dataset)),
           "format_version": FORMAT_VERSION}
    return "sha256:" + hashlib.sha256(json.dumps(doc, sort_keys=True, default=str).encode()).hexdigest()


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
    path = os.path.join(study["work_dir"], INGEST_KEY)
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
    fp = _dataset_fingerprint(study["data"])
    if fp is None:
        raise RuntimeError(f"ingest succeeded but {study['data']} has no readable _manifest.json")
    doc = {"key": key, "fingerprint": fp, "src": study["src"], "data": study["data"]}
    os.makedirs(study["work_dir"], exist_ok=True)
    path = os.path.join(study["work_dir"], INGEST_KEY)
    with open(path + ".tmp", "w") as f:
        json.dump(doc, f, indent=2, sort_keys=True)
    os.replace(path + ".tmp", path)
    return doc


def difficulty_needed(study: dict[str, Any]) -> bool:
    """False when the stored scores carry the key ``ltr grid`` checks (:func:`pipelines.grid.ensure_difficulty`)."""
    from pipelines.dataset import open_dataset
    from pipelines.difficulty import difficulty_key, stored_summary

    cfg = _load(study)
    return stored_summary(study["difficulty"], difficulty_key(open_dataset(study["data"]), cfg.difficulty,
                                                              cfg.metric)) is None


def unit_args(study: dict[str, Any], setup: dict[str, Any] | None) -> list[list[str]]:
    """One argument list per unit of work of the study's plan: what the mapped ``train`` tasks run;
    none when ``grid_setup`` found the study finished (``setup``: what it printed), so a re-run of a
    finished study starts no training application.

    A unit is a root node of a fold's plan with every node below it (:meth:`pipelines.plan.Plan.units`):
    no two units share a node and each path lies within one, so the units of all folds run in any
    order, at once or one by one, each as ``ltr grid --unit F:I ...``; the last to finish ends
    the study's parent run FINISHED. Planned from the config and the dataset's manifest (no Spark),
    after ``grid_setup``, as ``ltr grid --plan`` does. In a resumed study, a unit whose children are all
    FINISHED in MLflow is not mapped. A task is told its unit's place (fold, index), never node keys:
    ``ltr grid`` computes the keys itself, with the code and environment that train (keys computed
    here, in Airflow's environment, could differ and train nothing).
    """
    from pipelines.dataset import open_dataset
    from pipelines.grid import plan_fold, unfinished_units
    from pipelines.tracking import Tracker

    if setup and setup.get("finished"):  # every child of every fold FINISHED (None: deploy mode cluster)
        return []
    cfg = _load(study)
    ds = open_dataset(study["data"])
    plans = {f: plan_fold(cfg, ds, f) for f in study["folds"]}
    if setup and setup.get("parent_run_id"):  # a resumed study: units whose children all FINISHED are left out
        existing = Tracker.for_config(cfg, create=False).child_runs(setup["parent_run_id"])
        units = {f: unfinished_units(fp, existing) for f, fp in plans.items()}
    else:  # no word from grid_setup (deploy mode cluster): every unit, the done ones finish at once
        units = {f: fp.plan.units() for f, fp in plans.items()}
    return [["--unit", f"{f}:{plans[f].plan.units().index(unit)}", *study["grid_args"]]
            for f in study["folds"] for unit in units[f]]


# ----------------------------------------------------------------------------- the DAG
def _submit(step: str, **kwargs: Any) -> dict[str, Any]:
    return {"application": os.path.join(JOBS, f"{step}.py"), "name": f"ltr-{step}", "conn_id": "spark_default",
            **kwargs}


with DAG(
    dag_id="ltr_study",
    description="curriculum and continuation learning-to-rank study: ingest, difficulty, grid by plan units, report",
    schedule=None,
    catchup=False,
    max_active_runs=1,
    tags=["ltr", "spark", "mlflow"],
    doc_md=__doc__,
    params={
        "conf": Param("", type="string", description="YAML config; empty: conf/default.yaml"),
        "set": Param([], type="array", items={"type": "string"},
                     description="section.key=value overrides, passed as --set to every step"),
        "src": Param("", type="string", description="LETOR folder to ingest; empty: generate data as `ltr run`"),
        "spark_conn_id": Param("spark_default", type="string", description="Airflow Spark connection"),
    },
) as dag:
    study = task(resolve_study, task_id="study", multiple_outputs=True)()
    gen_check = task.short_circuit(generate_needed, task_id="generate_needed",
                                   ignore_downstream_trigger_rules=False)(study)
    generate = LtrSubmitOperator(task_id="generate", **_submit("generate", application_args=study["generate_args"]))
    ingest_check = task.short_circuit(ingest_needed, task_id="ingest_needed", ignore_downstream_trigger_rules=False,
                                      trigger_rule="none_failed")(study)
    ingest = LtrSubmitOperator(task_id="ingest", **_submit("ingest", application_args=study["ingest_args"]))
    recorded = task(record_ingest, task_id="record_ingest")(study, ingest_check)
    diff_check = task.short_circuit(difficulty_needed, task_id="difficulty_needed",
                                    ignore_downstream_trigger_rules=False, trigger_rule="none_failed")(study)
    difficulty = LtrSubmitOperator(task_id="difficulty",
                                   **_submit("difficulty", application_args=study["difficulty_args"]))
    setup = LtrSubmitOperator(task_id="grid_setup", trigger_rule="none_failed",
                              **_submit("grid", application_args=study["setup_args"]))
    units = task(unit_args, task_id="units")(study, setup.output)
    train = LtrSubmitOperator.partial(
        task_id="train", map_index_template="unit {{ task.application_args[1] }}",
        **_submit("grid")).expand(application_args=units)
    # none_failed: after a finished study, train is mapped over no unit (skipped) and the report still runs
    report = LtrSubmitOperator(task_id="report", trigger_rule="none_failed", **_submit("report", application_args=[
        "--run-id", "{{ (ti.xcom_pull(task_ids='grid_setup') or {}).get('parent_run_id', '') }}",
        study["report_args"]]))
    gen_check >> generate >> ingest_check >> ingest >> recorded >> diff_check >> difficulty
    difficulty >> setup >> units >> train >> report
