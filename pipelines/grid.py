"""``ltr grid``: the paper's study over folds, tracked in MLflow.

For each fold: the LambdaMART baseline (``T`` trees), MSE-t for every switch
point (``mse:t,lambdamart:T-t``), every curriculum strategy at every switch
point (``lambdamart@S:t,lambdamart:T-t``, the first stage being the easiest
``curriculum.fraction`` of the queries), and any extra paths of the config
(pacing curricula, blend continuation, CM and CL combined...). All the paths
of a fold train in one distributed job, so the data is loaded once and common
prefixes are trained once.

Resumable (see :mod:`pipelines.tracking`): a re-run of the same grid finds its
parent run, skips the children already FINISHED (same child key: a hash of the
child's resolved config and the data fingerprint) and trains the rest.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from dataclasses import asdict, dataclass, replace
from typing import Any

from pipelines.config import Config, ConfigError
from pipelines.curriculum import STRATEGIES, build_curriculum, read_curriculum
from pipelines.dataset import DatasetError, open_dataset
from pipelines.difficulty import SUMMARY as DIFFICULTY_SUMMARY
from pipelines.difficulty import run_difficulty
from pipelines.paths import TrainingPath, parse_path, resolve
from pipelines.storage import read_json
from pipelines.tracking import (
    BASELINE,
    MSE,
    TAG_CHILD_KEY,
    TAG_FOLD,
    TAG_KIND,
    TAG_PARENT,
    TAG_PATH,
    TAG_STRATEGY,
    TAG_SWITCH,
    Tracker,
    config_hash,
    png_bytes,
    pyplot,
)
from pipelines.train import (
    Curriculum,
    make_settings,
    resolve_workers,
    task_errors,
    train_distributed,
    training_frame,
)
from pipelines.trainer import PathResult
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


def ensure_curricula(spark, cfg: Config, data: str, difficulty: str, fold: int, names: set[str]) -> list[Curriculum]:
    """Build (or reuse) the fold's curricula: strategies with the grid's fraction, and the extra
    curricula of the config (``grid.extra_curricula``: name -> curriculum settings)."""
    ds = open_dataset(data)
    out = []
    for name in sorted(names):
        if name in cfg.grid.extra_curricula:
            ccfg = replace(cfg.curriculum, **cfg.grid.extra_curricula[name])
        elif name in STRATEGIES:
            ccfg = replace(cfg.curriculum, strategy=name, pacing="")
        else:
            raise ConfigError(f"grid path refers to curriculum {name!r}, which is neither a strategy nor in "
                              f"grid.extra_curricula ({sorted(cfg.grid.extra_curricula)})")
        key = config_hash({"cur": asdict(ccfg), "fp": ds.fingerprint, "fold": fold, "name": name})
        d = os.path.join(cfg.work_dir, "curricula", f"fold{fold}", name)
        try:
            summary = read_curriculum(d)
            fresh = summary.get("key") == key
        except DatasetError:
            fresh = False
        if not fresh:
            summary = build_curriculum(spark, data, difficulty, fold, ccfg, d, name=name, key=key)
        out.append(Curriculum(to_uri(d), summary))
    return out


class Progress:
    """Logs training progress of a running plan from the file rank 0 updates."""

    def __init__(self, path: str, label: str, interval: float = 5.0) -> None:
        self.path, self.label, self.interval = path, label, interval
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t0 = time.perf_counter()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                with open(self.path) as f:
                    p = json.load(f)
            except (OSError, ValueError):
                continue
            done, total = p["done"], p["total"]
            rate = done / max(time.perf_counter() - self._t0, 1e-9)
            left = (total - done) / rate if rate > 0 else float("nan")
            log.info("%s: %d/%d trees (%.1f trees/s, about %.0f s left)", self.label, done, total, rate, left)

    def __enter__(self) -> Progress:
        self._t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._t.join()


def _child_key(c: Child, cfg: Config, fingerprint: str, curricula: dict[str, Curriculum]) -> str:
    return config_hash({
        "path": c.path.shorthand(), "fold": c.fold, "strategy": c.strategy, "switch": c.switch,
        "train": {k: v for k, v in asdict(cfg.train).items() if k not in ("workers", "nthread", "path")},
        "metric": cfg.metric.to_dict(), "data": fingerprint,
        "curricula": {n: curricula[n].summary.get("key") for n in c.path.curricula},
    })


def run_grid(spark, cfg: Config, folds: list[int] | None = None, data: str | None = None) -> dict[str, Any]:
    """Run (or resume) the grid; return a summary with the parent run id and counts."""
    data = data or cfg.grid.data or os.path.join(cfg.work_dir, "dataset")
    ds = open_dataset(data)
    folds = folds or list(cfg.grid.folds)
    missing = [f for f in folds if f not in ds.folds]
    if missing:
        raise DatasetError(f"{data} has no fold {missing[0]}; folds: {sorted(ds.folds)}")
    difficulty = cfg.grid.difficulty or os.path.join(cfg.work_dir, "difficulty")
    children = {f: grid_children(cfg, f) for f in folds}
    if any(_curricula_needed(c) for c in children.values()):
        if not _difficulty_matches(difficulty, ds.fingerprint):
            log.info("computing difficulty scores -> %s", difficulty)
            run_difficulty(spark, data, difficulty, cfg.difficulty, cfg.metric)
    tracker = Tracker.for_config(cfg)
    grid_doc = {"grid": asdict(cfg.grid), "train": asdict(cfg.train), "metric": cfg.metric.to_dict(),
                "curriculum": asdict(cfg.curriculum), "data": ds.fingerprint, "folds": folds}
    grid_doc["train"].pop("workers"), grid_doc["train"].pop("nthread")
    parent, resumed = tracker.find_or_create_parent(config_hash(grid_doc), cfg.grid.experiment, {
        "folds": folds, "trees": cfg.grid.trees, "switch_points": cfg.grid.switch_points,
        "strategies": cfg.grid.strategies, "objectives": cfg.grid.objectives, "data": data,
        "data_fingerprint": ds.fingerprint, "metric": cfg.metric.describe(), "eta": cfg.train.eta,
        "leaves": cfg.train.leaves, "k": cfg.train.k, "fraction": cfg.curriculum.fraction,
        "extra_paths": json.dumps(cfg.grid.extra_paths, sort_keys=True)})
    done = tracker.resume_state(parent)
    log.info("grid %s: parent run %s (%s), %d children already finished", cfg.grid.experiment, parent,
             "resumed" if resumed else "new", len(done))
    workers, nthread = resolve_workers(spark, cfg.train)
    settings = make_settings(cfg.train, cfg.metric, ds, nthread)
    counts = {"trained": 0, "skipped": 0}
    try:
        for f in folds:
            curricula = {c.name: c for c in ensure_curricula(spark, cfg, data, difficulty, f,
                                                             _curricula_needed(children[f]))}
            todo = []
            for c in children[f]:
                key = _child_key(c, cfg, ds.fingerprint, curricula)
                if key in done:
                    counts["skipped"] += 1
                else:
                    todo.append((c, key))
            if not todo:
                log.info("fold %d: all %d children finished already", f, len(children[f]))
                continue
            stages = {n: c.n_stages for n, c in curricula.items()}
            paths = [resolve(c.path, stages) for c, _ in todo]
            curs = [curricula[n] for n in sorted({n for p in paths for n in p.curricula})]
            df = training_frame(spark, ds, f, curs)
            progress = os.path.join(cfg.work_dir, f".progress-fold{f}.json")
            fold_settings = replace(settings, progress=progress)
            with Progress(progress, f"fold {f}"), task_errors():
                results, info = train_distributed(spark, df, ds.n_features, paths, fold_settings, workers, curs)
            for (c, key), p in zip(todo, paths, strict=True):
                _log_child(tracker, parent, c, key, p, results[p.label], info, cfg, data, ds, curricula)
                counts["trained"] += 1
        tracker.finish(parent, "FINISHED")
    except BaseException:
        tracker.finish(parent, "FAILED")
        raise
    log.info("grid %s done: %d children trained, %d skipped (finished before); mlflow ui --backend-store-uri %s",
             cfg.grid.experiment, counts["trained"], counts["skipped"], tracker.uri)
    return {"parent_run_id": parent, "experiment": cfg.grid.experiment, "tracking_uri": tracker.uri,
            "resumed": resumed, **counts}


def _difficulty_matches(path: str, fingerprint: str) -> bool:
    try:
        return read_json(path, DIFFICULTY_SUMMARY).get("dataset_fingerprint") == fingerprint
    except (OSError, ValueError):  # missing or unreadable: compute it again
        return False


def _log_child(tracker: Tracker, parent: str, c: Child, key: str, path: TrainingPath, r: PathResult,
               info: dict[str, Any], cfg: Config, data: str, ds, curricula: dict[str, Curriculum]) -> None:
    m = cfg.metric.name
    run = tracker.client.create_run(tracker.experiment_id, run_name=c.name, tags={
        TAG_KIND: "child", TAG_PARENT: parent, TAG_CHILD_KEY: key, TAG_STRATEGY: c.strategy,
        TAG_SWITCH: "" if c.switch is None else str(c.switch), TAG_FOLD: str(c.fold), TAG_PATH: path.shorthand()})
    rid = run.info.run_id
    params = {"path": path.shorthand(), "fold": c.fold, "strategy": c.strategy, "switch_point": c.switch,
              "trees": path.trees, "data": data, "data_fingerprint": ds.fingerprint,
              "metric": cfg.metric.describe(), **{f"metric.{k}": v for k, v in cfg.metric.to_dict().items()},
              **{f"train.{k}": v for k, v in asdict(cfg.train).items() if k not in ("path",)},
              "workers": info["workers"], "nthread": info["nthread"]}
    for n in path.curricula:
        s = curricula[n].summary
        params[f"curriculum.{n}"] = json.dumps({k: s.get(k) for k in ("strategy", "pacing", "fraction", "delta",
                                                                        "n_stages", "seed")}, sort_keys=True)
    tracker.log_params(rid, params)
    tracker.log_history(rid, f"{m}_vali", r.trees, r.vali)
    tracker.log_history(rid, f"{m}_test", r.trees, r.test)
    tracker.log_metrics(rid, {f"final_{m}_vali": r.vali[-1], f"final_{m}_test": r.test[-1],
                              "trees": path.trees, "train_seconds_fold_job": info["seconds"]})
    tracker.log_dataset(rid, data, os.path.basename(data.rstrip("/")), ds.fingerprint, f"fold{c.fold}")
    perq = {"qid": r.test_qid, m: r.test_ndcg}
    tracker.log_text(rid, json.dumps(perq), "per_query_test.json")
    tracker.log_text(rid, json.dumps({"runs": r.runs, "score_dists": r.score_dists, "base_margin": r.base_margin},
                                     indent=1), "training.json")
    tracker.log_text(rid, _curve_png(c.name, r, m), "curve.png")
    if cfg.grid.log_models:
        tracker.log_model(rid, r.model)
    tracker.finish(rid)


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

