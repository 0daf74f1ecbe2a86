"""Peak memory of one training job as the data grows: the whole process tree, the driver JVM and
the Python worker alone, for the code of this checkout or of another (side by side).

    python -m benchmarks.bench_memory [--sizes 600,6000,31531] [--trees 40] [--work bench-out/memory]
                                      [--code DIR --label NAME] [--set KEY=VALUE ...]
                                      [--path 'lambdamart@l_hrel:20,lambdamart:20' --curriculum DIR]

For each size (queries), a generated dataset (``ltr generate`` + ``ltr ingest``, made once under
``WORK/data-N`` and shared by every code version) is trained with ``ltr train --fold 1 --path
lambdamart:T`` (local master, defaults), the code taken from ``--code`` (a ``git worktree`` of an
older commit, for the side-by-side figures; default: this checkout). Every 0.2 s the script reads
/proc: the summed RSS of the job's process tree, the RSS of its JVM and of its largest PySpark
Python process (the training worker). ``--path`` trains another path instead (a curriculum's
subset nodes then the full data: ``--curriculum`` is the ``ltr curriculum`` directory it names,
built on ``WORK/data-N``; one size at a time). ``WORK/results.json`` keeps every run under its label; the
table printed at the end gives each label's peaks, their growth per million rows, and the training
worker's own timings (matrices, seconds per tree) read from the job's summary.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from pipelines.core.proctree import kill_tree, tree_memory

ROOT = Path(__file__).resolve().parent.parent

GIB = 2**30


def run_sampled(cmd: list[str], cwd: Path, env: dict[str, str], log: Path) -> tuple[int, float, dict[str, int]]:
    peak = {"tree": 0, "jvm": 0, "worker": 0}
    with open(log, "ab") as out:
        out.write(f"\n==== {' '.join(cmd)}\n".encode())
        out.flush()
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=out, stderr=out, start_new_session=True)
        try:
            while proc.poll() is None:
                for k, v in tree_memory(proc.pid).items():
                    peak[k] = max(peak[k], v)
                time.sleep(0.2)
        except BaseException:
            kill_tree(proc.pid)
            raise
    return proc.returncode, time.perf_counter() - t0, peak


def dataset(work: Path, queries: int, env: dict[str, str], sets: list[str], results: dict) -> Path:
    """The generated dataset of ``queries`` queries (made once; its ingest's peaks go to ``results``)."""
    data = work / f"data-{queries}"
    if (data / "_manifest.json").exists():
        return data
    letor = work / f"letor-{queries}"
    shutil.rmtree(letor, ignore_errors=True)
    py = [sys.executable, "-m", "pipelines.app.cli"]
    for step, cmd in (
        ("generate", [*py, "generate", "--out", str(letor), "--queries", str(queries), "--seed", "4242"]),
        ("ingest", [*py, "ingest", "--src", str(letor), "--out", str(data), "--dataset", "mslr", *sets]),
    ):
        rc, wall, peak = run_sampled(cmd, ROOT, env, work / "bench.log")
        if rc != 0:
            raise SystemExit(f"{step} of {queries} queries failed (exit {rc}): see {work / 'bench.log'}")
        results.setdefault("_data", {}).setdefault(str(queries), {})[step] = {
            "wall_s": round(wall, 1),
            "peak_tree_gib": round(peak["tree"] / GIB, 3),
            "peak_jvm_gib": round(peak["jvm"] / GIB, 3),
            "sets": sets,
        }
    shutil.rmtree(letor, ignore_errors=True)
    return data


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="600,6000,31531", help="queries of each dataset, comma-separated")
    ap.add_argument("--trees", type=int, default=40)
    ap.add_argument("--work", default=str(ROOT / "bench-out" / "memory"))
    ap.add_argument("--code", default=str(ROOT), help="checkout whose code trains (default: this one)")
    ap.add_argument("--label", default="", help="name of this code's runs in results.json (default: its commit)")
    ap.add_argument(
        "--set",
        action="append",
        default=[],
        dest="overrides",
        metavar="KEY=VALUE",
        help="config overrides for ltr train (e.g. spark.driver_memory=1g)",
    )
    ap.add_argument("--path", default="", help="training path (default: lambdamart:TREES)")
    ap.add_argument(
        "--curriculum",
        action="append",
        default=[],
        metavar="DIR",
        help="curriculum the path names (ltr curriculum's output on WORK/data-N)",
    )
    args = ap.parse_args()
    path = args.path or f"lambdamart:{args.trees}"
    curricula = [a for c in args.curriculum for a in ("--curriculum", str(Path(c).resolve()))]
    if curricula and "," in args.sizes:
        ap.error("--curriculum is built on one dataset: give one size")
    work, code = Path(args.work).resolve(), Path(args.code).resolve()
    work.mkdir(parents=True, exist_ok=True)
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=code, capture_output=True, text=True
    ).stdout.strip()
    label = args.label or commit
    results_path = work / "results.json"
    results = json.loads(results_path.read_text()) if results_path.exists() else {}
    env_here = {**os.environ, "PYTHONPATH": str(ROOT)}
    env_code = {**os.environ, "PYTHONPATH": str(code)}
    for q in (int(s) for s in args.sizes.split(",")):
        sets = [a for o in args.overrides for a in ("--set", o)]
        data = dataset(work, q, env_here, sets, results)
        manifest = json.loads((data / "_manifest.json").read_text())
        run_dir = work / "runs" / f"{label}-{q}"
        shutil.rmtree(run_dir, ignore_errors=True)
        run_dir.mkdir(parents=True)
        sets = [a for o in [f"work_dir={run_dir}", *args.overrides] for a in ("--set", o)]
        cmd = [
            sys.executable,
            "-m",
            "pipelines.app.cli",
            "train",
            "--data",
            str(data),
            "--fold",
            "1",
            "--path",
            path,
            *curricula,
            "--out",
            str(run_dir / "model"),
            *sets,
        ]
        rc, wall, peak = run_sampled(cmd, code, env_code, work / "bench.log")
        if rc != 0:
            print(f"{label} at {q} queries failed (exit {rc}): see {work / 'bench.log'}", file=sys.stderr)
            return 1
        summary = json.loads((run_dir / "model" / "_train.json").read_text())
        w = summary["training"]["jobs"][0]["worker_timings"][0]
        rows = {
            s: sum(int(manifest["subsets"][x]["rows"]) for x in manifest["folds"]["1"][s])
            for s in ("train", "vali", "test")
        }
        trees = sum(int(w.get("trees", 0)) for w in summary["training"]["jobs"][0]["worker_timings"][:1])
        rec = {
            "commit": commit,
            "overrides": args.overrides,
            "path": path,
            "trees": trees,
            "rows": rows,
            "wall_s": round(wall, 1),
            "peak_tree_gib": round(peak["tree"] / GIB, 3),
            "peak_jvm_gib": round(peak["jvm"] / GIB, 3),
            "peak_worker_gib": round(peak["worker"] / GIB, 3),
            "worker_load_s": round(w.get("load", 0.0), 2),
            "worker_dmatrix_s": round(w.get("dmatrix", 0.0), 2),
            "worker_matrices": w.get("matrices"),
            "s_per_tree": round((w["boost"] + w["objective"]) / max(w["trees"], 1), 4),
            "eval_s_per_tree": round(w["eval"] / max(w["trees"], 1), 4),
            "test_ndcg": summary["final"].get("test_ndcg_at_10"),
        }
        results.setdefault(label, {})[str(q)] = rec
        results_path.write_text(json.dumps(results, indent=2))
        print(
            f"{label} {q:>6} queries ({sum(rows.values()):,} rows): tree {rec['peak_tree_gib']:.2f} GiB, "
            f"JVM {rec['peak_jvm_gib']:.2f}, worker {rec['peak_worker_gib']:.2f}; {rec['s_per_tree']:.4f} s/tree, "
            f"load {rec['worker_load_s']:.1f} s, wall {rec['wall_s']:.0f} s",
            flush=True,
        )
    print(table(results))
    return 0


def table(results: dict) -> str:
    lines = [
        "| code | queries | rows | tree peak GiB | JVM GiB | worker GiB | worker load s | s/tree | wall s |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for label, runs in results.items():
        if label.startswith("_"):
            continue
        for q, r in sorted(runs.items(), key=lambda kv: int(kv[0])):
            lines.append(
                f"| {label} | {int(q):,} | {sum(r['rows'].values()):,} | {r['peak_tree_gib']:.2f} | "
                f"{r['peak_jvm_gib']:.2f} | {r['peak_worker_gib']:.2f} | {r['worker_load_s']:.1f} | "
                f"{r['s_per_tree']:.4f} | {r['wall_s']:.0f} |"
            )
        pts = sorted((sum(r["rows"].values()), r) for r in runs.values())
        if len(pts) >= 2:
            (n0, a), (n1, b) = pts[0], pts[-1]
            per = {k: (b[k] - a[k]) / ((n1 - n0) / 1e6) for k in ("peak_tree_gib", "peak_jvm_gib", "peak_worker_gib")}
            lines.append(
                f"| {label} | growth per million rows | | {per['peak_tree_gib']:.2f} | "
                f"{per['peak_jvm_gib']:.2f} | {per['peak_worker_gib']:.2f} | | | |"
            )
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
