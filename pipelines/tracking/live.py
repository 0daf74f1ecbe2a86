"""A study's MLflow child runs while it trains: made once, streamed to, finished by their owner.

Every child run of the folds set up is made once, SCHEDULED, before anything trains (by
:func:`pipelines.app.grid.run_grid` under :func:`children_lock`); it turns RUNNING when the first of its
nodes starts, its NDCG curves are logged as metric history at every checkpoint, and it ends
FINISHED with its model and artifacts, or FAILED with the error. Only the process that trains a
child's last node opens and finishes it (units of one study run at once, in other processes).
"""

from __future__ import annotations

import json
import math
import os
import threading
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from pipelines.core.keys import code_identity
from pipelines.core.plots import png_bytes, pyplot
from pipelines.core.provenance import code_version
from pipelines.core.secrets import redact
from pipelines.kernel.selfpaced import is_dynamic
from pipelines.plan.paths import TrainingPath
from pipelines.plan.trie import DONE, states_of
from pipelines.plugins.loading import plugin_tags
from pipelines.store.checkpoints import CheckpointStore
from pipelines.store.lease import hold
from pipelines.store.results import PathResult, path_result, scores_npz, selections
from pipelines.study.design import Child, FoldPlan
from pipelines.tracking.runs import (
    TAG_CHILD_KEY,
    TAG_FOLD,
    TAG_KIND,
    TAG_PARENT,
    TAG_PATH,
    TAG_SEED,
    TAG_STRATEGY,
    TAG_SWITCH,
    Tracker,
)

if TYPE_CHECKING:  # types only (the training side is not imported by the MLflow side)
    from pipelines.core.config import Config
    from pipelines.data.curricula import Curriculum
    from pipelines.data.dataset import Dataset


#: Seconds a process waits for another's :func:`children_lock` (making a study's runs, finishing one run).
CHILDREN_LOCK_WAIT = 600.0


def children_lock(store: CheckpointStore, name: str):
    """A lock shared by every process of a study, whatever the tracking store: a lease
    (:mod:`pipelines.store.lease`) at ``<checkpoints>/_runs/<name>/``. The checkpoint store is the one place every
    training process of a study reaches by construction; MLflow has no find-or-create and a tracking
    server no lock, so this lease is what makes "look up the run, create or finish it" one step."""
    return hold(
        store,
        [store.runs_lock(name)],
        f"mlflow runs of {name} (pid {os.getpid()})",
        ttl=60.0,
        wait=CHILDREN_LOCK_WAIT,
        poll=0.05,
    )


@dataclass
class _Live:
    child: Child
    path: TrainingPath
    key: str
    run_id: str = ""
    # last curve step logged, per split: a run killed between the two splits' batches has logged more vali
    # than test points, so one mark for both would leave test points out when the run is continued
    logged: dict[str, int] = field(default_factory=dict)
    finished: bool = False


@dataclass
class LiveChildren:
    """The child runs of one fold: created when their first node starts, curves streamed at checkpoints."""

    tracker: Tracker
    parent: str
    fold_plan: FoldPlan
    store: CheckpointStore
    cfg: Config
    data: str
    ds: Dataset
    curricula: dict[str, Curriculum]
    existing: dict[str, tuple[str, str]]  # child key -> (run id, status) of runs from earlier attempts
    # node keys this process trains (None: the whole fold); it owns the children whose last node is one of them
    only: set[str] | None = None
    entries: list[_Live] = field(default_factory=list)

    def __post_init__(self) -> None:
        fp = self.fold_plan
        self.entries = [_Live(c, p, fp.child_key(i)) for i, (c, p) in enumerate(zip(fp.children, fp.paths))]
        # events arrive on the event server's threads, and may still arrive while finish_done runs on the
        # main thread: the check of what is logged and the logging are one step (else points are logged twice)
        self._lock = threading.RLock()
        self.by_node: dict[str, list[_Live]] = {}
        for e in self.owned():
            for key in fp.plan.chains[e.path.label]:
                self.by_node.setdefault(key, []).append(e)

    def owned(self) -> list[_Live]:
        """The children this process may open, log to and finish: those whose last node it trains. A path
        lies within one unit of the plan, so every child has exactly one owning unit (``--unit``), and one
        owning process at a time (the node leases); other processes never touch its run."""
        chains = self.fold_plan.plan.chains
        return [e for e in self.entries if self.only is None or chains[e.path.label][-1] in self.only]

    def create_missing(self) -> int:
        """Create a SCHEDULED run for every child of the fold that has none (call under
        :func:`children_lock`): the children of a study are made once, before anything trains, by the
        process that sets it up, so that no two processes ever make runs of one child. Returns how many."""
        n = 0
        for e in self.entries:
            if e.key not in self.existing:
                self._create(e)
                n += 1
        return n

    @property
    def metric(self) -> str:
        """The metric's name in MLflow keys (``ndcg_at_10``)."""
        return self.cfg.metric.name

    def todo(self) -> list[_Live]:
        """Owned children without a FINISHED run."""
        return [e for e in self.owned() if self.existing.get(e.key, ("", ""))[1] != "FINISHED"]

    def _create(self, e: _Live) -> None:
        t, c = self.tracker, e.child
        run = t.client.create_run(
            t.experiment_id,
            run_name=c.name,
            tags={
                TAG_KIND: "child",
                TAG_PARENT: self.parent,
                TAG_CHILD_KEY: e.key,
                TAG_STRATEGY: c.strategy,
                TAG_SWITCH: "" if c.switch is None else str(c.switch),
                **({TAG_SEED: str(c.seed)} if c.seed else {}),
                TAG_FOLD: str(c.fold),
                TAG_PATH: e.path.shorthand(),
                "mlflow.source.git.commit": code_version()["git"].split("-")[0],
                **plugin_tags(self._components(e)),
            },
        )
        run_id = run.info.run_id
        t.log_params(run_id, self._params(e))
        t.log_dataset(run_id, self.data, os.path.basename(self.data.rstrip("/")), self.ds.fingerprint, f"fold{c.fold}")
        t.client.update_run(run_id, status="SCHEDULED")
        self.existing[e.key] = (run_id, "SCHEDULED")

    def start(self, e: _Live) -> None:
        """Continue the child's run (made SCHEDULED by :meth:`create_missing`, or left RUNNING by a killed
        attempt: the same run id) as RUNNING, and log the points of its nodes already done."""
        t = self.tracker
        e.run_id = self.existing[e.key][0]  # run_grid made every child's run before training
        t.client.update_run(e.run_id, status="RUNNING")
        e.logged = {
            split: max((m.step for m in t.client.get_metric_history(e.run_id, f"{self.metric}_{split}")), default=0)
            for split in ("vali", "test")
        }
        plan = self.fold_plan.plan
        for key in plan.chains[e.path.label]:  # the chain's finished nodes only: no listing of the whole plan
            k = self.store.latest(key)
            if k is None or k < plan.node(key).t1:
                break
            self._log_points(e, self.store.meta(key, k)["curve"])

    def _components(self, e: _Live) -> list[str]:
        """The components a child's path uses: its objectives, its curricula's difficulty scores and pacing."""
        from pipelines.study.design import curriculum_config
        from udfs.curriculum import STRATEGIES

        names = [s.objective for s in e.path.segments]
        for cur in e.path.curricula:
            c = curriculum_config(self.cfg, cur)
            names += [str(STRATEGIES[c.strategy].score or ""), c.pacing]
        return [n for n in names if n]

    def _params(self, e: _Live) -> dict[str, Any]:
        c, cfg = e.child, self.cfg
        params = {
            "path": e.path.shorthand(),
            "fold": c.fold,
            "strategy": c.strategy,
            "switch_point": c.switch,
            "seed_repetition": c.seed,
            "trees": e.path.trees,
            "data": self.data,
            "data_fingerprint": self.ds.fingerprint,
            "metric": cfg.metric.describe(),
            **{f"metric.{k}": v for k, v in cfg.metric.to_dict().items()},
            **{f"train.{k}": v for k, v in asdict(cfg.train).items() if k != "path"},
            **{f"code.{k}": v for k, v in {**code_version(), **code_identity()}.items()},
            "plan_nodes": ",".join(self.fold_plan.plan.chains[e.path.label]),
        }
        taught = [n for n in e.path.curricula if self.curricula[n].summary.get("teacher")]
        if taught:  # a teacher-based curriculum: what its teachers cost, stated beside the result (the report's)
            fp = self.fold_plan
            params["teacher.path"], params["teacher.crossfit"] = cfg.teacher.path, cfg.teacher.crossfit
            params["teacher_trees"] = sum(fp.plan.node(k).trees for p in fp.teachers for k in fp.plan.chains[p.label])
        if any(is_dynamic(sg.data) for sg in e.path.segments):  # a self-paced segment: its rule's settings
            params.update({f"selfpaced.{k}": v for k, v in asdict(cfg.selfpaced).items()})
        for n in e.path.curricula:
            s = self.curricula[n].summary
            params[f"curriculum.{n}"] = json.dumps(
                {k: s.get(k) for k in ("strategy", "pacing", "fraction", "delta", "n_stages", "seed", "empty_queries")},
                sort_keys=True,
            )
        return params

    def _log_points(self, e: _Live, curve: list[list[float]]) -> None:
        with self._lock:
            self._log_new_points(e, curve)

    def _log_new_points(self, e: _Live, curve: list[list[float]]) -> None:
        for col, split in ((1, "vali"), (2, "test")):  # a split the dataset lacks has NaN points: not logged
            new = [p for p in curve if int(p[0]) > e.logged.get(split, 0)]
            if not new:
                continue
            pts = [(int(p[0]), float(p[col])) for p in new if math.isfinite(p[col])]
            if pts:
                self.tracker.log_history(e.run_id, f"{self.metric}_{split}", [a for a, _ in pts], [b for _, b in pts])
            e.logged[split] = int(new[-1][0])

    def on_event(self, ev: dict[str, Any]) -> None:
        """Executor events (one at a time): start the children of a starting node, stream its curve."""
        kind = ev.get("ev")
        if kind not in ("node_start", "checkpoint"):
            return
        with self._lock:
            self._on_event(kind, ev)

    def _on_event(self, kind: str, ev: dict[str, Any]) -> None:
        for e in self.by_node.get(ev["node"], []):
            if e.finished or self.existing.get(e.key, ("", ""))[1] == "FINISHED":
                continue
            if not e.run_id:
                self.start(e)
            if kind == "checkpoint":
                self._log_points(e, ev["curve"])

    def finish_done(self) -> int:
        """Log and finish every child whose nodes are all done; returns how many."""
        states = states_of(self.fold_plan.plan, self.store)
        n = 0
        for e in self.todo():
            if e.finished or any(states[k].state != DONE for k in self.fold_plan.plan.chains[e.path.label]):
                continue
            if not e.run_id:
                self.start(e)
            # one finisher per child, even where two processes own it in turn (a retry started while the
            # first attempt was finishing): the run's status is read again under the child's lock
            with self._lock, children_lock(self.store, e.run_id):
                if self.tracker.client.get_run(e.run_id).info.status == "FINISHED":
                    e.finished = True
                    self.existing[e.key] = (e.run_id, "FINISHED")
                    continue
                r = path_result(
                    self.store,
                    e.path.label,
                    self.fold_plan.plan.chains[e.path.label],
                    with_model=self.cfg.grid.log_models,
                )
                self._finish(e, r)
            n += 1
        return n

    def _finish(self, e: _Live, r: PathResult) -> None:
        t, m = self.tracker, self.metric
        self._log_points(e, [[a, b, c] for a, b, c in zip(r.trees, r.vali, r.test, strict=True)])
        final: dict[str, float] = {"trees": float(e.path.trees)}
        for split, curve in (("vali", r.vali), ("test", r.test)):
            if curve and math.isfinite(curve[-1]):
                final[f"final_{m}_{split}"] = curve[-1]
        t.log_metrics(e.run_id, final)
        t.log_text(
            e.run_id,
            json.dumps({"qid": r.test_qid, m: r.test_ndcg, "relevant": r.test_relevant}),
            "per_query_test.json",
        )
        if r.test_scores is not None:  # every test document's final score: the report's TREC run files
            t.log_text(e.run_id, scores_npz(r.test_scores), "test_scores.npz")
        chosen = selections(self.store, self.fold_plan.plan, self.fold_plan.plan.chains[e.path.label])
        points = [p for ps in chosen.values() for p in ps]
        if points:  # a self-paced segment's choices: the share and the queries kept at each selection, step = tree
            steps = [int(p[0]) for p in points]
            t.log_history(e.run_id, "selfpaced_share", steps, [float(p[1]) for p in points])
            t.log_history(e.run_id, "selfpaced_queries", steps, [float(p[2]) for p in points])
        t.log_text(
            e.run_id,
            json.dumps(
                {
                    "runs": r.runs,
                    "score_dists": r.score_dists,
                    "base_margin": r.base_margin,
                    **({"selections": chosen} if chosen else {}),
                },
                indent=1,
            ),  # fmt: skip
            "training.json",
        )
        t.log_text(e.run_id, _curve_png(e.child.name, r, m), "curve.png")
        # how many workers built the trees (train.workers=0 is "auto"): the count of each node's last
        # segment; several counts where a node resumed on a cluster of another size (same trees: global cuts)
        t.client.set_tag(e.run_id, "ltr.workers", ",".join(str(w) for w in dict.fromkeys(r.workers)))
        if self.cfg.grid.log_models:
            t.log_model(e.run_id, r.model)
        t.finish(e.run_id)
        e.finished = True
        self.existing[e.key] = (e.run_id, "FINISHED")

    def fail_started(self, error: str) -> None:
        """Mark every owned child run that started and did not finish FAILED, ``error`` as its ``ltr.error`` tag."""
        for e in self.owned():
            if e.run_id and not e.finished:
                self.tracker.client.set_tag(e.run_id, "ltr.error", redact(error)[:5000])
                self.tracker.finish(e.run_id, "FAILED")


# ------------------------------------------------------------ the grid


def _curve_png(title: str, r: PathResult, metric: str) -> bytes:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot(r.trees, r.vali, label="vali")
    ax.plot(r.trees, r.test, label="test")
    for run in r.runs[1:]:
        ax.axvline(run["first_tree"], color="grey", lw=0.8, ls="--")
    ax.set_xlabel("trees")
    ax.set_ylabel(metric.replace("_at_", "@").upper())
    ax.set_title(title)
    ax.legend()
    data = png_bytes(fig)
    plt.close(fig)
    return data
