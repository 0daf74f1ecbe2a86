"""The decisions of the Airflow study (``jobs/ltr_study_dag.py``), as plain functions: no Airflow, no Spark.

Each is the callable of one small Python task of the DAG: it resolves the run's config into every job's
arguments (:func:`resolve_study`), decides whether a step is up to date by comparing keys of its inputs
(:func:`generate_needed`, :func:`ingest_needed`, :func:`difficulty_needed`), records what an ingest was made
from (:func:`record_ingest`), finds the study's parent run (:func:`study_parent`) and maps one training task per
unfinished unit of the plan (:func:`unit_args`). A bad input raises :class:`StudyTaskError`, which the DAG turns
into a failure without retries (:func:`pipelines.app.airflow.fail_fast`).

Idempotent and retry-safe:

* ``generate_needed`` skips generation when ``<work_dir>/letor/generate.json`` records the configured queries
  and seed (and removes a stale one before regenerating, so a crash leaves no record);
* ``ingest_needed`` skips ingest when the dataset is fresh (the step's inputs, key and record are declared in
  :mod:`pipelines.study.steps`, which ``ltr run`` reads too);
* ``difficulty_needed`` skips the scores when ``_difficulty.json`` holds the key ``ltr grid`` itself checks;
* ``study_parent`` reads the parent run id that ``ltr grid --setup-only`` printed, else the record it wrote to
  ``<work_dir>/airflow/<run id>/grid_setup.json`` (a driver in cluster deploy mode prints nowhere the task sees);
* ``unit_args`` maps only the units whose children are not FINISHED in MLflow: a re-run of a finished study
  starts no training application.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pipelines.core.errors import UserError

#: The run param naming the Airflow connection of the MLflow tracking server, and its default.
MLFLOW_CONN_PARAM, MLFLOW_CONN_DEFAULT = "mlflow_conn_id", "mlflow_default"
#: Where MLflow's client reads a tracking server's credentials (never from a URI on a command line).
CREDENTIAL_ENV = ("MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD")
#: The run params that hold text a user types (and the Airflow UI shows to everyone who can see the run).
_TEXT_PARAMS = ("conf", "set", "src", "spark_conf", "archives", "py_files", "files", "jars")


class StudyTaskError(UserError):
    """A run's params, config or records that no retry can fix (the task fails at once, naming the cause)."""


@dataclass(frozen=True)
class MlflowServer:
    """An MLflow tracking server as an Airflow connection describes it: its address (no credentials) and the
    user the study logs in as."""

    uri: str
    username: str = ""
    password: str = ""

    def apply(self) -> None:
        """Put the credentials where MLflow's client reads them, in this process's environment (a spark-submit it
        starts inherits them; none is on a command line)."""
        for name, value in zip(CREDENTIAL_ENV, (self.username, self.password), strict=True):
            if value:
                os.environ[name] = value


#: How a task finds the connection (``pipelines.app.airflow.mlflow_connection``; None: it does not exist).
Connections = Callable[[str], MlflowServer | None]


def check_params_hold_no_secret(params: dict[str, Any], conn_id: str) -> None:
    """A run's params are shown in the Airflow UI (and its ``conf`` on the trigger's command line): one that holds
    a credential (:func:`pipelines.core.secrets.has_secret`) is refused, naming where credentials go instead."""
    from pipelines.core.secrets import has_secret, redact

    for name in _TEXT_PARAMS:
        value = params.get(name)
        items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else []
        texts = [(f"{name}[{k!r}]" if isinstance(value, dict) else f"{name}[{k}]", v) for k, v in items]
        for where, text in texts or [(name, value)]:
            if text is not None and has_secret(text):
                raise StudyTaskError(
                    f"params.{where} {redact(text)!r} holds a credential, which the Airflow UI shows to everyone "
                    f"who can see the run: put the MLflow server's login and password in the Airflow connection "
                    f"{conn_id or MLFLOW_CONN_DEFAULT!r} (or MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD "
                    "in the workers' environment), not in the run's params"
                )


def mlflow_server(params: dict[str, Any], connection: Connections | None) -> tuple[str, MlflowServer | None]:
    """(the connection id, its server) of a run: ``params.mlflow_conn_id`` (default ``mlflow_default``). The default
    connection may be missing (the config's ``tracking.uri`` and the workers' environment are used); a connection
    the run names must exist."""
    conn_id = str(params.get(MLFLOW_CONN_PARAM, MLFLOW_CONN_DEFAULT) or "")
    if not conn_id or connection is None:
        return conn_id, None
    server = connection(conn_id)
    if server is None and conn_id != MLFLOW_CONN_DEFAULT:
        raise StudyTaskError(f"params.{MLFLOW_CONN_PARAM}: no Airflow connection {conn_id!r}")
    return conn_id, server


def check_mlflow_access(uri: str, conn_id: str) -> None:
    """One authenticated request to a tracking server: credentials it refuses fail the study's first task, in one
    line, instead of every job after it."""
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient

    from pipelines.core.secrets import browser_address
    from pipelines.tracking.runs import REFUSED, is_server

    if not is_server(uri):
        return
    try:
        MlflowClient(uri).search_experiments(max_results=1)
    except MlflowException as e:
        if e.error_code not in REFUSED:
            raise
        source = f"the Airflow connection {conn_id!r}" if conn_id else "MLFLOW_TRACKING_USERNAME and _PASSWORD"
        raise StudyTaskError(
            f"the MLflow server at {browser_address(uri)} refused the credentials of {source} "
            f"({e.error_code}): set them to an MLflow user's login and password"
        ) from None


def load_study_config(study: dict[str, Any]) -> Any:
    """The run's :class:`pipelines.core.config.Config` (installed plug-ins loaded: the DAG loads no file)."""
    from pipelines.plugins.run_config import load_run_config

    return load_run_config(study["conf"] or None, study["set"], files=False)


def resolve_study(
    params: dict[str, Any], run_id: str | None = None, connection: Connections | None = None
) -> dict[str, Any]:
    """The run's config (``params.conf`` + ``params.set``), checked, and every job's arguments.

    ``params``, ``run_id``: the run's params and id (Airflow passes them to a task callable by these names);
    ``connection``: how to read the Airflow connection ``params.mlflow_conn_id`` names (the tracking server: its
    address becomes every job's ``tracking.uri``, its login and password the jobs' environment, never a param
    or an argument). Params that hold a credential are refused; the server's refusal of the credentials fails
    here, in one line.
    """
    from pipelines.core.config import ConfigError
    from pipelines.core.connect import remote_url
    from pipelines.core.layout import Layout
    from pipelines.plugins.loading import PluginError
    from pipelines.plugins.run_config import load_run_config

    conf, overrides, src = params.get("conf") or "", list(params.get("set") or []), params.get("src") or ""
    conn_id, server = mlflow_server(params, connection)
    check_params_hold_no_secret(params, conn_id)
    remote = str(params.get("spark_remote") or "")
    if remote:  # every step a client of that Spark Connect server (its spark-submit starts no cluster application)
        overrides.append(f"spark.remote={json.dumps(remote)}")
    if server is not None:  # after the run's own settings: the connection's address wins
        server.apply()
        overrides.append(f"tracking.uri={server.uri}")
    try:
        cfg = load_run_config(conf or None, overrides, files=False)  # installed plug-ins only
        remote_url(cfg.spark.remote)
    except (ConfigError, PluginError) as e:
        raise StudyTaskError(f"params conf/set/spark_remote: {e}") from None
    if not cfg.grid.folds:
        raise StudyTaskError("grid.folds is empty: the study has no fold to train")
    from pipelines.tracking.runs import tracking_uri

    check_mlflow_access(tracking_uri(cfg), conn_id if server is not None else "")
    common = (["--conf", conf] if conf else []) + [a for o in overrides for a in ("--set", o)]
    layout = Layout.of(cfg)
    work, letor, data, difficulty = cfg.work_dir, layout.letor, layout.data, layout.difficulty
    timeouts = {k: params.get(k) for k in ("train_timeout_base_s", "train_timeout_per_tree_s")}
    bad = {k: v for k, v in timeouts.items() if not isinstance(v, (int, float)) or v < 0}
    if bad:
        raise StudyTaskError(f"params {bad}: expected seconds >= 0 (0: no limit)")
    # where grid_setup writes its summary (the parent run id) for the tasks after it, whatever the deploy mode
    setup_record = layout.airflow_record(run_id, "grid_setup.json")
    return {
        "conf": conf,
        "set": overrides,
        "mlflow_conn_id": conn_id if server is not None else "",
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
    """True unless ``src`` was given or ``<work_dir>/letor`` is fresh (:func:`pipelines.study.steps.generate_state`);
    a stale record is removed before the generate task writes the data again."""
    from pipelines.study import steps

    if not study["generate"]:
        return False
    state = steps.generate_state(load_study_config(study), study["src"])
    steps.forget_generate(state)
    return not state.fresh


def ingest_needed(study: dict[str, Any]) -> str:
    """The key of the ingest's inputs when the dataset must be (re)written; "" (skip) when it is fresh
    (:func:`pipelines.study.steps.ingest_state`). The key is taken before the ingest starts, so a source that
    changes while it runs is ingested again; the record goes before the dataset changes."""
    from pipelines.study import steps

    try:
        state = steps.ingest_state(load_study_config(study), study["src"], study["data"], study["ingest_record"])
    except steps.SourceMissing:
        raise StudyTaskError(f"params.src {study['src']}: no such file or directory") from None
    if state.fresh:
        return ""
    steps.forget_ingest(study["ingest_record"])
    return state.key


def record_ingest(study: dict[str, Any], key: str) -> dict[str, Any]:
    """After a successful ingest, write ``<work_dir>/_ingest_key.json`` (``steps.record_ingest``)."""
    from pipelines.study import steps

    return steps.record_ingest(study["ingest_record"], key, study["src"], study["data"])


def difficulty_needed(study: dict[str, Any]) -> bool:
    """False when the stored scores are fresh (:func:`pipelines.study.steps.difficulty_state`, what ``ltr grid``
    checks too)."""
    from pipelines.study import steps

    return not steps.difficulty_state(load_study_config(study), study["data"], study["difficulty"]).fresh


def study_parent(study: dict[str, Any], setup: dict[str, Any] | None = None) -> dict[str, Any]:
    """The study's parent run: what ``grid_setup`` printed (``setup``), else what it wrote to
    ``study["setup_record"]`` (a driver in cluster deploy mode prints nowhere the task sees). Never a guess:
    without either this fails, and the units and the report never describe another study."""
    from pipelines.core.storage import read_json

    doc = setup or {}
    if not doc.get("parent_run_id"):
        try:
            doc = read_json(os.path.dirname(study["setup_record"]), os.path.basename(study["setup_record"]))
        except (OSError, ValueError) as e:
            raise StudyTaskError(
                f"grid_setup printed no parent run id and its record {study['setup_record']} cannot be "
                f"read ({e}): is work_dir storage the Airflow workers reach?"
            ) from None
    if not str(doc.get("parent_run_id") or "").strip():
        raise StudyTaskError(f"grid_setup recorded no parent run id ({doc})")
    return {"parent_run_id": str(doc["parent_run_id"]), "finished": bool(doc.get("finished"))}


def unit_args(study: dict[str, Any], parent: dict[str, Any]) -> list[dict[str, Any]]:
    """One mapped ``train`` task per unfinished unit of work of the study's plan: its arguments
    (``ltr grid --unit F:I ...``), its label (what it trains) and its time limit; none when the study is
    finished, so a re-run of a finished study starts no training application.

    A unit is a root node of a fold's plan with every node below it (:meth:`pipelines.plan.trie.Plan.units`):
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
    from pipelines.data.dataset import open_dataset
    from pipelines.study.design import plan_fold, unfinished_units
    from pipelines.tracking.runs import Tracker

    if parent.get("finished"):  # every child of every fold FINISHED
        return []
    cfg = load_study_config(study)
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
