"""Two trainings on one machine: each should keep a fair share of it, not collapse.

    python -m benchmarks.bench_sharing [--queries 2000] [--trees 150] [--before REV] [--repeats 1]
                                       [--env KEY=VALUE ...] [--work bench-out/sharing]

Data: ``ltr generate --queries N`` (MSLR-shaped) ingested once under ``--work``. Then, per arm, ``ltr train --data
DS --fold 1 --path lambdamart:T`` alone, and two of the same command started together (each in a work directory
of its own, nothing reused), as a user running two studies on a workstation meets it. The arms run side by side in
one run: ``before`` (a git worktree of ``--before``, e.g. the commit before the thread settings) and ``after``
(this checkout); ``--env`` adds environment settings to both (to try one). Reported per run: the training's trees a
second (``_train.json``'s barrier job: trees built / its seconds) and the command's wall time; per arm, how much
slower each of the two concurrent runs was than the lone one (a fair share of the machine: about 2x).
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

ROOT = Path(__file__).resolve().parent.parent


def _ltr(root: Path, args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
    with open(log, "wb") as f:
        return subprocess.Popen(
            [sys.executable, "-m", "pipelines.app.cli", *args],
            cwd=root,
            env={**os.environ, "PYTHONPATH": str(root), **env},
            stdout=f,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def prepare(work: Path, queries: int) -> Path:
    """The dataset (generated and ingested once; reused by later runs of the script)."""
    ds = work / "dataset"
    if not (ds / "_manifest.json").exists():
        for args in (["generate", "--queries", str(queries), "--out", str(work / "letor")],
                     ["ingest", "--src", str(work / "letor"), "--out", str(ds)]):  # fmt: skip
            p = _ltr(ROOT, [*args, "--set", f"work_dir={work}"], {}, work / f"{args[0]}.log")
            if p.wait() != 0:
                raise SystemExit(f"ltr {args[0]} failed: see {work / (args[0] + '.log')}")
    return ds


def train(root: Path, ds: Path, trees: int, runs: int, work: Path, env: dict[str, str]) -> list[dict[str, Any]]:
    """``runs`` trainings started together; each one's trees a second and wall time."""
    procs = []
    for i in range(runs):
        w = work / f"run{i}"
        shutil.rmtree(w, ignore_errors=True)
        w.mkdir(parents=True)
        args = ["train", "--data", str(ds), "--fold", "1", "--path", f"lambdamart:{trees}", "--out", str(w / "model"),
                "--set", f"work_dir={w}", "--set", f"train.checkpoint_every={trees}"]  # fmt: skip
        procs.append((time.perf_counter(), w, _ltr(root, args, env, w / "train.log")))
    out = []
    for t0, w, p in procs:
        if p.wait() != 0:
            raise SystemExit(f"ltr train failed: see {w / 'train.log'}")
        jobs = json.loads((w / "model" / "_train.json").read_text())["training"]["jobs"]
        secs, trees = sum(j["seconds"] for j in jobs), sum(j["trees_built"] for j in jobs)
        out.append({"wall_s": round(time.perf_counter() - t0, 2), "train_s": round(secs, 2), "trees": trees,
                    "trees_per_s": round(trees / secs, 2), "nthread": jobs[0].get("nthread")})  # fmt: skip
    return out


def worktree(rev: str, dest: Path) -> Path:
    """A git worktree of ``rev`` at ``dest`` (made once)."""
    if not dest.exists():
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(dest), rev], check=True,
                       capture_output=True)  # fmt: skip
    return dest


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--queries", type=int, default=2000)
    p.add_argument("--trees", type=int, default=150)
    p.add_argument("--before", default="", help="git revision of the 'before' arm (empty: only this checkout)")
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--env", action="append", default=[], metavar="KEY=VALUE", help="added to every run's environment")
    p.add_argument("--work", default=str(ROOT / "bench-out" / "sharing"))
    args = p.parse_args()
    work = Path(args.work).resolve()
    work.mkdir(parents=True, exist_ok=True)
    env = dict(e.split("=", 1) for e in args.env)
    ds = prepare(work, args.queries)
    arms = {"after": ROOT}
    if args.before:
        arms = {"before": worktree(args.before, work / f"worktree-{args.before}"), **arms}
    for arm, root in arms.items():  # numba's cache (keyed by the source's path) and the page cache, untimed
        train(root, ds, 5, 1, work / arm, env)
    results: dict[str, Any] = {arm: {"alone": [], "two": []} for arm in arms}
    for r in range(args.repeats):
        for arm, root in arms.items():
            for kind, n in (("alone", 1), ("two", 2)):
                got = train(root, ds, args.trees, n, work / arm, env)
                results[arm][kind].append(got)
                print(f"repeat {r + 1} {arm} {kind}: " + ", ".join(f"{g['trees_per_s']} trees/s ({g['wall_s']} s)"
                                                                     for g in got), flush=True)  # fmt: skip
    summary = {}
    for arm, res in results.items():
        alone = min(g["trees_per_s"] for rep in res["alone"] for g in rep)
        two = [g["trees_per_s"] for rep in res["two"] for g in rep]
        summary[arm] = {"alone_trees_per_s": alone, "two_trees_per_s": two,
                        "slowdown_each": [round(alone / t, 2) for t in two]}  # fmt: skip
    report = {"machine": {"host": platform.node(), "cpus": os.cpu_count(),
                          "usable_cpus": len(os.sched_getaffinity(0))},  # fmt: skip
              "queries": args.queries, "trees": args.trees, "env": env, "before": args.before, "results": results,
              "summary": summary}  # fmt: skip
    (work / "bench_sharing.json").write_text(json.dumps(report, indent=2))
    for arm, s in summary.items():
        print(f"{arm}: alone {s['alone_trees_per_s']} trees/s; two at once {s['two_trees_per_s']} trees/s each: "
              f"{s['slowdown_each']}x slower each")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
