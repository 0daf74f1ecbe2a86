"""Crash and restart of a grid, side by side with an uninterrupted grid on the same machine.

    python -m benchmarks.bench_resume [--work bench-out/resume] [--kill-at 0.6] [--queries 600]

1. ``ltr run``'s data (``--queries``, generated and ingested once, reused);
2. the default grid uninterrupted (``ltr grid``, fresh work directory): wall time T0;
3. the same grid in another work directory, killed with SIGKILL (driver and JVM)
   when ``--kill-at`` of its planned trees are built (progress read from the
   committed checkpoints), then restarted: wall time of the restart T1;
4. reports T1 / T0 (target: at most 0.65 at a kill at 60%) and whether every
   child's final test NDCG and model are identical to the uninterrupted grid's.

Each ``ltr grid`` is a fresh process (JVM start included in both figures).
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
from typing import Any

from pipelines.core.proctree import kill_tree

ROOT = Path(__file__).resolve().parent.parent


def ltr(*args: str) -> list[str]:
    return [sys.executable, "-m", "pipelines.app.cli", *args]


def built_trees(ckpt: Path) -> int:
    """Trees committed so far: the sum over nodes of their newest checkpoint's segments."""
    n = 0
    for node in ckpt.glob("*"):
        best = 0
        for marker in node.glob("t*/_checkpoint.json"):
            try:
                meta = json.loads(marker.read_text())
            except (OSError, ValueError):
                continue
            best = max(best, meta["tree"] - meta["node"]["t0"])
        n += best
    return n


def results(work: Path, data: str) -> tuple[dict, int]:
    """(label -> (final test NDCG, model bytes) of fold 1, trees the fold's plan builds)."""
    from pipelines.app.grid import fold_results
    from pipelines.core.config import load_config
    from pipelines.data.dataset import open_dataset
    from pipelines.study.design import plan_fold

    cfg = load_config(None, [f"work_dir={work}"])
    total = plan_fold(cfg, open_dataset(data), 1).plan.trees
    done = (work / "checkpoints").is_dir() and any((work / "checkpoints").iterdir())
    res = fold_results(cfg, 1, data) if done else {}
    return {k: (r.test[-1], r.model) for k, r in res.items()}, total


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", default=str(ROOT / "bench-out" / "resume"))
    ap.add_argument("--kill-at", type=float, default=0.6)
    ap.add_argument("--queries", type=int, default=600)
    args = ap.parse_args()
    work = Path(args.work)
    data_dir = work / "data"
    data = str(data_dir / "dataset")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    if not (Path(data) / "_manifest.json").exists():
        subprocess.run(
            ltr("generate", "--out", str(data_dir / "letor"), "--queries", str(args.queries)),
            check=True,
            env=env,
            cwd=ROOT,
        )
        subprocess.run(ltr("ingest", "--src", str(data_dir / "letor"), "--out", data), check=True, env=env, cwd=ROOT)
    runs: dict[str, Any] = {}
    for name in ("straight", "killed"):
        shutil.rmtree(work / name, ignore_errors=True)
    t0 = time.perf_counter()
    subprocess.run(
        ltr("grid", "--data", data, "--set", f"work_dir={work / 'straight'}"),
        check=True,
        env=env,
        cwd=ROOT,
        stderr=subprocess.DEVNULL,
    )
    runs["straight_seconds"] = round(time.perf_counter() - t0, 1)
    _, total = results(work / "straight", data)
    proc = subprocess.Popen(
        ltr("grid", "--data", data, "--set", f"work_dir={work / 'killed'}"),
        env=env,
        cwd=ROOT,
        start_new_session=True,
        stderr=subprocess.DEVNULL,
    )
    t0 = time.perf_counter()
    ckpt = work / "killed" / "checkpoints"
    while proc.poll() is None and built_trees(ckpt) < args.kill_at * total:
        time.sleep(0.2)
    kill_tree(proc.pid)  # the whole tree: PySpark's daemon runs its workers in their own process group,
    proc.wait()  # and a surviving barrier task could commit one more checkpoint after the count
    runs["killed_after_seconds"] = round(time.perf_counter() - t0, 1)
    runs["trees_committed_at_kill"] = built_trees(ckpt)
    runs["trees_planned"] = total
    t0 = time.perf_counter()
    subprocess.run(
        ltr("grid", "--data", data, "--set", f"work_dir={work / 'killed'}"),
        check=True,
        env=env,
        cwd=ROOT,
        stderr=subprocess.DEVNULL,
    )
    runs["restart_seconds"] = round(time.perf_counter() - t0, 1)
    runs["restart_over_straight"] = round(runs["restart_seconds"] / runs["straight_seconds"], 3)
    a, _ = results(work / "straight", data)
    b, _ = results(work / "killed", data)
    runs["identical_models_and_final_ndcg"] = a == b
    runs["machine"] = f"{platform.machine()}, {os.cpu_count()} cores"
    print(json.dumps(runs, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
