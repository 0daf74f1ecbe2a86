"""``ltr train``: distributed XGBoost inside Spark, with Python objectives and training paths.

How it runs (DESIGN.md section 5):

1. The fold's train/vali/test rows (and, per curriculum, each train query's
   first stage) are range-partitioned by qid into one partition per worker and
   sorted within it, so every worker holds whole queries.
2. A Rabit tracker starts on the driver; one barrier task per worker
   (``mapInArrow(..., barrier=True)``) joins XGBoost's collective. Before
   training, the workers exchange their qid sets (``allGather``) and all stop
   with :class:`SplitQueryError` if any query is on two workers, or with a
   clear error if a worker got no training query.
3. Each worker runs :func:`pipelines.trainer.train_plan`: XGBoost all-reduces
   the histograms, gradients of Python objectives are computed locally (whole
   queries), evaluation sums are all-reduced. Rank 0 returns the models,
   curves and score distributions.

Refused up front: more workers than the session has task slots (barrier tasks
must all run at once; Spark would otherwise wait for ever).
"""

from __future__ import annotations

import base64
import json
import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from pipelines.config import ConfigError, TrainConfig
from pipelines.curriculum import QUERIES, read_curriculum
from pipelines.dataset import Dataset, DatasetError, load_split, open_dataset
from pipelines.paths import TrainingPath, build_plan, parse_path, plan_trees, resolve
from pipelines.session import task_slots
from pipelines.storage import atomic_output
from pipelines.trainer import PathResult, Settings, SplitData, WorkerData, XgbComm, train_plan
from udfs import schema
from udfs.letor_chunks import to_uri
from udfs.metrics import NdcgSpec
from udfs.objectives import BlendSchedule

log = logging.getLogger(__name__)

SUMMARY = "_train.json"
SPLIT_COL = "_split"
SPLITS = ("train", "vali", "test")
RESULT_DDL = "kind string, name string, model binary, payload string"


class TrainError(ValueError):
    """Training that cannot run as asked (the message says what to change)."""


class SplitQueryError(RuntimeError):
    """A query's rows ended up on more than one worker."""


@dataclass(frozen=True)
class Curriculum:
    """A curriculum passed to training: its directory and summary."""

    path: str
    summary: dict[str, Any]

    @property
    def name(self) -> str:
        return str(self.summary.get("name") or self.summary["strategy"])

    @property
    def n_stages(self) -> int:
        return int(self.summary["n_stages"])

    @property
    def column(self) -> str:
        return f"_cur_{self.name}"

    def label_filters(self) -> dict[int, list[int]]:
        return {s["stage"]: s["label_filter"] for s in self.summary["stages"] if s.get("label_filter")}


def load_curricula(paths: list[str], ds: Dataset, fold: int) -> list[Curriculum]:
    """Curricula named by their strategy; each must belong to this dataset and fold."""
    out: dict[str, Curriculum] = {}
    for p in paths:
        c = Curriculum(to_uri(p), read_curriculum(p))
        if c.summary.get("dataset_fingerprint") != ds.fingerprint:
            raise DatasetError(f"curriculum {p} was built for another dataset; rebuild it with `ltr curriculum`")
        if int(c.summary.get("fold", -1)) != fold:
            raise DatasetError(f"curriculum {p} is for fold {c.summary.get('fold')}, not fold {fold}")
        if c.name in out:
            raise ConfigError(f"two curricula named {c.name!r} ({out[c.name].path} and {p})")
        out[c.name] = c
    return list(out.values())


# ------------------------------------------------------------ settings
def make_settings(cfg: TrainConfig, metric: NdcgSpec, ds: Dataset, nthread: int) -> Settings:
    params = {
        "tree_method": "hist", "grow_policy": "lossguide", "max_depth": 0, "max_leaves": cfg.leaves,
        "eta": cfg.eta, "max_bin": cfg.max_bin, "min_child_weight": cfg.min_child_weight,
        "lambda": cfg.reg_lambda, "subsample": cfg.subsample, "colsample_bytree": cfg.colsample_bytree,
        "seed": cfg.seed, "nthread": nthread, "device": cfg.device, "verbosity": 1,
    }
    lo, hi = ds.manifest.get("label_range", [0, 4])
    try:
        blend = BlendSchedule(cfg.blend_schedule, cfg.blend_at, cfg.blend_width)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    if cfg.eval_every < 1:
        raise ConfigError(f"train.eval_every must be >= 1, got {cfg.eval_every}")
    return Settings(params=params, k=cfg.k, metric=metric, eval_every=cfg.eval_every,
                    score_dist_trees=tuple(cfg.score_dist_trees), score_dist_bins=cfg.score_dist_bins,
                    base_margin=cfg.base_margin, seed=cfg.seed, min_label=int(lo), max_label=int(hi),
                    sigmoid_gamma=cfg.sigmoid_gamma, stochastic_noise=cfg.stochastic_noise, blend=blend)


def resolve_workers(spark: SparkSession, cfg: TrainConfig) -> tuple[int, int]:
    """(workers, threads per worker); more workers than task slots is refused.

    ``workers = 0`` (auto): one worker per task slot on a cluster; on a local
    master one worker with all the cores, because workers on one machine only
    add XGBoost's histogram all-reduce over loopback (measured on 2 cores: 1.39x
    the per-tree time of in-process ``xgb.train`` with 2 single-thread workers,
    1.03x with 1 worker x 2 threads, on 500,000 rows; 87 vs 34 ms per tree on
    45,000 rows).
    """
    slots = task_slots(spark)
    local = spark.sparkContext.master.startswith("local")
    workers = cfg.workers or (1 if local else slots)
    if workers < 1:
        raise TrainError(f"--workers must be >= 1, got {workers}")
    if workers > slots:
        raise TrainError(f"--workers {workers} needs {workers} tasks running at once (barrier mode), but the "
                         f"session has {slots} task slots; use --workers {slots} or fewer, or more cores/executors")
    if cfg.nthread:
        nthread = cfg.nthread
    elif local:
        nthread = max(1, slots // workers)  # one machine: share its cores among the workers
    else:
        nthread = int(spark.conf.get("spark.task.cpus", "1"))  # a cluster: the cores of the task slot
    return workers, nthread


# ------------------------------------------------------------ data
def training_frame(spark: SparkSession, ds: Dataset, fold: int, curricula: list[Curriculum]) -> DataFrame:
    """Rows of the fold's splits with a split code and, per curriculum, the first stage of train rows."""
    cols = [schema.SUBSET, schema.QID, schema.DOC, schema.LABEL, *schema.feature_cols(ds.n_features)]
    parts = []
    for code, split in enumerate(SPLITS):
        if ds.folds[fold].get(split):
            parts.append(load_split(spark, ds, fold, split, cols).withColumn(SPLIT_COL, F.lit(code).cast("tinyint")))
    df = parts[0]
    for p in parts[1:]:
        df = df.unionByName(p)
    for c in curricula:
        st = spark.read.parquet(f"{c.path}/{QUERIES}").select(
            schema.SUBSET, schema.QID, F.col("first_stage").alias(c.column))
        df = df.join(F.broadcast(st), on=[schema.SUBSET, schema.QID], how="left")
    return df


def arrange_by_qid(df: DataFrame, workers: int) -> DataFrame:
    """One partition per worker, whole queries in each (range of qids), sorted."""
    return df.repartitionByRange(workers, F.col(schema.QID)).sortWithinPartitions(SPLIT_COL, schema.QID, schema.DOC)


def _worker_data(table: pa.Table, n_features: int, curricula: list[dict[str, Any]]) -> WorkerData:
    feats = schema.feature_cols(n_features)
    split = table.column(SPLIT_COL).to_numpy() if table.num_rows else np.empty(0, np.int8)
    out: dict[str, SplitData] = {}
    for code, name in enumerate(SPLITS):
        idx = np.flatnonzero(split == code)
        t = table.take(pa.array(idx)) if table.num_rows else table
        X = np.column_stack([t.column(f).to_numpy() for f in feats]).astype(np.float32, copy=False) \
            if t.num_rows else np.zeros((0, n_features), np.float32)
        out[name] = SplitData(X=np.ascontiguousarray(X), y=t.column(schema.LABEL).to_numpy().astype(np.float32),
                              qid=t.column(schema.QID).to_numpy().astype(np.int32))
        if name == "train":
            stages = {}
            for c in curricula:
                v = t.column(c["column"]).to_numpy(zero_copy_only=False)
                if np.isnan(v.astype(np.float64)).any():
                    raise DatasetError(f"some training queries are missing from curriculum {c['name']}")
                stages[c["name"]] = v.astype(np.int32)
    return WorkerData(train=out["train"], vali=out["vali"], test=out["test"], stages=stages,
                      label_filters={c["name"]: {int(k): v for k, v in c["label_filters"].items()}
                                     for c in curricula})


def _check_queries(ctx, data: WorkerData) -> None:
    """Every worker sends its qid sets; every worker raises the same error if one is split."""
    mine = {name: base64.b64encode(np.unique(getattr(data, name).qid).astype(np.int32).tobytes()).decode()
            for name in SPLITS}
    msgs = [json.loads(m) for m in ctx.allGather(json.dumps({"rank": ctx.partitionId(), "qids": mine}))]
    sets = {m["rank"]: {s: np.frombuffer(base64.b64decode(q), np.int32) for s, q in m["qids"].items()} for m in msgs}
    ranks = sorted(sets)
    for name in SPLITS:
        for i, a in enumerate(ranks):
            for b in ranks[i + 1:]:
                both = np.intersect1d(sets[a][name], sets[b][name])
                if both.size:
                    raise SplitQueryError(f"query {int(both[0])} of the {name} split is on workers {a} and {b} "
                                          f"({both.size} queries split); every query must be on one worker")
    empty = [r for r in ranks if sets[r]["train"].size == 0]
    if empty:
        raise TrainError(f"workers {empty} received no training query; use fewer --workers")


# ------------------------------------------------------------ training
def _start_tracker(spark: SparkSession, workers: int) -> dict[str, Any]:
    from xgboost.tracker import RabitTracker

    master = spark.sparkContext.master
    host = "127.0.0.1" if master.startswith("local") else spark.conf.get("spark.driver.host")
    tracker = RabitTracker(n_workers=workers, host_ip=host, sortby="task")
    tracker.start()
    threading.Thread(target=tracker.wait_for, daemon=True).start()
    return dict(tracker.worker_args())


def train_distributed(spark: SparkSession, df: DataFrame, n_features: int, paths: list[TrainingPath],
                      settings: Settings, workers: int, curricula: list[Curriculum],
                      arrange: Callable[[DataFrame, int], DataFrame] = arrange_by_qid,
                      ) -> tuple[dict[str, PathResult], dict[str, Any]]:
    """Train every path on ``df`` (see :func:`training_frame`) with ``workers`` barrier tasks."""
    nodes = build_plan(paths)
    args = _start_tracker(spark, workers)
    cur_meta = [{"name": c.name, "column": c.column,
                 "label_filters": {str(k): v for k, v in c.label_filters().items()}} for c in curricula]

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import BarrierTaskContext
        from xgboost.collective import CommunicatorContext

        ctx = BarrierTaskContext.get()
        rb = list(batches)
        table = pa.Table.from_batches(rb) if rb else None
        if table is None:
            table = pa.table({SPLIT_COL: pa.array([], pa.int8())})
        t0 = time.perf_counter()
        data = _worker_data(table, n_features, cur_meta) if table.num_rows else None
        if data is None:
            data = WorkerData(*[SplitData(np.zeros((0, n_features), np.float32), np.zeros(0, np.float32),
                                          np.zeros(0, np.int32)) for _ in SPLITS],
                              stages={c["name"]: np.zeros(0, np.int32) for c in cur_meta})
        _check_queries(ctx, data)
        load = time.perf_counter() - t0
        with CommunicatorContext(dmlc_task_id=str(ctx.partitionId()), **args):
            results, timing = train_plan(data, nodes, settings, XgbComm())
        timing = {**timing, "load": load, "rows": int(data.train.y.size), "rank": ctx.partitionId()}
        rows = [{"kind": "timing", "name": str(ctx.partitionId()), "model": b"", "payload": json.dumps(timing)}]
        for r in results.values():  # every worker: its test queries' NDCG
            rows.append({"kind": "queries", "name": r.name, "model": b"",
                         "payload": json.dumps({"qid": r.test_qid, "ndcg": r.test_ndcg})})
        if ctx.partitionId() == 0:
            for r in results.values():
                payload = {k: v for k, v in asdict(r).items() if k not in ("model", "test_qid", "test_ndcg")}
                rows.append({"kind": "path", "name": r.name, "model": r.model, "payload": json.dumps(payload)})
        yield pa.RecordBatch.from_pylist(rows, schema=pa.schema([("kind", pa.string()), ("name", pa.string()),
                                                                 ("model", pa.binary()), ("payload", pa.string())]))

    t0 = time.perf_counter()
    out = arrange(df, workers).mapInArrow(run, RESULT_DDL, barrier=True).toArrow().to_pylist()
    wall = time.perf_counter() - t0
    results: dict[str, PathResult] = {}
    timings, queries = [], {}
    for row in out:
        payload = json.loads(row["payload"])
        if row["kind"] == "timing":
            timings.append(payload)
        elif row["kind"] == "queries":
            q = queries.setdefault(row["name"], ([], []))
            q[0].extend(payload["qid"])
            q[1].extend(payload["ndcg"])
        else:
            results[row["name"]] = PathResult(model=row["model"], **payload)
    for name, (qid, nd) in queries.items():
        order = np.argsort(qid, kind="stable")
        results[name].test_qid = [qid[i] for i in order]
        results[name].test_ndcg = [nd[i] for i in order]
    trees = plan_trees(nodes)
    info = {"workers": workers, "nthread": settings.params.get("nthread"), "seconds": wall,
            "trees_built": trees, "trees_requested": sum(p.trees for p in paths),
            "seconds_per_tree": wall / max(trees, 1), "worker_timings": sorted(timings, key=lambda t: t["rank"])}
    log.info("trained %d paths (%d trees built for %d requested) on %d workers x %s threads in %.1f s",
             len(paths), trees, info["trees_requested"], workers, info["nthread"], wall)
    return results, info


@contextmanager
def task_errors() -> Iterator[None]:
    """Re-raise our own errors that come back from barrier tasks wrapped (as PythonException)
    as themselves, with their one-line message; anything else passes unchanged."""
    try:
        yield
    except Exception as e:
        text = str(e)
        for cls in (SplitQueryError, TrainError, DatasetError):
            marker = f"{cls.__name__}: "
            if marker in text:
                raise cls(text.split(marker, 1)[1].splitlines()[0]) from None
        raise


# ------------------------------------------------------------ the job
def run_train(spark: SparkSession, data: str, fold: int, path: str, curricula: list[str], cfg: TrainConfig,
              metric: NdcgSpec, out: str) -> dict[str, Any]:
    """``ltr train``: train one path, write ``out`` (model.json, curve.csv, config.json, _train.json)."""
    ds = open_dataset(data)
    ds.subsets(fold, "train")
    curs = load_curricula(curricula, ds, fold)
    tp = resolve(parse_path(path), {c.name: c.n_stages for c in curs})
    curs = [c for c in curs if c.name in tp.curricula]
    workers, nthread = resolve_workers(spark, cfg)
    settings = make_settings(cfg, metric, ds, nthread)
    df = training_frame(spark, ds, fold, curs)
    with task_errors():
        results, info = train_distributed(spark, df, ds.n_features, [tp], settings, workers, curs)
    r = results[tp.label]
    summary = {
        "path": tp.shorthand(), "fold": fold, "trees": tp.trees, "dataset": data,
        "dataset_fingerprint": ds.fingerprint, "curricula": {c.name: c.path for c in curs},
        "runs": r.runs, "metric": {**metric.to_dict(), "description": metric.describe()},
        "final": {"tree": r.trees[-1] if r.trees else None, f"vali_{metric.name}": r.vali[-1] if r.vali else None,
                  f"test_{metric.name}": r.test[-1] if r.test else None},
        "score_dists": r.score_dists, "base_margin": r.base_margin, "training": info,
    }
    with atomic_output(out, SUMMARY) as tmp:
        with tmp.fs.open_output_stream(f"{tmp.path}/model.json") as f:
            f.write(r.model)
        lines = [f"tree,vali_{metric.name},test_{metric.name}"] + [
            f"{t},{v!r},{x!r}" for t, v, x in zip(r.trees, r.vali, r.test, strict=True)]
        with tmp.fs.open_output_stream(f"{tmp.path}/curve.csv") as f:
            f.write(("\n".join(lines) + "\n").encode())
        tmp.write_json("config.json", {"train": asdict(cfg), "metric": metric.to_dict(), "path": tp.shorthand(),
                                       "fold": fold, "data": data, "curricula": curricula})
        tmp.write_json(SUMMARY, summary)
    log.info("%s fold %d: %s after %d trees: vali %.4f, test %.4f", tp.shorthand(), fold, metric.name, tp.trees,
             summary["final"][f"vali_{metric.name}"] or float("nan"),
             summary["final"][f"test_{metric.name}"] or float("nan"))
    return summary
