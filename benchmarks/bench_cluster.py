"""Per-tree cost of a 2-worker ``ltr train`` on a standalone cluster against the same run on ``local[2]``.

    python -m benchmarks.bench_cluster [--work bench-out/cluster] [--queries 2000] [--trees 40] [--repeats 2]

Both sides, on the same data and machine, alternately: ``ltr train --workers 2
--nthread 1`` (two barrier workers of one thread, histograms all-reduced over
XGBoost's collective), Python LambdaMART, 64 leaves, NDCG on vali and test after
every tree, a fresh work directory per run (nothing resumed):

* ``standalone``: a master and two one-core workers started here on loopback
  with ``spark-class`` (two executor JVMs); the executors run this interpreter
  (same machine: no packed archive needed, which would only add its unpacking
  to the job's start, not to the per-tree cost);
* ``local2``: ``--master local[2]`` (one JVM, two task slots).

Per tree: the training job's wall time / trees (``training.jobs[0].seconds_per_tree``
in ``_train.json``: includes loading the fold into the workers) and rank 0's
boost + objective time / trees (the trees themselves). Medians over
``--repeats``; every run's figures are printed too. The models of the two sides
must be identical (same trees): printed as ``identical_models``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from benchmarks.bench_parallel import standalone
from pipelines.core.proctree import tree_memory

ROOT = Path(__file__).resolve().parent.parent


def ltr(*args: str) -> list[str]:
    return [sys.executable, "-m", "pipelines.app.cli", *args]


def train(
    master: str,
    data: Path,
    work: Path,
    trees: int,
    env: dict[str, str],
    workers: int = 2,
    nthread: int = 1,
    watch: list[int] | None = None,
) -> dict[str, Any]:
    """One ``ltr train`` and its figures; ``watch``: pids (the standalone workers) whose process trees' peak
    memory (summed RSS: the worker JVM, its executor JVM and the executor's Python workers) is sampled."""
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    cmd = ltr(
        "train",
        "--master",
        master,
        "--data",
        str(data),
        "--fold",
        "1",
        "--path",
        f"lambdamart:{trees}",
        "--workers",
        str(workers),
        "--nthread",
        str(nthread),
        "--out",
        str(work / "model"),
        "--set",
        f"work_dir={work}",
        "--set",
        "spark.conf={spark.executor.memory: 2g}",
    )
    peaks = [0] * len(watch or [])
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.2):
            for i, pid in enumerate(watch or []):
                peaks[i] = max(peaks[i], tree_memory(pid)["tree"])

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    t0 = time.perf_counter()
    try:
        with open(work / "ltr.log", "w") as log:
            subprocess.run(cmd, check=True, env=env, cwd=ROOT, stderr=log)
    finally:
        done.set()
        sampler.join()
    wall = time.perf_counter() - t0
    doc = json.loads((work / "model" / "_train.json").read_text())
    job = doc["training"]["jobs"][0]
    rank0 = job["worker_timings"][0]
    out = {
        "process_seconds": round(wall, 1),
        "job_seconds": round(job["seconds"], 2),
        "job_seconds_per_tree": round(job["seconds_per_tree"], 4),
        "trees_seconds_per_tree": round((rank0["boost"] + rank0["objective"]) / rank0["trees"], 4),
        "eval_seconds_per_tree": round(rank0["eval"] / rank0["trees"], 4),
        "final_test": doc["final"]["test_ndcg_at_10"],
        "rows_per_worker": [t["rows"] for t in job["worker_timings"]],
    }
    if watch:
        out["peak_per_worker_gib"] = [round(p / 2**30, 2) for p in peaks]
    print(f"{work.name}: {out}", file=sys.stderr, flush=True)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", default=str(ROOT / "bench-out" / "cluster"))
    ap.add_argument("--queries", type=int, default=2000)
    ap.add_argument("--trees", type=int, default=40)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--data", help="an ingested dataset to train on (default: one generated under --work)")
    ap.add_argument(
        "--one-worker",
        action="store_true",
        help="compare the two standalone workers with ONE local worker of 2 threads (the trees must not depend on "
        "the number of workers) instead of local[2]'s two; with each standalone worker's peak memory",
    )
    args = ap.parse_args()
    work = Path(args.work).absolute()
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
    }
    data = Path(args.data).absolute() if args.data else work / "data" / "dataset"
    if not (data / "_manifest.json").is_file():
        letor = work / "data" / "letor"
        subprocess.run(
            ltr("generate", "--out", str(letor), "--queries", str(args.queries), "--seed", "1"),
            check=True,
            env=env,
            cwd=ROOT,
        )
        subprocess.run(ltr("ingest", "--src", str(letor), "--out", str(data)), check=True, env=env, cwd=ROOT)
    manifest = json.loads((data / "_manifest.json").read_text())
    cluster = standalone(work / "cluster")
    url = cluster.url
    runs: dict[str, list[dict[str, float]]] = {"standalone": [], "local2": []}
    try:
        watch = [p.pid for p in cluster.procs[1:]] if args.one_worker else None
        for i in range(args.repeats):
            runs["standalone"].append(train(url, data, work / f"standalone-{i}", args.trees, env, watch=watch))
            if args.one_worker:
                runs["local2"].append(train("local[2]", data, work / f"local2-{i}", args.trees, env, 1, 2))
            else:
                runs["local2"].append(train("local[2]", data, work / f"local2-{i}", args.trees, env))
    finally:
        cluster.stop()
    models = {side: (work / f"{side}-0" / "model" / "model.json").read_text() for side in runs}
    med = {
        side: {k: statistics.median(r[k] for r in rs) for k in rs[0] if isinstance(rs[0][k], int | float)}
        for side, rs in runs.items()
    }
    out = {
        "machine": f"{platform.machine()}, {os.cpu_count()} cores",
        "rows": manifest["rows"],
        "queries": manifest["queries"],
        "trees": args.trees,
        "repeats": args.repeats,
        "median": med,
        "ratio_standalone_over_local2": {
            k: round(med["standalone"][k] / med["local2"][k], 3)
            for k in ("job_seconds_per_tree", "trees_seconds_per_tree")
        },
        "identical_models": models["standalone"] == models["local2"],
        "runs": runs,
    }
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
