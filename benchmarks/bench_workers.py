"""1, 2 and 3 barrier workers on a `local-cluster` master: the same trees on the fold's global cuts.

    python -m benchmarks.bench_workers [--queries 2000] [--path mse:20,lambdamart:40]
                                       [--sample-rows 50000] [--work bench-out]

Trains the same path with 1, 2 and 3 single-thread workers (``local-cluster[3,1,1536]``: three
executor JVMs, one core each) on the fold's global cuts (a sample of ``--sample-rows`` rows of
whole queries, smaller than the split, so the sample matters) and compares every tree with the
1-worker model: same split features and thresholds, and the largest difference of a leaf value
(the workers' histogram sums are added in another order). Also the final vali/test NDCG@10 and
each run's per-tree cost. Then the cost of a node lease (pipelines.store.lease) per checkpoint on the
local checkpoint store: take, renew (what every checkpoint does) and release, timed.

The same script runs on the code before global cuts, for the side by side (per-worker sketches;
no sample, no lease)::

    git worktree add /tmp/old 82ddc6d && cd /tmp/old && PYTHONPATH=/tmp/old python -m benchmarks.bench_workers
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

from pipelines.core.config import IngestConfig, SparkConfig, TrainConfig, load_dataset_spec
from pipelines.core.session import build_session
from pipelines.data.dataset import open_dataset
from pipelines.data.generate import generate
from pipelines.data.ingest import ingest
from pipelines.execution.barrier_job import make_settings
from pipelines.execution.executor import Execution, train_paths
from pipelines.plan.paths import parse_path
from pipelines.store.checkpoints import CheckpointStore
from udfs.metrics import NdcgSpec

ROOT = Path(__file__).resolve().parent.parent


def _trees(model: bytes) -> list[dict]:
    return json.loads(model)["learner"]["gradient_booster"]["model"]["trees"]


def compare(a: bytes, b: bytes) -> dict:
    ta, tb = _trees(a), _trees(b)
    same_splits = len(ta) == len(tb) and all(
        x["split_indices"] == y["split_indices"]
        and x["left_children"] == y["left_children"]
        and np.array_equal(
            np.asarray(x["split_conditions"])[np.asarray(x["left_children"]) >= 0],
            np.asarray(y["split_conditions"])[np.asarray(y["left_children"]) >= 0],
        )
        for x, y in zip(ta, tb)
    )
    leaf = max(
        (
            float(np.max(np.abs(np.asarray(x["base_weights"]) - np.asarray(y["base_weights"]))))
            for x, y in zip(ta, tb)
            if len(x["base_weights"]) == len(y["base_weights"])
        ),
        default=float("nan"),
    )
    return {
        "trees": len(ta),
        "same_splits_every_tree": same_splits,
        "max_leaf_difference": leaf,
        "bit_identical": a == b,
    }


def lease_cost(n: int = 200) -> dict:
    from pipelines.store.lease import acquire

    with tempfile.TemporaryDirectory(prefix="bench-lease-") as d:
        store = CheckpointStore(d)
        t0 = time.perf_counter()
        leases = [acquire(store, f"node{i}", "bench", ttl=120) for i in range(n)]
        take = (time.perf_counter() - t0) / n
        t0 = time.perf_counter()
        for lease in leases:
            lease.renew()
        renew = (time.perf_counter() - t0) / n
        t0 = time.perf_counter()
        for lease in leases:
            lease.release()
        release = (time.perf_counter() - t0) / n
    return {"take_ms": round(take * 1e3, 3), "renew_ms": round(renew * 1e3, 3), "release_ms": round(release * 1e3, 3)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--queries", type=int, default=2000)
    p.add_argument("--path", default="mse:20,lambdamart:40")
    p.add_argument("--sample-rows", type=int, default=50_000)
    p.add_argument("--work", default=str(ROOT / "bench-out"))
    args = p.parse_args()
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    spark = build_session(
        SparkConfig(
            master="local-cluster[3,1,1536]",
            driver_memory="2g",
            log_level="ERROR",
            conf={"spark.executor.memory": "1g"},
        )
    )
    data = work / f"workers_bench_{args.queries}"
    if not (data / "_manifest.json").exists():
        src = work / f"workers_bench_{args.queries}_letor"
        generate(str(src), queries=args.queries, seed=77)
        ingest(spark, str(src), str(data), load_dataset_spec("mslr"), IngestConfig())
    ds = open_dataset(str(data))
    train_rows = sum(int(ds.manifest["subsets"][s]["rows"]) for s in ds.subsets(1, "train"))
    out: dict = {
        "machine": f"{platform.node()} {platform.machine()}, {os.cpu_count()} cores",
        "master": "local-cluster[3,1,1536]",
        "queries": args.queries,
        "train_rows": train_rows,
        "path": args.path,
        "sample_rows": args.sample_rows,
        "runs": {},
    }
    models = {}
    global_cuts = hasattr(TrainConfig, "cuts_sample_rows")  # False: the code before global cuts
    out["global_cuts"] = global_cuts
    for w in (1, 2, 3):
        cfg = TrainConfig(
            workers=w,
            nthread=1,
            eval_every=1,
            score_dist_trees=[],
            **({"cuts_sample_rows": args.sample_rows} if global_cuts else {}),
        )
        settings = make_settings(cfg, NdcgSpec(), ds, 1)
        with tempfile.TemporaryDirectory(prefix="bench-workers-") as d:
            t0 = time.perf_counter()
            res, info = train_paths(
                spark,
                ds,
                1,
                [parse_path(args.path, "p")],
                settings,
                Execution.from_config(
                    replace(cfg, job_retries=0), workers=w, nthread=1, parallel=1, resume_hint="the benchmark again"
                ),
                CheckpointStore(d),
            )
            wall = time.perf_counter() - t0
        w0 = info["worker_timings"][0]
        models[w] = res["p"].model
        out["runs"][f"{w} workers"] = {
            "wall_seconds": round(wall, 1),
            "per_tree": round((w0["boost"] + w0["objective"]) / w0["trees"], 4),
            "final_vali_ndcg_at_10": res["p"].vali[-1],
            "final_test_ndcg_at_10": res["p"].test[-1],
            **({} if w == 1 else {"against_1_worker": compare(models[1], models[w])}),
        }
        print(json.dumps({f"{w} workers": out["runs"][f"{w} workers"]}), flush=True)
    spark.stop()
    if global_cuts:
        out["lease_per_node_on_local_disk"] = lease_cost()
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
