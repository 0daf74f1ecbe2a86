"""A Spark driver's start with and without Spark's class archive (:mod:`pipelines.app.jvm`), side by side.

    python -m benchmarks.bench_session [--runs 5] [--jvm-options "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"]

Each run is a fresh Python process that builds a ``local[2]`` session the way ``ltr`` does
(:func:`pipelines.core.session.build_session`) and runs one small job (a pandas UDF over 64 rows): the seconds to
the session and to the job's end, and the whole process's. Runs alternate without
and with the archive (``-XX:SharedArchiveFile`` in ``SPARK_SUBMIT_OPTS``), so that the machine's drift falls on
both. The archive is written first if missing (its seconds printed: a one-time cost). Prints one JSON line per
run and a summary: medians and their ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

_RUN = """
import json, resource, time
t0 = time.perf_counter()
from pipelines.core.config import SparkConfig
from pipelines.core.session import build_session
spark = build_session(SparkConfig(master="local[2]", ui=False, log_level="ERROR"))
t1 = time.perf_counter()
from pyspark.sql import functions as F
df = spark.range(64).withColumn("q", F.col("id") % 4)
n = df.groupBy("q").applyInPandas(lambda p: p.assign(id=p["id"] * 2), "id long, q long").count()
t2 = time.perf_counter()
spark.stop()
assert n == 64
print(json.dumps({"session_s": t1 - t0, "first_job_s": t2 - t1}))
"""


def one_run(option: str, base: str) -> dict:
    env = {**os.environ, "SPARK_SUBMIT_OPTS": f"{base} {option}".strip(), "PYTHONPATH": str(ROOT)}
    env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-c", _RUN], env=env, capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        raise SystemExit(f"run failed ({r.returncode}):\n{r.stderr[-3000:]}")
    out = json.loads(r.stdout.strip().splitlines()[-1])
    out["process_s"] = time.perf_counter() - t0
    return out


def main(argv: list[str] | None = None) -> int:
    from pipelines.app.jvm import build_class_archive, class_archive, java_option

    p = argparse.ArgumentParser(prog="python -m benchmarks.bench_session", description=__doc__.split("\n")[0])
    p.add_argument("--runs", type=int, default=5, help="runs of each kind (alternating)")
    p.add_argument("--jvm-options", default="-XX:TieredStopAtLevel=1 -XX:+UseSerialGC", help="both kinds' options")
    a = p.parse_args(argv)
    archive = class_archive()
    if archive is None:
        raise SystemExit("no java found")
    if not archive.exists():
        t0 = time.perf_counter()
        build_class_archive(archive)
        print(json.dumps({"archive_written_s": round(time.perf_counter() - t0, 1), "archive": str(archive)}))
    runs: dict[str, list[dict]] = {"without": [], "with": []}
    for i in range(a.runs):
        for kind, option in (("without", ""), ("with", java_option(archive))):
            r = one_run(option, a.jvm_options)
            runs[kind].append(r)
            print(json.dumps({"run": i + 1, "archive": kind, **{k: round(v, 2) for k, v in r.items()}}), flush=True)
    summary = {"machine": f"{platform.node()} ({os.cpu_count()} cores)", "runs": a.runs, "jvm_options": a.jvm_options}
    for key in ("session_s", "first_job_s", "process_s"):
        without = statistics.median(r[key] for r in runs["without"])
        with_ = statistics.median(r[key] for r in runs["with"])
        summary[key] = {"without": round(without, 2), "with": round(with_, 2), "ratio": round(with_ / without, 2)}
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
