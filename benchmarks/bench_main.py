"""The main job's duration, as README states it: ``ltr run`` from nothing, timed by this script.

    python -m benchmarks.bench_main [--repeats 3] [--work bench-out/main]

Each repeat runs README's main command's job (``ltr run``, default config: generate 600
queries, ingest, difficulty, curricula, the default grid, the report) as a fresh process in
an empty work directory and times it; the grid's share is read from the job's own log
lines. Prints the median and every run's figures (seconds) as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
STAMP = re.compile(r"^(\d\d:\d\d:\d\d) INFO ")


def _seconds(log: str, start: str, end: str) -> float | None:
    """Seconds between the first log line containing ``start`` and the first after it containing ``end``."""
    t0 = None
    for line in log.splitlines():
        m = STAMP.match(line)
        if not m:
            continue
        t = datetime.strptime(m.group(1), "%H:%M:%S")
        if t0 is None and start in line:
            t0 = t
        elif t0 is not None and end in line:
            return (t - t0).total_seconds() % 86400
    return None


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--work", default=str(ROOT / "bench-out" / "main"))
    args = p.parse_args()
    runs: list[dict[str, Any]] = []
    for i in range(args.repeats):
        work = Path(args.work) / f"run{i}"
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        cmd = [sys.executable, "-m", "pipelines.app.cli", "run", "--set", f"work_dir={work}"]
        t0 = time.perf_counter()
        proc = subprocess.run(
            cmd, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True
        )
        wall = time.perf_counter() - t0
        (work / "ltr-run.log").write_text(proc.stderr)
        if proc.returncode != 0:
            print(proc.stderr[-3000:], file=sys.stderr)
            return proc.returncode
        runs.append(
            {
                "wall_seconds": round(wall, 1),
                "grid_seconds": _seconds(proc.stderr, "curricula and the grid", "report ->"),
            }
        )
        print(f"run {i + 1}/{args.repeats}: {runs[-1]}", file=sys.stderr)
    out = {
        "machine": f"{platform.machine()}, {os.cpu_count()} cores",
        "command": "ltr run (default config)",
        "median_wall_seconds": statistics.median(r["wall_seconds"] for r in runs),
        "median_grid_seconds": statistics.median(g for r in runs if (g := r["grid_seconds"]) is not None),
        "runs": runs,
    }
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
