"""One fold of the paper's protocol at full scale, in the background, resumable across sessions.

    python -m benchmarks.bench_paper [--work bench-out/paper] [--queries 31531] [--fold 1]
                                     [--interrupt-at 0.1] [--keep-letor] [--status]

Steps, each skipped when its output exists (run the same command again after any stop):

1. ``ltr generate`` 31,531 queries (MSLR-WEB30K's size; seed 4242) as LETOR text;
2. ``ltr ingest`` them (all five folds; the text is deleted afterwards unless ``--keep-letor``);
3. ``ltr grid --conf conf/paper.yaml`` on fold ``--fold`` only (``grid.folds=[F]``, so the study
   is that fold: T = 500, t = 100..400, every strategy), local master, defaults otherwise.
   Once, when ``--interrupt-at`` of the fold's planned trees are committed, the grid's whole
   process tree is killed (SIGSTOP, then SIGKILL) and the grid started again: the on-purpose
   interruption. A stop from outside (the session ends, the machine restarts) is another
   interruption: the next run of this script continues from the checkpoints;
4. ``ltr report`` (the fold's Table 1 row and the rest) into ``WORK/run/report/``.

``WORK/state.json`` keeps every step's and every attempt's wall seconds, trees committed
before and after, and peak memory (the summed RSS of the step's process tree: driver,
JVM, Python workers; of its JVM; and of its largest Python worker: sampled every 2 s); it is rewritten
every 30 s, so an attempt stopped
from outside loses at most that much of its record. At the end it adds the committed trees'
cost read from the checkpoints (rank 0's boost, objective, curve and checkpoint seconds; in all and
by kind of node: objective on all rows or on a curriculum subset) and prints the summary.
``--status`` prints the state and the plan's progress, runs nothing.

The node keys hold the code identity (the content of ``pipelines/`` and ``udfs/`` and the library
versions; pipelines/core/keys.py): run every attempt with the same computing code (a ``git worktree`` of
one commit is the simple way; a documentation commit in between does not matter), or the resumed grid
is another grid.
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
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from benchmarks.bench_resume import built_trees
from pipelines.core.proctree import kill_tree, tree_memory

ROOT = Path(__file__).resolve().parent.parent

PAGE = os.sysconf("SC_PAGE_SIZE")


def ltr(*args: str) -> list[str]:
    return [sys.executable, "-m", "pipelines.app.cli", *args]


class State:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.doc = json.loads(path.read_text()) if path.exists() else {"steps": {}, "attempts": []}

    def save(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.doc, indent=2))
        tmp.replace(self.path)


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def watch(cmd: list[str], log: Path, record: dict, state: State, env: dict, stop_when=None) -> int | None:
    """Run ``cmd`` (stderr to ``log``), sampling its tree's RSS into ``record``; ``stop_when()`` true: kill it."""
    with open(log, "ab") as err:
        err.write(f"\n==== {_now()} {' '.join(cmd)}\n".encode())
        err.flush()
        proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=err, stderr=err, start_new_session=True)
        t0, saved = time.perf_counter(), 0.0
        record.update(
            started=_now(),
            seconds=0.0,
            peak_rss_gib=0.0,
            peak_jvm_gib=0.0,
            peak_worker_gib=0.0,
            ended="running (or stopped from outside)",
        )
        try:
            while proc.poll() is None:
                mem = tree_memory(proc.pid)
                for k, v in (
                    ("peak_rss_gib", mem["tree"]),
                    ("peak_jvm_gib", mem["jvm"]),
                    ("peak_worker_gib", mem["worker"]),
                ):
                    record[k] = max(record.get(k, 0.0), round(v / 2**30, 2))
                record["seconds"] = round(time.perf_counter() - t0, 1)
                if stop_when is not None and stop_when():
                    kill_tree(proc.pid)
                    proc.wait()
                    record.update(seconds=round(time.perf_counter() - t0, 1), ended="interrupted on purpose")
                    state.save()
                    return None
                if record["seconds"] - saved >= 30:
                    state.save()
                    saved = record["seconds"]
                time.sleep(2)
        except BaseException:
            kill_tree(proc.pid)
            raise
        record.update(
            seconds=round(time.perf_counter() - t0, 1),
            rc=proc.returncode,
            ended="finished" if proc.returncode == 0 else f"failed (exit {proc.returncode})",
        )
        state.save()
        return proc.returncode


def overrides(work: Path, fold: int) -> list[str]:
    return [f"work_dir={work / 'run'}", f"grid.folds=[{fold}]"]


def plan_info(work: Path, data: str, fold: int, extra: list[str]):
    from pipelines.core.config import load_config
    from pipelines.core.layout import Layout
    from pipelines.data.dataset import open_dataset
    from pipelines.study.design import plan_fold

    cfg = load_config(ROOT / "conf" / "paper.yaml", [*overrides(work, fold), *extra])
    fp = plan_fold(cfg, open_dataset(data), fold)
    return cfg, fp.plan, Layout.of(cfg).checkpoints


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", default=str(ROOT / "bench-out" / "paper"))
    ap.add_argument("--queries", type=int, default=31531)
    ap.add_argument("--fold", type=int, default=1)
    ap.add_argument(
        "--interrupt-at",
        type=float,
        default=0.1,
        help="share of the fold's trees committed when the grid is killed once on purpose (0: never)",
    )
    ap.add_argument("--keep-letor", action="store_true", help="keep the generated LETOR text after ingest")
    ap.add_argument(
        "--set",
        action="append",
        default=[],
        dest="overrides",
        metavar="KEY=VALUE",
        help="more config overrides for the grid and the report (e.g. a small smoke run)",
    )
    ap.add_argument("--status", action="store_true", help="print the state and the plan's progress; run nothing")
    args = ap.parse_args()
    work = Path(args.work).resolve()
    work.mkdir(parents=True, exist_ok=True)
    state = State(work / "state.json")
    state.doc.setdefault(
        "machine", f"{platform.machine()}, {os.cpu_count()} cores, {os.sysconf('SC_PHYS_PAGES') * PAGE / 2**30:.0f} GiB"
    )
    letor, data, log = work / "letor", str(work / "dataset"), work / "bench.log"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    steps = state.doc["steps"]
    if args.status:
        if (Path(data) / "_manifest.json").exists():
            _, plan, ckpt = plan_info(work, data, args.fold, args.overrides)
            state.doc["progress"] = f"{built_trees(Path(ckpt))}/{plan.trees} trees committed"
        print(json.dumps(state.doc, indent=2))
        return 0

    if not (Path(data) / "_manifest.json").exists():
        if not steps.get("generate", {}).get("rc") == 0:
            shutil.rmtree(letor, ignore_errors=True)
            steps["generate"] = {}
            if (
                watch(
                    ltr("generate", "--out", str(letor), "--queries", str(args.queries), "--seed", "4242"),
                    log,
                    steps["generate"],
                    state,
                    env,
                )
                != 0
            ):
                print(f"generate failed: see {log}", file=sys.stderr)
                return 1
        steps["ingest"] = {}
        if (
            watch(
                ltr("ingest", "--src", str(letor), "--out", data, "--dataset", "mslr"), log, steps["ingest"], state, env
            )
            != 0
        ):
            print(f"ingest failed: see {log}", file=sys.stderr)
            return 1
        if not args.keep_letor:
            shutil.rmtree(letor, ignore_errors=True)
    cfg, plan, ckpt_root = plan_info(work, data, args.fold, args.overrides)
    ckpt = Path(ckpt_root)
    state.doc["plan"] = {
        "fold": args.fold,
        "nodes": len(plan.nodes),
        "trees": plan.trees,
        "paths": len(plan.chains),
        "checkpoint_every": cfg.train.checkpoint_every,
    }
    sets = [a for o in [*overrides(work, args.fold), *args.overrides] for a in ("--set", o)]
    grid = ltr("grid", "--conf", str(ROOT / "conf" / "paper.yaml"), "--data", data, *sets)
    while True:
        before = built_trees(ckpt) if ckpt.is_dir() else 0
        if before >= plan.trees and state.doc["attempts"] and state.doc["attempts"][-1].get("rc") == 0:
            break
        rec: dict = {"trees_before": before}
        state.doc["attempts"].append(rec)
        on_purpose = (
            args.interrupt_at > 0 and not state.doc.get("interrupted") and before < args.interrupt_at * plan.trees
        )

        def stop_when(on_purpose: bool = on_purpose, rec: dict = rec) -> bool:
            if not on_purpose:
                return False
            n = built_trees(ckpt) if ckpt.is_dir() else 0
            rec["trees_after"] = n
            return n >= args.interrupt_at * plan.trees

        rc = watch(grid, log, rec, state, env, stop_when)
        rec["trees_after"] = built_trees(ckpt) if ckpt.is_dir() else 0
        if rc is None:
            state.doc["interrupted"] = True
            state.save()
            continue
        state.save()
        if rc != 0:
            print(f"ltr grid failed (exit {rc}): see {log}", file=sys.stderr)
            return 1
    with open(log, "ab") as err:
        subprocess.run(
            ltr("report", "--conf", str(ROOT / "conf" / "paper.yaml"), *sets),
            env=env,
            cwd=ROOT,
            stdout=err,
            stderr=err,
            check=True,
        )
    rep = {"report": str(Path(cfg.report.out or work / "run" / "report") / "report.md")}
    from pipelines.store.checkpoints import CheckpointStore

    # the plan again: before the grid's first attempt the curricula did not exist, and a curriculum
    # node's key holds its curriculum's content (read before, only the all-row nodes' costs matched)
    _, plan, ckpt_root = plan_info(work, data, args.fold, args.overrides)
    store = CheckpointStore(ckpt_root)
    kinds: dict[str, list] = {}  # a curve point costs the same on every node: its share differs by kind
    for n in plan.nodes:
        kinds.setdefault(f"{n.objective} on {'all rows' if n.data == 'all' else 'a curriculum subset'}", []).append(
            n.key
        )
    by_kind: dict[str, Any] = {}
    cost: dict[str, Any] = {}
    for kind, keys in kinds.items():
        c = store.cost(keys)  # each node's checkpoints read once; the fold's total is the kinds' sum
        for k, v in c.items():
            cost[k] = cost.get(k, 0.0) + v
        tr = c.get("boost", 0.0) + c.get("objective", 0.0)
        if c.get("trees") and tr:
            by_kind[kind] = {
                "nodes": len(keys),
                "trees": int(c["trees"]),
                "training_per_tree": round(tr / c["trees"], 3),
                "curves_per_tree": round(c.get("eval", 0.0) / c["trees"], 4),
                "curves_share": round(c.get("eval", 0.0) / tr, 4),
                "checkpoints_share": round(c.get("checkpoint", 0.0) / tr, 4),
            }
    if cost.get("trees", 0) < plan.trees:
        print(
            f"the checkpoints under {ckpt_root} hold {int(cost.get('trees', 0))} of this plan's {plan.trees} "
            "trees: the computing code changed since the grid ran (node keys hold it); run this script "
            "from the grid's code (its worktree)",
            file=sys.stderr,
        )
        return 1
    train = cost["boost"] + cost["objective"]
    attempts = state.doc["attempts"]
    summary = {
        "trees_built": int(cost["trees"]),
        "trees_planned": plan.trees,
        "grid_wall_seconds": round(sum(a["seconds"] for a in attempts), 1),
        "grid_attempts": len(attempts),
        "per_tree_seconds_wall": round(sum(a["seconds"] for a in attempts) / plan.trees, 3),
        "per_tree_seconds_training": round(train / cost["trees"], 3),
        "curves_share_of_training": round(cost["eval"] / train, 4),
        "checkpoints_share_of_training": round(cost["checkpoint"] / train, 4),
        "peak_rss_gib": max(
            [a.get("peak_rss_gib", 0) for a in attempts] + [s.get("peak_rss_gib", 0) for s in steps.values()]
        ),
        "cost_seconds": {k: round(v, 1) for k, v in cost.items()},
        "by_kind": by_kind,
        **rep,
    }
    state.doc["summary"] = summary
    state.save()
    print(json.dumps(state.doc, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
