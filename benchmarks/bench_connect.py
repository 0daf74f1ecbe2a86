"""A classic session against a client of a warm Spark Connect server: the whole ``ltr train`` process and its fixed
costs, side by side on the same data and machine.

    python -m benchmarks.bench_connect --data DATASET [--trees 100] [--repeats 3] [--work bench-out/connect]

Starts a Connect server (``ltr server start``'s: loopback, a free port, the session's properties, the project's
interpreter for its Python workers; its record and log under ``WORK/connect``), warms it with one ``ltr
train`` (its JVM's JIT and Python workers, which a server kept running has), then runs ``ltr train --path
lambdamart:TREES`` on fold 1 ``--repeats`` times in alternation: classic (a JVM of its own) and ``--remote`` to the
server (:func:`benchmarks.bench_first_tree.one_run`: seconds to the first tree, per tree, the job, the whole process,
whether the model is byte-identical to the first run's). Writes ``WORK/results.json``; prints one JSON line a run and
the medians. The server's own memory is not in the client's process tree: the peaks are not comparable.

Beside them, in the same alternation, the floor of the time to a first tree on this machine (unless ``--no-floor``):
the libraries alone, XGBoost's ``xgb.train`` and LightGBM (when installed: the ``bench`` extra), each a process of its
own that imports its library, reads fold 1's training rows from the same Parquet files and trains one tree with the
same leaves, bins and threads (:func:`benchmarks.bench_scale.reference`); its whole process is its first tree. No
Spark, no session, no check of the workers, no validation rows: what any process that trains from these files pays.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import subprocess
import time
from pathlib import Path
from typing import Any

from benchmarks.bench_first_tree import one_run
from benchmarks.bench_scale import reference_command
from pipelines.app import server
from pipelines.plugins.run_config import load_run_config
from pipelines.testing.processes import ROOT


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", required=True, help="an ingested dataset (ltr ingest)")
    p.add_argument("--trees", type=int, default=100)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--work", default="bench-out/connect")
    p.add_argument("--no-floor", action="store_true", help="leave out the libraries' own first tree (the floor)")
    a = p.parse_args(argv)
    work = Path(a.work).resolve()
    work.mkdir(parents=True, exist_ok=True)
    cfg = load_run_config(None, [f"work_dir={work}"])
    url = server.start(cfg)["url"]  # `ltr server start`: its record and log under WORK/connect
    floors = [] if a.no_floor else ["xgb_train", *(["lightgbm"] if importlib.util.find_spec("lightgbm") else [])]
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
            for kind in floors:
                res = floor_run(kind, Path(a.data), work / f"run{r}-{kind}.json")
                runs.append(res)
                print(json.dumps(res), flush=True)
    finally:
        server.stop(cfg)
    (work / "results.json").write_text(json.dumps(runs, indent=1))
    for kind in ("classic", "connect", *floors):
        mine = [r for r in runs if r["kind"] == kind]
        keys = [k for k in ("first_tree_s", "job_s", "process_s", "per_tree_s", "load_s", "matrix_s") if k in mine[0]]
        print(kind, json.dumps({k: statistics.median(r[k] for r in mine) for k in keys}))
    return 0


def floor_run(kind: str, data: Path, out: Path) -> dict[str, Any]:
    """One tree by library ``kind`` alone (``xgb_train`` or ``lightgbm``), in a process of its own: its whole
    process (the time to its first tree), and the reference's own load and matrix times."""
    t0 = time.time()
    subprocess.run(reference_command(kind, data, 1, out), cwd=ROOT, check=True)
    total = round(time.time() - t0, 1)
    ref = json.loads(out.read_text())
    return {
        "kind": kind,
        "first_tree_s": total,
        "process_s": total,
        "load_s": ref["load_s"],
        "matrix_s": ref["matrix_s"],
    }


if __name__ == "__main__":
    raise SystemExit(main())
