"""``ltr grid --parallel 2`` against ``--parallel 1``, side by side on the same data and machine.

    python -m benchmarks.bench_parallel [--work bench-out/parallel] [--data DIR] [--standalone] [--no-local]

Local (default master ``local[*]``): the default grid with ``--parallel 1`` (one
job per fold, one worker with all the cores) and with ``--parallel 2`` (ready
nodes as two concurrent jobs, one worker with one core each).

``--standalone``: also on a standalone Spark cluster started here on loopback
(``spark-class`` master + two workers with one core each, stopped at the end):
``--parallel 2`` (two concurrent one-worker jobs) against ``--parallel 1`` with
``train.workers=2`` (one job whose two workers all-reduce every histogram).

``--no-local``: only the standalone comparison.

Reports wall times (each ``ltr grid`` a fresh process) and whether every
child's model and final NDCG equal those of the ``--parallel 1`` run.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

from pipelines.app.grid import fold_results
from pipelines.core.config import load_config
from pipelines.testing.processes import StandaloneCluster

ROOT = Path(__file__).resolve().parent.parent


def ltr(*args: str) -> list[str]:
    return [sys.executable, "-m", "pipelines.app.cli", *args]


def results(work: Path, data: str) -> dict:
    """label -> (final test NDCG, model bytes) of fold 1."""
    res = fold_results(load_config(None, [f"work_dir={work}"]), 1, data)
    return {k: (r.test[-1], r.model) for k, r in res.items()}


def grid(work: Path, data: str, env: dict, *extra: str) -> float:
    shutil.rmtree(work, ignore_errors=True)
    work.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    with open(f"{work}.log", "w") as log:  # the grid's log, kept beside its work directory
        subprocess.run(
            ltr("grid", "--data", data, "--set", f"work_dir={work}", *extra), check=True, env=env, cwd=ROOT, stderr=log
        )
    seconds = round(time.perf_counter() - t0, 1)
    print(f"{work.name}: {seconds} s", file=sys.stderr, flush=True)
    return seconds


def standalone(work: Path) -> StandaloneCluster:
    """A master and two one-core workers of 3 GiB on loopback
    (:class:`pipelines.testing.processes.StandaloneCluster`), with this environment (executors run this
    interpreter), once both workers have registered."""
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable}
    cluster = StandaloneCluster(work, workers=2, memory="3g", env=env)
    cluster.wait_for_workers(2)
    return cluster


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", default=str(ROOT / "bench-out" / "parallel"))
    ap.add_argument(
        "--data",
        default=str(ROOT / "bench-out" / "resume" / "data" / "dataset"),
        help="an ingested dataset (default: bench_resume.py's)",
    )
    ap.add_argument("--standalone", action="store_true")
    ap.add_argument("--no-local", action="store_true", help="skip the local runs (with --standalone)")
    args = ap.parse_args()
    work, data = Path(args.work).absolute(), str(Path(args.data).absolute())
    # the executors must run this interpreter: the driver hands its PYSPARK_PYTHON (default python3, which
    # lacks our dependencies) to every executor; without it the first standalone grid failed (stop 12)
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
    }
    out: dict = {"machine": f"{platform.machine()}, {os.cpu_count()} cores", "data": data}
    if not args.no_local:
        out["local_parallel_1_seconds"] = grid(work / "p1", data, env)
        out["local_parallel_2_seconds"] = grid(work / "p2", data, env, "--parallel", "2", "--set", "train.nthread=1")
        out["local_ratio_2_over_1"] = round(out["local_parallel_2_seconds"] / out["local_parallel_1_seconds"], 3)
        out["local_parallel_2_identical"] = results(work / "p2", data) == results(work / "p1", data)
    if args.standalone:
        cluster = standalone(work / "cluster")
        url = cluster.url
        try:
            common = ["--master", url, "--set", "spark.conf={spark.executor.memory: 2g}"]
            out["standalone_one_job_2_workers_seconds"] = grid(
                work / "s1", data, env, *common, "--set", "train.workers=2"
            )
            out["standalone_parallel_2_seconds"] = grid(work / "s2", data, env, *common, "--parallel", "2")
            out["standalone_ratio_parallel_over_allreduce"] = round(
                out["standalone_parallel_2_seconds"] / out["standalone_one_job_2_workers_seconds"], 3
            )
            # one worker per node against two workers' all-reduced sketches: equal trees are not expected
            # (the histogram bins differ), so the difference of every child's final test NDCG is reported
            a, b = results(work / "s1", data), results(work / "s2", data)
            out["standalone_children"] = len(a)
            out["standalone_max_abs_final_ndcg_difference"] = round(max(abs(a[k][0] - b[k][0]) for k in a), 4)
            if not args.no_local:
                out["standalone_parallel_2_identical_to_local_parallel_1"] = b == results(work / "p1", data)
        finally:
            cluster.stop()
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
