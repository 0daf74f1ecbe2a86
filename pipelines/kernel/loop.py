"""The boosting loop one worker runs over plan nodes: plain Python over numpy arrays, no Spark.

:mod:`pipelines.execution.barrier_job` calls :func:`run_nodes` inside each Spark barrier task with the rows
:mod:`pipelines.kernel.matrices` made (bin codes, XGBoost's matrix) and an
:class:`~pipelines.kernel.env.XgbComm`; tests call it with rows in memory and a
:class:`~pipelines.kernel.env.LocalComm` (one worker) as the local twin.

A node's trees are built in *segments* ending at every multiple of ``checkpoint_every`` and at the
node's last tree. Each segment is a fresh booster whose matrix carries the margins so far as
``base_margin``, so a segment resumed from a checkpoint builds the same trees, bit for bit, as the
uninterrupted run. After each segment every worker writes its margins and rank 0 commits the
segment's trees and the node's curve (:mod:`pipelines.store.checkpoints`); :mod:`pipelines.store.results`
assembles paths from them. Curves: NDCG@k on vali and test (:func:`udfs.metrics.ndcg_fast`) on
margins to which each new tree is added by walking bin codes (:mod:`udfs.trees`), summed over the
workers. Randomness never depends on node boundaries or the worker count: XGBoost's sampling is
seeded per global tree (``seed_per_iteration``), the noise of ``noisy_lambdamart`` per (tree, query,
document).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import numba
import numpy as np
import xgboost as xgb

from pipelines.kernel.cuts import cuts_of, reference_matrix
from pipelines.kernel.env import Comm, LocalComm, XgbComm, check_device, openmp_threads, returning_freed_memory
from pipelines.kernel.matrices import (
    DataError,
    SplitData,
    WorkerData,
    add_trees_to_rows,
    encode,
    margins_of_rows,
    matrix_cuts,
    representatives,
    training_matrix,
    walkable,
)
from pipelines.kernel.nodes import Node
from pipelines.kernel.selfpaced import Schedule, choose, is_dynamic, query_scores
from udfs.metrics import NdcgSpec, inverse_idcg, ndcg_fast, offsets_from_qids
from udfs.model import Model
from udfs.objectives import registry
from udfs.trees import add_tree, tree_arrays

__all__ = [
    "Settings",
    "SplitData",
    "WorkerData",
    "LocalComm",
    "XgbComm",
    "booster_params",
    "check_device",
    "matrix_order",
    "run_nodes",
]

log = logging.getLogger(__name__)


# ------------------------------------------------------------ what the loop is given
class Checkpoints(Protocol):
    """Where the loop reads and writes a node's checkpoints (:class:`pipelines.store.checkpoints.CheckpointStore`:
    storage is operations code, handed to the kernel as this object)."""

    def latest(self, key: str) -> int | None: ...
    def meta(self, key: str, tree: int) -> dict[str, Any]: ...
    def shards(self, key: str, tree: int) -> list[dict[str, np.ndarray]]: ...
    def write_shard(
        self, key: str, tree: int, rank: int, arrays: dict[str, np.ndarray], *, lease_token: str | None = None
    ) -> None: ...
    def write_segment(
        self, key: str, t_start: int, t_end: int, model: bytes, *, lease_token: str | None = None
    ) -> None: ...
    def commit(self, key: str, tree: int, meta: dict[str, Any], *, lease_token: str | None = None) -> None: ...


# ------------------------------------------------------------ settings
@dataclass(frozen=True, kw_only=True)
class Settings:
    """Everything a worker needs besides the data, built on the driver from the config's sections
    (:func:`pipelines.execution.barrier_job.make_settings`, :meth:`of`). It declares no setting of its own: what the
    trees, curves and checkpoints depend on is the config's model part and ``metric`` as the config has them."""

    model: Model  # the model part of the config's train: section (TrainConfig.model)
    metric: NdcgSpec  # the config's metric: section (the NDCG of the curves)
    labels: tuple[int, int]  # the dataset's smallest and largest label (score distributions per label)
    nthread: int  # XGBoost threads per worker, resolved (train.nthread, else the worker's share of the cores)
    checkpoint_every: int  # trees between two checkpoints (train.checkpoint_every: no tree depends on it)
    codes_in_memory_gib: float  # train.codes_in_memory_gib: bin codes beyond it go to a local file
    #: the schedule of each self-paced segment's data (``selfpaced.300``: rule and span) the plan trains
    #: (:func:`pipelines.plan.paths.paced_schedules`; its inputs are in the node's key)
    paced: Mapping[str, Schedule] = field(default_factory=dict)

    @classmethod
    def of(cls, train: Any, metric: NdcgSpec, labels: tuple[int, int], nthread: int) -> Settings:
        """The settings of a config's ``train:`` section (a :class:`pipelines.core.config.TrainConfig`: its model
        part, and the run values the loop needs)."""
        return cls(
            model=train.model,
            metric=metric,
            labels=labels,
            nthread=nthread,
            checkpoint_every=train.checkpoint_every,
            codes_in_memory_gib=train.codes_in_memory_gib,
        )

    def with_seed(self, offset: int) -> Settings:
        """These settings with ``offset`` added to ``train.seed``, the seed of the objectives' noise and of
        XGBoost's sampling (a plan node of a ``grid.seeds`` repetition); themselves for offset 0."""
        if not offset:
            return self
        return replace(self, model=replace(self.model, seed=self.model.seed + offset))

    @property
    def params(self) -> dict[str, Any]:
        """XGBoost booster params shared by every node: ``hist`` trees grown leaf-wise (``lossguide``, at most
        ``train.leaves`` leaves, no depth limit) with the config's learning rate, bins, regularisation,
        sampling, seed and device, on ``nthread`` threads."""
        t = self.model
        return {
            "tree_method": "hist",
            "grow_policy": "lossguide",
            "max_depth": 0,
            "max_leaves": t.leaves,
            "eta": t.eta,
            "max_bin": t.max_bin,
            "min_child_weight": t.min_child_weight,
            "lambda": t.reg_lambda,
            "subsample": t.subsample,
            "colsample_bytree": t.colsample_bytree,
            "seed": t.seed,
            "nthread": self.nthread,
            "device": t.device,
            "verbosity": 1,
        }

    @property
    def objectives(self) -> dict[str, Any]:
        """The training settings every Python objective's ``params`` holds (:func:`udfs.objectives.registry.shared`)."""
        return registry.shared(self.model, self.metric)


def booster_params(settings: Settings, objective: str) -> dict[str, Any]:
    """Params of one booster: built-in objectives get their XGBoost name and top-k settings."""
    p = dict(settings.params)
    builtin = registry.get(objective).builtin
    if builtin:
        p["objective"] = builtin
        if builtin.startswith("rank:"):
            p.update(
                lambdarank_pair_method="topk",
                lambdarank_num_pair_per_sample=settings.model.k,
                ndcg_exp_gain=settings.metric.gain == "exp2",
            )
    p["disable_default_eval_metric"] = 1
    p["seed_per_iteration"] = True  # sampling seeded by the global tree index, not the booster's age
    return p


# ------------------------------------------------------------ states
@dataclass
class _State:
    """A node's margins (this worker's rows) and history after global tree ``tree``."""

    tree: int
    train: np.ndarray
    vali: np.ndarray | None
    test: np.ndarray | None
    base: float  # the path's starting score
    segments: list[list[int]] = field(default_factory=list)  # [t_start, t_end] of the node's committed segments
    curve: list[list[float]] = field(default_factory=list)  # the node's (tree, vali, test) points
    dists: list[dict[str, Any]] = field(default_factory=list)  # the node's score distributions
    rows: int = 0  # training rows of the node (all workers)
    # this worker's seconds spent on the node's trees so far, resumed attempts included: boost, objective,
    # eval (curves), checkpoint (model, margins, shards; not the commit of the meta that records it), trees
    cost: dict[str, float] = field(default_factory=dict)
    # a self-paced node's selections so far: [tree, share, queries kept, queries chosen among] (all workers)
    selections: list[list[float]] = field(default_factory=list)


Events = Callable[[dict[str, Any]], None]


def _no_events(_: dict[str, Any]) -> None:
    return None


# ------------------------------------------------------------ the loop
class _Worker:
    def __init__(
        self,
        data: WorkerData,
        settings: Settings,
        comm: Comm,
        store: Checkpoints,
        events: Events,
        ref: Any = None,
        lease_token: str | None = None,
    ) -> None:
        self.s, self.comm, self.store, self.events = settings, comm, store, events
        self.lease_token = lease_token
        check_device(settings.model.device)
        nthread = settings.nthread
        if nthread:  # before any XGBoost work: the quantile sketch below is multithreaded too
            openmp_threads(nthread)
            numba.set_num_threads(max(1, min(nthread, numba.config.NUMBA_NUM_THREADS)))
        t0 = time.perf_counter()
        max_bin = settings.model.max_bin
        if ref is None:
            if comm.world > 1:
                raise RuntimeError(
                    "workers of one job need the fold's global cuts (pipelines.store.cuts): without them "
                    "each worker's sketch, and so the trees, would depend on the number of workers"
                )
            if data.train.X is None:
                raise ValueError("rows handed as bin codes need the reference matrix of the cuts they were coded on")
            # one worker with its rows in memory (the local twin): the cuts of all its training rows
            ref = reference_matrix(cuts_of(data.train.X, max_bin, nthread=nthread), nthread)
        self.ref, self.max_bin, self.nthread = ref, max_bin, nthread
        self.cuts = matrix_cuts(ref)  # the fold's cuts: every split of every tree is one of them
        self.reps = representatives(self.cuts)
        self.data = data = encode(data, self.cuts)  # rows in memory become codes; streamed rows already are
        # One training matrix at a time (built when a node first needs it): (data, matrix, rows, offsets, complement)
        self._matrix: tuple[str, Any, np.ndarray | None, np.ndarray, np.ndarray | None] | None = None
        # Eval margins are accumulated here, one new tree at a time, by walking codes (udfs.trees): no eval DMatrix.
        self.evals = {name: sp for name, sp in (("vali", data.vali), ("test", data.test)) if sp is not None}
        self.inv_idcg = {name: inverse_idcg(sp.offsets, sp.y, settings.metric) for name, sp in self.evals.items()}
        self.n_queries = {
            name: float(comm.allreduce(np.array([sp.n_queries], np.float64), "sum")[0])
            for name, sp in self.evals.items()
        }
        # A split no worker holds (a dataset without vali or test) has no curve: NaN points, nothing logged.
        self.evals = {name: sp for name, sp in self.evals.items() if self.n_queries[name] > 0}
        self.timing = {
            "dmatrix": time.perf_counter() - t0,
            "matrices": 0,
            "objective": 0.0,
            "boost": 0.0,
            "eval": 0.0,
            "checkpoint": 0.0,
            "resume": 0.0,
            "trees": 0,
        }

    # -- helpers -------------------------------------------------------
    def base_for(self, node: Node) -> float:
        """The base margin of a root node: 0 for ranking objectives (``auto``, ``zero``), the global mean label
        over every worker's train rows for regression (``auto``, ``mean``), or the number given
        (``train.base_margin``, checked by :class:`pipelines.core.config.TrainConfig`)."""
        mode = self.s.model.base_margin
        if mode == "zero" or (mode == "auto" and not registry.get(node.objective).regression):
            return 0.0
        if mode in ("mean", "auto"):
            y = self.data.train.y
            tot = self.comm.allreduce(np.array([float(y.sum()), float(y.size)]), "sum")
            return float(tot[0] / max(tot[1], 1.0))
        return float(mode)

    def mean_ndcg(self, name: str, margins: np.ndarray) -> float:
        """Mean NDCG of split ``name`` over every worker's queries (an allreduce), NaN for a split without queries."""
        sp = self.evals[name]
        local = float(ndcg_fast(sp.offsets, sp.y, margins, self.s.metric, self.inv_idcg[name]).sum())
        total = self.comm.allreduce(np.array([local]), "sum")[0]
        return float(total / self.n_queries[name]) if self.n_queries[name] else float("nan")

    def score_dist(self, tree: int, margins: np.ndarray) -> dict[str, Any]:
        """Histograms of test margins per label (global range, all workers)."""
        test = self.data.test
        if test is None:
            raise DataError("score distributions need this worker's test rows; it has none")
        y = test.y
        lo_hi = self.comm.allreduce(np.array([-margins.min(initial=np.inf), margins.max(initial=-np.inf)]), "max")
        lo, hi = -lo_hi[0], lo_hi[1]
        if not np.isfinite(lo) or hi <= lo:
            lo, hi = (lo if np.isfinite(lo) else 0.0), (lo if np.isfinite(lo) else 0.0) + 1.0
        edges = np.linspace(lo, hi, self.s.model.score_dist_bins + 1)
        labels = list(range(self.s.labels[0], self.s.labels[1] + 1))
        hist = np.stack([np.histogram(margins[y == lab], bins=edges)[0] for lab in labels]).astype(np.float64)
        hist = self.comm.allreduce(hist, "sum")
        return {"tree": tree, "edges": edges.tolist(), "labels": labels, "counts": hist.astype(np.int64).tolist()}

    def training_matrix(
        self, data: str, chosen: np.ndarray | None = None
    ) -> tuple[Any, np.ndarray | None, np.ndarray, np.ndarray, np.ndarray | None]:
        """(DMatrix, rows or None, labels, offsets, complement rows) of a node's data (``all`` or a subset), or of
        the rows ``chosen`` by a self-paced selection (``data`` then names the selection).

        Only the last one is kept: the previous matrix is freed before the next is built, so a worker
        never holds the full matrix beside a subset's (:func:`matrix_order` keeps the switches few).
        """
        tr = self.data.train
        if self._matrix is None or self._matrix[0] != data:
            t0 = time.perf_counter()
            with returning_freed_memory():  # the build's buffers leave the process; the loop's stay
                self._matrix = None  # freed before the next one is built
                rows = self.data.rows(data) if chosen is None else chosen
                if rows is None:
                    dm = training_matrix(tr, self.ref, self.max_bin, self.nthread, reps=self.reps)
                    self._matrix = (data, dm, None, tr.offsets, None)
                else:
                    dm = training_matrix(tr, self.ref, self.max_bin, self.nthread, rows=rows, reps=self.reps)
                    comp = np.setdiff1d(np.arange(tr.y.size), rows, assume_unique=True).astype(np.int64)
                    self._matrix = (data, dm, rows, offsets_from_qids(tr.qid[rows]), comp)
            self.timing["dmatrix"] += time.perf_counter() - t0
            self.timing["matrices"] += 1
        _, dm, subset, offsets, complement = self._matrix
        return dm, subset, (tr.y if subset is None else tr.y[subset]), offsets, complement

    # -- checkpoints -----------------------------------------------------
    def agreed_latest(self, key: str) -> int:
        """The newest committed checkpoint of a node (-1: none), the same on every worker."""
        k = self.store.latest(key)
        k = -1 if k is None else k
        both = self.comm.allreduce(np.array([k, -k], np.float64), "max")
        if both[0] != -both[1]:
            raise RuntimeError(
                f"workers see different checkpoints of node {key} ({int(-both[1])}..{int(both[0])}): "
                "is the checkpoint directory on storage every executor reaches?"
            )
        return int(both[0])

    def load(self, node: Node, tree: int) -> _State:
        """This worker's state of ``node`` at checkpoint ``tree``: margins from its shard, the rest from the meta."""
        t0 = time.perf_counter()
        meta = self.store.meta(node.key, tree)
        shards = self.store.shards(node.key, tree)
        d = self.data
        st = _State(
            tree,
            margins_of_rows(shards, "train", d.train.qid),
            None if d.vali is None else margins_of_rows(shards, "vali", d.vali.qid),
            None if d.test is None else margins_of_rows(shards, "test", d.test.qid),
            float(meta["base"]),
            meta["segments"],
            meta["curve"],
            meta["dists"],
            int(meta["rows"]),
            dict(meta.get("cost", {})),
            list(meta.get("selections", [])),
        )
        self.timing["resume"] += time.perf_counter() - t0
        return st

    def save(self, node: Node, st: _State, model: bytes, seg: list[int]) -> None:
        """Shards of every worker, then rank 0 commits the segment's trees and the meta."""
        t0 = time.perf_counter()
        arrays: dict[str, np.ndarray] = {"train_qid": self.data.train.qid, "train_margin": st.train}
        for name, sp in self.evals.items():
            arrays[f"{name}_qid"] = sp.qid
            arrays[f"{name}_margin"] = getattr(st, name)
        if st.tree == node.t1 and node.ends and "test" in self.evals:
            sp = self.evals["test"]
            arrays["test_query"] = sp.qid[sp.offsets[:-1]].astype(np.int32)
            test_margin = st.test
            if test_margin is None:
                raise DataError(f"node {node.key}: no test margins at its end although the worker holds test rows")
            arrays["test_ndcg"] = ndcg_fast(sp.offsets, sp.y, test_margin, self.s.metric, self.inv_idcg["test"])
            # relevant documents per query (label > 0): the report leaves out of its paired statistics the
            # queries with none, which every system scores metric.empty on
            arrays["test_relevant"] = np.add.reduceat((sp.y > 0).astype(np.int32), sp.offsets[:-1])
            # each document's position in its query and label, beside test_margin: the report's TREC run
            # and qrels files (docno = the position, the order metric.ties=input breaks ties by)
            arrays["test_doc"] = np.asarray(sp.doc, np.int32)
            arrays["test_label"] = np.asarray(sp.y, np.int8)
        self.store.write_shard(node.key, st.tree, self.comm.rank, arrays, lease_token=self.lease_token)
        self.comm.allreduce(np.zeros(1), "sum")  # every shard is written before the commit
        st.cost["checkpoint"] = st.cost.get("checkpoint", 0.0) + time.perf_counter() - t0
        if self.comm.rank == 0:
            self.store.write_segment(node.key, seg[0], seg[1], model, lease_token=self.lease_token)
            self.store.commit(
                node.key,
                st.tree,
                {
                    "node": {
                        "key": node.key,
                        "parent": node.parent,
                        "objective": node.objective,
                        "data": node.data,
                        "t0": node.t0,
                        "t1": node.t1,
                        "ends": list(node.ends),
                        **({"seed": node.seed} if node.seed else {}),  # as the plan writes it
                    },
                    "shards": self.comm.world,
                    "base": st.base,
                    "segments": st.segments,
                    "curve": st.curve,
                    "dists": st.dists,
                    "rows": st.rows,
                    "done": st.tree == node.t1,
                    "cost": st.cost,
                    **({"selections": st.selections} if st.selections else {}),
                    "conventions": {"k": self.s.model.k, "gain": self.s.metric.gain},
                },
                lease_token=self.lease_token,
            )
        self.timing["checkpoint"] += time.perf_counter() - t0

    # -- running nodes ---------------------------------------------------
    def start_state(self, node: Node, parent: _State | None) -> _State:
        """The state a node starts from: its newest checkpoint, else its parent's output, else the base score."""
        k = self.agreed_latest(node.key)
        if k >= node.t0 + 1:
            log.info("node %s (%s): continuing from its checkpoint at tree %d", node.key, node.describe(), k)
            return self.load(node, k)
        if parent is None and node.parent is not None:
            pk = self.agreed_latest(node.parent)
            if pk < 0:
                raise RuntimeError(f"node {node.key} ({node.describe()}): its parent {node.parent} has no output")
            parent = self.load_parent(node.parent, pk)
        if parent is not None:
            return _State(
                node.t0,
                parent.train.copy(),
                None if parent.vali is None else parent.vali.copy(),
                None if parent.test is None else parent.test.copy(),
                parent.base,
            )
        tr, base = self.data.train, self.base_for(node)
        return _State(
            0,
            np.full(tr.y.size, base, np.float32),
            None if self.data.vali is None else np.full(self.data.vali.y.size, base, np.float32),
            None if self.data.test is None else np.full(self.data.test.y.size, base, np.float32),
            base,
        )

    def load_parent(self, key: str, tree: int) -> _State:
        """The state a child node starts from: its parent ``key``'s finished checkpoint.

        Raises
        ------
        RuntimeError
            The parent's checkpoint at ``tree`` is not its last tree.
        """
        meta = self.store.meta(key, tree)
        node = Node(**{**meta["node"], "ends": tuple(meta["node"]["ends"])})
        if tree != node.t1:
            raise RuntimeError(f"node {key} is not finished (checkpoint at tree {tree} of {node.t1})")
        return self.load(node, tree)

    def schedule(self, node: Node) -> Schedule | None:
        """The self-paced schedule of ``node``'s data (None for a static one)."""
        if not is_dynamic(node.data):
            return None
        paced = self.s.paced.get(node.data)
        span = int(node.data.split(".")[1])
        if paced is None or span != node.trees:  # the plan keeps a dynamic segment in one node of its own
            raise RuntimeError(f"node {node.key} ({node.describe()}): no self-paced schedule for {node.data} "
                               f"of {node.trees} trees (schedules: {sorted(self.s.paced)})")  # fmt: skip
        return paced

    def select(self, node: Node, st: _State, paced: Schedule, seed: int) -> tuple[np.ndarray | None, list[float]]:
        """The training rows of this worker that ``node``'s selection at ``st.tree`` keeps (None: all of them),
        and its record: [tree, share, queries kept, queries chosen among] over every worker. Each worker scores its
        own queries by the margins it holds; the qids and scores of all are gathered, and every worker makes the
        same choice (:func:`pipelines.kernel.selfpaced.choose`)."""
        t0 = time.perf_counter()
        tr = self.data.train
        # at a path's first tree every document has the base score: no judgement to choose by (the NDCG of the
        # documents' tie order would be an oracle: it grows with the share of relevant documents), so all are kept
        share = 1.0 if st.tree == 0 else paced.share_at(node.t0, st.tree)
        ease, _ = query_scores(st.train, tr.y, tr.offsets, paced.by, self.s.metric)
        qids = tr.qid[tr.offsets[:-1]].astype(np.int64)
        parts = self.comm.gather((qids, ease))
        all_q = np.concatenate([p[0] for p in parts])
        all_e = np.concatenate([p[1] for p in parts])
        rule = node.data.split(".")[0]
        kept = choose(all_q, all_e, share, rule, seed, st.tree)
        among = int(np.count_nonzero(~np.isnan(all_e)))
        record = [st.tree, share, int(kept.size - (all_q.size - among)), among]
        self.timing["select"] = self.timing.get("select", 0.0) + time.perf_counter() - t0
        if kept.size == all_q.size:
            return None, record
        mine = np.isin(qids, kept)
        return np.flatnonzero(np.repeat(mine, np.diff(tr.offsets))).astype(np.int64), record

    def run_node(self, node: Node, parent: _State | None) -> _State:
        """Train ``node`` from its latest checkpoint (or ``parent``'s state, or a fresh root) to its last tree,
        checkpointing every ``train.checkpoint_every`` trees and sending progress events; returns the final state."""
        st = self.start_state(node, parent)
        if st.tree < node.t1:
            self.events({"ev": "node_start", "node": node.key, "tree": st.tree})
        every = self.s.checkpoint_every
        paced = self.schedule(node)
        while st.tree < node.t1:
            if paced is None:
                end = min(node.t1, (st.tree // every + 1) * every)
            else:  # a self-paced node checkpoints at each selection: a resumed one starts where a choice was made
                end = min(node.t1, node.t0 + ((st.tree - node.t0) // paced.every + 1) * paced.every)
            st = self.segment(node, st, end)
            self.events({"ev": "checkpoint", "node": node.key, "tree": st.tree, "curve": st.curve})
        return st

    def segment(self, node: Node, st: _State, end: int) -> _State:
        """Trees ``st.tree..end`` of ``node`` with a fresh booster on the margins so far; then a checkpoint."""
        s = self.s.with_seed(node.seed)
        paced = self.schedule(node)
        if paced is None:
            dtrain, rows, y, offsets, comp = self.training_matrix(node.data)
        else:
            chosen, record = self.select(node, st, paced, paced.seed + node.seed)
            st = replace(st, selections=[*st.selections, record])
            name = "all" if chosen is None else f"{node.key}@{st.tree}"
            dtrain, rows, y, offsets, comp = self.training_matrix(name, chosen)
        dtrain.set_base_margin(st.train if rows is None else st.train[rows])
        ev = {name: np.array(getattr(st, name), dtype=np.float32) for name in self.evals}  # own copies
        booster = xgb.Booster(booster_params(s, node.objective), [dtrain])
        spec = registry.get(node.objective)
        builtin = spec.builtin is not None
        tr = self.data.train
        obj = (
            None
            if spec.fn is None
            else spec.make(
                s.objectives,
                y,
                offsets,
                tr.qid if rows is None else tr.qid[rows],
                tr.docs if rows is None else tr.docs[rows],
            )
        )
        rows_total = st.rows or int(self.comm.allreduce(np.array([float(dtrain.num_row())]), "sum")[0])
        curve, dists, trees = list(st.curve), list(st.dists), []
        before = dict(self.timing)
        for t in range(st.tree, end):  # t: global index of the tree being built
            i = t - st.tree
            if builtin:
                t0 = time.perf_counter()
                booster.update(dtrain, t)
                self.timing["boost"] += time.perf_counter() - t0
            else:
                t0 = time.perf_counter()
                margins = booster.predict(dtrain, output_margin=True, training=True)
                grad, hess = obj(margins, t)  # type: ignore[misc]
                t1 = time.perf_counter()
                booster.boost(dtrain, t, grad=grad, hess=hess)
                self.timing["objective"] += t1 - t0
                self.timing["boost"] += time.perf_counter() - t1
            self.timing["trees"] += 1
            done = t + 1
            t0 = time.perf_counter()
            tree = walkable(tree_arrays(booster, i, self.cuts), t)
            trees.append(tree)
            for name, sp in self.evals.items():
                add_tree(sp.coded(), tree, ev[name], codes=sp.coded())
            if self.evals and (done % s.model.eval_every == 0 or done == node.t1 or done in s.model.score_dist_trees):
                curve.append(
                    [
                        done,
                        self.mean_ndcg("vali", ev["vali"]) if "vali" in ev else float("nan"),
                        self.mean_ndcg("test", ev["test"]) if "test" in ev else float("nan"),
                    ]
                )
                if done in s.model.score_dist_trees and "test" in ev:
                    dists.append(self.score_dist(done, ev["test"]))
            self.timing["eval"] += time.perf_counter() - t0
            self.events({"ev": "tree", "node": node.key, "tree": done})
        t0 = time.perf_counter()
        model = bytes(booster.save_raw("json"))
        if rows is None:
            train = np.asarray(booster.predict(dtrain, output_margin=True), np.float32)  # XGBoost's cache
        else:  # the subset's rows from the cache; the others see the segment's trees for the first time
            train = st.train.copy()
            train[rows] = booster.predict(dtrain, output_margin=True)
            if comp is None:
                raise RuntimeError("a subset's matrix without its complement rows")
            add_trees_to_rows(self.data.train.codes_or_file(), trees, train, comp)
        del booster  # before the next segment resets the DMatrix's base margin
        self.timing["checkpoint"] += time.perf_counter() - t0
        cost = {
            k: st.cost.get(k, 0.0) + self.timing[k] - before[k]
            for k in ("boost", "objective", "eval", "checkpoint", "trees")
        }
        nxt = _State(
            end,
            train,
            ev.get("vali"),
            ev.get("test"),
            st.base,
            [*st.segments, [st.tree, end]],
            curve,
            dists,
            rows_total,
            cost,
            st.selections,
        )
        self.save(node, nxt, model, [st.tree, end])
        return nxt


def run_nodes(
    data: WorkerData,
    nodes: Iterable[Node],
    settings: Settings,
    store: Checkpoints,
    comm: Comm | None = None,
    events: Events | None = None,
    ref: Any = None,
    lease_token: str | None = None,
) -> dict[str, float]:
    """Run ``nodes`` (plan order: a node's parent is done or comes earlier) on this worker's data.

    ``ref``: a matrix holding the fold's global cuts (:func:`pipelines.store.cuts.reference_matrix`, built
    before joining the collective); required with more than one worker. Without it a single worker
    sketches its own rows (the local twin of a fold whose cuts sample is the whole training split).
    ``lease_token``: rank 0 commits checkpoints only while the node's lease is this token (None: no check).

    The nodes run in :func:`matrix_order` (same trees, fewer training matrices built). Each node
    continues from its newest checkpoint, else from its parent's output (kept in memory when the
    parent ran in this call, else read from the store). Outputs go to ``store``; returns the
    worker's timings (``dmatrix``: seconds spent building matrices, ``matrices``: how many).
    """
    nodes = matrix_order(list(nodes))
    w = _Worker(data, settings, comm or LocalComm(), store, events or _no_events, ref, lease_token)
    outputs: dict[str, _State] = {}
    waiting = {n.key: sum(1 for c in nodes if c.parent == n.key) for n in nodes}
    for node in nodes:
        parent = outputs.get(node.parent) if node.parent else None
        st = w.run_node(node, parent)
        if node.parent in outputs:
            waiting[node.parent] -= 1
            if waiting[node.parent] == 0:
                del outputs[node.parent]
        if waiting[node.key]:
            outputs[node.key] = st
    return w.timing


def matrix_order(nodes: list[Node]) -> list[Node]:
    """``nodes`` (plan order) reordered, parents still first, so that nodes on the same data follow each
    other wherever the plan allows: the worker then builds each training matrix once per such run.

    Greedy: the next node is the first ready one (its parent done or not among ``nodes``) on the data
    of the node before it, else the first ready one. A curriculum's unit then trains its subset chain
    (``lambdamart@q.0`` at every switch point) before the full-data continuations that hang off it,
    instead of alternating subset and full matrix at each switch point. The order changes no tree:
    a node's trees depend only on its parent's output.
    """
    keys = {n.key for n in nodes}
    done: set[str] = set()
    left, out = list(nodes), list[Node]()
    while left:
        ready = [n for n in left if n.parent not in keys or n.parent in done]
        if not ready:
            raise ValueError(f"node {left[0].key}: its parent {left[0].parent} never becomes ready (a cycle)")
        data = out[-1].data if out else None
        nxt = next((n for n in ready if n.data == data), ready[0])
        out.append(nxt)
        done.add(nxt.key)
        left.remove(nxt)
    return out
