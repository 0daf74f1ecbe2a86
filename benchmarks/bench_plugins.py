"""What a plug-in objective costs per tree: the built-in LambdaMART against the same function registered through
the plug-in path, side by side, and a plain numpy ListNet (``examples/plugins/listnet.py``) beside them.

    python -m benchmarks.bench_plugins [--rows 138000] [--trees 60] [--repeats 3] [--out bench-out/plugins]

No Spark: the worker loop a barrier task runs (:func:`pipelines.kernel.loop.run_nodes`, one worker, all cores as
threads) on MSLR-shaped rows generated in memory (:func:`benchmarks.bench_gpu.make_data`, 136 features). Runs:

* ``lambdamart``: the built-in Python objective (``udfs.objectives.lambdamart``);
* ``lambdamart_plugin``: the same function body registered by a plug-in file with
  :func:`pipelines.plugins.objective` (loaded as ``--plugin`` loads it), so it goes through the plug-in
  path: its settings from ``components``, its result checked every tree (shapes, dtypes, finite, hessians);
* ``listnet``: the example ListNet, plain numpy (no numba).

Each repeat runs the three in turn on the same data (ABCABC...), so a drift of the machine hits all of them.
Per run: per-tree time (boost + objective, as the workers measure it) and the objective's share, the median over
the repeats; the plug-in's ratio to the built-in (the issue's bound: at most 2% apart). Output:
``<out>/bench_plugins.json`` and a table on stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.bench_gpu import loop, machine, make_data, settings_for
from pipelines.plugins import loading

ROOT = Path(__file__).resolve().parent.parent

#: The built-in LambdaMART's body, registered as a plug-in (what a researcher's file would hold).
PLUGIN = """
from pipelines.plugins import objective
from udfs.objectives.lambdamart import lambdarank_grad
from udfs.objectives.pairwise import pair_inverse_idcg


@objective("lambdamart_plugin")
def lambdamart_plugin(margins, labels, offsets, *, tree, params, cache):
    if "inv_idcg" not in cache:
        cache["inv_idcg"] = pair_inverse_idcg(labels, offsets, params["k"], params["exp_gain"])
    return lambdarank_grad(margins, labels, offsets, k=params["k"], exp_gain=params["exp_gain"],
                           inv_idcg=cache["inv_idcg"])
"""

RUNS = ("lambdamart", "lambdamart_plugin", "listnet")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=138_000, help="training rows (whole queries)")
    p.add_argument("--trees", type=int, default=60)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--test-queries", type=int, default=200)
    p.add_argument("--threads", type=int, default=0, help="threads (0: all cores)")
    p.add_argument("--out", default=str(ROOT / "bench-out" / "plugins"))
    args = p.parse_args()
    threads = args.threads or os.cpu_count() or 1
    with tempfile.TemporaryDirectory(prefix="bench-plugins-") as d:
        f = Path(d) / "lambdamart_plugin.py"
        f.write_text(PLUGIN)
        loading.load([str(f), str(ROOT / "examples" / "plugins" / "listnet.py")])
        train, test, gen_s = make_data(args.rows, args.test_queries, threads)
        print(f"data: {train.y.size:,} train rows, {test.y.size:,} test rows, {gen_s:.1f} s", flush=True)
        settings = settings_for("cpu", threads, args.trees)
        # warm-up: numba's compilation and the first matrices, out of the timings
        for run in RUNS:
            _loop(run, train, test, settings_for("cpu", threads, 3), 3)
        results: dict[str, list[dict[str, Any]]] = {r: [] for r in RUNS}
        for i in range(args.repeats):
            for run in RUNS:
                r = _loop(run, train, test, settings, args.trees)
                results[run].append(r)
                print(f"repeat {i + 1} {run}: {r['per_tree_s'] * 1e3:.1f} ms/tree "
                      f"(objective {r['objective_per_tree_s'] * 1e3:.1f} ms)", flush=True)  # fmt: skip
    summary = {
        run: {
            "per_tree_ms": statistics.median(r["per_tree_s"] for r in rs) * 1e3,
            "objective_ms": statistics.median(r["objective_per_tree_s"] for r in rs) * 1e3,
            "test_ndcg10": rs[-1]["test_ndcg10"],
            "per_tree_ms_each": [round(r["per_tree_s"] * 1e3, 2) for r in rs],
        }
        for run, rs in results.items()
    }
    base = summary["lambdamart"]["per_tree_ms"]
    for s in summary.values():
        s["ratio_to_builtin"] = s["per_tree_ms"] / base
    report = {"machine": machine(), "threads": threads, "rows": int(train.y.size), "trees": args.trees,
              "repeats": args.repeats, "results": summary}  # fmt: skip
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "bench_plugins.json").write_text(json.dumps(report, indent=2))
    print(f"\n{'run':<20} {'ms/tree':>9} {'objective ms':>13} {'x built-in':>11} {'test NDCG@10':>13}")
    for run, s in summary.items():
        print(f"{run:<20} {s['per_tree_ms']:>9.1f} {s['objective_ms']:>13.1f} {s['ratio_to_builtin']:>11.3f} "
              f"{s['test_ndcg10']:>13.4f}")  # fmt: skip
    return 0


def _loop(run: str, train: Any, test: Any, settings: Any, trees: int) -> dict[str, Any]:
    """The worker loop on objective ``run`` (bench_gpu's runner, its path named by the objective)."""
    from benchmarks import bench_gpu

    bench_gpu.LOOP_PATH.setdefault(run, run)
    return loop(run, train, test, settings, trees)


if __name__ == "__main__":
    raise SystemExit(main())
