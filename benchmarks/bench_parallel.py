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
import socket
import subprocess
import sys
import time
from pathlib import Path

from pipelines.config import load_config
from pipelines.grid import fold_results

ROOT = Path(__file__).resolve().parent.parent


def ltr(*args: str) -> list[str]:
    return [sys.executable, "-m", "pipelines.cli", *args]


def results(work: Path, data: str) -> dict:
    """label -> (final test NDCG, model bytes) of fold 1."""
    res = fold_results(load_config(None, [f"work_dir={work}"]), 1, data)
    return {k: (r.test[-1], r.model) for k, r in res.items()}


def grid(work: Path, data: str, env: dict, *extra: str) -> float:
    shutil.rmtree(work, ignore_errors=True)
    work.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    with open(f"{work}.log", "w") as log:  # the grid's log, kept beside its work directory
        subprocess.run(ltr("grid", "--data", data, "--set", f"work_dir={work}", *extra), check=True, env=env,
                       cwd=ROOT, stderr=log)
    seconds = round(time.perf_counter() - t0, 1)
    print(f"{work.name}: {seconds} s", file=sys.stderr, flush=True)
    return seconds


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def standalone(work: Path):
    """Start a master and two one-core workers on loopback; return (master URL, processes)."""
    import pyspark

    spark_class = str(Path(pyspark.__file__).parent / "bin" / "spark-class")
    port, ui = free_port(), free_port()
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable}
    procs = [subprocess.Popen([spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                               "--port", str(port), "--webui-port", str(ui)], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
    url = f"spark://127.0.0.1:{port}"
    time.sleep(6)
    for i in range(2):
        d = work / f"worker{i}"
        d.mkdir(parents=True, exist_ok=True)
        procs.append(subprocess.Popen([spark_class, "org.apache.spark.deploy.worker.Worker", url, "--cores", "1",
                                       "--memory", "3g", "--work-dir", str(d), "--webui-port", str(free_port())],
                                      env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    time.sleep(8)
    return url, procs


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", default=str(ROOT / "bench-out" / "parallel"))
    ap.add_argument("--data", default=str(ROOT / "bench-out" / "resume" / "data" / "dataset"),
                    help="an ingested dataset (default: bench_resume.py's)")
    ap.add_argument("--standalone", action="store_true")
    ap.add_argument("--no-local", action="store_true", help="skip the local runs (with --standalone)")
    args = ap.parse_args()
    work, data = Path(args.work).absolute(), str(Path(args.data).absolute())
    # the executors must run this interpreter: the driver hands its PYSPARK_PYTHON (default python3, which
    # lacks our dependencies) to every executor; without it the first standalone grid failed (stop 12)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYSPARK_PYTHON": sys.executable,
           "PYSPARK_DRIVER_PYTHON": sys.executable}
    out: dict = {"machine": f"{platform.machine()}, {os.cpu_count()} cores", "data": data}
    if not args.no_local:
        out["local_parallel_1_seconds"] = grid(work / "p1", data, env)
        out["local_parallel_2_seconds"] = grid(work / "p2", data, env, "--parallel", "2", "--set", "train.nthread=1")
        out["local_ratio_2_over_1"] = round(out["local_parallel_2_seconds"] / out["local_parallel_1_seconds"], 3)
        out["local_parallel_2_identical"] = results(work / "p2", data) == results(work / "p1", data)
    if args.standalone:
        url, procs = standalone(work / "cluster")
        try:
            common = ["--master", url, "--set", "spark.conf={spark.executor.memory: 2g}"]
            out["standalone_one_job_2_workers_seconds"] = grid(work / "s1", data, env, *common,
                                                               "--set", "train.workers=2")
            out["standalone_parallel_2_seconds"] = grid(work / "s2", data, env, *common, "--parallel", "2")
            out["standalone_ratio_parallel_over_allreduce"] = round(
                out["standalone_parallel_2_seconds"] / out["standalone_one_job_2_workers_seconds"], 3)
            # one worker per node against two workers' all-reduced sketches: equal trees are not expected
            # (the histogram bins differ), so the difference of every child's final test NDCG is reported
            a, b = results(work / "s1", data), results(work / "s2", data)
            out["standalone_children"] = len(a)
            out["standalone_max_abs_final_ndcg_difference"] = round(max(abs(a[k][0] - b[k][0]) for k in a), 4)
            if not args.no_local:
                out["standalone_parallel_2_identical_to_local_parallel_1"] = b == results(work / "p1", data)
        finally:
            for p in reversed(procs):
                p.terminate()
            for p in procs:
                p.wait(timeout=30)
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
