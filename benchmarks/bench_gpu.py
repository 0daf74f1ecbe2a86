"""GPU against CPU training (``train.device=cuda`` against ``cpu``), side by side on the same data and machine.

    python -m benchmarks.bench_gpu [--rows 500000,2000000] [--trees 200] [--devices cpu,cuda]
                                   [--runs ref_ndcg,ref_mse,loop_xgb_lambdamart,loop_lambdamart]
                                   [--test-queries 2000] [--threads 0] [--out bench-out/gpu]

    # CPU only, tiny data (under a minute): a check of the script on a machine without a GPU
    python -m benchmarks.bench_gpu --devices cpu --rows 20000,40000 --trees 10 --test-queries 100
    # on the workplace's lent GPU machine (no XGBoost, PySpark or Java there): benchmarks/gpu_device.sh

No Spark session and no JVM: the data are generated in memory and each run is either in-process
XGBoost or the project's own worker loop (:func:`pipelines.kernel.loop.run_nodes`, the code a
Spark barrier task runs, here with one worker and :class:`~pipelines.kernel.env.LocalComm`).
The ``pyspark`` package must still be importable (:mod:`pipelines.execution.barrier_job` and
:mod:`pipelines.data.generate` import it at the top); no JVM is started.

Data: MSLR-shaped rows from :func:`pipelines.data.generate.simulate_batch` (136 features, labels 0-4,
about 121 documents a query; the model behind ``ltr generate``), generated in batches of 256
queries in parallel, features cast to float32 as ingest stores them (not rounded to LETOR's 6
decimals). The last ``--test-queries`` queries are the held-out test split; each ``--rows`` size
trains on the first whole queries that reach that many rows, so the smaller sets are prefixes of
the larger one and every run is scored on the same test queries.

Parameters: the project's (:func:`pipelines.execution.barrier_job.make_settings` on a ``TrainConfig`` with
``device`` and ``nthread`` = all cores): ``hist``, 64 leaves (lossguide), eta 0.05, 256 bins,
NDCG@10 (top-10 pairs). Runs, each on every device:

* ``ref_ndcg`` / ``ref_mse``: in-process ``Booster.update`` with ``rank:ndcg`` /
  ``reg:squarederror`` (:func:`pipelines.kernel.loop.booster_params`) on one QuantileDMatrix per size
  built from host (numpy) rows; per-tree time of every tree, reported as the mean over trees 2..T
  (the first tree, which on a GPU also uploads the matrix, is reported apart);
* ``loop_xgb_lambdamart`` / ``loop_lambdamart``: the worker loop with the built-in objective
  (path ``xgb_lambdamart:T``) / the Python LambdaMART objective (``lambdamart:T``: margins
  predicted, gradients computed by numba on the CPU, ``Booster.boost`` with them); NDCG@10 on the
  test split walked every tree (``eval``), one checkpoint at the end. Per-tree: (boost +
  objective) / trees, all trees, as bench_train reports it, and the wall time between the tree
  events of trees 2..T (which includes the eval walk).

Before the runs, each device is warmed up (CUDA: :func:`pipelines.kernel.env.check_device`, which
trains one tree on the GPU and refuses a silent CPU fallback; both: a few trees of every run kind on
a small prefix, which also compiles the numba kernels). NDCG@10 (:func:`udfs.metrics.ndcg`, the
project's conventions) of every run on the test split; GPU and CPU ``hist`` differ slightly
(floating-point summation order), so the table shows both values and their difference.

Output: ``<out>/bench_gpu.json`` and a table on stdout.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import xgboost as xgb

from pipelines.core.config import TrainConfig
from pipelines.data.dataset import Dataset
from pipelines.data.generate import BATCH_QUERIES, mslr_queries, simulate_batch
from pipelines.execution.barrier_job import make_settings
from pipelines.kernel.env import check_device
from pipelines.kernel.loop import Settings, SplitData, WorkerData, booster_params, run_nodes
from pipelines.plan.paths import parse_path
from pipelines.plan.trie import build_plan
from pipelines.store.checkpoints import CheckpointStore
from pipelines.store.results import path_result
from udfs.metrics import NdcgSpec, ndcg

ROOT = Path(__file__).resolve().parent.parent
RUNS = ("ref_ndcg", "ref_mse", "loop_xgb_lambdamart", "loop_lambdamart")
REF_OBJECTIVE = {"ref_ndcg": "xgb_lambdamart", "ref_mse": "xgb_mse"}  # the project's names of the built-ins
LOOP_PATH = {"loop_xgb_lambdamart": "xgb_lambdamart", "loop_lambdamart": "lambdamart"}
SEED = 4242


# ------------------------------------------------------------ data
def _batch(args: tuple[int, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    b, n_docs = args
    labels, X = simulate_batch(np.random.default_rng([SEED, 1, b]), n_docs)
    return labels.astype(np.float32), X.astype(np.float32)


def make_data(train_rows: int, test_queries: int, procs: int) -> tuple[SplitData, SplitData, float]:
    """(train, test, seconds): at least ``train_rows`` training rows in whole queries, then ``test_queries``."""
    t0 = time.perf_counter()
    mean_docs = 121.0
    queries = int(train_rows / mean_docs * 1.05) + test_queries + 64
    qid, n_docs, _ = mslr_queries(queries, SEED)
    cum = np.cumsum(n_docs)
    n_train = int(np.searchsorted(cum, train_rows) + 1)
    if n_train + test_queries > queries:
        raise ValueError(f"generated too few queries for {train_rows} rows: raise the estimate in make_data")
    keep = n_train + test_queries
    qid, n_docs = qid[:keep], n_docs[:keep]
    jobs = [(b, n_docs[s : s + BATCH_QUERIES]) for b, s in enumerate(range(0, keep, BATCH_QUERIES))]
    if procs > 1:
        with ProcessPoolExecutor(procs, mp_context=multiprocessing.get_context("fork")) as ex:
            parts = list(ex.map(_batch, jobs))
    else:
        parts = [_batch(j) for j in jobs]
    y = np.concatenate([p[0] for p in parts])
    X = np.concatenate([p[1] for p in parts])
    q = np.repeat(qid, n_docs).astype(np.int32)
    split = int(cum[n_train - 1])
    train = SplitData(X[:split], y[:split], q[:split])
    test = SplitData(X[split:], y[split:], q[split:])
    return train, test, time.perf_counter() - t0


def prefix(sp: SplitData, rows: int) -> SplitData:
    """The first whole queries of ``sp`` that hold at least ``rows`` rows (all of it when fewer)."""
    if sp.X is None:
        raise ValueError("prefix needs rows in memory (SplitData.X), not bin codes")
    end = int(sp.offsets[min(int(np.searchsorted(sp.offsets, rows)), sp.offsets.size - 1)])
    return SplitData(sp.X[:end], sp.y[:end], sp.qid[:end])


# ------------------------------------------------------------ runs
def settings_for(device: str, threads: int, trees: int) -> Settings:
    """The project's worker settings for ``device`` (make_settings on a TrainConfig, as the driver builds them)."""
    cfg = TrainConfig(
        workers=1,
        nthread=threads,
        device=device,
        eval_every=trees,
        score_dist_trees=[],
        checkpoint_every=trees,
    )
    ds = Dataset(path="(generated in memory)", manifest={"label_range": [0, 4], "n_features": 136})
    return make_settings(cfg, NdcgSpec(), ds, threads)


def test_ndcg(scores: np.ndarray, test: SplitData) -> float:
    return float(ndcg(test.offsets, test.y, np.asarray(scores, np.float64), NdcgSpec()).mean())


def reference(run: str, dm: Any, test: SplitData, dtest: Any, settings: Settings, trees: int) -> dict[str, Any]:
    """In-process ``Booster.update``, one tree at a time, timed per tree."""
    params = booster_params(settings, REF_OBJECTIVE[run])
    b = xgb.Booster(params, [dm])
    per_tree = []
    t_all = time.perf_counter()
    for i in range(trees):
        t0 = time.perf_counter()
        b.update(dm, i)
        per_tree.append(time.perf_counter() - t0)
    scores = b.predict(dtest, output_margin=True)  # also waits for anything the device still has queued
    total = time.perf_counter() - t_all
    used = json.loads(b.save_config())["learner"]["generic_param"]["device"]
    rest = per_tree[1:] or per_tree
    return {
        "device_used": used,
        "trees": trees,
        "first_tree_s": per_tree[0],
        "per_tree_s": float(np.mean(rest)),
        "per_tree_median_s": float(np.median(rest)),
        "per_tree_all_s": float(np.mean(per_tree)),
        "total_s": total,
        "test_ndcg10": test_ndcg(scores, test),
    }


def loop(run: str, train: SplitData, test: SplitData, settings: Settings, trees: int) -> dict[str, Any]:
    """The project's worker loop on one worker (LocalComm): its timings, the tree events' wall times, final NDCG."""
    path = parse_path(f"{LOOP_PATH[run]}:{trees}", run)
    plan = build_plan([path])
    stamps: list[float] = []

    def events(ev: dict[str, Any]) -> None:
        if ev.get("ev") == "tree":
            stamps.append(time.perf_counter())

    data = WorkerData(SplitData(train.X, train.y, train.qid), None, SplitData(test.X, test.y, test.qid))
    with tempfile.TemporaryDirectory(prefix="bench-gpu-ckpt-") as d:
        store = CheckpointStore(d)
        t0 = time.perf_counter()
        timing = run_nodes(data, plan.nodes, settings, store, events=events)
        wall = time.perf_counter() - t0
        res = path_result(store, run, plan.chains[run], with_model=False)
    n = int(timing["trees"])
    steady = (stamps[-1] - stamps[0]) / (len(stamps) - 1) if len(stamps) > 1 else float("nan")
    return {
        "device_used": settings.params["device"],
        "trees": n,
        "per_tree_s": (timing["boost"] + timing["objective"]) / n,
        "objective_per_tree_s": timing["objective"] / n,
        "eval_per_tree_s": timing["eval"] / n,
        "wall_per_tree_after_first_s": steady,
        "matrices_s": timing["dmatrix"],
        "checkpoint_s": timing["checkpoint"],
        "wall_s": wall,
        "test_ndcg10": res.test[-1],
    }


def warm_up(device: str, runs: list[str], train: SplitData, test: SplitData, threads: int) -> float:
    """A few trees of every run kind on a small prefix (CUDA context, kernels, numba compilation)."""
    t0 = time.perf_counter()
    small, s = prefix(train, 20_000), settings_for(device, threads, 3)
    dm = xgb.QuantileDMatrix(small.X, small.y, qid=small.qid, max_bin=256, nthread=threads)
    tsmall = prefix(test, 2000)
    for run in runs:
        if run in REF_OBJECTIVE:
            reference(run, dm, tsmall, xgb.DMatrix(tsmall.X, nthread=threads), s, 3)
        else:
            loop(run, small, tsmall, s, 3)
    del dm
    return time.perf_counter() - t0


# ------------------------------------------------------------ report
def machine() -> dict[str, Any]:
    info: dict[str, Any] = {
        "host": platform.node(),
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "xgboost": xgb.__version__,
        "xgboost_cuda": bool(xgb.build_info().get("USE_CUDA")),
        "xgboost_cuda_version": xgb.build_info().get("CUDA_VERSION"),
        "numpy": np.__version__,
        "code": str(Path(make_settings.__code__.co_filename).resolve().parent.parent),
    }
    try:
        with open("/proc/cpuinfo") as f:
            info["cpu"] = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), "?")
    except OSError:
        info["cpu"] = platform.processor()
    try:
        q = "name,memory.total,driver_version"
        out = subprocess.run(
            ["nvidia-smi", f"--query-gpu={q}", "--format=csv,noheader"], capture_output=True, text=True, timeout=30
        )
        info["gpu"] = out.stdout.strip() or out.stderr.strip()
    except (OSError, subprocess.SubprocessError):
        info["gpu"] = None
    return info


def table(results: list[dict[str, Any]], devices: list[str]) -> str:
    lines = []
    head = ["train rows", "run", "trees"]
    for d in devices:
        head += [f"{d} s/tree", f"{d} 1st tree s", f"{d} NDCG@10"]
    if "cpu" in devices and len(devices) > 1:
        head += ["speed-up", "NDCG diff"]
    lines.append(" | ".join(head))
    lines.append(" | ".join("---" for _ in head))
    for r in results:
        row = [f"{r['rows']:,}", r["run"], str(r["trees"])]
        for d in devices:
            x = r["devices"].get(d)
            if x is None or "error" in x:
                row += ["-", "-", "-"]
                continue
            first = x.get("first_tree_s")
            row += [f"{x['per_tree_s']:.4f}", "-" if first is None else f"{first:.3f}", f"{x['test_ndcg10']:.4f}"]
        if "cpu" in devices and len(devices) > 1:
            cpu = r["devices"].get("cpu", {})
            other = [r["devices"].get(d, {}) for d in devices if d != "cpu"][0]
            if "per_tree_s" in cpu and "per_tree_s" in other:
                row += [
                    f"{cpu['per_tree_s'] / other['per_tree_s']:.2f}x",
                    f"{other['test_ndcg10'] - cpu['test_ndcg10']:+.4f}",
                ]
            else:
                row += ["-", "-"]
        lines.append(" | ".join(row))
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", default="500000,2000000", help="comma-separated training sizes in rows")
    p.add_argument("--trees", type=int, default=200)
    p.add_argument("--devices", default="cpu,cuda", help="comma-separated XGBoost devices (cpu, cuda)")
    p.add_argument("--runs", default=",".join(RUNS), help=f"comma-separated, of {', '.join(RUNS)}")
    p.add_argument("--test-queries", type=int, default=2000)
    p.add_argument("--threads", type=int, default=0, help="CPU threads (0: all cores)")
    p.add_argument("--out", default=str(ROOT / "bench-out" / "gpu"))
    args = p.parse_args()
    sizes = sorted(int(x) for x in args.rows.split(","))
    devices = [d.strip() for d in args.devices.split(",") if d.strip()]
    runs = [r.strip() for r in args.runs.split(",") if r.strip()]
    bad = [r for r in runs if r not in RUNS]
    if bad or args.trees < 2:
        p.error(f"--runs: unknown {bad}; expected some of {RUNS}" if bad else "--trees must be at least 2")
    threads = args.threads or os.cpu_count() or 1
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    out_file = out_dir / "bench_gpu.json"
    report: dict[str, Any] = {
        "machine": machine(),
        "threads": threads,
        "trees": args.trees,
        "devices": devices,
        "runs": runs,
        "params": None,
        "results": [],
    }
    print(json.dumps(report["machine"]), flush=True)

    train_all, test, gen_s = make_data(sizes[-1], args.test_queries, threads)
    report["data"] = {
        "generator": "pipelines.data.generate.simulate_batch",
        "train_rows_max": int(train_all.y.size),
        "test_rows": int(test.y.size),
        "test_queries": test.n_queries,
        "seconds": round(gen_s, 2),
    }
    print(
        f"data: {train_all.y.size:,} train rows, {test.y.size:,} test rows ({test.n_queries} queries), {gen_s:.1f} s",
        flush=True,
    )

    usable = []
    for d in devices:
        try:
            check_device(d)  # CUDA: refuses an XGBoost without CUDA or a missing GPU (one tree on the GPU)
            report.setdefault("warm_up_s", {})[d] = round(warm_up(d, runs, train_all, test, threads), 2)
            usable.append(d)
        except Exception as e:  # noqa: BLE001 -- a device that fails (no GPU, no CUDA build) is reported, not fatal
            report.setdefault("device_errors", {})[d] = f"{type(e).__name__}: {e}"
            print(f"device {d}: {e}", flush=True)
    report["params"] = {d: settings_for(d, threads, args.trees).params for d in usable}
    dtest = xgb.DMatrix(test.X, nthread=threads)

    def save() -> None:
        out_file.write_text(json.dumps(report, indent=2))

    for rows in sizes:
        train = prefix(train_all, rows)
        t0 = time.perf_counter()
        dm = (
            xgb.QuantileDMatrix(train.X, train.y, qid=train.qid, max_bin=256, nthread=threads)
            if any(r in REF_OBJECTIVE for r in runs)
            else None
        )
        dm_s = time.perf_counter() - t0
        for run in runs:
            r: dict[str, Any] = {
                "rows": int(train.y.size),
                "queries": train.n_queries,
                "run": run,
                "trees": args.trees,
                "devices": {},
            }
            if dm is not None and run in REF_OBJECTIVE:
                r["quantile_dmatrix_s"] = round(dm_s, 2)
            for d in usable:
                s = settings_for(d, threads, args.trees)
                try:
                    if run in REF_OBJECTIVE:
                        x = reference(run, dm, test, dtest, s, args.trees)
                    else:
                        x = loop(run, train, test, s, args.trees)
                except Exception as e:  # noqa: BLE001 -- one failed run must not lose the others' figures
                    x = {"error": f"{type(e).__name__}: {e}"}
                r["devices"][d] = x
                print(f"{rows:>9,} {run:<20} {d:<5} {json.dumps(x)}", flush=True)
            if "cpu" in r["devices"] and len(usable) > 1:
                cpu = r["devices"]["cpu"]
                for d in usable:
                    x = r["devices"][d]
                    if d != "cpu" and "per_tree_s" in x and "per_tree_s" in cpu:
                        x["speedup_vs_cpu"] = round(cpu["per_tree_s"] / x["per_tree_s"], 3)
                        x["ndcg_diff_vs_cpu"] = x["test_ndcg10"] - cpu["test_ndcg10"]
            report["results"].append(r)
            save()
        del dm
    save()
    print()
    print(table(report["results"], usable))
    print(f"\nwritten: {out_file}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
