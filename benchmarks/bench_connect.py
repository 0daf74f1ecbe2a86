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
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

from benchmarks.bench_first_tree import one_run
from pipelines.app import server
from pipelines.plugins.run_config import load_run_config
from pipelines.testing.processes import ROOT


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", required=True, help="an ingested dataset (ltr ingest)")
    p.add_argument("--trees", type=int, default=100)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--work", default="bench-out/connect")
    a = p.parse_args(argv)
    work = Path(a.work).resolve()
    work.mkdir(parents=True, exist_ok=True)
    cfg = load_run_config(None, [f"work_dir={work}"])
    url = server.start(cfg)["url"]  # `ltr server start`: its record and log under WORK/connect
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
        server.stop(cfg)
    (work / "results.json").write_text(json.dumps(runs, indent=1))
    for kind in ("classic", "connect"):
        mine = [r for r in runs if r["kind"] == kind]
        med = {k: statistics.median(r[k] for r in mine) for k in ("first_tree_s", "job_s", "process_s", "per_tree_s")}
        print(kind, json.dumps(med))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
