"""Training speed, side by side on the same fold, data and machine.

    python -m benchmarks.bench_train [--queries 7000] [--trees 60] [--work bench-out]
                                     [--grid | --grid-only | --costs-only]

Data: a generated MSLR-shaped dataset (``--queries``, fold 1: about 3/5 of the
rows for training; 7,000 queries give about 500,000 training rows), ingested
once and reused. Parameters: 64 leaves (lossguide), eta 0.05, 256 bins, NDCG@10.

Per-tree cost (the mean over ``--trees`` trees, first tree included, on both
sides: the distributed workers report only totals, so the references' mean is
what compares like with like; their median is printed beside it):

* ``xgb_train_rank_ndcg`` / ``xgb_train_squarederror``: in-process
  ``xgb.train`` with ``rank:ndcg`` (top-10 pairs) / ``reg:squarederror``, all
  cores as threads, on a prebuilt QuantileDMatrix: the references;
* per configuration ``<workers>w_x_<threads>t`` (all cores as single-thread
  workers, and one worker with all cores): ``builtin_lambdamart`` and
  ``builtin_mse`` (the distributed trainer with the same built-in objectives)
  and ``python_lambdamart`` (the Python objective), with their ratios to the
  references;

for the distributed runs, per-tree = (boost + objective time) / trees as the
workers measure it (rank 0; data loading and DMatrix building reported apart),
plus the whole job's wall time. With ``eval_every = trees`` the curves cost
nothing; ``python_lambdamart_curves`` repeats the Python run with NDCG on
vali and test after every tree to show what the curves cost.

``--costs-only``: one Python lambdamart run (one worker with all the cores, NDCG
after every tree, checkpoints every ``train.checkpoint_every`` trees): what the
curves and the checkpoints cost as shares of the training time.

``--grid``: the switch-point grid MSE-t, t = 100, 200, 300, 400, T = 500:
trained together (prefix reuse: 1,400 trees) and one path at a time (2,000
trees); wall times side by side, one worker with all the cores (the local default).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import xgboost as xgb

from pipelines.core.config import IngestConfig, SparkConfig, TrainConfig, load_dataset_spec
from pipelines.core.session import build_session
from pipelines.data.dataset import load_split, open_dataset
from pipelines.data.generate import generate
from pipelines.data.ingest import ingest
from pipelines.execution.barrier_job import make_settings
from pipelines.execution.executor import Execution, train_paths
from pipelines.plan.paths import parse_path
from pipelines.store.checkpoints import CheckpointStore
from udfs import schema
from udfs.metrics import NdcgSpec

ROOT = Path(__file__).resolve().parent.parent


def dataset(spark, work: Path, queries: int) -> str:
    out = work / f"train_bench_{queries}"
    if not (out / "_manifest.json").exists():
        src = work / f"train_bench_{queries}_letor"
        generate(str(src), queries=queries, seed=4242)
        ingest(spark, str(src), str(out), load_dataset_spec("mslr"), IngestConfig())
    return str(out)


def reference(spark, data: str, trees: int, threads: int, objective: str = "rank:ndcg") -> dict:
    ds = open_dataset(data)
    cols = [schema.QID, schema.DOC, schema.LABEL, *schema.feature_cols(ds.n_features)]
    rows: Any = load_split(spark, ds, 1, "train", cols).toPandas()  # pyspark types it as a protocol
    pdf = rows.sort_values([schema.QID, schema.DOC], kind="stable")
    X = pdf[schema.feature_cols(ds.n_features)].to_numpy(np.float32)
    y, qid = pdf[schema.LABEL].to_numpy(np.float32), pdf[schema.QID].to_numpy()
    t0 = time.perf_counter()
    d = xgb.QuantileDMatrix(X, y, qid=qid, max_bin=256, nthread=threads)
    build = time.perf_counter() - t0
    params = {
        "objective": objective,
        "lambdarank_pair_method": "topk",
        "lambdarank_num_pair_per_sample": 10,
        "tree_method": "hist",
        "grow_policy": "lossguide",
        "max_depth": 0,
        "max_leaves": 64,
        "eta": 0.05,
        "max_bin": 256,
        "nthread": threads,
        "base_score": 0.0,
        "disable_default_eval_metric": 1,
    }
    if not objective.startswith("rank:"):
        del params["lambdarank_pair_method"], params["lambdarank_num_pair_per_sample"]
    b = xgb.Booster(params, [d])
    per_tree = []
    for i in range(trees):
        t0 = time.perf_counter()
        b.update(d, i)
        per_tree.append(time.perf_counter() - t0)
    return {
        "objective": objective,
        "rows": int(y.size),
        "threads": threads,
        "dmatrix_seconds": round(build, 3),
        "per_tree_median": statistics.median(per_tree),
        "per_tree_mean": float(np.mean(per_tree)),
    }


def ours(spark, data: str, path: str, trees_eval: int, workers: int, nthread: int) -> dict:
    ds = open_dataset(data)
    cfg = TrainConfig(workers=workers, nthread=nthread, eval_every=trees_eval, score_dist_trees=[])
    settings = make_settings(cfg, NdcgSpec(), ds, nthread)
    t0 = time.perf_counter()
    res, info = _train(spark, ds, [parse_path(path, "p")], cfg, settings, workers, nthread)
    wall = time.perf_counter() - t0
    w0 = info["worker_timings"][0]
    n = w0["trees"]
    return {
        "path": path,
        "workers": workers,
        "threads_per_worker": nthread,
        "wall_seconds": round(wall, 2),
        "trees": n,
        "per_tree": (w0["boost"] + w0["objective"]) / n,
        "objective_per_tree": w0["objective"] / n,
        "eval_per_tree": w0["eval"] / n,
        "load_seconds": round(w0["load"], 2),
        "dmatrix_seconds": round(w0["dmatrix"], 2),
        "checkpoint_per_tree": w0["checkpoint"] / n,
        "checkpoint_share_of_training": round(w0["checkpoint"] / (w0["boost"] + w0["objective"]), 4),
        "checkpoint_every": settings.checkpoint_every,
        "final_test_ndcg": res["p"].test[-1],
    }


def _train(spark, ds, paths, cfg, settings, workers: int, nthread: int):
    """Train ``paths`` from scratch (fresh checkpoint directory: nothing reused)."""
    with tempfile.TemporaryDirectory(prefix="bench-ckpt-") as d:
        how = Execution.from_config(
            replace(cfg, job_retries=0),
            workers=workers,
            nthread=nthread,
            parallel=1,
            resume_hint="the benchmark again",
        )
        return train_paths(spark, ds, 1, paths, settings, how, CheckpointStore(d))


def grid(spark, data: str, threads: int) -> dict:
    """The default configuration on a local master: one worker holding all the cores."""
    workers = 1
    ds = open_dataset(data)
    cfg = TrainConfig(workers=workers, nthread=threads, eval_every=10, score_dist_trees=[])
    settings = make_settings(cfg, NdcgSpec(), ds, threads)
    paths = [parse_path(f"mse:{t},lambdamart:{500 - t}", f"MSE-{t}") for t in (100, 200, 300, 400)]
    t0 = time.perf_counter()
    together, info = _train(spark, ds, paths, cfg, settings, workers, threads)
    shared = time.perf_counter() - t0
    t0 = time.perf_counter()
    alone = {}
    for p in paths:
        r, _ = _train(spark, ds, [p], cfg, settings, workers, threads)
        alone.update(r)
    separate = time.perf_counter() - t0
    same = all(together[p.label].test[-1] == alone[p.label].test[-1] for p in paths)
    return {
        "trees_built_shared": info["trees_built"],
        "trees_built_separate": 2000,
        "seconds_shared": round(shared, 1),
        "seconds_separate": round(separate, 1),
        "speedup": round(separate / shared, 2),
        "identical_final_ndcg": same,
        "final_test_ndcg": {p.label: together[p.label].test[-1] for p in paths},
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--queries", type=int, default=7000)
    p.add_argument("--trees", type=int, default=60)
    p.add_argument("--work", default=str(ROOT / "bench-out"))
    p.add_argument("--grid", action="store_true")
    p.add_argument("--grid-only", action="store_true", help="run only the switch-point grid")
    p.add_argument(
        "--costs-only",
        action="store_true",
        help="only what curves (NDCG after every tree) and checkpoints cost, relative to training "
        "(Python lambdamart, one worker with all the cores, train.checkpoint_every's default)",
    )
    args = p.parse_args()
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    threads = os.cpu_count() or 1
    spark = build_session(SparkConfig(master=f"local[{threads}]", driver_memory="8g", log_level="ERROR"))
    data = dataset(spark, work, args.queries)
    out: dict = {"machine": f"{platform.machine()}, {threads} cores", "dataset": data, "trees": args.trees}
    if args.grid_only:
        out["grid"] = grid(spark, data, threads)
        print(json.dumps(out, indent=2))
        return 0
    if args.costs_only:
        r = ours(spark, data, f"lambdamart:{args.trees}", 1, 1, threads)
        out["costs"] = {**r, "curves_cost_share_of_training": round(r["eval_per_tree"] / r["per_tree"], 4)}
        print(json.dumps(out, indent=2))
        return 0
    ref = reference(spark, data, args.trees, threads)
    ref_mse = reference(spark, data, args.trees, threads, "reg:squarederror")
    out["xgb_train_rank_ndcg"], out["xgb_train_squarederror"] = ref, ref_mse
    configs = [(threads, 1), (1, threads)] if threads > 1 else [(1, 1)]
    for workers, nthread in configs:
        tag = f"{workers}w_x_{nthread}t"
        runs = {
            "builtin_lambdamart": ours(spark, data, f"xgb_lambdamart:{args.trees}", args.trees, workers, nthread),
            "builtin_mse": ours(spark, data, f"xgb_mse:{args.trees}", args.trees, workers, nthread),
            "python_lambdamart": ours(spark, data, f"lambdamart:{args.trees}", args.trees, workers, nthread),
            "python_lambdamart_curves": ours(spark, data, f"lambdamart:{args.trees}", 1, workers, nthread),
        }
        c = runs["python_lambdamart_curves"]
        per_tree = {k: v["per_tree"] for k, v in runs.items()}
        out[tag] = {
            **runs,
            "ratio_builtin_lambdamart_vs_xgb_train": round(per_tree["builtin_lambdamart"] / ref["per_tree_mean"], 3),
            "ratio_builtin_mse_vs_xgb_train": round(per_tree["builtin_mse"] / ref_mse["per_tree_mean"], 3),
            "ratio_python_lambdamart_vs_xgb_train_rank_ndcg": round(
                per_tree["python_lambdamart"] / ref["per_tree_mean"], 3
            ),
            "curves_cost_share_of_training": round(c["eval_per_tree"] / c["per_tree"], 3),
        }
    if args.grid:
        out["grid"] = grid(spark, data, threads)
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
