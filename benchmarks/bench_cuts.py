"""Global histogram cuts from a sample against cuts sketched from the whole training split, side by side.

    python -m benchmarks.bench_cuts [--queries 31531] [--trees 300] [--samples 200000,0] [--work bench-out]

Before global cuts, each worker sketched its own rows (the workers' sketches merged); on a local
master (one worker, the default) that is the sketch of the whole training split, which
``--samples 0`` reproduces (0 = every row). For each sample size the script computes the fold's
cuts (:func:`pipelines.store.cuts.compute_cuts`, timed), counts the cut values that differ from the
whole split's, and trains ``lambdamart:TREES`` (the Python objective, one worker with all the
cores, curves after every tree) on them: final vali/test NDCG@10 and per-tree cost, so the
figures say what the sample changes in quality and cost. Data: a generated MSLR-shaped dataset
(``--queries``; 31,531 is MSLR-WEB30K's size, about 2.26 million training rows in fold 1),
generated and ingested once under ``--work`` and reused (the same folder bench_train.py uses).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from benchmarks.bench_train import dataset
from pipelines.core.config import SparkConfig, TrainConfig
from pipelines.core.session import build_session
from pipelines.data.dataset import open_dataset
from pipelines.execution.barrier_job import make_settings
from pipelines.execution.executor import Execution, train_paths
from pipelines.plan.paths import parse_path
from pipelines.store.checkpoints import CheckpointStore
from pipelines.store.cuts import compute_cuts
from udfs.metrics import NdcgSpec

ROOT = Path(__file__).resolve().parent.parent
ALL_ROWS = 10**12


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--queries", type=int, default=31531)
    p.add_argument("--trees", type=int, default=300)
    p.add_argument("--samples", default="200000,0", help="comma-separated sample sizes in rows (0: every row)")
    p.add_argument("--work", default=str(ROOT / "bench-out"))
    args = p.parse_args()
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    threads = os.cpu_count() or 1
    spark = build_session(SparkConfig(master=f"local[{threads}]", driver_memory="4g", log_level="ERROR"))
    data = dataset(spark, work, args.queries)
    ds = open_dataset(data)
    train_rows = sum(int(ds.manifest["subsets"][s]["rows"]) for s in ds.subsets(1, "train"))
    samples = [int(x) or ALL_ROWS for x in args.samples.split(",")]
    out: dict = {
        "machine": f"{platform.node()} {platform.machine()}, {threads} cores",
        "queries": args.queries,
        "train_rows": train_rows,
        "trees": args.trees,
        "runs": {},
    }
    full = None
    for rows in sorted(samples, reverse=True):  # the whole split first: the others are compared with it
        t0 = time.perf_counter()
        cuts = compute_cuts(ds, 1, 256, rows, "bench", threads)
        cut_seconds = time.perf_counter() - t0
        full = full or cuts
        same_layout = np.array_equal(cuts.ptr, full.ptr)
        differ = int(np.sum(cuts.values != full.values)) if same_layout else None
        cfg = TrainConfig(workers=1, nthread=threads, eval_every=1, score_dist_trees=[], cuts_sample_rows=rows)
        settings = make_settings(cfg, NdcgSpec(), ds, threads)
        with tempfile.TemporaryDirectory(prefix="bench-cuts-") as d:
            t0 = time.perf_counter()
            res, info = train_paths(
                spark,
                ds,
                1,
                [parse_path(f"lambdamart:{args.trees}", "p")],
                settings,
                Execution.from_config(
                    replace(cfg, job_retries=0),
                    workers=1,
                    nthread=threads,
                    parallel=1,
                    resume_hint="the benchmark again",
                ),
                CheckpointStore(d),
            )
            wall = time.perf_counter() - t0
        w0 = info["worker_timings"][0]
        n = w0["trees"]
        name = "whole split" if rows >= train_rows else f"sample {rows}"
        out["runs"][name] = {
            "sample_rows": min(rows, train_rows),
            "cuts_rows": cuts.rows,
            "cuts_seconds": round(cut_seconds, 2),
            "cut_values": int(cuts.values.size),
            "cut_values_differing_from_whole_split": differ,
            "wall_seconds": round(wall, 1),
            "per_tree": round((w0["boost"] + w0["objective"]) / n, 4),
            "eval_per_tree": round(w0["eval"] / n, 4),
            "dmatrix_seconds": round(w0["dmatrix"], 2),
            "final_vali_ndcg_at_10": res["p"].vali[-1],
            "final_test_ndcg_at_10": res["p"].test[-1],
        }
        print(json.dumps({name: out["runs"][name]}), flush=True)
    print(json.dumps(out, indent=2))
    spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
