"""The Spark barrier job that trains plan nodes: distributed XGBoost inside Spark, Python objectives.

How it runs (docs/explanation/architecture.md, "The data path"):

1. Every worker holds whole queries, chosen by a hash of the qid: it reads the fold's
   train/vali/test rows (and, per curriculum, each train query's first stage) from the
   dataset's Parquet itself and keeps its queries (:func:`fold_rows`,
   :mod:`pipelines.worker.rows`; ``train.read: worker``), or the driver's frame of them is
   hash-partitioned into one partition per worker (:func:`arrange_by_qid`; ``spark``): the
   same rows either way. It bins them on the fold's cuts and puts them in (qid, doc) order itself.
2. A Rabit tracker starts on the driver; one barrier task per worker
   (``mapInArrow(..., barrier=True)``) joins XGBoost's collective. Before
   training, the workers exchange their qid sets over it (:func:`check_queries`) and all stop
   with :class:`SplitQueryError` if any query is on two workers, or with a
   clear error if a worker got no training query.
3. Each worker runs :func:`pipelines.kernel.loop.run_nodes`: XGBoost all-reduces
   the histograms, gradients of Python objectives are computed locally (whole
   queries), evaluation sums are all-reduced. Outputs go to the checkpoint
   store (:mod:`pipelines.store.checkpoints`); rank 0 reports progress and curves to
   the driver over TCP (:mod:`pipelines.execution.events`).

Refused up front: more workers than the session has task slots (barrier tasks
must all run at once; Spark would otherwise wait for ever).
"""

from __future__ import annotations

import json
import logging
import signal
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

import pipelines.worker  # noqa: F401  (first: in a Spark worker it imports XGBoost without scikit-learn)
from pipelines.core.config import ConfigError, TrainConfig
from pipelines.core.connect import (
    conf_value,
    default_parallelism,
    is_connect,
    is_local,
    master,
    server_here,
    task_slots,
)
from pipelines.core.errors import LtrError, UserError, crosses_tasks, relay
from pipelines.core.threads import usable_cpus
from pipelines.data.curricula import QUERIES, Curriculum
from pipelines.data.dataset import Dataset, load_split
from pipelines.kernel.cuts import FoldCuts, reference_matrix
from pipelines.kernel.env import Comm, XgbComm, check_device, returning_freed_memory
from pipelines.kernel.loop import Settings, run_nodes
from pipelines.kernel.matrices import FEATURES_COL, SPLIT_COL, SPLITS, WorkerData, from_batches, local_dir, matrix_cuts
from pipelines.plan.trie import Node
from pipelines.store.checkpoints import CheckpointStore
from pipelines.store.lease import LeaseLost
from pipelines.worker.rows import FoldRows
from udfs import schema
from udfs.metrics import NdcgSpec

log = logging.getLogger(__name__)


@crosses_tasks
class TrainError(UserError):
    """Training that cannot run as asked (the message says what to change)."""


class StaleAttemptError(LtrError, RuntimeError):
    """A barrier task of a stage Spark retried: it must not join the job's spent tracker."""


@crosses_tasks
class SplitQueryError(UserError, RuntimeError):
    """A query's rows ended up on more than one worker."""


# ------------------------------------------------------------ settings
def make_settings(cfg: TrainConfig, metric: NdcgSpec, ds: Dataset, nthread: int) -> Settings:
    """The workers' :class:`~pipelines.kernel.loop.Settings` of a training run, built on the driver from the
    config's sections (the booster params are :attr:`~pipelines.kernel.loop.Settings.params`). Logs a warning
    when row or column subsampling is on (a resumed run may then draw other samples).

    Parameters
    ----------
    cfg : TrainConfig
        The ``train`` section of the config (its values were checked when it was made).
    metric : NdcgSpec
        The NDCG conventions of evaluation.
    ds : Dataset
        The dataset; its manifest's ``label_range`` (default ``[0, 4]``) gives the label bounds.
    nthread : int
        XGBoost threads per worker (:func:`resolve_workers`).

    Returns
    -------
    Settings
        Everything a worker needs besides its data.

    Raises
    ------
    ConfigError
        When ``train.device`` asks for CUDA from an XGBoost built without it.
    """
    lo, hi = ds.manifest.get("label_range", [0, 4])
    try:
        check_device(cfg.device, probe=False)  # the CUDA build, on the driver; each worker probes its GPU
    except ValueError as e:
        raise ConfigError(str(e)) from None
    if cfg.subsample < 1 or cfg.colsample_bytree < 1:
        log.warning(
            "train.subsample/colsample_bytree < 1: XGBoost's sampler state is not part of a checkpoint, so "
            "a resumed run may draw other samples than an uninterrupted one (measured: not bit-identical)"
        )
    return Settings.of(cfg, metric, (int(lo), int(hi)), nthread)


def check_barrier_conf(conf: Any) -> None:
    """Spark settings barrier jobs cannot run under, refused up front in one line (``conf``: a SparkConf)."""
    if str(conf.get("spark.dynamicAllocation.enabled", "false")).lower() == "true":
        raise TrainError(
            "training runs as Spark barrier jobs, which dynamic allocation does not support: "
            "submit with --conf spark.dynamicAllocation.enabled=false and a fixed number of executors"
        )


def resolve_workers(spark: SparkSession, cfg: TrainConfig, parallel: int = 1) -> tuple[int, int]:
    """(workers, threads per worker) of one training job when ``parallel`` jobs run at once.

    ``workers = 0`` (auto): on a cluster, the barrier task slots (Spark's count
    of concurrent tasks, ``spark.task.cpus`` honoured: :func:`pipelines.core.session.task_slots`)
    shared among the parallel jobs; on a local master one worker with its share of the cores,
    because workers on one machine only add XGBoost's histogram all-reduce over
    loopback (benchmarks/RESULTS.md, "Training"). More workers than
    task slots is refused (barrier tasks must all run at once). On a cluster
    (``local-cluster[...]`` included) a worker is one barrier task and runs
    ``spark.task.cpus`` threads: for multi-threaded workers submit with
    ``--conf spark.task.cpus=N`` and executor cores a multiple of N. On a local master the cores are those this
    process may use (:func:`pipelines.core.threads.usable_cpus`: its CPU affinity and cgroup quota), when fewer
    than Spark's count.
    """
    if parallel < 1:
        raise TrainError(f"--parallel must be >= 1, got {parallel}")
    check_barrier_conf({"spark.dynamicAllocation.enabled": conf_value(spark, "spark.dynamicAllocation.enabled")})
    local = is_local(master(spark))
    slots = task_slots(spark)
    if slots is None:  # a Connect server whose configuration does not say (executors that come and go)
        if not cfg.workers:
            raise TrainError(
                "the Spark Connect server does not say how many tasks it runs at once (no spark.executor.instances "
                "and spark.executor.cores): set train.workers (--workers N) to the barrier tasks to train on"
            )
        slots = cfg.workers * parallel
    workers = cfg.workers or (1 if local else max(1, slots // parallel))
    if workers < 1:
        raise TrainError(f"--workers must be >= 1, got {workers}")
    if workers * parallel > slots:
        raise TrainError(
            f"--workers {workers} x --parallel {parallel} needs {workers * parallel} tasks running at "
            f"once (barrier mode), but the session has {slots} task slots (spark.task.cpus="
            f"{spark.conf.get('spark.task.cpus', '1')}); use fewer workers or parallel jobs, or more "
            "cores/executors"
        )
    if cfg.nthread:
        nthread = cfg.nthread
    elif local:  # one machine: share the cores this process may use among the workers
        cores = min(default_parallelism(spark), usable_cpus())
        nthread = max(1, cores // (workers * parallel))
    else:
        nthread = int(spark.conf.get("spark.task.cpus", "1") or "1")  # a cluster: the cores of the task slot
    log.info(
        "training on %d workers x %d threads (%s; %d barrier task slots, %d parallel jobs)",
        workers,
        nthread,
        "train.workers" if cfg.workers else "auto",
        slots,
        parallel,
    )
    return workers, nthread


# ------------------------------------------------------------ data
def training_frame(spark: SparkSession, ds: Dataset, fold: int, curricula: list[Curriculum]) -> DataFrame:
    """Rows of the fold's splits with a split code, their features in one array column (:data:`FEATURES_COL`)
    and, per curriculum, the first stage of train rows."""
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
            schema.SUBSET, schema.QID, F.col("first_stage").alias(c.column)
        )
        df = df.join(F.broadcast(st), on=[schema.SUBSET, schema.QID], how="left")
    # The features as one array<float> column: Spark hands a worker its rows as Arrow in one thread, and a list
    # column converts at twice the speed of 220 float columns (0.1x Istella fold, 980k rows, 2 cores: 17-22 s
    # against 33-39 s for the shuffle and the worker's batches; benchmarks/RESULTS.md, "The time to the first tree")
    feats = schema.feature_cols(ds.n_features)
    return df.select(*[c for c in df.columns if c not in {*feats, schema.SUBSET}], F.array(*feats).alias(FEATURES_COL))


def fold_rows(ds: Dataset, fold: int, curricula: list[Curriculum]) -> FoldRows:
    """What the barrier tasks need to read the fold's rows themselves (``train.read: worker``): the same rows,
    split codes and curriculum stages as :func:`training_frame`."""
    splits = tuple(
        (code, tuple(ds.subsets(fold, split))) for code, split in enumerate(SPLITS) if ds.folds[fold].get(split)
    )
    return FoldRows(ds.path, ds.n_features, splits, tuple((c.column, f"{c.path}/{QUERIES}") for c in curricula))


def reads_in_workers(read: str, path: str) -> bool:
    """Whether the barrier tasks read their rows themselves (``train.read``; ``auto``: a local dataset path)."""
    return read == "worker" or (read == "auto" and ("://" not in path or path.startswith("file://")))


def arrange_by_qid(df: DataFrame, workers: int) -> DataFrame:
    """One partition per worker, whole queries in each; which worker holds a query depends on its qid
    alone (Spark's Murmur3 hash of it), so a multi-worker model is the same in any application.

    Not sorted here: a sort of the wide rows was the driver JVM's largest memory (it spills, or
    needs gigabytes of heap at paper scale); the worker puts its rows, binned, in (qid, doc) order
    itself (:func:`pipelines.kernel.matrices.from_batches`).

    Not ``repartitionByRange``: it samples qid bounds with the RDD id as seed, so the split of the
    queries among workers (and with it the trees, through the merged quantile sketches) depended on
    how many jobs the session had run before; it also costs a sampling pass over the data."""
    return df.repartition(workers, F.col(schema.QID))


def check_same_code(driver: dict[str, str], files: dict[str, tuple[str, str]] | None = None) -> None:
    """Refuse to train on an executor whose code (:func:`pipelines.core.keys.worker_identity`: the tree loop and
    every objective) is not the driver's: the node keys, computed on the driver, would name trees that other code built
    (a stale ``--archives`` environment, another XGBoost on some machines). ``files``: the driver's
    :func:`~pipelines.core.keys.source_files`; when this executor has the same bytes and library versions, that
    settles it without parsing the sources again."""
    import socket

    from pipelines.core.keys import code_differences, code_label, worker_code

    here = worker_code(driver, files)
    if here is not None and here != driver:
        other = code_differences(here, driver)
        raise TrainError(
            f"executor {socket.gethostname()} runs other code than the driver ({', '.join(other)}: "
            f"{code_label(here, other)} here, {code_label(driver, other)} on the driver); ship the driver's "
            "environment to the executors (ltr pack, spark-submit --archives) or install the same "
            "code and libraries everywhere"
        )


def check_queries(comm: Comm, data: WorkerData) -> None:
    """Every worker sends its qid sets over ``comm``; every worker raises the same error if a query is on two
    workers (:class:`SplitQueryError`) or a worker has no training query (:class:`TrainError`)."""
    mine = {name: np.unique(getattr(data, name).qid).astype(np.int32) for name in SPLITS}
    sets = dict(enumerate(comm.gather(mine)))
    ranks = sorted(sets)
    for name in SPLITS:
        for i, a in enumerate(ranks):
            for b in ranks[i + 1 :]:
                both = np.intersect1d(sets[a][name], sets[b][name])
                if both.size:
                    raise SplitQueryError(
                        f"query {int(both[0])} of the {name} split is on workers {a} and {b} "
                        f"({both.size} queries split); every query must be on one worker"
                    )
    empty = [r for r in ranks if sets[r]["train"].size == 0]
    if empty:
        raise TrainError(f"workers {empty} received no training query; use fewer --workers")


# ------------------------------------------------------------ training
def driver_host(spark: SparkSession) -> str:
    """The address executors reach the driver at (loopback on a local master)."""
    if master(spark).startswith("local"):
        return "127.0.0.1"
    host = spark.conf.get("spark.driver.host")
    if not host:
        raise TrainError("spark.driver.host is not set: the executors cannot reach the driver's tracker")
    return host


def tracker_in_stage(spark: SparkSession, where: str) -> bool:
    """Whether XGBoost's tracker runs in the barrier stage (``train.tracker``: ``stage``; ``auto``: for a client of a
    Spark Connect server on another machine or on a cluster master, whose executors need not reach this process)
    rather than in this process (``driver``)."""
    if where == "auto":
        in_stage = is_connect(spark) and not (server_here(spark) and is_local(master(spark)))
    else:
        in_stage = where == "stage"
    if in_stage:
        log.info("the XGBoost tracker runs in each barrier stage (train.tracker=%s): no live progress", where)
    return in_stage


def _tracker_in_task(ctx: Any, workers: int, timeout: int) -> dict[str, Any]:
    """In a barrier task: the first task starts the job's tracker on its executor's host, every task gets its
    arguments (``allGather``, which every task of the stage calls once)."""
    mine = ""
    if ctx.partitionId() == 0:
        host = ctx.getTaskInfos()[0].address.rsplit(":", 1)[0]  # the task infos come in partition order
        mine = json.dumps(start_tracker(host, workers, timeout))
    return dict(json.loads(ctx.allGather(mine)[0]))


def _start_tracker(spark: SparkSession, workers: int, timeout: int = 0) -> dict[str, Any]:
    """A fresh Rabit tracker for one barrier job (never reused: a retried stage would hang on it).

    ``timeout`` (seconds, 0 = none): how long the tracker waits for the workers
    to connect and finish, so that a lost worker ends the job instead of hanging it.
    """
    return start_tracker(driver_host(spark), workers, timeout)


def start_tracker(host: str, workers: int, timeout: int = 0) -> dict[str, Any]:
    """A Rabit tracker for ``workers`` on ``host``, started, with a thread that waits for it; the workers'
    arguments (see :func:`_start_tracker`)."""
    from xgboost.tracker import RabitTracker

    tracker = RabitTracker(n_workers=workers, host_ip=host, sortby="task", timeout=timeout)
    # The tracker's native thread and the thread that waits for it start with SIGTERM blocked (a thread inherits
    # its creator's mask): the kernel then hands a SIGTERM to a thread of the driver that handles it
    # (pipelines.app.stop), never to the tracker's poll, which it would interrupt ("Poll failed ... Interrupted
    # system call", a traceback on the console of a stopped ``ltr``). A SIGTERM that comes meanwhile waits, pending,
    # until the mask is lifted.
    with _sigterm_blocked():
        tracker.start()
        threading.Thread(target=_wait_for_tracker, args=(tracker,), name="xgboost-tracker", daemon=True).start()
    return dict(tracker.worker_args())


@contextmanager
def _sigterm_blocked() -> Iterator[None]:
    """SIGTERM blocked in this thread for the block (the threads it starts keep the mask), then as it was: in
    whichever thread starts a tracker (the main thread, or a pool thread of ``--parallel``)."""
    if not hasattr(signal, "pthread_sigmask"):  # not on this platform: nothing to block
        yield
        return
    before = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    try:
        yield
    finally:
        if signal.SIGTERM not in before:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})


def _wait_for_tracker(tracker: Any) -> None:
    """The tracker's waiting thread. A tracker that fails (a worker lost, a stopped job) fails the barrier job too,
    whose error says why: the tracker's own error is logged here, not raised as an uncaught thread exception, and
    the tracker is freed here, so that its ``__del__`` raises nothing at garbage collection."""
    from xgboost.core import XGBoostError

    from pipelines.core.signals import STOP

    try:
        tracker.wait_for()
    except XGBoostError as e:
        # its causes are the lines "- [file:line|time]: what" (the first line is where it was raised)
        causes = "; ".join(line.strip()[2:] for line in str(e).splitlines() if line.strip().startswith("- "))
        (log.debug if STOP.is_set() else log.warning)("the XGBoost tracker ended with an error: %s", causes or e)
    finally:
        try:
            tracker.free()
        except XGBoostError:
            log.debug("could not free the XGBoost tracker", exc_info=True)


def run_nodes_distributed(
    spark: SparkSession,
    rows: DataFrame | FoldRows,
    n_features: int,
    nodes: list[Node],
    settings: Settings,
    workers: int,
    curricula: list[Curriculum],
    store: CheckpointStore,
    cuts: FoldCuts,
    events: tuple[str, int] | None = None,
    arrange: Callable[[DataFrame, int], DataFrame] = arrange_by_qid,
    tracker_timeout: int = 0,
    lease_token: str | None = None,
    tracker_in_stage: bool = False,
    driver_bound: bool = False,
) -> dict[str, Any]:
    """Train ``nodes`` (plan order) on ``rows`` with ``workers`` barrier tasks: a frame of the fold's rows
    (:func:`training_frame`), which ``arrange`` hands out to the tasks, or where each task reads its own
    (:func:`fold_rows`, :mod:`pipelines.worker.rows`: the same rows, no shuffle).

    Every worker builds its training matrix on the fold's global ``cuts`` (:mod:`pipelines.store.cuts`), so
    the trees do not depend on ``workers``. ``lease_token``: the driver's lease on the nodes
    (:mod:`pipelines.store.lease`); rank 0 commits a checkpoint only while the lease is still it.

    Outputs go to ``store`` (checkpoints every ``settings.checkpoint_every`` trees
    and at each node's end); rank 0 reports progress to the driver's event
    listener at ``events`` (host, port; None: no report); with ``driver_bound`` (a Spark Connect client's job) it
    stops the job when that connection breaks (:class:`pipelines.execution.events.DriverGone`). XGBoost's
    tracker runs in this process, or with ``tracker_in_stage`` in the stage's first task (:func:`tracker_in_stage`).
    A barrier stage that Spark retries is stopped (its Rabit tracker is spent): the caller starts a new job, which
    resumes from the checkpoints. Returns timings.
    """
    from pipelines.core.keys import source_files, worker_identity, worker_roots
    from pipelines.plugins.loading import activate
    from pipelines.plugins.loading import current as current_plugins

    args = None if tracker_in_stage else _start_tracker(spark, workers, tracker_timeout)
    job = uuid.uuid4().hex  # this job's token: its tasks check in once with the driver
    driver_code = dict(worker_identity())
    driver_files = source_files(worker_roots())
    plugins = current_plugins()  # the driver's plug-ins: each task loads them and checks their code
    cur_meta = [
        {"name": c.name, "column": c.column, "label_filters": {str(k): v for k, v in c.label_filters().items()}}
        for c in curricula
    ]

    source = rows if isinstance(rows, FoldRows) else None  # the closure must not hold a DataFrame

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """One barrier task: load this worker's rows, join XGBoost's collective and train ``nodes``.

        Parameters
        ----------
        batches : Iterator[pa.RecordBatch]
            The rows of this worker's partition (whole queries, see :func:`arrange_by_qid`).

        Yields
        ------
        pa.RecordBatch
            One row: the worker's rank and its timings as JSON (``load``, ``rows``, ``rank`` and those of
            :func:`pipelines.kernel.loop.run_nodes`).

        Raises
        ------
        StaleAttemptError
            When Spark retried the barrier stage (its tracker is spent) or the driver has already seen this
            task check in.
        TrainError
            When this executor runs other code than the driver (:func:`check_same_code`), or a worker got no
            training query.
        SplitQueryError
            When a query's rows are on more than one worker.
        DriverGone
            When the Spark Connect client whose job this is has ended (``driver_bound``).
        """
        from pyspark import BarrierTaskContext
        from xgboost.collective import CommunicatorContext

        from pipelines.execution.events import EventClient

        ctx = BarrierTaskContext.get()
        fresh = EventClient(*events, driver_bound=driver_bound).hello(job, ctx.partitionId()) if events else None
        if ctx.attemptNumber() > 0 or fresh is False:
            raise StaleAttemptError(
                "Spark retried the barrier stage, whose XGBoost tracker is spent: "
                "the driver restarts the job from the last checkpoints instead"
            )
        check_same_code(driver_code, driver_files)
        activate(plugins)
        t0 = time.perf_counter()
        if source is not None:
            for _ in batches:  # this task's placeholder row
                pass
            batches = source.batches(ctx.partitionId(), workers)
        with returning_freed_memory():  # the batches' buffers, once joined, leave the process
            ref = reference_matrix(cuts, int(settings.params.get("nthread") or 0))  # outside the collective
            # rows stream in as Arrow batches and are kept as bin codes (pipelines.kernel.matrices)
            data = from_batches(
                batches,
                n_features,
                matrix_cuts(ref),
                cur_meta,
                spill_over=settings.codes_in_memory_gib * 2**30,
                where=local_dir(),
            )
        load = time.perf_counter() - t0
        client = EventClient(*events, driver_bound=driver_bound) if events and ctx.partitionId() == 0 else None
        collective = args if args is not None else _tracker_in_task(ctx, workers, tracker_timeout)
        try:
            with CommunicatorContext(dmlc_task_id=str(ctx.partitionId()), **collective):
                comm = XgbComm()
                check_queries(comm, data)
                events_to = client.send if client else None
                try:
                    timing = run_nodes(data, nodes, settings, store, comm, events_to, ref, lease_token)
                except LeaseLost as e:
                    # said in the log here too (as DriverGone is): leaving XGBoost's collective, a worker whose
                    # tracker was in a driver that is gone fails to reach it, and that error replaces this one
                    log.warning("%s", e)
                    raise
        finally:
            if client:
                client.close()
        timing = {**timing, "load": load, "rows": int(data.train.y.size), "rank": ctx.partitionId()}
        yield pa.RecordBatch.from_pylist(
            [{"rank": ctx.partitionId(), "payload": json.dumps(timing)}],
            schema=pa.schema([("rank", pa.int32()), ("payload", pa.string())]),
        )

    t0 = time.perf_counter()
    # one placeholder row per barrier task when the tasks read their rows themselves
    frame = spark.range(0, workers, 1, workers) if isinstance(rows, FoldRows) else arrange(rows, workers)
    out = frame.mapInArrow(run, "rank int, payload string", barrier=True).toArrow().to_pylist()
    wall = time.perf_counter() - t0
    timings = sorted((json.loads(r["payload"]) for r in out), key=lambda t: t["rank"])
    trees = sum(n.trees for n in nodes)
    info = {
        "workers": workers,
        "nthread": settings.params.get("nthread"),
        "seconds": wall,
        "trees_built": timings[0]["trees"] if timings else 0,
        "trees_planned": trees,
        "seconds_per_tree": wall / max(timings[0]["trees"] if timings else 1, 1),
        "worker_timings": timings,
    }
    log.info(
        "trained %d nodes (%d trees) on %d workers x %s threads in %.1f s",
        len(nodes),
        info["trees_built"],
        workers,
        info["nthread"],
        wall,
    )
    return info


@contextmanager
def task_errors() -> Iterator[None]:
    """Re-raise our own errors that come back from barrier tasks wrapped (as PythonException) as themselves, with
    their one-line message (the classes of :data:`pipelines.core.errors.CROSSES_TASKS`); anything else passes
    unchanged."""
    try:
        yield
    except Exception as e:
        ours = relay(e)
        if ours is not None:
            raise ours from None
        raise
