"""A classic session against a client of a warm Spark Connect server: the whole ``ltr train`` process and its fixed
costs, side by side on the same data and machine.

    python -m benchmarks.bench_connect --data DATASET [--trees 100] [--repeats 3] [--work bench-out/connect]

Starts a Connect server (``spark-submit --class ...SparkConnectServer`` on ``local[2]``, loopback, a free port, the
project's interpreter for its Python workers, as docs/how-to/spark-connect.md says), warms it with one ``ltr
train`` (its JVM's JIT and Python workers, which a server kept running has), then runs ``ltr train --path
lambdamart:TREES`` on fold 1 ``--repeats`` times in alternation: classic (a JVM of its own) and ``--remote`` to the
server (:func:`benchmarks.bench_first_tree.one_run`: seconds to the first tree, per tree, the job, the whole process,
whether the model is byte-identical to the first run's). Writes ``WORK/results.json``; prints one JSON line a run and
the medians. The server's own memory is not in the client's process tree: the peaks are not comparable.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.bench_first_tree import one_run
from pipelines.testing.processes import ROOT, SPARK_BIN, free_port, stop_process


def start_server(log: Path) -> tuple[subprocess.Popen, str]:
    """A Connect server on local[2] and a free loopback port, started and answering; (process, URL)."""
    port = free_port()
    # the JVM options of a classic `ltr` session (none of the tests' quick JIT): the same JVM either way
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
    cmd = [str(SPARK_BIN / "spark-submit"), "--class", "org.apache.spark.sql.connect.service.SparkConnectServer"]
    cmd += ["--master", "local[2]", "--conf", "spark.connect.grpc.binding.address=127.0.0.1"]
    cmd += ["--conf", f"spark.connect.grpc.binding.port={port}", "--conf", "spark.scheduler.mode=FAIR"]
    cmd += ["--conf", f"spark.pyspark.python={sys.executable}", "--conf", "spark.ui.enabled=false"]
    with open(log, "wb") as f:
        proc = subprocess.Popen(cmd, env=env, stdout=f, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 180
    while "Spark Connect server started" not in log.read_text(errors="replace"):
        if proc.poll() is not None or time.monotonic() > deadline:
            stop_process(proc)
            raise SystemExit(f"no Connect server; see {log}")
        time.sleep(0.5)
    return proc, f"sc://127.0.0.1:{port}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", required=True, help="an ingested dataset (ltr ingest)")
    p.add_argument("--trees", type=int, default=100)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--work", default="bench-out/connect")
    a = p.parse_args(argv)
    work = Path(a.work).resolve()
    work.mkdir(parents=True, exist_ok=True)
    server, url = start_server(work / "server.log")
    runs: list[dict[str, Any]] = []
    try:
        one_run(ROOT, a.data, a.trees, work / "warm-up", [f"spark.remote={url}"])
        for r in range(a.repeats):
            for kind, sets in (("classic", []), ("connect", [f"spark.remote={url}"])):
                res = {"kind": kind, **one_run(ROOT, a.data, a.trees, work / f"run{r}-{kind}", sets)}
                if runs:
                    res["identical_to_first"] = Path(res["model"]).read_bytes() == Path(runs[0]["model"]).read_bytes()
                runs.append(res)
                print(json.dumps(res), flush=True)
    finally:
        stop_process(server)
    (work / "results.json").write_text(json.dumps(runs, indent=1))
    for kind in ("classic", "connect"):
        mine = [r for r in runs if r["kind"] == kind]
        med = {k: statistics.median(r[k] for r in mine) for k in ("first_tree_s", "job_s", "process_s", "per_tree_s")}
        print(kind, json.dumps(med))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
