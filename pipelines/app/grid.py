"""``ltr grid``: the paper's study over folds, tracked in MLflow (the orchestration only).

What the study trains is planned by :mod:`pipelines.study.design` (children, fold plans, units: no Spark, no
MLflow); the difficulty scores and curricula it needs are made by :mod:`pipelines.study.steps`. The paths of a
fold form a plan of checkpointed nodes (:mod:`pipelines.plan.trie`): common prefixes
train once, every node checkpoints every ``train.checkpoint_every`` trees, and
a re-run continues every node from its latest checkpoint and never retrains a
finished one (:mod:`pipelines.execution.executor`).

MLflow, live (:mod:`pipelines.tracking.live`): every child run of the folds set up is
made once, SCHEDULED, before anything trains, and only the process that trains a
child's last node opens and finishes it. A re-run finds the grid's parent run and
continues the same child runs (their key: the child's name and its last node's key);
finished children are skipped.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, replace
from typing import Any

from pipelines.core.config import Config, ConfigError
from pipelines.core.errors import UserError
from pipelines.core.keys import code_identity, code_label
from pipelines.core.layout import Layout
from pipelines.core.provenance import code_version
from pipelines.core.secrets import redact
from pipelines.data.curricula import Curriculum
from pipelines.data.dataset import Dataset
from pipelines.execution.barrier_job import make_settings, resolve_workers, task_errors
from pipelines.execution.executor import Execution, UnknownNode, execute_plan
from pipelines.store.checkpoints import CheckpointStore
from pipelines.store.lease import LeaseHeld, LeaseLost
from pipelines.store.results import PathResult, path_result
from pipelines.study.design import (
    FoldPlan,
    check_curricula,
    curricula_needed,
    grid_children,
    grid_keys,
    is_taught,
    plan_fold,
    record_plan,
    study_data,
    study_finished,
)
from pipelines.study.steps import ensure_curricula, ensure_difficulty, ensure_teachers
from pipelines.study.teachers import check_teacher
from pipelines.tracking.live import LiveChildren, children_lock
from pipelines.tracking.runs import TAG_GRID_KEY, TAG_STUDY_KEY, Tracker, open_ui

log = logging.getLogger(__name__)


def plugins_code() -> dict[str, str]:
    """``{"plugins": digest}`` of the code and settings of every loaded plug-in component (nothing without one): a
    grid's code besides the kernel's, so that a study whose plug-in was edited after it finished gets a parent run
    of its own (the edited component's nodes train again, the others' are reused), as after a kernel change."""
    from pipelines.core.keys import digest
    from pipelines.plugins.loading import current

    codes = current().codes
    return {"plugins": digest(dict(sorted(codes.items())))} if codes else {}


class CodeChanged(UserError):
    """An unfinished grid of the same study was started by other code (a user error: exit 2)."""


def _refuse_other_code(tracker: Tracker, study_key: str, grid_key: str, code: dict[str, str], new_parent: bool) -> None:
    """Resuming a grid with other code would mix two code versions in one table: refused in one line,
    unless ``new_parent`` (``ltr grid --new-parent``), which starts a parent run of its own. Code is
    its identity (:func:`pipelines.core.keys.code_identity`: the computing code's content and library
    versions), not the git commit: a documentation-only commit resumes."""
    if new_parent:
        return
    for r in tracker.parents(TAG_STUDY_KEY, study_key):
        if r.data.tags.get(TAG_GRID_KEY) == grid_key:
            return  # this very grid (same code) exists: it resumes
        if r.info.status != "FINISHED":
            then = {k[len("code.") :]: v for k, v in r.data.params.items() if k.startswith("code.")}
            raise CodeChanged(
                f"grid {tracker.experiment!r}: its unfinished parent run {r.info.run_id} was started by code "
                f"{code_label(then)}, this is {code_label(code)}: finish it with that code, or pass --new-parent to "
                "start a new parent run for this code (results of two code versions never share a table)"
            )


@dataclass
class _Study:
    """What :func:`run_grid` sets up before anything trains: the data, every fold's plan and curricula,
    the parent run, and the live children of the folds this process sets up."""

    data: str
    ds: Dataset
    folds: list[int]  # the study's (grid.folds)
    run_folds: list[int]  # the folds trained now
    plans: dict[int, FoldPlan]
    curricula: dict[int, dict[str, Curriculum]]
    only: list[str] | None
    tracker: Tracker
    parent: str
    resumed: bool
    store: CheckpointStore
    lives: dict[int, LiveChildren]
    train_keys: dict[int, set[str] | None]  # per fold, the nodes trained here (None: all the fold needs)
    existing: dict[str, tuple[str, str]]  # the child runs as they were at setup
    teacher_trees: int = 0  # trees the teachers of teacher-based curricula cost in this process

    def summary(self, finished: bool, folds: list[int], **counts: int) -> dict[str, Any]:
        """The summary :func:`run_grid` returns: the parent run, the tracking store, whether it resumed.

        Parameters
        ----------
        finished : bool
            Whether every fold of the study is finished (the parent run ends FINISHED).
        folds : list[int]
            The folds reported on (the study's, or the ones trained now).
        **counts : int
            Counts added as they are (``trained``, ``skipped``, ``trees_built``).

        Returns
        -------
        dict[str, Any]
            ``parent_run_id``, ``experiment``, ``tracking_uri``, ``resumed``, ``folds``, ``finished`` and the
            counts.
        """
        return {
            "parent_run_id": self.parent,
            "experiment": self.tracker.experiment,
            "tracking_uri": redact(self.tracker.uri),  # printed and written to work_dir: no password
            "resumed": self.resumed,
            "folds": folds,
            "finished": finished,
            **counts,
        }


def run_grid(
    spark,
    cfg: Config,
    folds: list[int] | None = None,
    data: str | None = None,
    parallel: int = 1,
    only: list[str] | None = None,
    resume_hint: str = "ltr grid",
    new_parent: bool = False,
    setup_only: bool = False,
    units: list[tuple[int, int]] | None = None,
) -> dict[str, Any]:
    """Run (or resume) the grid; return a summary with the parent run id and counts.

    The study is ``grid.folds``; ``folds``: train only these folds of it now
    (``ltr grid --fold F``: one scheduler task per fold), under the study's one
    parent run, which ends FINISHED once every fold of the study is;
    ``parallel``: ready nodes run as up to that many concurrent Spark jobs;
    ``only``: train just these node keys (their parents must be done; a key no plan of ``folds`` holds is
    refused, :class:`pipelines.execution.executor.UnknownNode`); ``units``: (fold, index) of units to train
    (:meth:`pipelines.plan.trie.Plan.units`), their keys computed here, after the curricula are built;
    ``new_parent``: start a new parent run even where an unfinished grid of the
    same study was started by other code (refused otherwise: :class:`CodeChanged`);
    ``setup_only``: find or create the parent run, compute the difficulty scores
    and every fold's curricula, train nothing (``ltr grid --setup-only``).
    """
    workers, nthread = resolve_workers(spark, cfg.train, parallel)
    how = Execution.from_config(cfg.train, workers=workers, nthread=nthread, parallel=parallel, resume_hint=resume_hint)
    s = _set_up(spark, cfg, folds, data, only, new_parent, setup_only, units, how)
    if setup_only:
        finished = study_finished(s.plans, s.existing)
        s.tracker.finish(s.parent, "FINISHED" if finished else "RUNNING")
        return s.summary(finished, s.folds, trained=0, skipped=0, trees_built=s.teacher_trees)
    paced = {d: sch for f in s.run_folds for d, sch in s.plans[f].paced.items()}  # the same in every fold
    settings = replace(make_settings(cfg.train, cfg.metric, s.ds, nthread), paced=paced)
    counts = {"trained": 0, "skipped": 0, "trees_built": s.teacher_trees}
    live = None
    try:
        for f in s.run_folds:
            live = s.lives[f]
            _train_fold(spark, cfg, s, f, settings, how, counts)
        finished = _finish(cfg, s)
    except (LeaseHeld, LeaseLost):
        # another process trains these nodes (and streams into the same child runs): nothing failed, nothing
        # to mark; the parent stays as it is (RUNNING) and this command exits 75 for a later retry
        raise
    except BaseException as e:
        if live is not None:
            live.fail_started(str(e).splitlines()[0] if str(e) else type(e).__name__)
        s.tracker.finish(s.parent, "FAILED")
        raise
    log.info(
        "grid %s done: %d children trained (%d trees built), %d skipped (finished before); MLflow UI: %s",
        cfg.grid.experiment,
        counts["trained"],
        counts["trees_built"],
        counts["skipped"],
        open_ui(s.tracker.uri),
    )
    return s.summary(finished, s.run_folds, **counts)


def _set_up(
    spark,
    cfg: Config,
    folds: list[int] | None,
    data: str | None,
    only: list[str] | None,
    new_parent: bool,
    setup_only: bool,
    units: list[tuple[int, int]] | None,
    how: Execution,
) -> _Study:
    """Check the folds and node keys asked for, build (or find) the difficulty scores and curricula (training the
    teachers of teacher-based ones first), plan every fold, find or create the parent run and make every child run
    of the folds set up here, once."""
    data, ds, study = study_data(cfg, data)
    run_folds = list(dict.fromkeys(folds)) if folds else study
    outside = [f for f in run_folds if f not in study]
    if outside:
        raise ConfigError(f"--fold {outside[0]}: not a fold of this study (grid.folds = {study})")
    if setup_only:
        run_folds = []
    difficulty = Layout.of(cfg).difficulty
    needs = {f: curricula_needed(grid_children(cfg, f)) for f in study}
    build = study if setup_only else run_folds
    # before the difficulty scores: a curriculum this dataset cannot build (a strategy ranking by a feature its
    # preset lacks, hrel_labels outside its labels) is refused in one line, not after a Spark job
    check_curricula(cfg, ds, {n for f in study for n in needs[f]})
    taught = {f: any(is_taught(cfg, n) for n in needs[f]) for f in study}
    if any(taught.values()):
        check_teacher(cfg, ds, study)
    # a study of other code is refused before anything is computed for it (difficulty scores, teachers)
    tracker = Tracker.for_config(cfg)
    code = {**code_identity(), **plugins_code()}
    study_key, grid_key = grid_keys(cfg, ds, code)
    _refuse_other_code(tracker, study_key, grid_key, code, new_parent)
    if any(needs[f] for f in build):
        ensure_difficulty(spark, cfg, data, difficulty)
    curricula = {}  # node keys hold the curricula's content: built (or found built) before planning
    store = CheckpointStore(Layout.of(cfg).checkpoints)
    teacher_trees = 0
    teachers = {}
    for f in build:
        teacher = None
        if taught[f]:  # its teachers trained and their scores computed first (pipelines.study.teachers)
            teacher = ensure_teachers(
                spark, cfg, data, difficulty, f, store, make_settings(cfg.train, cfg.metric, ds, how.nthread), how
            )
            teacher_trees += teacher.trees_built
            teachers[f] = teacher
        built = ensure_curricula(spark, cfg, data, difficulty, f, needs[f], teacher)
        curricula[f] = {c.name: c for c in [*built, *(teacher.curricula if teacher else ())]}
    plans = {f: plan_fold(cfg, ds, f) for f in study}
    for f, index in units or []:
        fold_units = plans[f].plan.units()
        if not 0 <= index < len(fold_units):
            raise UnknownNode(
                f"--unit {f}:{index}: fold {f}'s plan has {len(fold_units)} units "
                f"(0..{len(fold_units) - 1}); list them with `ltr grid --plan`"
            )
        only = [*(only or []), *fold_units[index]]
    if only is not None:  # a key no fold of this run plans: exit 2 naming it, never a silent no-op
        known = {n.key for f in run_folds for n in plans[f].plan.nodes}
        unknown = sorted(set(only) - known)
        if unknown:
            raise UnknownNode(
                f"--node {unknown[0]}: no plan node of fold(s) {run_folds} has this key (computed by "
                "other code, config or data?); list the plan with `ltr grid --plan` and the same "
                "config, or name a unit with `--unit FOLD:INDEX`"
            )
    parent, resumed = tracker.find_or_create_parent(
        grid_key,
        cfg.grid.experiment,
        {
            "folds": study,
            "trees": cfg.grid.trees,
            "switch_points": cfg.grid.switch_points,
            "strategies": cfg.grid.all_strategies(),
            "objectives": cfg.grid.objectives,
            "data": data,
            "data_fingerprint": ds.fingerprint,
            "metric": cfg.metric.describe(),
            "eta": cfg.train.eta,
            "leaves": cfg.train.leaves,
            "k": cfg.train.k,
            "fraction": cfg.curriculum.fraction,
            "difficulty.empty_queries": cfg.difficulty.empty_queries,
            "extra_paths": json.dumps(cfg.grid.extra_paths, sort_keys=True),
            # the teachers of teacher-based curricula (their trees are in the study's cost: trees_built)
            **(
                {"teacher.path": cfg.teacher.path, "teacher.crossfit": cfg.teacher.crossfit}
                if any(taught.values())
                else {}
            ),
            **{f"code.{k}": v for k, v in code.items()},
            "code.git": code_version()["git"],
        },
        tags={TAG_STUDY_KEY: study_key, "mlflow.source.git.commit": code_version()["git"].split("-")[0]},
    )
    if not resumed:
        tracker.log_dataset(parent, data, os.path.basename(data.rstrip("/")), ds.fingerprint, "grid")
    for f, teacher in teachers.items():  # the teachers are the study's too: what they are and cost, on the parent
        tracker.log_text(parent, json.dumps(teacher.doc, indent=1, sort_keys=True), f"fold{f}.json", "teachers")
    # per fold, the nodes this process trains (None: all the fold needs); it owns the children ending in them
    train_keys = {f: None if only is None else set(only) & {n.key for n in plans[f].plan.nodes} for f in build}
    lives = {}
    with children_lock(store, parent):  # every child of the folds set up here gets its one run, made once
        existing = tracker.child_runs(parent)
        made = 0
        for f in build:
            lives[f] = LiveChildren(
                tracker, parent, plans[f], store, cfg, data, ds, curricula[f], existing, train_keys[f]
            )
            made += lives[f].create_missing()
    log.info(
        "grid %s: parent run %s (%s), %d children already finished, %d child runs created",
        cfg.grid.experiment,
        parent,
        "resumed" if resumed else "new",
        sum(st == "FINISHED" for _, st in existing.values()),
        made,
    )
    return _Study(
        data,
        ds,
        study,
        run_folds,
        plans,
        curricula,
        only,
        tracker,
        parent,
        resumed,
        store,
        lives,
        train_keys,
        existing,
        teacher_trees,
    )


def _train_fold(spark, cfg: Config, s: _Study, f: int, settings, how: Execution, counts: dict[str, int]) -> None:
    """Train what fold ``f``'s unfinished children (or the nodes asked for) need; finish the children done."""
    fp, live = s.plans[f], s.lives[f]
    record_plan(s.store, cfg.grid.experiment, fp)
    todo = live.todo()
    counts["skipped"] += len(live.owned()) - len(todo)
    asked = s.train_keys[f]
    keys = sorted(
        asked
        if asked is not None  # else what its unfinished children need
        else {k for e in todo for k in fp.plan.chains[e.path.label]}
    )
    if not keys:
        log.info("fold %d: all %d children finished already", f, len(fp.children))
        return
    with task_errors():
        info = execute_plan(
            spark, fp.plan, s.ds, s.curricula[f], settings, s.store, how, on_event=live.on_event, only=keys
        )
    counts["trees_built"] += info["trees"]
    counts["trained"] += live.finish_done()


def _finish(cfg: Config, s: _Study) -> bool:
    """End the parent run FINISHED once every child of the study is, else leave it RUNNING; True if finished."""
    existing, plans = s.existing, s.plans
    partial = s.run_folds != s.folds or s.only is not None
    if partial:  # other folds or nodes may run in other processes: see what MLflow holds now
        existing = s.tracker.child_runs(s.parent)
        # and the other folds' plans as they stand now: their curricula may have been built meanwhile
        # (keyed provisionally before), so that their child keys match the runs their tasks finished
        plans = {**plans, **{f: plan_fold(cfg, s.ds, f) for f in s.folds if f not in s.run_folds}}
    finished = study_finished(plans, existing)
    s.tracker.finish(s.parent, "FINISHED" if finished else "RUNNING")
    if not finished and partial and study_finished(plans, s.tracker.child_runs(s.parent)):
        # a concurrent fold or node task finished its children meanwhile and may have read ours as
        # unfinished: whoever writes last looks again, so the study never stays RUNNING once all is done
        finished = True
        s.tracker.finish(s.parent, "FINISHED")
    return finished


def fold_results(cfg: Config, fold: int, data: str | None = None, with_model: bool = True) -> dict[str, PathResult]:
    """Every finished child path of a fold, read back from the checkpoints (path label -> result)."""
    _, ds, _ = study_data(cfg, data)
    fp = plan_fold(cfg, ds, fold)
    store = CheckpointStore(Layout.of(cfg).checkpoints)
    return {p.label: path_result(store, p.label, fp.plan.chains[p.label], with_model) for p in fp.paths}
