"""The training loop one worker runs: plain Python over numpy arrays, no Spark.

:mod:`pipelines.train` calls :func:`train_plan` inside each Spark barrier task,
with an :class:`XgbComm` on XGBoost's collective (histograms are all-reduced by
XGBoost itself; this module all-reduces only small evaluation sums). Tests call
it with a :class:`LocalComm` (one worker) as the local twin.

How a plan runs (see :mod:`pipelines.paths`): every run of the plan is a fresh
XGBoost booster whose DMatrix carries the margins reached so far as
``base_margin``, so no tree is ever re-predicted on the training data
(continuing with ``xgb_model=`` would re-predict the whole prefix); snapshots
of the margins at every path's switch point let other runs continue from
there. A path's model is the concatenation of its runs' trees
(:func:`concat_models`), so its first ``t`` trees are exactly the model after
``t`` trees. The quantised training matrix is built once and reused by every
run (subsets for curricula take its quantiles via ``ref=``).

NDCG@k on vali and test after every ``eval_every`` trees comes from this
project's evaluator (:func:`udfs.metrics.ndcg_fast`) on margins accumulated one
new tree at a time (:mod:`udfs.trees`, bit-identical to XGBoost's predictions
and several times cheaper than its predictor), summed over the workers' queries.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import numba
import numpy as np
import xgboost as xgb

from pipelines.paths import OBJECTIVES, REGRESSION, PlanNode, plan_trees
from udfs.metrics import NdcgSpec, inverse_idcg, ndcg_fast, offsets_from_qids
from udfs.objectives import (
    BlendSchedule,
    blend,
    lambdarank_grad,
    mse_grad,
    pair_inverse_idcg,
    sigmoid_pairwise_grad,
    stochastic_ndcg_grad,
)
from udfs.trees import add_tree, tree_arrays

log = logging.getLogger(__name__)


# ------------------------------------------------------------ collective
class Comm(Protocol):
    rank: int
    world: int

    def allreduce(self, data: np.ndarray, op: str) -> np.ndarray: ...


class LocalComm:
    """A world of one worker."""

    rank = 0
    world = 1

    def allreduce(self, data: np.ndarray, op: str) -> np.ndarray:
        return np.asarray(data)


class XgbComm:
    """XGBoost's collective (must be initialised: inside ``CommunicatorContext``)."""

    def __init__(self) -> None:
        from xgboost import collective

        self._c = collective
        self.rank = collective.get_rank()
        self.world = collective.get_world_size()

    def allreduce(self, data: np.ndarray, op: str) -> np.ndarray:
        ops = {"sum": self._c.Op.SUM, "max": self._c.Op.MAX}
        arr = np.ascontiguousarray(data, dtype=np.float64)
        return np.asarray(self._c.allreduce(arr, ops[op])).reshape(arr.shape)  # it returns a flat array


# ------------------------------------------------------------ threads
def openmp_threads(n: int) -> list[str]:
    """Let OpenMP (XGBoost's threads) use ``n`` threads in this process; returns the runtimes set.

    PySpark starts Python workers with ``OMP_NUM_THREADS=1`` (one per task
    slot), and XGBoost caps ``nthread`` at ``omp_get_max_threads()``, so inside
    a Spark task ``nthread=2`` silently ran on one thread (measured: 0.126 vs
    0.074 s per tree). Raise the limit of every OpenMP runtime already loaded,
    and the environment for any loaded later.
    """
    import ctypes

    os.environ["OMP_NUM_THREADS"] = str(n)
    done = []
    try:
        with open("/proc/self/maps") as f:
            libs = {line.split()[-1] for line in f if any(x in line for x in ("libgomp", "libomp", "libiomp5"))}
    except OSError:  # not Linux: ask the loader for the usual names
        import ctypes.util

        libs = {p for name in ("gomp", "omp", "iomp5") if (p := ctypes.util.find_library(name))}
    for lib in sorted(libs):
        try:
            ctypes.CDLL(lib).omp_set_num_threads(int(n))
            done.append(lib)
        except (OSError, AttributeError):
            continue
    return done


# ------------------------------------------------------------ data
@dataclass
class SplitData:
    """Rows of one split held by this worker, queries contiguous."""

    X: np.ndarray  # float32 [rows, features]
    y: np.ndarray  # float32 labels
    qid: np.ndarray  # int32

    def __post_init__(self) -> None:
        self.offsets = offsets_from_qids(self.qid)

    @property
    def n_queries(self) -> int:
        return int(self.offsets.size - 1)


@dataclass
class WorkerData:
    """What one worker trains on: train rows plus optional vali/test, and for every
    curriculum the first stage of each train row (``stages[name]``)."""

    train: SplitData
    vali: SplitData | None = None
    test: SplitData | None = None
    stages: dict[str, np.ndarray] = field(default_factory=dict)
    label_filters: dict[str, dict[int, list[int]]] = field(default_factory=dict)

    def rows(self, data: str) -> np.ndarray | None:
        """Train rows of a segment's data (None = all)."""
        if data == "all":
            return None
        name, stage = data.split(".")
        st = int(stage)
        mask = self.stages[name] <= st
        labels = self.label_filters.get(name, {}).get(st)
        if labels is not None:
            mask &= np.isin(self.train.y, labels)
        # Never None here, even if the mask covers every local row: the decision must be
        # the same on all workers (their collective calls must match).
        return np.flatnonzero(mask)


# ------------------------------------------------------------ settings
@dataclass(frozen=True)
class Settings:
    """Everything a worker needs besides the data (built from TrainConfig on the driver)."""

    params: dict[str, Any]  # XGBoost booster params shared by every run
    k: int = 10
    metric: NdcgSpec = NdcgSpec()
    eval_every: int = 1
    score_dist_trees: tuple[int, ...] = (100,)
    score_dist_bins: int = 100
    base_margin: str = "auto"
    seed: int = 0
    min_label: int = 0
    max_label: int = 4
    progress: str = ""  # file rank 0 rewrites with {"done": trees, "total": trees} (at most once a second)
    sigmoid_gamma: float = 1.0
    stochastic_noise: float = 1.0
    blend: BlendSchedule = BlendSchedule("linear", 200, 100)


def booster_params(settings: Settings, objective: str) -> dict[str, Any]:
    """Params of one run: built-in objectives get their XGBoost name and top-k settings."""
    p = dict(settings.params)
    builtin = OBJECTIVES[objective]
    if builtin:
        p["objective"] = builtin
        if builtin.startswith("rank:"):
            p.update(lambdarank_pair_method="topk", lambdarank_num_pair_per_sample=settings.k,
                     ndcg_exp_gain=settings.metric.gain == "exp2")
    p["disable_default_eval_metric"] = 1
    return p


def python_objective(objective: str, settings: Settings, y: np.ndarray, offsets: np.ndarray,
                     first_tree: int, n_trees: int, rank: int
                     ) -> Callable[[np.ndarray, int], tuple[np.ndarray, np.ndarray]]:
    """``f(margins, global_tree) -> (grad, hess)`` for a Python objective on one run's rows."""
    k, exp_gain = settings.k, settings.metric.gain == "exp2"
    if objective == "mse":
        return lambda s, t: mse_grad(s, y)
    inv = pair_inverse_idcg(y, offsets, k, exp_gain)  # labels are fixed: once per run
    if objective == "lambdamart":
        return lambda s, t: lambdarank_grad(s, y, offsets, k=k, exp_gain=exp_gain, inv_idcg=inv)
    if objective == "ranknet":
        return lambda s, t: lambdarank_grad(s, y, offsets, k=k, exp_gain=exp_gain, delta="one", inv_idcg=inv)
    if objective == "sigmoid_pairwise":
        return lambda s, t: sigmoid_pairwise_grad(s, y, offsets, k=k, gamma=settings.sigmoid_gamma)
    if objective == "stochastic_ndcg":
        def stochastic(s: np.ndarray, t: int) -> tuple[np.ndarray, np.ndarray]:
            noise = settings.stochastic_noise * max(0.0, 1.0 - (t - first_tree) / n_trees)  # anneals to 0
            rng = np.random.default_rng([settings.seed, t, rank])
            return stochastic_ndcg_grad(s, y, offsets, k=k, noise=noise, rng=rng, exp_gain=exp_gain, inv_idcg=inv)
        return stochastic
    if objective == "blend":
        def blended(s: np.ndarray, t: int) -> tuple[np.ndarray, np.ndarray]:
            g = settings.blend.gamma(t)
            m = mse_grad(s, y) if g < 1.0 else None
            r = lambdarank_grad(s, y, offsets, k=k, exp_gain=exp_gain, inv_idcg=inv) if g > 0.0 else None
            return blend(g, m, r)  # type: ignore[arg-type]
        return blended
    raise ValueError(f"{objective!r} is not a Python objective")


# ------------------------------------------------------------ results
@dataclass
class PathResult:
    """What training one path produced (complete on rank 0)."""

    name: str
    model: bytes = b""
    trees: list[int] = field(default_factory=list)
    vali: list[float] = field(default_factory=list)
    test: list[float] = field(default_factory=list)
    runs: list[dict[str, Any]] = field(default_factory=list)
    score_dists: list[dict[str, Any]] = field(default_factory=list)
    base_margin: float = 0.0
    test_qid: list[int] = field(default_factory=list)  # this worker's test queries (all, once merged)
    test_ndcg: list[float] = field(default_factory=list)  # their final NDCG@k


@dataclass
class _State:
    """Margins and history at one point of the plan."""

    tree: int  # global trees so far
    train: np.ndarray
    vali: np.ndarray | None
    test: np.ndarray | None
    models: list[tuple[bytes, int]]  # (run booster JSON, trees taken from it)
    curve: list[tuple[int, float, float]]
    runs: list[dict[str, Any]]
    dists: list[dict[str, Any]]
    base: float


# ------------------------------------------------------------ the loop
class _Trainer:
    def __init__(self, data: WorkerData, settings: Settings, comm: Comm) -> None:
        self.data, self.s, self.comm = data, settings, comm
        nthread = settings.params.get("nthread", 0)
        tr = data.train
        if nthread:  # before any XGBoost work: the quantile sketch below is multithreaded too
            openmp_threads(int(nthread))
            numba.set_num_threads(max(1, min(int(nthread), numba.config.NUMBA_NUM_THREADS)))
        t0 = time.perf_counter()
        self.dfull = xgb.QuantileDMatrix(tr.X, label=tr.y, qid=tr.qid, max_bin=settings.params.get("max_bin", 256),
                                         nthread=nthread)
        # Eval margins are accumulated here, one new tree at a time (udfs.trees): no eval DMatrix.
        self.evals = {name: sp for name, sp in (("vali", data.vali), ("test", data.test)) if sp is not None}
        self.inv_idcg = {name: inverse_idcg(sp.offsets, sp.y, settings.metric) for name, sp in self.evals.items()}
        self.n_queries = {name: float(comm.allreduce(np.array([sp.n_queries], np.float64), "sum")[0])
                          for name, sp in self.evals.items()}
        self.timing = {"dmatrix": time.perf_counter() - t0, "objective": 0.0, "boost": 0.0, "eval": 0.0,
                       "trees": 0}
        self.results: dict[str, PathResult] = {}
        self.total_trees = 0
        self._progress_at = 0.0

    # -- helpers -------------------------------------------------------
    def base_for(self, node: PlanNode) -> float:
        mode = self.s.base_margin
        if mode == "zero" or (mode == "auto" and node.objective not in REGRESSION):
            return 0.0
        if mode in ("mean", "auto"):
            y = self.data.train.y
            tot = self.comm.allreduce(np.array([float(y.sum()), float(y.size)]), "sum")
            return float(tot[0] / max(tot[1], 1.0))
        try:
            return float(mode)
        except ValueError:
            raise ValueError(f"train.base_margin must be auto, zero, mean or a number, got {mode!r}") from None

    def mean_ndcg(self, name: str, margins: np.ndarray) -> float:
        sp = self.evals[name]
        local = float(ndcg_fast(sp.offsets, sp.y, margins, self.s.metric, self.inv_idcg[name]).sum())
        total = self.comm.allreduce(np.array([local]), "sum")[0]
        return float(total / self.n_queries[name]) if self.n_queries[name] else float("nan")

    def test_per_query(self, margins: np.ndarray | None) -> tuple[list[int], list[float]]:
        """This worker's test queries and their NDCG@k (for paired significance tests)."""
        sp = self.data.test
        if sp is None or margins is None or sp.n_queries == 0:
            return [], []
        v = ndcg_fast(sp.offsets, sp.y, margins, self.s.metric, self.inv_idcg["test"])
        return sp.qid[sp.offsets[:-1]].astype(int).tolist(), v.tolist()

    def score_dist(self, tree: int, margins: np.ndarray) -> dict[str, Any]:
        """Histograms of test margins per label (global range, all workers)."""
        y = self.data.test.y
        lo_hi = self.comm.allreduce(np.array([-margins.min(initial=np.inf), margins.max(initial=-np.inf)]), "max")
        lo, hi = -lo_hi[0], lo_hi[1]
        if not np.isfinite(lo) or hi <= lo:
            lo, hi = (lo if np.isfinite(lo) else 0.0), (lo if np.isfinite(lo) else 0.0) + 1.0
        edges = np.linspace(lo, hi, self.s.score_dist_bins + 1)
        labels = list(range(self.s.min_label, self.s.max_label + 1))
        hist = np.stack([np.histogram(margins[y == lab], bins=edges)[0] for lab in labels]).astype(np.float64)
        hist = self.comm.allreduce(hist, "sum")
        return {"tree": tree, "edges": edges.tolist(), "labels": labels, "counts": hist.astype(np.int64).tolist()}

    # -- running the plan ------------------------------------------------
    def report_progress(self, force: bool = False) -> None:
        if not self.s.progress or self.comm.rank != 0:
            return
        now = time.perf_counter()
        if force or now - self._progress_at >= 1.0:
            self._progress_at = now
            tmp = f"{self.s.progress}.tmp"
            try:
                with open(tmp, "w") as f:
                    json.dump({"done": self.timing["trees"], "total": self.total_trees}, f)
                os.replace(tmp, self.s.progress)
            except OSError:  # progress is best effort (e.g. no shared file system with the driver)
                pass

    def run(self, nodes: list[PlanNode]) -> dict[str, PathResult]:
        self.total_trees = plan_trees(nodes)
        tr = self.data.train
        for node in nodes:
            base = self.base_for(node)
            st = _State(0, np.full(tr.y.size, base, np.float32),
                        None if self.data.vali is None else np.full(self.data.vali.y.size, base, np.float32),
                        None if self.data.test is None else np.full(self.data.test.y.size, base, np.float32),
                        [], [], [], [], base)
            self._run_node(node, st)
        self.report_progress(force=True)
        return self.results

    def _run_node(self, node: PlanNode, st: _State) -> None:
        s, tr = self.s, self.data.train
        rows = self.data.rows(node.data)
        if rows is None:
            dtrain, y, offsets = self.dfull, tr.y, tr.offsets
        else:
            y, qid = tr.y[rows], tr.qid[rows]
            offsets = offsets_from_qids(qid)
            dtrain = xgb.QuantileDMatrix(tr.X[rows], label=y, qid=qid, ref=self.dfull,
                                         max_bin=s.params.get("max_bin", 256), nthread=s.params.get("nthread", 0))
        dtrain.set_base_margin(st.train if rows is None else st.train[rows])
        ev = {name: np.array(getattr(st, name), dtype=np.float32) for name in self.evals}  # own copies
        params = booster_params(s, node.objective)
        booster = xgb.Booster(params, [dtrain])
        builtin = OBJECTIVES[node.objective] is not None
        obj = None if builtin else python_objective(node.objective, s, y, offsets, st.tree, node.length,
                                                    self.comm.rank)
        curve, dists = list(st.curve), list(st.dists)
        total_rows = self.comm.allreduce(np.array([float(dtrain.num_row())]), "sum")[0]
        run_info = {"objective": node.objective, "data": node.data, "first_tree": st.tree,
                    "rows": int(total_rows), "builtin": builtin}
        stops = set(node.stops)
        snapshots: list[tuple[int, _State]] = []
        for i in range(node.length):
            t = st.tree + i  # global index of the tree being built
            if builtin:
                t0 = time.perf_counter()
                booster.update(dtrain, i)
                self.timing["boost"] += time.perf_counter() - t0
            else:
                t0 = time.perf_counter()
                margins = booster.predict(dtrain, output_margin=True, training=True)
                grad, hess = obj(margins, t)
                t1 = time.perf_counter()
                booster.boost(dtrain, i, grad=grad, hess=hess)
                self.timing["objective"] += t1 - t0
                self.timing["boost"] += time.perf_counter() - t1
            self.timing["trees"] += 1
            self.report_progress()
            done = t + 1
            t0 = time.perf_counter()
            if self.evals:
                tree = tree_arrays(booster, i)
                for name, sp in self.evals.items():
                    add_tree(sp.X, tree, ev[name])
            if self.evals and (done % s.eval_every == 0 or (i + 1) in stops or done in s.score_dist_trees):
                curve.append((done, self.mean_ndcg("vali", ev["vali"]) if "vali" in ev else float("nan"),
                              self.mean_ndcg("test", ev["test"]) if "test" in ev else float("nan")))
                if done in s.score_dist_trees and "test" in ev:
                    dists.append(self.score_dist(done, ev["test"]))
            self.timing["eval"] += time.perf_counter() - t0
            if (i + 1) in stops:
                snapshots.append((i + 1, self._stop(node, booster, dtrain, rows, st, i + 1, ev, curve, dists,
                                                    run_info)))
        # Children run only now: they reset the base margins of the shared DMatrices,
        # which must not happen while this run's booster still uses them.
        del booster
        for length, nxt in snapshots:
            for child in node.children.get(length, []):
                self._run_node(child, nxt)

    def _stop(self, node: PlanNode, booster: xgb.Booster, dtrain, rows, st: _State, length: int,
              evals: dict[str, np.ndarray], curve, dists, run_info) -> _State:
        """Snapshot after ``length`` trees of this run; finish the paths that end here."""
        model = bytes(booster.save_raw("json"))
        if rows is None:
            train = booster.predict(dtrain, output_margin=True)  # XGBoost's cache: no re-prediction
        else:  # rows outside this run's subset see its trees for the first time
            self.dfull.set_base_margin(st.train)  # safe: every run that trained on dfull has finished
            train = booster.predict(self.dfull, output_margin=True)
        nxt = _State(st.tree + length, np.asarray(train, np.float32),
                     None if "vali" not in evals else evals["vali"].copy(),
                     None if "test" not in evals else evals["test"].copy(), [*st.models, (model, length)],
                     [c for c in curve if c[0] <= st.tree + length],
                     [*st.runs, {**run_info, "trees": length}],
                     [d for d in dists if d["tree"] <= st.tree + length], st.base)
        for name in node.ends.get(length, []):
            qids, per_query = self.test_per_query(nxt.test)
            if self.comm.rank == 0:
                c = nxt.curve
                self.results[name] = PathResult(
                    name=name, model=concat_models(nxt.models, nxt.base), trees=[x[0] for x in c],
                    vali=[x[1] for x in c], test=[x[2] for x in c], runs=nxt.runs,
                    score_dists=nxt.dists, base_margin=nxt.base, test_qid=qids, test_ndcg=per_query)
            else:
                self.results[name] = PathResult(name=name, test_qid=qids, test_ndcg=per_query)
        return nxt


def train_plan(data: WorkerData, nodes: list[PlanNode], settings: Settings, comm: Comm | None = None
               ) -> tuple[dict[str, PathResult], dict[str, float]]:
    """Run the plan on this worker's data; return the paths' results and timings."""
    trainer = _Trainer(data, settings, comm or LocalComm())
    results = trainer.run(nodes)
    return results, trainer.timing


# ------------------------------------------------------------ models
def concat_models(parts: list[tuple[bytes, int]], base_margin: float) -> bytes:
    """One XGBoost JSON model from the first ``n`` trees of each part, in order.

    Every part was trained on margins that already include the earlier parts,
    so the sum of all trees plus ``base_margin`` (stored as the model's
    base_score) is the path's prediction.
    """
    docs = [json.loads(m) for m, _ in parts]
    out = docs[-1]
    trees = []
    for doc, (_, n) in zip(docs, parts, strict=True):
        trees += doc["learner"]["gradient_booster"]["model"]["trees"][:n]
    for i, t in enumerate(trees):
        t["id"] = i
    gb = out["learner"]["gradient_booster"]["model"]
    gb["trees"] = trees
    gb["tree_info"] = [0] * len(trees)
    gb["iteration_indptr"] = list(range(len(trees) + 1))
    gb["gbtree_model_param"]["num_trees"] = str(len(trees))
    lmp = out["learner"]["learner_model_param"]
    lmp["base_score"] = f"[{float(np.float32(base_margin)):.9E}]"
    lmp["boost_from_average"] = "0"
    out["learner"]["objective"] = {"name": "rank:ndcg", "lambdarank_param": {
        "lambdarank_bias_norm": "1", "lambdarank_normalization": "1", "lambdarank_num_pair_per_sample": "10",
        "lambdarank_pair_method": "topk", "lambdarank_score_normalization": "1", "lambdarank_unbiased": "0",
        "ndcg_exp_gain": "1"}}
    return json.dumps(out).encode()
