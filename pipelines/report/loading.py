r"""Loading a grid from MLflow: which parent run, its finished children as :class:`Record`\ s, what is missing."""

from __future__ import annotations

import json
import logging
import math
import os
from dataclasses import dataclass, field
from typing import Any

from pipelines.report.records import Record, ReportError, label_of, order_systems
from pipelines.tracking.runs import (
    TAG_CHILD_KEY,
    TAG_FOLD,
    TAG_KIND,
    TAG_PATH,
    TAG_SEED,
    TAG_STRATEGY,
    TAG_SWITCH,
    Tracker,
    UnknownExperiment,
    sqlite_path,
    tracking_uri,
)

log = logging.getLogger(__name__)


@dataclass
class GridState:
    """The grid a report reads: its parent run and what of it finished."""

    parent: str
    status: str  # the parent run's MLflow status
    folds: list[int]  # the grid's folds (the parent's ``folds`` param)
    params: dict[str, str] = field(default_factory=dict)  # the parent's params
    unfinished: list[tuple[str, int, str]] = field(default_factory=list)  # (label, fold, status), no finished twin
    systems: list[tuple[str, int | None]] = field(default_factory=list)  # every (strategy, switch) seen, any status
    split: str = "test"  # the split of the tables: test, or vali for a dataset without a test split
    duplicates: list[str] = field(default_factory=list)  # FINISHED copies of one child left out (one note each)

    def missing(self, records: list[Record]) -> dict[str, list[int]]:
        """label -> the grid's folds without a finished run of that system."""
        have: dict[tuple[str, int | None], set[int]] = {}
        for r in records:
            have.setdefault((r.strategy, r.switch), set()).add(r.fold)
        out = {}
        for key in order_systems(list(set(self.systems) | set(have))):
            gone = [f for f in self.folds if f not in have.get(key, set())]
            if gone:
                out[label_of(*key)] = gone
        return out

    def problems(self, records: list[Record]) -> list[str]:
        """Why this grid is unfinished (empty when the parent is FINISHED and nothing is missing)."""
        out = []
        if self.status != "FINISHED":
            out.append(f"parent run status {self.status}")
        if self.unfinished:
            shown = ", ".join(f"fold{f}/{lab} {st}" for lab, f, st in self.unfinished[:8])
            more = f" and {len(self.unfinished) - 8} more" if len(self.unfinished) > 8 else ""
            n = len(self.unfinished)
            out.append(f"{n} child run{'s' * (n != 1)} not finished ({shown}{more})")
        missing = self.missing(records)
        if missing:
            items = list(missing.items())
            shown = "; ".join(f"{lab}: fold {', '.join(map(str, fs))}" for lab, fs in items[:8])
            more = f" and {len(items) - 8} more systems" if len(items) > 8 else ""
            out.append(f"finished runs missing for {shown}{more}")
        return out + self.duplicates


def _ensure_store(uri: str) -> None:
    path = sqlite_path(uri)
    if path and not os.path.exists(path):
        raise ReportError(
            f"no MLflow tracking database {path}: run `ltr grid` first, or point the report at "
            "the grid's store (work_dir, or tracking.uri)"
        )


def open_tracker(cfg: Any, experiment: str | None = None) -> Tracker:
    """The report's tracker: an existing experiment only (default ``grid.experiment``), never a new one."""
    _ensure_store(tracking_uri(cfg))
    try:
        return Tracker.for_config(cfg, experiment, create=False)
    except UnknownExperiment as e:
        raise ReportError(f"--experiment: {e}") from None


def find_grid(tracker: Tracker, parent: str | None = None) -> Any:
    """The parent run of the grid to report: ``parent`` (checked to be a grid of this experiment), else
    the experiment's latest FINISHED grid."""
    from mlflow.exceptions import MlflowException

    if parent:
        try:
            run = tracker.client.get_run(parent)
        except MlflowException:
            raise ReportError(f"--run-id {parent}: no such run in {tracker.uri}") from None
        if run.info.experiment_id != tracker.experiment_id:
            exp = tracker.client.get_experiment(run.info.experiment_id).name
            raise ReportError(
                f"--run-id {parent}: the run belongs to experiment {exp!r}, not {tracker.experiment!r}; "
                f"pass --experiment {exp}"
            )
        kind = run.data.tags.get(TAG_KIND)
        if kind != "grid":
            raise ReportError(
                f"--run-id {parent}: not a grid's parent run (tag {TAG_KIND} = {kind!r}); "
                "pass the parent run of `ltr grid`"
            )
        return run
    search = tracker.client.search_runs
    runs = search(
        [tracker.experiment_id],
        filter_string=f"tags.`{TAG_KIND}` = 'grid' and attributes.status = 'FINISHED'",
        order_by=["attributes.start_time DESC"],
        max_results=1,
    )
    if runs:
        return runs[0]
    runs = search(
        [tracker.experiment_id],
        filter_string=f"tags.`{TAG_KIND}` = 'grid'",
        order_by=["attributes.start_time DESC"],
        max_results=1,
    )
    if runs:
        r = runs[0]
        raise ReportError(
            f"experiment {tracker.experiment!r} has no finished grid; the latest grid run "
            f"{r.info.run_id} is {r.info.status}: resume it with `ltr grid`, or pass --run-id "
            f"{r.info.run_id} to report on what it has finished"
        )
    raise ReportError(f"experiment {tracker.experiment!r} has no grid run; run `ltr grid` first")


def _folds_param(text: str | None) -> list[int] | None:
    try:
        folds = json.loads(text) if text else None
    except ValueError:
        return None
    return sorted({int(f) for f in folds}) if isinstance(folds, list) else None


def load_grid(tracker: Tracker, run: Any, metric: str) -> tuple[list[Record], GridState]:
    """The FINISHED children of parent ``run`` as records (curves, per-query NDCG, score distributions,
    code versions), and the grid's state (its folds, the children that did not finish)."""
    parent = run.info.run_id
    records: list[Record] = []
    others = []
    systems: set[tuple[str, int | None]] = set()
    splits: set[str] = set()
    runs, duplicates = _one_finished_run_per_child(tracker.children(parent))
    for r in runs:
        tags = r.data.tags
        sw = tags.get(TAG_SWITCH, "")
        fold, strategy, switch = int(tags[TAG_FOLD]), tags[TAG_STRATEGY], int(sw) if sw else None
        seed = int(tags.get(TAG_SEED) or 0)
        systems.add((strategy, switch))
        if r.info.status != "FINISHED":
            others.append((strategy, switch, fold, seed, r.info.status))
            continue
        rid = r.info.run_id
        hist = _one_point_per_step(tracker.client.get_metric_history(rid, f"{metric}_test"), rid)
        vh = _one_point_per_step(tracker.client.get_metric_history(rid, f"{metric}_vali"), rid)
        if not hist and not vh:
            raise ReportError(
                f"run {rid} ({label_of(strategy, switch)}, fold {fold}) has no {metric}_test "
                f"history: was the grid run with another metric than {metric}? (metric.k)"
            )
        # a dataset without a test split: the curves on vali stand in (said in the report), no pairing
        splits.add("test" if hist else "vali")
        perq = tracker.load_json(rid, "per_query_test.json") if hist else {"qid": [], metric: [], "relevant": []}
        if len(set(perq["qid"])) != len(perq["qid"]):
            raise ReportError(
                f"run {rid} ({label_of(strategy, switch)}, fold {fold}): per_query_test.json lists a query id twice"
            )
        training = tracker.load_json(rid, "training.json")
        params = r.data.params
        records.append(
            Record(
                fold=fold,
                strategy=strategy,
                switch=switch,
                steps=[m.step for m in hist or vh],
                test=[m.value for m in hist or vh],
                vali=[m.value for m in vh],
                per_query=dict(zip(perq["qid"], perq[metric], strict=True)),
                # runs of an older ltr logged no counts: None, and the paired statistics refuse them
                relevant=dict(zip(perq["qid"], perq["relevant"], strict=True)) if "relevant" in perq else None,
                score_dists=training.get("score_dists", []),
                base_margin=float(training.get("base_margin", 0.0)),
                run_id=rid,
                code={k[5:]: v for k, v in params.items() if k.startswith("code.")},
                metric=params.get("metric", ""),
                conventions={k[7:]: v for k, v in params.items() if k.startswith("metric.")},
                seed=seed,
                logged=dict(r.data.metrics),
                teacher_trees=int(params.get("teacher_trees") or 0),
                selections=[p for ps in (training.get("selections") or {}).values() for p in ps],
            )
        )
    done = {(r.strategy, r.switch, r.fold, r.seed) for r in records}
    unfinished = sorted(
        {
            (label_of(s, t) + (f" seed {i}" if i else ""), f, st)
            for s, t, f, i, st in others
            if (s, t, f, i) not in done
        },
        key=lambda x: (x[1], x[0]),
    )
    folds = _folds_param(run.data.params.get("folds"))
    if folds is None:
        log.warning("grid run %s records no folds param: taking the folds of its children", parent)
        folds = sorted({r.fold for r in records} | {o[2] for o in others})
    if len(splits) > 1:
        raise ReportError(f"grid run {parent}: some children have test curves and some only vali curves")
    state = GridState(
        parent,
        run.info.status,
        folds,
        dict(run.data.params),
        unfinished,
        sorted(systems, key=lambda k: (k[0], k[1] or 0)),
        split=splits.pop() if splits else "test",
        duplicates=duplicates,
    )
    if duplicates:
        log.warning("grid %s: %s", parent, "; ".join(duplicates))
    return records, state


def _one_point_per_step(history: list[Any], run_id: str) -> list[Any]:
    """A metric history sorted by step, a step logged twice with the same value kept once (an HTTP retry of
    the tracking client can log a batch twice); two values at one step are an error naming the run."""
    out: dict[int, Any] = {}
    for m in sorted(history, key=lambda m: (m.step, m.timestamp)):
        seen = out.setdefault(m.step, m)
        if seen.value != m.value and not (math.isnan(seen.value) and math.isnan(m.value)):
            raise ReportError(
                f"run {run_id}: {m.key} has two values at step {m.step} ({seen.value}, {m.value}): "
                "the run mixes two trainings; delete it (`mlflow runs delete --run-id "
                f"{run_id}`) and resume the grid to train it again"
            )
    return list(out.values())


def _one_finished_run_per_child(children: list[Any]) -> tuple[list[Any], list[str]]:
    """The grid's child runs with at most one FINISHED run per (fold, strategy, switch point, seed repetition), and
    a note per run left out.

    Two FINISHED runs of one child with the same ``ltr.child_key`` (the same path and last plan node, so the
    same checkpoints and results: what a scheduler running a study's units at once made before children were
    owned) are one result logged twice: the earliest is reported, the others are named with the command
    that deletes them. Two with different keys are two different results for one cell of the tables: an
    error that names both runs and how to repair the grid."""
    finished: dict[tuple[str, str, str, str], list[Any]] = {}
    out = []
    for r in children:
        tags = r.data.tags
        if tags.get(TAG_KIND) != "child":
            continue
        if r.info.status == "FINISHED":
            finished.setdefault(
                (tags.get(TAG_FOLD, ""), tags.get(TAG_STRATEGY, ""), tags.get(TAG_SWITCH, ""), tags.get(TAG_SEED, "")),
                [],
            ).append(r)
        else:
            out.append(r)
    notes = []
    for (fold, strategy, switch, seed), rs in finished.items():
        rs.sort(key=lambda r: (r.info.start_time or 0, r.info.run_id))
        out.append(rs[0])
        if len(rs) == 1:
            continue
        label = label_of(strategy, int(switch) if switch else None) + (f" seed {seed}" if seed else "")
        keys = {r.data.tags.get(TAG_CHILD_KEY, "") for r in rs}
        ids = [r.info.run_id for r in rs]
        if len(keys) > 1 or "" in keys:
            raise ReportError(
                f"{label}: fold {fold} has {len(rs)} finished runs of different training ({', '.join(ids)}; "
                f"paths {sorted({r.data.tags.get(TAG_PATH, '?') for r in rs})}, child keys {sorted(keys)}): a table "
                "cell must hold one result. Keep the run of the grid's current plan (`ltr grid --plan` lists its "
                "keys) and delete the other with `mlflow runs delete --run-id ID`, or start the study over with "
                "`ltr grid --new-parent`"
            )
        notes.append(
            f"{label} fold {fold}: {len(rs)} finished runs of the same child (key {keys.pop()}, the same "
            f"checkpoints): reporting {ids[0]}; remove the copies with "
            + " && ".join(f"mlflow runs delete --run-id {i}" for i in ids[1:])
        )
    return out, notes


def code_versions(records: list[Record]) -> dict[str, dict[str, int]]:
    """``code.*`` key -> value -> number of runs (every run counted; a run without the key counts as '');
    keys in :func:`pipelines.core.provenance.code_version`'s order, then any others."""
    first = ["ltr", "git", "sources", "xgboost", "pyspark", "numpy"]
    seen = {k for r in records for k in r.code}
    keys = [k for k in first if k in seen] + sorted(seen - set(first))
    out: dict[str, dict[str, int]] = {}
    for k in keys:
        for r in records:
            v = r.code.get(k, "")
            out.setdefault(k, {}).setdefault(v, 0)
            out[k][v] += 1
    return out


def report_version() -> dict[str, str]:
    """The code writing the report: ltr, git and scipy (which computes the statistics)."""
    import scipy

    from pipelines.core.provenance import code_version

    v = code_version()
    return {"ltr": v["ltr"], "git": v["git"], "scipy": scipy.__version__}
