"""``ltr grid``: the paper's study over folds, tracked in MLflow.

For each fold: the LambdaMART baseline (``T`` trees), MSE-t for every switch
point (``mse:t,lambdamart:T-t``), every curriculum strategy at every switch
point (``lambdamart@S:t,lambdamart:T-t``, the first stage being the easiest
``curriculum.fraction`` of the queries), and any extra paths of the config
(pacing curricula, blend continuation, CM and CL combined...). The paths of a
fold form a plan of checkpointed nodes (:mod:`pipelines.plan`): common prefixes
train once, every node checkpoints every ``train.checkpoint_every`` trees, and
a re-run continues every node from its latest checkpoint and never retrains a
finished one (:mod:`pipelines.executor`).

MLflow, live (:mod:`pipelines.live_children`): every child run of the folds set up is
made once, SCHEDULED, before anything trains, and only the process that trains a
child's last node opens and finishes it. A re-run finds the grid's parent run and
continues the same child runs (their key: the child's name and its last node's key);
finished children are skipped.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import asdict, dataclass, replace
from typing import Any

from pipelines.barrier_job import Curriculum, make_settings, resolve_workers, task_errors
from pipelines.checkpoints import CheckpointStore
from pipelines.config import Config, ConfigError
from pipelines.curriculum import STRATEGIES, build_curriculum, check_curriculum, read_curriculum
from pipelines.dataset import Dataset, DatasetError, open_dataset
from pipelines.difficulty import SUMMARY as DIFFICULTY_SUMMARY
from pipelines.difficulty import stored_summary
from pipelines.difficulty import difficulty_key as compute_difficulty_key
from pipelines.difficulty import run_difficulty
from pipelines.executor import Execution, UnknownNode, execute_plan, states_of
from pipelines.lease import LeaseHeld, LeaseLost
from pipelines.keys import child_key as make_child_key
from pipelines.keys import (code_identity, code_label, curriculum_content_key, differences, digest, plan_context,
                            study_keys, train_inputs)
from pipelines.keys import curriculum_key as make_curriculum_key
from pipelines.paths import TrainingPath, parse_path, resolve
from pipelines.plan import DONE, Plan, build_plan, format_plan
from pipelines.provenance import code_version
from pipelines.storage import read_json
from pipelines.tracking import (
    BASELINE,
    MSE,
    TAG_GRID_KEY,
    TAG_STUDY_KEY,
    Tracker,
)
from pipelines.live_children import LiveChildren, children_lock
from pipelines.results import PathResult, path_result
from udfs.letor_chunks import to_uri

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Child:
    """One (fold, strategy, switch point) of the grid."""

    fold: int
    strategy: str  # "lambdamart" (baseline), "mse", a curriculum strategy, or an extra path's name
    switch: int | None
    path: TrainingPath

    @property
    def name(self) -> str:
        return f"fold{self.fold}/{self.strategy}" + ("" if self.switch is None else f"-{self.switch}")


def grid_children(cfg: Config, fold: int) -> list[Child]:
    """The children of one fold, in a stable order."""
    g = cfg.grid
    lm, mse = ("xgb_lambdamart", "xgb_mse") if g.objectives == "builtin" else ("lambdamart", "mse")
    if g.objectives not in ("python", "builtin"):
        raise ConfigError(f"grid.objectives must be 'python' or 'builtin', got {g.objectives!r}")
    T = g.trees
    bad = [t for t in g.switch_points if not 0 < t < T]
    if bad:
        raise ConfigError(f"grid.switch_points must lie strictly between 0 and grid.trees={T}; got {bad}")
    unknown = [s for s in g.strategies if s not in STRATEGIES or s == "none"]
    if unknown:
        raise ConfigError(f"grid.strategies: unknown {unknown}; choose from {[s for s in STRATEGIES if s != 'none']}")
    out = []
    if g.baseline:
        out.append(Child(fold, BASELINE, None, parse_path(f"{lm}:{T}", f"{BASELINE}")))
    if g.mse:
        out += [Child(fold, MSE, t, parse_path(f"{mse}:{t},{lm}:{T - t}", f"{MSE}-{t}")) for t in g.switch_points]
    for s in g.strategies:
        out += [Child(fold, s, t, parse_path(f"{lm}@{s}:{t},{lm}:{T - t}", f"{s}-{t}")) for t in g.switch_points]
    for name, text in sorted(g.extra_paths.items()):
        out.append(Child(fold, name, None, parse_path(text, name)))
    return out


def _curricula_needed(children: list[Child]) -> set[str]:
    return {n for c in children for n in c.path.curricula}


def _curriculum_config(cfg: Config, name: str):
    if name in cfg.grid.extra_curricula:
        return replace(cfg.curriculum, **cfg.grid.extra_curricula[name])
    if name in STRATEGIES:
        return replace(cfg.curriculum, strategy=name, pacing="")
    raise ConfigError(f"grid path refers to curriculum {name!r}, which is neither a strategy nor in "
                      f"grid.extra_curricula ({sorted(cfg.grid.extra_curricula)})")


def difficulty_key(cfg: Config, ds: Dataset) -> str:
    """Everything that determines the difficulty scores (:func:`pipelines.difficulty.difficulty_inputs`):
    dataset, resolved feature roles, difficulty settings, metric conventions, code version."""
    return compute_difficulty_key(ds, cfg.difficulty, cfg.metric)


def difficulty_dir(cfg: Config) -> str:
    return cfg.grid.difficulty or os.path.join(cfg.work_dir, "difficulty")


def curriculum_dir(cfg: Config, fold: int, name: str) -> str:
    return os.path.join(cfg.work_dir, "curricula", f"fold{fold}", name)


def curriculum_key(cfg: Config, ds: Dataset, fold: int, name: str, scores: str) -> str:
    """Everything that determines a curriculum (:func:`pipelines.keys.curriculum_key`): its settings, the
    dataset, the fold, the difficulty inputs and ``scores``, the content fingerprint of the very scores it
    is built from (scores computed again into the same folder with another result rebuild it)."""
    return make_curriculum_key(asdict(_curriculum_config(cfg, name)), ds.fingerprint, fold, name,
                               difficulty_key(cfg, ds), cfg.difficulty.empty_queries, scores)


def _scores_fingerprint(difficulty: str) -> str:
    try:
        return str(read_json(difficulty, DIFFICULTY_SUMMARY).get("content_fingerprint", ""))
    except (OSError, ValueError):
        return ""


def stored_curriculum_keys(cfg: Config, ds: Dataset, fold: int, names: set[str]) -> dict[str, str]:
    """Content key (:func:`pipelines.keys.curriculum_content_key`) of each curriculum as built in the work
    directory, read without Spark; a curriculum not built yet, or built from other inputs, gets a provisional
    key (``unbuilt:...``) that matches no checkpoint: its nodes show as to do until it is built."""
    scores = _scores_fingerprint(difficulty_dir(cfg))
    out = {}
    for name in sorted(names):
        key = curriculum_key(cfg, ds, fold, name, scores)
        try:
            summary = read_curriculum(curriculum_dir(cfg, fold, name))
        except DatasetError:
            summary = {}
        out[name] = curriculum_content_key(summary) if scores and summary.get("key") == key else f"unbuilt:{key}"
    return out


def ensure_difficulty(spark, cfg: Config, data: str, difficulty: str) -> dict[str, Any]:
    """The difficulty scores at ``difficulty``: reused when their recorded key matches this config's
    (:func:`difficulty_key`), else computed again; returns their summary."""
    summary = stored_summary(difficulty, difficulty_key(cfg, open_dataset(data)))
    if summary is not None:
        return summary
    log.info("computing difficulty scores -> %s (none there, or computed from other inputs)", difficulty)
    return run_difficulty(spark, data, difficulty, cfg.difficulty, cfg.metric)


def ensure_curricula(spark, cfg: Config, data: str, difficulty: str, fold: int, names: set[str]) -> list[Curriculum]:
    """Build (or reuse, when its key matches) each curriculum of the fold: strategies with the grid's
    fraction, and the extra curricula of the config (``grid.extra_curricula``: name -> settings).

    A curriculum's stored key covers its settings, the dataset, the fold, the difficulty inputs and
    the content fingerprint of the very scores it was built from: scores computed again (by
    ``ltr run`` or ``ltr difficulty``) into the same folder with another result rebuild it."""
    if not names:
        return []
    ds = open_dataset(data)
    scores = read_json(difficulty, DIFFICULTY_SUMMARY).get("content_fingerprint", "")
    out = []
    for name in sorted(names):
        ccfg = _curriculum_config(cfg, name)
        key = curriculum_key(cfg, ds, fold, name, scores)
        d = curriculum_dir(cfg, fold, name)
        try:
            summary = read_curriculum(d)
            fresh = summary.get("key") == key
        except DatasetError:
            fresh = False
        if not fresh:
            summary = build_curriculum(spark, data, difficulty, fold, ccfg, d, name=name, key=key,
                                       empty_queries=cfg.difficulty.empty_queries)
        out.append(Curriculum(to_uri(d), summary))
    return out


# ------------------------------------------------------------ planning (no Spark, no MLflow)
@dataclass(frozen=True)
class FoldPlan:
    """A fold's children, their resolved paths and the plan of nodes they share."""

    fold: int
    children: list[Child]
    paths: list[TrainingPath]
    plan: Plan

    def child_key(self, i: int) -> str:
        c, p = self.children[i], self.paths[i]
        return make_child_key(c.name, p.shorthand(), self.plan.chains[p.label][-1])

    def unit_label(self, index: int) -> str:
        """What the ``index``-th unit trains, for people (a scheduler's task label):
        ``fold 1: mse 0..30 -> mse-10, mse-20, mse-30`` (its root node, then the paths that end in it)."""
        unit = self.plan.units()[index]
        ends = [p.label for p in self.paths if self.plan.chains[p.label][-1] in set(unit)]
        return f"fold {self.fold}: {self.plan.node(unit[0]).describe()} -> {', '.join(ends)}"

    def unit_trees(self, index: int) -> int:
        """Trees the ``index``-th unit builds."""
        return sum(self.plan.node(k).trees for k in self.plan.units()[index])

    @property
    def provisional(self) -> list[str]:
        """Curricula of the plan not built yet (their nodes' keys are provisional)."""
        return sorted({n.curriculum for n in self.plan.nodes if n.curriculum
                       and str(self.plan.inputs.get(n.key, {}).get("curriculum", "")).startswith("unbuilt:")})


def plan_fold(cfg: Config, ds: Dataset, fold: int) -> FoldPlan:
    """The plan of one fold from the config, the dataset's manifest and the curricula as built in the work
    directory (:func:`stored_curriculum_keys`): pure reads, no Spark."""
    children = grid_children(cfg, fold)
    names = _curricula_needed(children)
    # checked against the dataset here, before any Spark work (hrel_labels, shares, the empty-query policy)
    stages = {n: len(check_curriculum(_curriculum_config(cfg, n), ds, cfg.difficulty.empty_queries)) for n in names}
    paths = [resolve(c.path, stages) for c in children]
    plan = build_plan(paths, fold=fold, context=plan_context(cfg.train, cfg.metric, ds.fingerprint, fold),
                      curriculum_keys=stored_curriculum_keys(cfg, ds, fold, names))
    return FoldPlan(fold, children, paths, plan)


def checkpoint_root(cfg: Config) -> str:
    return os.path.join(cfg.work_dir, "checkpoints")


def _grid_data(cfg: Config, data: str | None) -> tuple[str, Dataset, list[int]]:
    data = data or cfg.grid.data or os.path.join(cfg.work_dir, "dataset")
    ds = open_dataset(data)
    folds = list(dict.fromkeys(cfg.grid.folds))  # --folds 1,1 is fold 1 once
    missing = [f for f in folds if f not in ds.folds]
    if missing:
        raise DatasetError(f"{data} has no fold {missing[0]}; folds: {sorted(ds.folds)}")
    return data, ds, folds


def show_plan(cfg: Config, data: str | None = None) -> str:
    """``ltr grid --plan``: every fold's nodes, trees and states, from the checkpoints; trains nothing.

    Under a node that is to do while the last run of this experiment planned the same place in the trie
    under another key (:func:`record_plan`), the inputs that changed (``context.code.sources: a -> b``)."""
    _, ds, folds = _grid_data(cfg, data)
    store = CheckpointStore(checkpoint_root(cfg))
    out = []
    for f in folds:
        fp = plan_fold(cfg, ds, f)
        states = states_of(fp.plan, store)
        stored = _read_plan_record(store, cfg.grid.experiment, f)
        why: dict[str, list[str]] = {}
        for n in fp.plan.nodes:
            old = stored.get(fp.plan.signature(n.key))
            if states[n.key].state == DONE or not old or old["key"] == n.key:
                continue
            why[n.key] = [f"key changed since the last run (node {old['key']}): {d}"
                          for d in differences(old["inputs"], fp.plan.inputs.get(n.key, {}))]
        text = format_plan(fp.plan, states, why)
        if fp.provisional:
            text += (f"\n  (curricula {', '.join(fp.provisional)} are not built yet: the keys of their nodes are "
                     "provisional; `ltr grid --setup-only` builds them)")
        out.append(text)
    return "\n".join(out)


def _plan_record_path(store: CheckpointStore, experiment: str, fold: int) -> str:
    return f"{store.path}/_plans/{digest(experiment, 12)}-fold{fold}.json"


def _read_plan_record(store: CheckpointStore, experiment: str, fold: int) -> dict[str, Any]:
    try:
        with store.fs.open_input_stream(_plan_record_path(store, experiment, fold)) as f:
            return json.loads(f.read().decode())
    except (OSError, ValueError):
        return {}


def record_plan(store: CheckpointStore, experiment: str, fp: FoldPlan) -> None:
    """Keep, per experiment and fold, each node's key and key document by its place in the trie: what
    ``ltr grid --plan`` compares with to say why a key changed. Written before training (by rename)."""
    doc = {fp.plan.signature(n.key): {"key": n.key, "inputs": fp.plan.inputs.get(n.key, {})} for n in fp.plan.nodes}
    path = _plan_record_path(store, experiment, fp.fold)
    try:
        store.write_file(path[len(store.path) + 1:], json.dumps(doc, sort_keys=True, default=str).encode())
    except OSError as e:  # a diagnostic: never a reason to stop a study
        log.warning("could not record fold %d's plan at %s (ltr grid --plan will not say why keys changed): %s",
                    fp.fold, path, e)


def _study_keys(cfg: Config, ds: Dataset, code: dict[str, str] | None = None) -> tuple[str, str]:
    """(study key, grid key) of the grid of ``cfg`` on ``ds`` (:func:`pipelines.keys.study_keys`).

    Where the inputs were read from is not what they are: the data by its fingerprint, the difficulty
    scores by the keys of the curricula built on them (node keys); `--data X` and `grid.data=X`, or the
    dataset moved to another path, resume the same grid; how many workers build the trees does not
    change them (global cuts), so it is in no key either."""
    grid_cfg = {k: v for k, v in asdict(cfg.grid).items() if k not in ("data", "difficulty")}
    return study_keys({"grid": grid_cfg, "train": train_inputs(cfg.train), "metric": cfg.metric.to_dict(),
                       "curriculum": asdict(cfg.curriculum), "difficulty": asdict(cfg.difficulty),
                       "dataset": ds.fingerprint, "folds": list(dict.fromkeys(cfg.grid.folds))}, code)


class CodeChanged(ValueError):
    """An unfinished grid of the same study was started by other code (a user error: exit 2)."""


def _refuse_other_code(tracker: Tracker, study_key: str, grid_key: str, code: dict[str, str],
                       new_parent: bool) -> None:
    """Resuming a grid with other code would mix two code versions in one table: refused in one line,
    unless ``new_parent`` (``ltr grid --new-parent``), which starts a parent run of its own. Code is
    its identity (:func:`pipelines.keys.code_identity`: the computing code's content and library
    versions), not the git commit: a documentation-only commit resumes."""
    if new_parent:
        return
    for r in tracker.parents(TAG_STUDY_KEY, study_key):
        if r.data.tags.get(TAG_GRID_KEY) == grid_key:
            return  # this very grid (same code) exists: it resumes
        if r.info.status != "FINISHED":
            then = {k[len("code."):]: v for k, v in r.data.params.items() if k.startswith("code.")}
            raise CodeChanged(
                f"grid {tracker.experiment!r}: its unfinished parent run {r.info.run_id} was started by code "
                f"{code_label(then)}, this is {code_label(code)}: finish it with that code, or pass --new-parent to "
                "start a new parent run for this code (results of two code versions never share a table)")


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

    def summary(self, finished: bool, folds: list[int], **counts: int) -> dict[str, Any]:
        return {"parent_run_id": self.parent, "experiment": self.tracker.experiment, "tracking_uri": self.tracker.uri,
                "resumed": self.resumed, "folds": folds, "finished": finished, **counts}


def run_grid(spark, cfg: Config, folds: list[int] | None = None, data: str | None = None, parallel: int = 1,
             only: list[str] | None = None, resume_hint: str = "ltr grid", new_parent: bool = False,
             setup_only: bool = False, units: list[tuple[int, int]] | None = None) -> dict[str, Any]:
    """Run (or resume) the grid; return a summary with the parent run id and counts.

    The study is ``grid.folds``; ``folds``: train only these folds of it now
    (``ltr grid --fold F``: one scheduler task per fold), under the study's one
    parent run, which ends FINISHED once every fold of the study is;
    ``parallel``: ready nodes run as up to that many concurrent Spark jobs;
    ``only``: train just these node keys (their parents must be done; a key no plan of ``folds`` holds is
    refused, :class:`pipelines.executor.UnknownNode`); ``units``: (fold, index) of units to train
    (:meth:`pipelines.plan.Plan.units`), their keys computed here, after the curricula are built;
    ``new_parent``: start a new parent run even where an unfinished grid of the
    same study was started by other code (refused otherwise: :class:`CodeChanged`);
    ``setup_only``: find or create the parent run, compute the difficulty scores
    and every fold's curricula, train nothing (``ltr grid --setup-only``).
    """
    s = _set_up(spark, cfg, folds, data, only, new_parent, setup_only, units)
    if setup_only:
        finished = _study_finished(s.plans, s.existing)
        s.tracker.finish(s.parent, "FINISHED" if finished else "RUNNING")
        return s.summary(finished, s.folds, trained=0, skipped=0, trees_built=0)
    workers, nthread = resolve_workers(spark, cfg.train, parallel)
    settings = make_settings(cfg.train, cfg.metric, s.ds, nthread)
    how = Execution(workers, nthread, parallel, cfg.train.job_retries, cfg.train.tracker_timeout, resume_hint,
                    cfg.train.lease_ttl, cfg.train.lease_wait)
    counts = {"trained": 0, "skipped": 0, "trees_built": 0}
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
    log.info("grid %s done: %d children trained (%d trees built), %d skipped (finished before); "
             "mlflow ui --backend-store-uri %s", cfg.grid.experiment, counts["trained"], counts["trees_built"],
             counts["skipped"], s.tracker.uri)
    return s.summary(finished, s.run_folds, **counts)


def _set_up(spark, cfg: Config, folds: list[int] | None, data: str | None, only: list[str] | None,
            new_parent: bool, setup_only: bool, units: list[tuple[int, int]] | None) -> _Study:
    """Check the folds and node keys asked for, build (or find) the difficulty scores and curricula, plan
    every fold, find or create the parent run and make every child run of the folds set up here, once."""
    data, ds, study = _grid_data(cfg, data)
    run_folds = list(dict.fromkeys(folds)) if folds else study
    outside = [f for f in run_folds if f not in study]
    if outside:
        raise ConfigError(f"--fold {outside[0]}: not a fold of this study (grid.folds = {study})")
    if setup_only:
        run_folds = []
    difficulty = difficulty_dir(cfg)
    needs = {f: _curricula_needed(grid_children(cfg, f)) for f in study}
    build = study if setup_only else run_folds
    if any(needs[f] for f in build):
        ensure_difficulty(spark, cfg, data, difficulty)
    curricula = {}  # node keys hold the curricula's content: built (or found built) before planning
    for f in build:
        curricula[f] = {c.name: c for c in ensure_curricula(spark, cfg, data, difficulty, f, needs[f])}
    plans = {f: plan_fold(cfg, ds, f) for f in study}
    for f, index in units or []:
        fold_units = plans[f].plan.units()
        if not 0 <= index < len(fold_units):
            raise UnknownNode(f"--unit {f}:{index}: fold {f}'s plan has {len(fold_units)} units "
                              f"(0..{len(fold_units) - 1}); list them with `ltr grid --plan`")
        only = [*(only or []), *fold_units[index]]
    if only is not None:  # a key no fold of this run plans: exit 2 naming it, never a silent no-op
        known = {n.key for f in run_folds for n in plans[f].plan.nodes}
        unknown = sorted(set(only) - known)
        if unknown:
            raise UnknownNode(f"--node {unknown[0]}: no plan node of fold(s) {run_folds} has this key (computed by "
                              "other code, config or data?); list the plan with `ltr grid --plan` and the same "
                              "config, or name a unit with `--unit FOLD:INDEX`")
    tracker = Tracker.for_config(cfg)
    code = dict(code_identity())
    study_key, grid_key = _study_keys(cfg, ds, code)
    _refuse_other_code(tracker, study_key, grid_key, code, new_parent)
    parent, resumed = tracker.find_or_create_parent(grid_key, cfg.grid.experiment, {
        "folds": study, "trees": cfg.grid.trees, "switch_points": cfg.grid.switch_points,
        "strategies": cfg.grid.strategies, "objectives": cfg.grid.objectives, "data": data,
        "data_fingerprint": ds.fingerprint, "metric": cfg.metric.describe(), "eta": cfg.train.eta,
        "leaves": cfg.train.leaves, "k": cfg.train.k, "fraction": cfg.curriculum.fraction,
        "difficulty.empty_queries": cfg.difficulty.empty_queries,
        "extra_paths": json.dumps(cfg.grid.extra_paths, sort_keys=True),
        **{f"code.{k}": v for k, v in code.items()}, "code.git": code_version()["git"]},
        tags={TAG_STUDY_KEY: study_key, "mlflow.source.git.commit": code_version()["git"].split("-")[0]})
    if not resumed:
        tracker.log_dataset(parent, data, os.path.basename(data.rstrip("/")), ds.fingerprint, "grid")
    store = CheckpointStore(checkpoint_root(cfg))
    # per fold, the nodes this process trains (None: all the fold needs); it owns the children ending in them
    train_keys = {f: None if only is None else set(only) & {n.key for n in plans[f].plan.nodes} for f in build}
    lives = {}
    with children_lock(store, parent):  # every child of the folds set up here gets its one run, made once
        existing = tracker.child_runs(parent)
        made = 0
        for f in build:
            lives[f] = LiveChildren(tracker, parent, plans[f], store, cfg, data, ds, curricula[f], existing,
                                    train_keys[f])
            made += lives[f].create_missing()
    log.info("grid %s: parent run %s (%s), %d children already finished, %d child runs created", cfg.grid.experiment,
             parent, "resumed" if resumed else "new", sum(st == "FINISHED" for _, st in existing.values()), made)
    return _Study(data, ds, study, run_folds, plans, curricula, only, tracker, parent, resumed, store, lives,
                  train_keys, existing)


def _train_fold(spark, cfg: Config, s: _Study, f: int, settings, how: Execution, counts: dict[str, int]) -> None:
    """Train what fold ``f``'s unfinished children (or the nodes asked for) need; finish the children done."""
    fp, live = s.plans[f], s.lives[f]
    record_plan(s.store, cfg.grid.experiment, fp)
    todo = live.todo()
    counts["skipped"] += len(live.owned()) - len(todo)
    keys = sorted(s.train_keys[f] if s.train_keys[f] is not None  # else what its unfinished children need
                  else {k for e in todo for k in fp.plan.chains[e.path.label]})
    if not keys:
        log.info("fold %d: all %d children finished already", f, len(fp.children))
        return
    with task_errors():
        info = execute_plan(spark, fp.plan, s.ds, s.curricula[f], settings, s.store, how, on_event=live.on_event,
                            only=keys)
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
    finished = _study_finished(plans, existing)
    s.tracker.finish(s.parent, "FINISHED" if finished else "RUNNING")
    if not finished and partial and _study_finished(plans, s.tracker.child_runs(s.parent)):
        # a concurrent fold or node task finished its children meanwhile and may have read ours as
        # unfinished: whoever writes last looks again, so the study never stays RUNNING once all is done
        finished = True
        s.tracker.finish(s.parent, "FINISHED")
    return finished


def unfinished_units(fp: FoldPlan, existing: dict[str, tuple[str, str]]) -> list[list[str]]:
    """The fold's units of work (:meth:`pipelines.plan.Plan.units`) that end a child whose run is not
    FINISHED (``existing``: :meth:`pipelines.tracking.Tracker.child_runs`). The others have nothing
    left to do: every node of a FINISHED child is done, and a unit holds every node of its paths."""
    roots = {fp.plan.chains[p.label][0] for i, p in enumerate(fp.paths)
             if existing.get(fp.child_key(i), ("", ""))[1] != "FINISHED"}
    return [unit for unit in fp.plan.units() if unit[0] in roots]


def _study_finished(plans: dict[int, FoldPlan], existing: dict[str, tuple[str, str]]) -> bool:
    """Whether every child of every fold of the study has a FINISHED run."""
    return all(existing.get(fp.child_key(i), ("", ""))[1] == "FINISHED"
               for fp in plans.values() for i in range(len(fp.children)))


def fold_results(cfg: Config, fold: int, data: str | None = None, with_model: bool = True) -> dict[str, PathResult]:
    """Every finished child path of a fold, read back from the checkpoints (path label -> result)."""
    _, ds, _ = _grid_data(cfg, data)
    fp = plan_fold(cfg, ds, fold)
    store = CheckpointStore(checkpoint_root(cfg))
    return {p.label: path_result(store, p.label, fp.plan.chains[p.label], with_model) for p in fp.paths}
