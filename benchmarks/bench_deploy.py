"""The tiny study under a real scheduler at parallelism 1, 2 and 3: wall time and peak memory.

Each parallelism gets a fresh deployment (``pipelines/testing/deployment.py``: PostgreSQL, an ``mlflow server``,
Airflow's api-server + scheduler + dag-processor, LocalExecutor with ``core.parallelism`` = P and
``LTR_TRAINING_SLOTS`` = P) and one DAG run of the same study (generated data, ingest, difficulty, setup,
the units, the report). Reported per P: the DAG run's wall time (trigger to end), the training phase's
(first train task start to last end), the most training tasks that ran at once, and the peak resident
memory of everything started (services and their task processes, spark-submits, Spark's Python workers),
sampled every 0.5 s, and its peak during training.

    python -m benchmarks.bench_deploy [--parallelism 1,2,3] [--queries 200] [--folds 1] [--trees 30] [--timeline]

``--timeline`` adds every task try's queued, start and end seconds (:meth:`Deployment.timeline`): where a run's
time goes, one step after the other.

Baseline: P = 1 (units one after another) on the same machine in the same run. Needs what
``tests/scenarios/test_deploy.py`` needs (PostgreSQL's binaries, the [airflow,deploy] extras).
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time

from pipelines.core.proctree import tree_rss
from pipelines.testing.deployment import Deployment, missing


def one(p: int, queries: int, folds: list[int], trees: int, timeline: bool = False) -> dict:
    d = Deployment(
        parallelism=p,
        env={"LTR_TRAINING_SLOTS": str(p), "LTR_TASK_RETRIES": "0", "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"},
    )
    peak = {"all": 0, "training": 0}
    stop = threading.Event()
    training = threading.Event()

    def sample() -> None:
        while not stop.wait(0.5):
            rss = sum(tree_rss(pid) for pid in d.service_pids())  # the services' trees are disjoint
            peak["all"] = max(peak["all"], rss)
            if training.is_set():
                peak["training"] = max(peak["training"], rss)

    try:
        d.start()
        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        work = d.root / "work"
        study = [
            f"work_dir={work}",
            f"generate.queries={queries}",
            "generate.workers=1",
            "spark.shuffle_partitions=2",
            f"grid.folds={json.dumps(folds)}",
            f"grid.trees={trees}",
            f"grid.switch_points=[{trees // 3}]",
            "grid.strategies=[q_nrel]",
            "grid.extra_paths={}",
            "grid.extra_curricula={}",
            "grid.log_models=false",
            "train.leaves=8",
            "report.permutations=200",
            f"report.table2_sizes=[{trees // 3}]",
        ]  # the tracking server and its credentials: the Airflow connection mlflow_default
        t0 = time.monotonic()
        d.trigger("bench", {"set": study})

        def watch() -> None:
            if not training.is_set() and any(
                t["task_id"] == "train" and t["start_date"] for t in d.task_instances("bench")
            ):
                training.set()

        state = d.wait_run("bench", 3600, on_poll=watch)
        wall = time.monotonic() - t0
        tis = d.task_instances("bench")
        trains = [t for t in tis if t["task_id"] == "train"]
        spans = [(t["start_date"], t["end_date"]) for t in trains]
        at_once = max(sum(1 for a, b in spans if a <= s < b) for s, _ in spans)
        train_s = (max(b for _, b in spans) - min(a for a, _ in spans)).total_seconds()
        return {
            "parallelism": p,
            "state": state,
            "wall_s": round(wall, 1),
            "training_s": round(train_s, 1),
            "units": len(trains),
            "at_once": at_once,
            "peak_rss_gib": round(peak["all"] / 2**30, 2),
            "peak_rss_training_gib": round(peak["training"] / 2**30, 2),
            **({"timeline": d.timeline("bench")} if timeline else {}),
        }
    finally:
        stop.set()
        d.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--parallelism", default="1,2,3")
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--folds", default="1")
    ap.add_argument("--trees", type=int, default=30)
    ap.add_argument("--timeline", action="store_true", help="every task try's queued/start/end seconds")
    args = ap.parse_args()
    why = missing()
    if why:
        sys.exit(f"cannot start a deployment here: {why}")
    for p in (int(x) for x in args.parallelism.split(",")):
        result = one(p, args.queries, [int(f) for f in args.folds.split(",")], args.trees, args.timeline)
        print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
