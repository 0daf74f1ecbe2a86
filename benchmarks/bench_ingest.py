"""Ingest throughput, side by side on the same file and machine.

    python -m benchmarks.bench_ingest [--rows 500000] [--work bench-out] [--repeat 3]
    python -m benchmarks.bench_ingest --full-scale [--work bench-out]

Default mode: one MSLR-shaped LETOR file of at least ``--rows`` rows (the five
test files of a generated dataset, concatenated), its bytes warm in the page
cache, then, alternating over ``--repeat`` rounds:

* ``xgboost``: ``xgboost.DMatrix("file?format=libsvm")`` with all cores, XGBoost's
  multithreaded C++ text parser (parse only, into its in-memory matrix);
* ``spark_split_cast``: a plain Spark parse of the same file: ``read.text``,
  ``split`` on spaces and ``:``, ``cast`` to int / float, written to Parquet in the
  same layout (one column per feature) as ours;
* ``ltr_ingest``: ``pipelines.data.ingest.ingest`` end to end (parse, validate, sort,
  Parquet, quarantine check, manifest, fingerprint, atomic commit), in the same
  warm Spark session; its first run in a fresh session is reported apart as
  ``ltr_ingest_cold`` (Python workers start and load the numba kernels).

``--full-scale``: generate 31,531 queries (MSLR-WEB30K's count) and ingest all
five folds; report wall times and the peak resident memory of the whole process
tree (driver, JVM, Python workers), sampled every 0.2 s.

Prints one JSON document; the closing notes quote it.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import shutil
import statistics
import sys
import threading
import time
from pathlib import Path

from pipelines.core.config import IngestConfig, SparkConfig, load_dataset_spec
from pipelines.core.proctree import tree_rss
from pipelines.core.session import build_session
from pipelines.data.generate import generate, mslr_queries
from pipelines.data.ingest import ingest

ROOT = Path(__file__).resolve().parent.parent

log = logging.getLogger("bench_ingest")


# ------------------------------------------------------------ memory
class PeakRss:
    """Peak summed RSS of this process and all its descendants, sampled from /proc."""

    def __init__(self, interval: float = 0.2) -> None:
        self.interval = interval
        self.peak = 0
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, tree_rss(os.getpid()))
            self._stop.wait(self.interval)

    def __enter__(self) -> PeakRss:
        self._t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._t.join()


# ------------------------------------------------------------ inputs
def make_file(work: Path, rows: int) -> Path:
    """One LETOR file with at least ``rows`` rows (reused if present)."""
    path = work / "one" / "train.txt"
    if path.exists():
        return path
    _, n, _ = mslr_queries(10**6, seed=77)
    queries = int((n.cumsum() < rows).sum()) + 1
    queries = max(queries, 5)
    gen = work / "gen_one"
    generate(str(gen), queries=queries, seed=77)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as out:
        for f in range(1, 6):
            with open(gen / f"Fold{f}" / "test.txt", "rb") as src:
                shutil.copyfileobj(src, out, 16 << 20)
    shutil.rmtree(gen)
    return path


def warm(path: Path) -> None:
    with open(path, "rb") as f:
        while f.read(64 << 20):
            pass


# ------------------------------------------------------------ contenders
def run_xgboost(path: Path, threads: int) -> float:
    import xgboost as xgb

    t0 = time.perf_counter()
    d = xgb.DMatrix(f"{path}?format=libsvm", nthread=threads)
    dt = time.perf_counter() - t0
    assert d.num_row() > 0
    return dt


def run_spark_split_cast(spark, path: Path, out: Path, n_features: int) -> float:
    from pyspark.sql import functions as F

    shutil.rmtree(out, ignore_errors=True)
    t0 = time.perf_counter()
    tok = F.split(F.col("value"), " ")
    cols = [tok[0].cast("tinyint").alias("label"), F.split(tok[1], ":")[1].cast("int").alias("qid")]
    cols += [F.split(tok[i + 1], ":")[1].cast("float").alias(f"f{i}") for i in range(1, n_features + 1)]
    spark.read.text(str(path)).select(*cols).write.parquet(str(out))
    return time.perf_counter() - t0


def run_ltr(spark, path: Path, out: Path) -> float:
    t0 = time.perf_counter()
    ingest(spark, str(path), str(out), load_dataset_spec("mslr"), IngestConfig())
    return time.perf_counter() - t0


# ------------------------------------------------------------ modes
def bench_file(args: argparse.Namespace) -> dict:
    work = Path(args.work)
    path = make_file(work, args.rows)
    size = path.stat().st_size
    rows = sum(1 for _ in open(path, "rb"))
    warm(path)
    threads = os.cpu_count() or 1
    spark = build_session(SparkConfig(master=f"local[{threads}]", driver_memory="6g", log_level="ERROR"))
    times: dict[str, list[float]] = {"xgboost": [], "spark_split_cast": [], "ltr_ingest": []}
    cold = run_ltr(spark, path, work / "ltr_out")
    for _ in range(args.repeat):
        times["xgboost"].append(run_xgboost(path, threads))
        times["spark_split_cast"].append(run_spark_split_cast(spark, path, work / "spark_out", 136))
        times["ltr_ingest"].append(run_ltr(spark, path, work / "ltr_out"))
    med = {k: statistics.median(v) for k, v in times.items()}
    mbs = {k: size / 1e6 / v for k, v in med.items()}
    return {
        "machine": f"{platform.machine()}, {threads} cores, {platform.python_version()}",
        "file": str(path),
        "bytes": size,
        "rows": rows,
        "seconds": {k: [round(x, 3) for x in v] for k, v in times.items()} | {"ltr_ingest_cold": round(cold, 3)},
        "median_seconds": {k: round(v, 3) for k, v in med.items()},
        "MB_per_s": {k: round(v, 1) for k, v in mbs.items()} | {"ltr_ingest_cold": round(size / 1e6 / cold, 1)},
        "ltr_vs_spark_split_cast": round(med["spark_split_cast"] / med["ltr_ingest"], 2),
        "ltr_time_over_xgboost_time": round(med["ltr_ingest"] / med["xgboost"], 2),
        "ltr_cold_time_over_xgboost_time": round(cold / med["xgboost"], 2),
    }


def bench_full(args: argparse.Namespace) -> dict:
    work = Path(args.work)
    src = work / "web30k"
    res: dict = {"machine": f"{platform.machine()}, {os.cpu_count()} cores"}
    with PeakRss() as mem:
        t0 = time.perf_counter()
        s = generate(str(src), queries=31531, seed=2018)
        res["generate"] = {
            "seconds": round(time.perf_counter() - t0, 1),
            "rows": s.rows,
            "queries": s.queries,
            "bytes_on_disk_all_files": sum(p.stat().st_size for p in src.glob("Fold*/*.txt")),
        }
    res["generate"]["peak_rss_GiB"] = round(mem.peak / 2**30, 2)
    spark = build_session(SparkConfig(driver_memory="4g", log_level="ERROR"))
    with PeakRss() as mem:
        t0 = time.perf_counter()
        m = ingest(spark, str(src), str(work / "web30k_ds"), load_dataset_spec("mslr"), IngestConfig())
        res["ingest"] = {
            "seconds": round(time.perf_counter() - t0, 1),
            "rows": m["rows"],
            "queries": m["queries"],
            "layout": m["layout"],
            "fingerprint": m["fingerprint"],
        }
    res["ingest"]["peak_rss_GiB"] = round(mem.peak / 2**30, 2)
    return res


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=500_000)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--work", default=str(ROOT / "bench-out"))
    p.add_argument("--full-scale", action="store_true")
    args = p.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    Path(args.work).mkdir(parents=True, exist_ok=True)
    res = bench_full(args) if args.full_scale else bench_file(args)
    print(json.dumps(res, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
