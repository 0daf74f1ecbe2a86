"""Running a fold's plan: sequential (one Spark job) or ``--parallel N`` (concurrent Spark jobs).

* Sequential (``parallel = 1``, the default): every node not yet done runs in
  one barrier job, in plan order, so the data is loaded once and each node's
  output stays in memory for its children (as fast as training without a plan).
* Parallel (``parallel = N``): every *ready* node (its parent is done) is an
  independent unit, run as its own Spark job in its own FAIR scheduler pool,
  up to N at a time, each with its own barrier workers: on a cluster with many
  executors, many suffixes train at once instead of all-reducing the
  histograms of one small tree across machines.
* Either way a failed job is started again (``train.job_retries`` times) and
  continues from the last checkpoints; after that the error names the fold,
  the node and the command that resumes the study.

Progress and curves reach the driver over TCP (:mod:`pipelines.execution.events`).
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from contextlib import nullcontext
from dataclasses import dataclass, replace
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from pipelines.core.config import TrainConfig
from pipelines.core.connect import is_connect, label_jobs, use_pool
from pipelines.core.errors import LtrError, UserError, relay
from pipelines.core.signals import STOP
from pipelines.data.curricula import Curriculum
from pipelines.data.dataset import Dataset, DatasetError
from pipelines.execution.barrier_job import (
    driver_host,
    fold_rows,
    reads_in_workers,
    run_nodes_distributed,
    tracker_in_stage,
    training_frame,
)
from pipelines.execution.events import EventServer, ProgressDisplay
from pipelines.kernel.cuts import FoldCuts
from pipelines.kernel.loop import Settings
from pipelines.plan.trie import DONE, PARTIAL, Node, NodeState, Plan, pending, states_of
from pipelines.store.checkpoints import CheckpointStore
from pipelines.store.cuts import fold_cuts
from pipelines.store.lease import hold
from pipelines.worker.rows import FoldRows

log = logging.getLogger(__name__)


class NodeFailed(LtrError, RuntimeError):
    """Training a node failed (after retries): the message names the fold, node and the resume command."""


class UnknownNode(UserError):
    """A node key the plan does not hold (a user error: exit 2)."""


@dataclass(frozen=True, kw_only=True)
class Execution:
    """How to run a plan: workers and threads per job, concurrent jobs, retries, leases.

    Made by :meth:`from_config` (the config's ``train:`` section and what the command resolved); it declares no
    defaults of its own.
    """

    workers: int  # barrier tasks per job (resolved: pipelines.execution.barrier_job.resolve_workers)
    nthread: int  # XGBoost threads per worker (resolved likewise)
    parallel: int  # concurrent Spark jobs (ltr grid --parallel)
    retries: int  # train.job_retries
    tracker_timeout: int  # train.tracker_timeout
    resume_hint: str  # the command that resumes, named by a failure
    lease_ttl: float  # train.lease_ttl: seconds; renewed every ttl/3 while the job runs
    lease_wait: float  # train.lease_wait: how long to wait for another process's lease on a node before stopping
    read: str  # train.read: whether the barrier tasks read their rows themselves
    tracker: str  # train.tracker: where XGBoost's tracker runs (auto, driver, stage)

    @classmethod
    def from_config(
        cls, train: TrainConfig, *, workers: int, nthread: int, parallel: int, resume_hint: str
    ) -> Execution:
        """How to run the plans of a command: retries, tracker timeout, leases and how rows are read from the run
        part of ``train`` (:attr:`pipelines.core.config.TrainConfig.run`), the rest as the command resolved them.

        Parameters
        ----------
        train : TrainConfig
            The config's ``train:`` section (its run part: ``job_retries``, ``tracker_timeout``, ``lease_ttl``,
            ``lease_wait``, ``read``).
        workers, nthread : int
            Barrier tasks per job and threads per worker (:func:`pipelines.execution.barrier_job.resolve_workers`).
        parallel : int
            Ready nodes run as up to that many concurrent Spark jobs (1: one job per fold).
        resume_hint : str
            The command that resumes, named by the error of a node that failed after its retries.

        Returns
        -------
        Execution
        """
        run = train.run
        return cls(
            workers=workers,
            nthread=nthread,
            parallel=parallel,
            retries=run.job_retries,
            tracker_timeout=run.tracker_timeout,
            resume_hint=resume_hint,
            lease_ttl=run.lease_ttl,
            lease_wait=run.lease_wait,
            read=run.read,
            tracker=run.tracker,
        )


def execute_plan(
    spark: SparkSession,
    plan: Plan,
    ds: Dataset,
    curricula: dict[str, Curriculum],
    settings: Settings,
    store: CheckpointStore,
    how: Execution,
    on_event: Callable[[dict[str, Any]], None] | None = None,
    only: list[str] | None = None,
) -> dict[str, Any]:
    """Train every node of ``plan`` that is not done (or only the nodes ``only``); return timings:
    ``trees`` built by this call's jobs, ``trees_planned`` left to build when it started, ``jobs``.

    ``on_event`` receives the executors' events (after the progress display), one at a time.
    """
    want = {n.key for n in plan.nodes} if only is None else set(only)
    states = states_of(plan, store)
    if _set_aside_shards_to_read(plan, store, want, states):
        states = states_of(plan, store)
    todo = pending(plan, states)
    unknown = sorted(want - {n.key for n in plan.nodes})
    if unknown:  # a key from another environment or an older plan: never a silent no-op
        raise UnknownNode(
            f"fold {plan.fold}: the plan has no node {unknown[0]}"
            f"{f' (and {len(unknown) - 1} more)' if len(unknown) > 1 else ''}: it was computed by "
            "other code, config or data; list the plan's nodes with `ltr grid --plan` (same config), "
            "or give the unit as `--unit`"
        )
    if only is not None:
        todo = [n for n in todo if n.key in want]
        for n in todo:
            if n.parent and states[n.parent].state != DONE and n.parent not in want:
                raise NodeFailed(
                    f"fold {plan.fold}: node {n.key} ({n.describe()}) cannot run yet: its parent {n.parent} is not done"
                )
    info: dict[str, Any] = {"jobs": [], "nodes": len(todo), "trees": sum(states[n.key].trees_left(n) for n in todo)}
    if not todo:
        return info
    # N/M over the fold's plan (or the nodes asked for), done trees included: a resumed fold shows where it is
    total = sum(n.trees for n in plan.nodes if n.key in want)
    display = ProgressDisplay(f"fold {plan.fold}", total, total - info["trees"])

    def callback(ev: dict[str, Any]) -> None:
        """Advance the progress display by one tree on each ``tree`` event, then pass ``ev`` to ``on_event``."""
        if ev.get("ev") == "tree":
            # when the first tree of this call was done (epoch seconds): the wait a user sees before training moves
            info.setdefault("first_tree_at", time.time())
            display.advance(1)
        if on_event is not None:
            on_event(ev)

    cuts = fold_cuts(
        store.root,
        ds,
        plan.fold,
        settings.model.max_bin,
        settings.model.cuts_sample_rows,
        how.nthread,
    )
    in_stage = tracker_in_stage(spark, how.tracker)
    try:
        # the workers report to this process only where its tracker is reached too
        with nullcontext() if in_stage else EventServer(driver_host(spark), callback) as server:
            address = None if server is None else server.address
            if how.parallel <= 1:
                info["jobs"].append(_run_unit(spark, plan, todo, ds, curricula, settings, store, how, address, cuts))
            else:
                info["jobs"] += _run_parallel(spark, plan, todo, ds, curricula, settings, store, how, address, cuts)
    finally:
        display.close()
    # what this process built (another process may have finished a node while we waited for its lease)
    info["trees_planned"], info["trees"] = info["trees"], sum(int(j.get("trees_built", 0)) for j in info["jobs"])
    return info


def _set_aside_shards_to_read(
    plan: Plan, store: CheckpointStore, want: set[str], states: Mapping[str, NodeState]
) -> bool:
    """Check with their shards the checkpoints whose shards this run reads (``states``, the plan's, checked the
    metadata and segments only): a resumed node's newest checkpoint and a starting node's parent's output (read by
    the workers), and each path's last node's output (read on the driver for the path's results, after the run). A
    corrupt one is set aside (:meth:`~pipelines.store.checkpoints.CheckpointStore.intact_latest`), so that what it
    held is trained again, parents before their children; returns whether one was (the states are then stale)."""
    read = {chain[-1] for chain in plan.chains.values()} & want
    for n in pending(plan, states):
        if n.key not in want:
            continue
        if states[n.key].state == PARTIAL:
            read.add(n.key)
        elif n.parent is not None and states[n.parent].state == DONE:
            read.add(n.parent)
    changed = False
    for key in sorted(read):
        newest = store.latest(key)
        changed |= store.intact_latest(key, shards=True) != newest
    return changed


def _run_parallel(
    spark: SparkSession,
    plan: Plan,
    todo: list[Node],
    ds: Dataset,
    curricula: dict[str, Curriculum],
    settings: Settings,
    store: CheckpointStore,
    how: Execution,
    address: tuple[str, int] | None,
    cuts: FoldCuts,
) -> list[dict[str, Any]]:
    """Ready nodes as concurrent Spark jobs (one FAIR pool each), up to ``how.parallel`` at a time."""
    left = {n.key: n for n in todo}
    finished: set[str] = {n.key for n in plan.nodes if n.key not in left}
    running: dict[Future, Node] = {}
    jobs = []
    pools = threading.local()

    def unit(node: Node) -> dict[str, Any]:
        """Train ``node`` as one barrier job (:func:`_run_unit`) in this pool thread's own FAIR pool.

        Returns
        -------
        dict[str, Any]
            The job's timings.
        """
        if getattr(pools, "name", None) is None:
            pools.name = f"ltr-{threading.get_ident()}"
        use_pool(spark, pools.name)
        label_jobs(spark, f"ltr-node-{node.key}", f"fold {plan.fold}: {node.describe()}")
        return _run_unit(spark, plan, [node], ds, curricula, settings, store, how, address, cuts)

    with ThreadPoolExecutor(max_workers=how.parallel, thread_name_prefix="ltr-node") as pool:
        while left or running:
            for key in list(left):
                if len(running) >= how.parallel:
                    break
                node = left[key]
                if node.parent is None or node.parent in finished:
                    del left[key]
                    running[pool.submit(unit, node)] = node
            if not running:
                raise NodeFailed(f"fold {plan.fold}: nodes {sorted(left)} wait for parents that never finish")
            done, _ = wait(list(running), return_when=FIRST_COMPLETED)
            for fut in done:
                node = running.pop(fut)
                jobs.append(fut.result())  # raises the unit's error; the pool waits for the others
                finished.add(node.key)
    return jobs


def _run_unit(
    spark: SparkSession,
    plan: Plan,
    nodes: list[Node],
    ds: Dataset,
    curricula: dict[str, Curriculum],
    settings: Settings,
    store: CheckpointStore,
    how: Execution,
    address: tuple[str, int] | None,
    cuts: FoldCuts,
) -> dict[str, Any]:
    """One Spark barrier job for ``nodes``; a failure is retried from the checkpoints."""
    names = sorted({n.curriculum for n in nodes if n.curriculum})
    missing = [c for c in names if c not in curricula]
    if missing:
        raise DatasetError(f"fold {plan.fold}: no curriculum {missing} for nodes of the plan")
    curs = [curricula[c] for c in names]
    if reads_in_workers(how.read, ds.path):
        rows: DataFrame | FoldRows = fold_rows(ds, plan.fold, curs)  # each barrier task reads its own
    else:
        rows = training_frame(spark, ds, plan.fold, curs)
    s = replace(settings, nthread=how.nthread)
    owner = f"fold {plan.fold}: {how.resume_hint}"
    # one writer per node: the leases are held across the retries, renewed by a heartbeat, released at the end
    with hold(store, [n.key for n in nodes], owner, ttl=how.lease_ttl, wait=how.lease_wait) as held:
        for attempt in range(how.retries + 1):
            # after a retry, or a wait for another process's lease: only what is not done yet
            todo = [n for n in nodes if states_of(plan.subplan([n.key]), store)[n.key].state != DONE]
            if not todo:
                return {
                    "workers": how.workers,
                    "nthread": how.nthread,
                    "seconds": 0.0,
                    "trees_built": 0,
                    "trees_planned": 0,
                    "worker_timings": [],
                }
            try:
                return run_nodes_distributed(
                    spark,
                    rows,
                    ds.n_features,
                    todo,
                    s,
                    how.workers,
                    curs,
                    store,
                    cuts,
                    events=address,
                    tracker_timeout=how.tracker_timeout,
                    tracker_in_stage=address is None,
                    lease_token=held.token,
                    driver_bound=is_connect(spark),
                )
            except Exception as e:
                _retry_or_raise(e, attempt, plan, nodes, store, how)
    raise AssertionError("unreachable")


def _retry_or_raise(
    e: Exception, attempt: int, plan: Plan, nodes: list[Node], store: CheckpointStore, how: Execution
) -> None:
    """Return when the failed job is to be started again; else raise: our own errors as themselves
    (a lost lease too: another process writes the node now), the last failure as :class:`NodeFailed`."""
    cause = _one_line(e)
    states = states_of(plan, store)
    failed = next((n for n in nodes if states[n.key].state != DONE), nodes[-1])
    if (isinstance(e, LtrError) and e.exit_code != 1) or relay(e) is not None:
        raise e  # the input's or another process's doing: a retry would fail the same way
    if STOP.is_set():
        raise e  # the process is stopping (SIGTERM) and cancelled the job itself: nothing to start again
    if attempt < how.retries:
        log.warning(
            "fold %d: training failed at node %s (%s): %s; starting again from the last checkpoints (retry %d of %d)",
            plan.fold,
            failed.key,
            failed.describe(),
            cause,
            attempt + 1,
            how.retries,
        )
        return
    st = states[failed.key]
    where = f"checkpoint at tree {st.tree}" if st.state != "todo" else "no checkpoint yet"
    paths = [p for p, chain in plan.chains.items() if failed.key in chain]
    raise NodeFailed(
        f"fold {plan.fold}: node {failed.key} ({failed.describe()}; {where}; paths "
        f"{', '.join(paths)}) failed: {cause}. Resume with: {how.resume_hint}"
    ) from e


_PY_ERROR = re.compile(r"^(?:[A-Za-z_][\w.]*\.)?([A-Za-z_]\w*(?:Error|Exception|Interrupt|Exit)): (.*)$")


def _one_line(e: BaseException) -> str:
    """The cause of an error from a Spark task in one line: the Python exception's own line, else
    Spark's first reason (e.g. ``Python worker exited unexpectedly (crashed)``)."""
    text = str(e).strip()
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    found = [m for m in (_PY_ERROR.match(ln) for ln in lines) if m]
    python = [m for m in found if m.group(1) not in ("PythonException", "Py4JJavaError", "SparkException")]
    if python:
        return f"{python[-1].group(1)}: {python[-1].group(2)}"[:500]
    for ln in lines:
        if "SparkException: " in ln:
            return "SparkException: " + ln.split("SparkException: ", 1)[1][:480]
    return f"{type(e).__name__}: {lines[0] if lines else ''}"[:500]


def train_paths(
    spark: SparkSession,
    ds: Dataset,
    fold: int,
    paths: list[Any],
    settings: Settings,
    how: Execution,
    store: CheckpointStore,
    curricula: dict[str, Curriculum] | None = None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Plan ``paths`` (resolved) with no context, train them, and return ``({label: PathResult}, job info)``:
    a library entry point for benchmarks and tests (grids key their plans by ``keys.plan_context``)."""
    from pipelines.core.keys import curriculum_content_key
    from pipelines.plan.trie import build_plan
    from pipelines.store.results import path_result

    curricula = curricula or {}
    plan = build_plan(
        paths, fold=fold, curriculum_keys={n: curriculum_content_key(c.summary) for n, c in curricula.items()}
    )
    info = execute_plan(spark, plan, ds, curricula, settings, store, how)
    job = info["jobs"][0] if info["jobs"] else {}
    return {p: path_result(store, p, c) for p, c in plan.chains.items()}, job
