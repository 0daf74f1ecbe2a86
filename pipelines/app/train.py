"""``ltr train``: one training path on one fold, as a checkpointed plan (see :mod:`pipelines.plan.trie`)."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict, replace
from typing import Any

from pyspark.sql import SparkSession

from pipelines.core.config import SelfPacedConfig, TrainConfig
from pipelines.core.keys import curriculum_content_key, plan_context
from pipelines.core.secrets import redact
from pipelines.core.storage import atomic_output
from pipelines.data.curricula import load_curricula
from pipelines.data.dataset import open_dataset
from pipelines.execution.barrier_job import make_settings, resolve_workers, task_errors
from pipelines.execution.executor import Execution, execute_plan
from pipelines.plan.paths import paced_schedules, parse_path, resolve
from pipelines.plan.trie import build_plan
from pipelines.plugins.loading import used_plugins
from pipelines.store.checkpoints import CheckpointStore
from pipelines.store.results import path_result, selections
from udfs.metrics import NdcgSpec

log = logging.getLogger(__name__)

SUMMARY = "_train.json"


# ------------------------------------------------------------ the folds' cuts while Spark starts
@contextlib.contextmanager
def cuts_ahead(data: str | None, folds: list[int], cfg: TrainConfig, checkpoints: str) -> Iterator[None]:
    """Load or compute the ``folds``' histogram cuts of ``data`` (:func:`pipelines.store.cuts.fold_cuts`, stored
    under their key in ``checkpoints``), one fold after the other, on a thread of their own while the caller's block
    runs (the Spark session's start: a JVM, seconds); when the block ends, wait for the first fold and for the fold
    under way, and start no other (when the block raises: for the fold under way only). The training finds them
    stored when it needs them (its executor calls the same function, with the same key) instead of sampling the
    fold after the session was up: the first tree comes that much sooner.

    Only an earlier start of what the training does anyway: the cuts depend on the fold's rows in (qid, doc) order,
    ``max_bin`` and the sample's size, not on the thread count (XGBoost sketches each feature on one thread, all
    rows in order), so the key and the cuts are the ones the executor would compute. Any error here (no such
    dataset or fold, a sample with no row) is left to the training, which meets it again where it reports it
    today; the thread only logs it at debug level."""
    if not data or not folds:
        yield
        return
    ended, failed = threading.Event(), threading.Event()  # the block ended; it raised

    def work() -> None:
        from pipelines.store.cuts import fold_cuts

        t0, done = time.perf_counter(), []
        try:
            ds = open_dataset(data)
            root = CheckpointStore(checkpoints).root
            for i, fold in enumerate(folds):
                if failed.is_set() or (i and ended.is_set()):
                    break
                fold_cuts(root, ds, fold, cfg.max_bin, cfg.cuts_sample_rows)
                done.append(fold)
        except Exception as e:  # noqa: BLE001 - the training computes them again and reports the error
            log.debug("cuts ahead of the training: %s: %s (the training computes them)", type(e).__name__, e)
        log.debug("cuts of fold(s) %s ready ahead of the training in %.1f s", done, time.perf_counter() - t0)

    thread = threading.Thread(target=work, name="cuts-ahead", daemon=True)
    thread.start()
    try:
        yield
    except BaseException:
        failed.set()  # no fold not under way: the error is what the caller waits for
        raise
    finally:
        ended.set()  # the first fold (its training comes next) and the one under way, no other
        thread.join()


# ------------------------------------------------------------ the job
def run_train(
    spark: SparkSession,
    data: str,
    fold: int,
    path: str,
    curricula: list[str],
    cfg: TrainConfig,
    metric: NdcgSpec,
    out: str,
    checkpoints: str,
    selfpaced: SelfPacedConfig | None = None,
) -> dict[str, Any]:
    """``ltr train``: train one path, write ``out`` (model.json, curve.csv, config.json, _train.json).

    The path is a plan of nodes checkpointed under ``checkpoints``: a re-run
    after a crash continues from the last checkpoint. ``selfpaced``: the settings of its self-paced segments
    (the config's ``selfpaced:`` section).
    """
    ds = open_dataset(data)
    ds.subsets(fold, "train")
    curs = load_curricula(curricula, ds, fold)
    tp = resolve(parse_path(path), {c.name: c.n_stages for c in curs})
    curs = [c for c in curs if c.name in tp.curricula]
    paced = paced_schedules(selfpaced or SelfPacedConfig(), [tp])
    workers, nthread = resolve_workers(spark, cfg)
    settings = replace(make_settings(cfg, metric, ds, nthread), paced=paced)
    plan = build_plan(
        [tp],
        fold=fold,
        context=plan_context(cfg, metric, ds.fingerprint, fold),
        curriculum_keys={c.name: curriculum_content_key(c.summary) for c in curs},
        paced=paced,
    )
    store = CheckpointStore(checkpoints)
    how = Execution.from_config(
        cfg, workers=workers, nthread=nthread, parallel=1, resume_hint="the same `ltr train` command"
    )
    with task_errors():
        info = execute_plan(spark, plan, ds, {c.name: c for c in curs}, settings, store, how)
    r = path_result(store, tp.label, plan.chains[tp.label])
    summary: dict[str, Any] = {
        "path": tp.shorthand(),
        "fold": fold,
        "trees": tp.trees,
        "dataset": redact(data),
        "dataset_fingerprint": ds.fingerprint,
        "curricula": {c.name: redact(c.path) for c in curs},
        "runs": r.runs,
        "metric": {**metric.to_dict(), "description": metric.describe()},
        "final": {
            "tree": r.trees[-1] if r.trees else None,
            f"vali_{metric.name}": r.vali[-1] if r.vali else None,
            f"test_{metric.name}": r.test[-1] if r.test else None,
        },
        "score_dists": r.score_dists,
        "base_margin": r.base_margin,
        "training": info,
        **({"selections": selections(store, plan, plan.chains[tp.label])} if paced else {}),
    }
    with atomic_output(out, SUMMARY) as tmp:
        with tmp.fs.open_output_stream(f"{tmp.path}/model.json") as f:
            f.write(r.model)
        lines = [f"tree,vali_{metric.name},test_{metric.name}"] + [
            f"{t},{v!r},{x!r}" for t, v, x in zip(r.trees, r.vali, r.test, strict=True)
        ]
        with tmp.fs.open_output_stream(f"{tmp.path}/curve.csv") as f:
            f.write(("\n".join(lines) + "\n").encode())
        tmp.write_json(
            "config.json",
            {
                "train": asdict(cfg),
                "metric": metric.to_dict(),
                "path": tp.shorthand(),
                "fold": fold,
                "data": redact(data),
                "curricula": [redact(c) for c in curricula],
                "plugins": used_plugins([s.objective for s in tp.segments]),
            },
        )
        tmp.write_json(SUMMARY, summary)
    log.info(
        "%s fold %d: %s after %d trees: vali %.4f, test %.4f",
        tp.shorthand(),
        fold,
        metric.name,
        tp.trees,
        summary["final"][f"vali_{metric.name}"] or float("nan"),
        summary["final"][f"test_{metric.name}"] or float("nan"),
    )
    return summary
