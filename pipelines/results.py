"""A finished study's results as pandas objects, for a notebook::

    from pipelines import results

    study = results.load("work")          # a study's work_dir (its report written by `ltr run` / `ltr report`)
    study.systems                         # one row per system: Table 1's mean and sd, its training path
    study.per_query                       # one row per system, fold and test query: the NDCG the tests pair
    study.curves                          # one row per system, fold and tree: vali and test NDCG (from MLflow)
    study.report                          # report.json as a dict (every number of every table)

    study = results.from_mlflow("https://mlflow.example.org", "ltr-default")  # without the work_dir

``per_query``, ``systems`` and ``report`` come from ``<work_dir>/report`` (``report.out`` elsewhere: pass
``report_dir``); ``curves`` and the training paths from the study's MLflow store: ``sqlite:///<work_dir>/mlflow.db``
by default, or ``tracking_uri`` (a server's credentials from ``MLFLOW_TRACKING_USERNAME`` and ``_PASSWORD``). Read
only: nothing is written, no run is made.

Without the ``work_dir`` (a study on a tracking server, run elsewhere): ``results.from_mlflow(tracking_uri,
experiment)`` reads the same from the MLflow experiment alone, the report ``ltr report`` logged on the grid's parent
run (downloaded into a folder of your choice or a temporary one).
"""

from __future__ import annotations

import functools
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipelines.core.errors import UserError


class ResultsError(UserError):
    """A folder that holds no finished study's report, or a store without its runs."""


@dataclass(frozen=True)
class Study:
    """One finished study (:func:`load`)."""

    work_dir: Path
    report_dir: Path
    tracking_uri: str
    report: dict[str, Any]

    @functools.cached_property
    def per_query(self) -> Any:
        """``report/per_query.csv``: system, strategy, switch, fold, qid, the metric (``ndcg_at_10``), relevant
        documents, run id."""
        import pandas as pd

        return pd.read_csv(self.report_dir / "per_query.csv")

    @functools.cached_property
    def systems(self) -> Any:
        """Table 1 (``report.json``'s ``systems``): system, strategy, switch, folds, mean, sd, and each system's
        training paths (its child runs' ``path`` param: one, or one per seed repetition, ``~i``, joined by
        ``" | "``)."""
        import pandas as pd

        from pipelines.tracking.runs import TAG_STRATEGY, TAG_SWITCH

        rows = [{k: v for k, v in s.items() if k != "per_fold"} for s in self.report["systems"]]
        paths: dict[tuple[str, str], set[str]] = {}
        for r in self._tracker.children(self.report["parent"]):
            key = (r.data.tags.get(TAG_STRATEGY, ""), r.data.tags.get(TAG_SWITCH, ""))
            if r.data.params.get("path"):
                paths.setdefault(key, set()).add(r.data.params["path"])
        for row in rows:
            switch = "" if row.get("switch") is None else str(row["switch"])
            row["path"] = " | ".join(sorted(paths.get((str(row.get("strategy")), switch), ())))
        return pd.DataFrame(rows)

    @functools.cached_property
    def curves(self) -> Any:
        """Every finished child's curves, one row a point (system, fold, seed, tree: the number of trees, vali and
        test NDCG, run id)."""
        import pandas as pd

        from pipelines.report.loading import load_grid

        tracker = self._tracker
        run = tracker.client.get_run(self.report["parent"])
        records, _ = load_grid(tracker, run, self.report["metric_name"])
        names = {(str(x["strategy"]), x.get("switch")): x["system"] for x in self.report["systems"]}
        rows = []
        for r in records:
            vali = r.vali if len(r.vali) == len(r.steps) else [float("nan")] * len(r.steps)
            for step, v, t in zip(r.steps, vali, r.test, strict=True):
                rows.append({"system": names.get((r.strategy, r.switch), r.strategy), "fold": r.fold, "seed": r.seed,
                             "tree": step, "vali": v, "test": t, "run_id": r.run_id})  # fmt: skip
        return pd.DataFrame(rows, columns=["system", "fold", "seed", "tree", "vali", "test", "run_id"])

    @functools.cached_property
    def _tracker(self) -> Any:
        """The study's experiment, opened once (read only: ``create=False``)."""
        from pipelines.tracking.runs import Tracker

        return Tracker(self.tracking_uri, self.report["experiment"], artifact_root="", create=False)


def load(
    work_dir: str | os.PathLike, tracking_uri: str | None = None, report_dir: str | os.PathLike | None = None
) -> Study:
    """The finished study of ``work_dir`` (see the module); :class:`ResultsError` naming what is missing."""
    work = Path(work_dir)
    out = Path(report_dir) if report_dir else work / "report"
    path = out / "report.json"
    if not path.is_file():
        raise ResultsError(f"{path}: no report here; run `ltr report` (or `ltr run`) for the study of {work} first")
    try:
        report = json.loads(path.read_text())
    except ValueError as e:
        raise ResultsError(f"{path}: not a report ({e})") from None
    if not (out / "per_query.csv").is_file():
        raise ResultsError(f"{out / 'per_query.csv'}: missing; write the report again with `ltr report`")
    uri = tracking_uri or f"sqlite:///{work.resolve() / 'mlflow.db'}"
    return Study(work, out, uri, report)


def from_mlflow(
    tracking_uri: str, experiment: str, run_id: str | None = None, dest: str | os.PathLike | None = None
) -> Study:
    """The finished study of MLflow experiment ``experiment`` at ``tracking_uri``: the grid ``run_id`` (its parent
    run), by default the experiment's latest FINISHED grid, as ``ltr report`` picks it. Its report (what ``ltr report``
    logged under the parent run's ``report/``) is downloaded into ``dest`` (default: a new temporary folder), which
    becomes the study's ``work_dir``. :class:`ResultsError` when the experiment, the grid or its report is missing."""
    import tempfile

    from mlflow.exceptions import MlflowException

    from pipelines.core.secrets import redact
    from pipelines.report.loading import find_grid
    from pipelines.report.records import ReportError
    from pipelines.tracking.runs import Tracker

    where = f"experiment {experiment!r} at {redact(tracking_uri)}"
    tracker = Tracker(tracking_uri, experiment, artifact_root="", create=False)  # UnknownExperiment: exit 2
    try:
        parent = find_grid(tracker, run_id).info.run_id
    except ReportError as e:
        raise ResultsError(f"{where}: {e}") from None
    work = Path(dest) if dest else Path(tempfile.mkdtemp(prefix="ltr-results-"))
    work.mkdir(parents=True, exist_ok=True)
    for name in ("report.json", "per_query.csv"):
        try:
            tracker.download(parent, f"report/{name}", str(work))
        except (MlflowException, OSError) as e:
            raise ResultsError(
                f"{where}: could not read report/{name} of the grid {parent} ({redact(str(e))[:200]}); "
                f"was it reported? `ltr report --experiment {experiment} --run-id {parent}`"
            ) from None
    return load(work, tracking_uri)
