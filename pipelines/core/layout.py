"""Where everything of a study lives: the one place that turns a config into locations.

Under ``work_dir`` (a local path; the folders below may be set elsewhere by the config where it says so)::

    letor/                       generated LETOR text (`ltr generate`, `ltr run`, the DAG's generate step)
    dataset/                     the ingested Parquet dataset (grid.data points the grid elsewhere; `ltr run`
                                 always ingests its own data here)
    difficulty/                  per-query difficulty scores (grid.difficulty overrides)
    curricula/fold<F>/<name>/    a fold's curriculum
    teachers/fold<F>/            a fold's teacher scores (the teachers themselves are plan nodes: checkpoints/)
    checkpoints/                 plan nodes' checkpoints, cuts, leases, plan records
    report/                      `ltr report`'s tables and figures (report.out overrides)
    mlflow.db, mlartifacts/      the default MLflow tracking store (tracking.uri / tracking.artifacts override)
    _ingest_key.json             the record of what the dataset was ingested from (ltr run's and the DAG's)
    airflow/<run id>/            the DAG's per-run records (grid_setup.json)

Every command, the grid, the tracker and the Airflow DAG ask this module; none joins ``work_dir`` itself.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any

#: The DAG's record of the ingest's inputs (``jobs/ltr_study_dag.py``'s ``record_ingest``).
INGEST_KEY = "_ingest_key.json"


@dataclass(frozen=True)
class Layout:
    """The locations of one config's study (see the module docstring). Build it with :meth:`of`."""

    work_dir: str
    data: str
    difficulty: str
    report: str

    @classmethod
    def of(cls, cfg: Any) -> Layout:
        """The layout of a :class:`pipelines.core.config.Config` (its ``work_dir`` and the overrides it sets)."""
        w = cfg.work_dir
        return cls(
            work_dir=w,
            data=cfg.grid.data or os.path.join(w, "dataset"),
            difficulty=cfg.grid.difficulty or os.path.join(w, "difficulty"),
            report=cfg.report.out or os.path.join(w, "report"),
        )

    @property
    def letor(self) -> str:
        """Generated LETOR text: ``<work_dir>/letor``."""
        return os.path.join(self.work_dir, "letor")

    @property
    def run_dataset(self) -> str:
        """Where ``ltr run`` ingests the data it trains on (``<work_dir>/dataset``, whatever ``grid.data`` says:
        ``ltr run`` never writes over a dataset named elsewhere)."""
        return os.path.join(self.work_dir, "dataset")

    @property
    def checkpoints(self) -> str:
        """The checkpoint store (nodes, cuts, leases, plan records): ``<work_dir>/checkpoints``."""
        return os.path.join(self.work_dir, "checkpoints")

    def curriculum(self, fold: int, name: str) -> str:
        """Curriculum ``name`` of ``fold``: ``<work_dir>/curricula/fold<F>/<name>``."""
        return os.path.join(self.work_dir, "curricula", f"fold{fold}", name)

    def teacher_scores(self, fold: int) -> str:
        """The teacher scores of ``fold``'s training queries: ``<work_dir>/teachers/fold<F>``."""
        return os.path.join(self.work_dir, "teachers", f"fold{fold}")

    @property
    def ingest_key(self) -> str:
        """The DAG's record of what the dataset was ingested from: ``<work_dir>/_ingest_key.json``."""
        return os.path.join(self.work_dir, INGEST_KEY)

    def airflow_record(self, run_id: str | None, name: str) -> str:
        """A file the DAG's run ``run_id`` writes for its later tasks (the id made safe as a folder name)."""
        return os.path.join(self.work_dir, "airflow", re.sub(r"[^A-Za-z0-9_.-]", "_", run_id or "manual"), name)

    @property
    def mlflow_uri(self) -> str:
        """The default tracking store: ``sqlite:///<work_dir>/mlflow.db`` (absolute)."""
        return mlflow_uri(self.work_dir)

    @property
    def mlartifacts(self) -> str:
        """The default store's artifacts: ``<work_dir>/mlartifacts``."""
        return os.path.join(self.work_dir, "mlartifacts")


def mlflow_uri(work_dir: str) -> str:
    """``sqlite:///<work_dir>/mlflow.db`` with ``work_dir`` made absolute."""
    return f"sqlite:///{os.path.abspath(os.path.join(work_dir, 'mlflow.db'))}"
