"""MLflow tracking: one parent run per grid, one child run per (fold, strategy, switch point).

* The tracking URI comes from config; by default a SQLite store in the work
  directory (``sqlite:///<work_dir>/mlflow.db``) with artifacts next to it, so
  ``mlflow ui --backend-store-uri sqlite:///<work_dir>/mlflow.db`` shows
  everything with no server.
* Children log params (resolved path, hyperparameters, fold, data fingerprint,
  metric conventions), the NDCG@k curves as metric history (step = number of
  trees; names like ``ndcg_at_10_test``: MLflow rejects ``@``), final metrics,
  the model (``mlflow.xgboost``), the input dataset, per-query test NDCG, score
  distributions and a plot. Tags make strategy, switch point and fold filterable.
* Resumable: the parent is found again by its grid key (:func:`pipelines.core.keys.study_keys`: the
  study's resolved config, the data fingerprint and the code identity). A child run carries its
  child key (:func:`pipelines.core.keys.child_key`: its name, its path and the key of its last plan
  node), is made once, SCHEDULED, before anything trains, and a re-run continues the same runs: a
  FINISHED child is skipped, one left RUNNING by a crash goes on from its nodes' checkpoints and is
  finished by the process that trains its last node (:mod:`pipelines.tracking.live`).
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import threading
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from pipelines.core import secrets
from pipelines.core.errors import UserError
from pipelines.core.layout import Layout
from pipelines.core.locks import FileLock

log = logging.getLogger(__name__)

TAG_KIND = "ltr.kind"
TAG_GRID_KEY = "ltr.grid_key"
#: MLflow 3's UI opens an experiment as model training (runs, charts), not its GenAI overview.
TAG_EXPERIMENT_KIND = "mlflow.experimentKind"
MODEL_TRAINING = "custom_model_development"
TAG_STUDY_KEY = "ltr.study_key"  # a grid's key without the code version
TAG_CHILD_KEY = "ltr.child_key"
TAG_PARENT = "mlflow.parentRunId"
TAG_STRATEGY = "ltr.strategy"
TAG_SWITCH = "ltr.switch_point"
TAG_SEED = "ltr.seed"  # a grid.seeds repetition's index (absent: the child itself, seed 0)
TAG_FOLD = "ltr.fold"
TAG_PATH = "ltr.path"


#: MLflow's switch of its tqdm bars over artifact transfers (``mlflow.environment_variables``; default on).
PROGRESS_BAR_ENV = "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"
_quiet_lock = threading.Lock()
_quiet_depth = 0


@contextmanager
def quiet_artifacts() -> Iterator[None]:
    """No "Downloading artifacts" progress bar from MLflow within the block (the report reads a few small files
    from each of the grid's children: one bar each otherwise).

    MLflow reads :data:`PROGRESS_BAR_ENV` from ``os.environ`` at each transfer and has no per-call switch, so the
    variable is set to ``false`` for the block's duration and removed after it (blocks may nest or run in several
    threads: the last one out removes it). A value the user set is left alone, and honoured: with
    ``MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR=true`` the bars show."""
    global _quiet_depth
    with _quiet_lock:
        owner = _quiet_depth > 0 or PROGRESS_BAR_ENV not in os.environ
        if owner:
            _quiet_depth += 1
            os.environ[PROGRESS_BAR_ENV] = "false"
    try:
        yield
    finally:
        if owner:
            with _quiet_lock:
                _quiet_depth -= 1
                if _quiet_depth == 0:
                    os.environ.pop(PROGRESS_BAR_ENV, None)


def _quiet_client(uri: str) -> Any:
    """An ``MlflowClient`` of ``uri`` whose ``download_artifacts`` shows no progress bar (:func:`quiet_artifacts`):
    every read through :attr:`Tracker.client` (``load_json``, the report's test scores) is quiet."""
    from mlflow.tracking import MlflowClient

    class QuietClient(MlflowClient):
        def download_artifacts(self, run_id: str, path: str, dst_path: str | None = None) -> str:
            """``MlflowClient.download_artifacts`` without its progress bar."""
            with quiet_artifacts():
                return super().download_artifacts(run_id, path, dst_path)

    return QuietClient(uri)


class UnknownExperiment(UserError, LookupError):
    """``Tracker(..., create=False)`` of an experiment that does not exist."""


def tracking_uri(cfg: Any) -> str:
    """The tracking URI of a resolved :class:`~pipelines.core.config.Config`: ``tracking.uri``, else the default
    SQLite store in the work directory (:attr:`pipelines.core.layout.Layout.mlflow_uri`). The one place it is
    decided (:meth:`Tracker.for_config` and the report's store check read it from here)."""
    return cfg.tracking.uri or Layout.of(cfg).mlflow_uri


def sqlite_path(uri: str) -> str:
    """The database file of a SQLite tracking store (``sqlite:///<path>``); ``""`` for any other store."""
    return uri[len("sqlite:///") :] if uri.startswith("sqlite:///") else ""


def open_ui(tracking_uri: str) -> str:
    """How to open the MLflow UI of ``tracking_uri``: a tracking server's browser address (it serves its own UI;
    ``mlflow ui`` would start a second one), else the ``mlflow ui --backend-store-uri`` command for the store
    (credentials masked: the user has them)."""
    if is_server(tracking_uri):
        return f"open {secrets.browser_address(tracking_uri)} in a browser"
    return f"mlflow ui --backend-store-uri {secrets.redact(tracking_uri)}"


class RefusedCredentials(UserError):
    """The tracking server refused this process's credentials (401/403): one line, exit 2."""


#: MLflow's error codes of a server that refuses the credentials it was given (401, 403).
REFUSED = ("UNAUTHENTICATED", "PERMISSION_DENIED")


def is_server(uri: str) -> bool:
    """A tracking server (REST), as opposed to a store the process opens itself (SQLite, a database URL)."""
    return uri.split("://", 1)[0].lower() in ("http", "https", "databricks")


@contextmanager
def store_lock(uri: str) -> Iterator[None]:
    """An exclusive lock (``<db>.lock``, :class:`pipelines.core.locks.FileLock`) on a local SQLite store; nothing for
    other stores.

    MLflow creates and migrates a SQLite store's schema in whichever process opens it first, and
    finds-or-creates experiments and parent runs by a search then an insert: two processes opening a
    fresh store at once (``ltr grid --fold 1 & ltr grid --fold 2 &``, or the DAG's mapped tasks) fail
    in alembic ("table _alembic_tmp_runs already exists") or make two parent runs of one study.
    Measured in ``tests/tracking/test_tracking.py``. A tracking server's database serialises its own schema;
    there the DAG's ``grid_setup`` makes the experiment and the parent run before any task maps.
    """
    path = sqlite_path(uri)
    if not path or path == ":memory:":
        yield
        return
    with FileLock(f"{path}.lock"):
        yield


@dataclass
class Tracker:
    """A thin wrapper around ``MlflowClient`` for one experiment.

    ``create``: make the experiment if it does not exist (training); with ``False`` a
    missing experiment raises :class:`UnknownExperiment` (readers such as the report).
    """

    uri: str
    experiment: str
    artifact_root: str
    create: bool = True

    def __post_init__(self) -> None:
        import mlflow

        self._artifact_uris: dict[str, str] = {}  # run id -> artifact location (:meth:`download`)
        self._artifact_repos: dict[str, Any] = {}  # artifact location -> its repository

        logging.getLogger("mlflow").setLevel(logging.WARNING)
        logging.getLogger("alembic").setLevel(logging.WARNING)
        # MLflow prints "View run ... at: <tracking URI>" on every finished run, password included: off (read on
        # every call), unless the user asked for them; its own log handler masks credentials as ours does
        os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")
        secrets.guard_logger("mlflow")
        mlflow.set_tracking_uri(self.uri)
        with store_lock(self.uri):  # the first use of a store creates its schema
            self.client = _quiet_client(self.uri)  # reads show no progress bars
            exp = self._experiment_or_refusal()
            if exp is None and not self.create:
                names = sorted(e.name for e in self.client.search_experiments())
                raise UnknownExperiment(
                    f"no MLflow experiment {self.experiment!r} at {secrets.redact(self.uri)}; existing "
                    f"experiments: {', '.join(names) or '(none)'}"
                )
            if exp is None:
                if not self.artifact_root:  # a tracking server: its own artifact store (--serve-artifacts)
                    loc = None
                elif "://" in self.artifact_root:
                    loc = self.artifact_root
                else:
                    os.makedirs(self.artifact_root, exist_ok=True)
                    loc = f"file://{os.path.abspath(self.artifact_root)}"
                self.experiment_id = self.client.create_experiment(
                    self.experiment, artifact_location=loc, tags={TAG_EXPERIMENT_KIND: MODEL_TRAINING}
                )
            else:
                self.experiment_id = exp.experiment_id
                if self.create and TAG_EXPERIMENT_KIND not in exp.tags:  # one made before the tag existed
                    self.client.set_experiment_tag(self.experiment_id, TAG_EXPERIMENT_KIND, MODEL_TRAINING)

    def _experiment_or_refusal(self) -> Any:
        """The experiment (None: none yet); a server's refusal of the credentials as one line, naming where they
        are read from."""
        from mlflow.exceptions import MlflowException

        try:
            return self.client.get_experiment_by_name(self.experiment)
        except MlflowException as e:
            if e.error_code not in REFUSED:
                raise
            who = os.environ.get("MLFLOW_TRACKING_USERNAME") or "(no user: MLFLOW_TRACKING_USERNAME is not set)"
            raise RefusedCredentials(
                f"the MLflow server at {secrets.browser_address(self.uri)} refused the credentials of {who} "
                f"({e.error_code}): set MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD to an MLflow user's"
            ) from None

    @classmethod
    def for_config(cls, cfg: Any, experiment: str | None = None, create: bool = True) -> Tracker:
        """The tracker of a resolved :class:`~pipelines.core.config.Config` (defaults under its work_dir);
        ``experiment`` defaults to ``grid.experiment``; ``create``: see the class.

        Artifacts: ``tracking.artifacts`` when set; else, with a tracking server (``http(s)://``), the server's
        choice (``mlflow-artifacts:/...`` with ``mlflow server --serve-artifacts``: every task reaches it
        through the server, wherever it runs); else ``<work_dir>/mlartifacts``."""
        uri = tracking_uri(cfg)
        artifacts = cfg.tracking.artifacts or ("" if is_server(uri) else Layout.of(cfg).mlartifacts)
        return cls(uri, experiment or cfg.grid.experiment, artifacts, create)

    # -- runs -----------------------------------------------------------
    def find_or_create_parent(
        self, grid_key: str, name: str, params: dict[str, Any], tags: dict[str, str] | None = None
    ) -> tuple[str, bool]:
        """The parent run of this grid (resumed if one with the same key exists)."""
        with store_lock(self.uri):  # one parent per grid when processes start it at once
            return self._find_or_create_parent(grid_key, name, params, tags)

    def _find_or_create_parent(
        self, grid_key: str, name: str, params: dict[str, Any], tags: dict[str, str] | None
    ) -> tuple[str, bool]:
        runs = self.client.search_runs(
            [self.experiment_id],
            filter_string=f"tags.`{TAG_GRID_KEY}` = '{grid_key}'",
            order_by=["attributes.start_time DESC"],
            max_results=1,
        )
        if runs:
            run_id = runs[0].info.run_id
            self.client.update_run(run_id, status="RUNNING")
            return run_id, True
        run = self.client.create_run(
            self.experiment_id, run_name=name, tags={TAG_KIND: "grid", TAG_GRID_KEY: grid_key, **(tags or {})}
        )
        self.log_params(run.info.run_id, params)
        return run.info.run_id, False

    def parents(self, tag: str, value: str) -> list[Any]:
        """Grid parent runs with ``tag = value``, newest first."""
        return self.client.search_runs(
            [self.experiment_id],
            filter_string=f"tags.`{TAG_KIND}` = 'grid' and tags.`{tag}` = '{value}'",
            order_by=["attributes.start_time DESC"],
            max_results=1000,
        )

    def children(self, parent_id: str) -> list[Any]:
        """Every run of the experiment tagged as a child of ``parent_id`` (MLflow ``Run`` objects, any status).
        Their artifact locations are kept for :meth:`download`."""
        runs = self.client.search_runs(
            [self.experiment_id], filter_string=f"tags.`{TAG_PARENT}` = '{parent_id}'", max_results=50000
        )
        self._artifact_uris.update((r.info.run_id, r.info.artifact_uri) for r in runs)
        return runs

    def child_runs(self, parent_id: str) -> dict[str, tuple[str, str]]:
        """child key -> (run id, status) of the grid's children; a FINISHED run wins over others of the
        same key. A resumed grid continues the unfinished ones (same run ids)."""
        out: dict[str, tuple[str, str]] = {}
        for r in sorted(self.children(parent_id), key=lambda r: r.info.start_time or 0):
            key = r.data.tags.get(TAG_CHILD_KEY)
            if key and out.get(key, ("", ""))[1] != "FINISHED":
                out[key] = (r.info.run_id, r.info.status)
        return out

    def log_params(self, run_id: str, params: dict[str, Any]) -> None:
        """Log ``params`` on run ``run_id`` in batches of 100, sorted by name, each value as a string cut to
        6000 characters, credentials masked (:func:`pipelines.core.secrets.redact`: a data path's password)."""
        from mlflow.entities import Param

        items = [Param(k, secrets.redact(v)[:6000]) for k, v in sorted(params.items())]
        for i in range(0, len(items), 100):
            self.client.log_batch(run_id, params=items[i : i + 100])

    def log_history(self, run_id: str, key: str, steps: list[int], values: list[float]) -> None:
        """A metric history (one value per step) in batches of 1000."""
        from mlflow.entities import Metric

        ts = int(time.time() * 1000)
        ms = [Metric(key, float(v), ts, int(s)) for s, v in zip(steps, values, strict=True)]
        for i in range(0, len(ms), 1000):
            self.client.log_batch(run_id, metrics=ms[i : i + 1000])

    def log_metrics(self, run_id: str, metrics: dict[str, float]) -> None:
        """Log ``metrics`` (name -> value) on run ``run_id`` in one batch, at step 0 and the current time."""
        from mlflow.entities import Metric

        ts = int(time.time() * 1000)
        self.client.log_batch(run_id, metrics=[Metric(k, float(v), ts, 0) for k, v in metrics.items()])

    def log_text(self, run_id: str, text: str | bytes, name: str, folder: str | None = None) -> None:
        """Log ``text`` (a str is UTF-8 encoded) as the artifact file ``name`` of run ``run_id``.

        Parameters
        ----------
        run_id : str
            The run.
        text : str or bytes
            The file's content.
        name : str
            The artifact's file name.
        folder : str, optional
            The artifact folder to put it in; None: the run's artifact root.
        """
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, name)
            with open(path, "wb") as f:
                f.write(text.encode() if isinstance(text, str) else text)
            self.client.log_artifact(run_id, path, folder)

    def log_dataset(self, run_id: str, path: str, name: str, fingerprint: str, context: str) -> None:
        """Record the dataset at ``path`` as an input of run ``run_id`` (MLflow's dataset tracking).

        Parameters
        ----------
        run_id : str
            The run.
        path : str
            The dataset's location (its source in MLflow).
        name : str
            The name MLflow shows.
        fingerprint : str
            The dataset's fingerprint; its part after the last ``:``, cut to 16 characters, is the digest.
        context : str
            The input's ``mlflow.data.context`` tag (``grid``, ``fold<F>``).
        """
        from mlflow.data.dataset_source_registry import resolve_dataset_source
        from mlflow.data.meta_dataset import MetaDataset
        from mlflow.entities import DatasetInput, InputTag

        with warnings.catch_warnings():  # "can be interpreted in multiple ways": both are the local source
            warnings.simplefilter("ignore", UserWarning)
            source = resolve_dataset_source(secrets.redact(path))
        # MLflow declares `profile` abstract on Dataset; MetaDataset is its documented concrete "no data" dataset
        ds = MetaDataset(source, name=name, digest=fingerprint.split(":")[-1][:16])  # type: ignore[abstract]
        self.client.log_inputs(
            run_id, [DatasetInput(ds._to_mlflow_entity(), [InputTag("mlflow.data.context", context)])]
        )

    def log_model(self, run_id: str, model_json: bytes) -> None:
        """Log an XGBoost model (its JSON) as the MLflow model ``model`` of run ``run_id``; the run stays RUNNING.

        The model is logged in JSON format with the running XGBoost version as its pip requirement. Logging
        ends the run (FINISHED), so its status is set back to RUNNING: :meth:`finish` ends it.
        """
        import mlflow
        import xgboost as xgb

        booster = xgb.Booster(model_file=bytearray(model_json))
        with mlflow.start_run(run_id=run_id, nested=True):
            mlflow.xgboost.log_model(
                booster, name="model", model_format="json", pip_requirements=[f"xgboost=={xgb.__version__}"]
            )
        self.client.update_run(run_id, status="RUNNING")  # end_run above marked it FINISHED

    def finish(self, run_id: str, status: str = "FINISHED") -> None:
        """Set run ``run_id``'s status and end time (``MlflowClient.set_terminated``): ``FINISHED``, ``FAILED``,
        or ``RUNNING`` for a grid parent whose study has folds left to train."""
        self.client.set_terminated(run_id, status=status)

    def download(self, run_id: str, name: str, dst: str) -> str:
        """Artifact ``name`` of run ``run_id`` downloaded into directory ``dst`` (its local path), without a
        progress bar.

        Read from the run's artifact store directly: ``MlflowClient.download_artifacts`` resolves a
        ``runs:/`` URI, which costs a ``get_run`` and, since MLflow 3, a search of the run's logged models on
        every call, a large share of a report's time. The artifact location
        comes from :meth:`children`' search when it listed the run, else from one ``get_run``, and each
        store is opened once."""
        from mlflow.store.artifact.artifact_repository_registry import get_artifact_repository

        uri = self._artifact_uris.get(run_id)
        if uri is None:
            uri = self._artifact_uris[run_id] = self.client.get_run(run_id).info.artifact_uri
        repo = self._artifact_repos.get(uri)
        if repo is None:
            repo = self._artifact_repos[uri] = get_artifact_repository(uri, tracking_uri=self.uri)
        with quiet_artifacts():
            return str(repo.download_artifacts(name, dst))

    def load_json(self, run_id: str, name: str) -> Any:
        """A JSON artifact of a run (as written by :meth:`log_text`)."""
        with tempfile.TemporaryDirectory() as d, open(self.download(run_id, name, d)) as f:
            return json.load(f)
