"""Selective Gradient Boosting against LambdaMART: ``selgb`` at several shares of non-relevant documents kept, on
MSLR-shaped data with clean labels and with a share of them redrawn, each a whole ``ltr run`` of the product.

    python -m benchmarks.bench_selgb [--queries 6000] [--trees 500] [--negatives 0.01,0.1,0.3] [--noise 0,0.1]
                                     [--work bench-out/selgb] [--reuse]

Per label noise, one work directory (``WORK/noise<N>``: generate, ingest, the grid, the report); per share, one
``ltr run`` in it with ``components.selgb.negatives`` set (a component's settings are one per run) and an MLflow
experiment of its own: LambdaMART's nodes do not depend on the share, so it trains once per noise and the later runs
find it in the checkpoints. From each
run's ``report.json``: both systems' mean test NDCG@10 and selgb minus LambdaMART, paired over the test queries
(95% bootstrap interval, the report's permutation p). Writes ``WORK/selgb.md`` and ``WORK/selgb.json`` and prints
the Markdown; ``--reuse`` takes a run that an earlier call finished (``WORK/runs.json``) as it is.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def run(wd: Path, overrides: list[str], log: Path) -> float:
    """``ltr run --conf conf/methods.yaml`` in ``wd`` with ``overrides``; its seconds."""
    sets = [x for o in [f"work_dir={wd}", *overrides] for x in ("--set", o)]
    cmd = [sys.executable, "-m", "pipelines.app.cli", "run", "--conf", str(ROOT / "conf" / "methods.yaml"), *sets]
    t0 = time.perf_counter()
    with open(log, "w") as out:
        subprocess.run(cmd, check=True, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)
    return time.perf_counter() - t0


def overrides(a: argparse.Namespace, noise: float, negatives: float) -> list[str]:
    """conf/methods.yaml cut to LambdaMART and selgb at ``a.trees`` trees, one seed."""
    return [
        f"generate.queries={a.queries}",
        f"generate.label_noise={noise}",
        f"grid.trees={a.trees}",
        "grid.strategies=[]",
        "grid.switch_points=[]",
        "grid.mse=false",
        "grid.seeds=1",
        "grid.extra_curricula={}",
        f"grid.extra_paths={{selgb: 'selgb:{a.trees}'}}",
        f"components={{selgb: {{negatives: {negatives}}}}}",
        f"grid.experiment=ltr-selgb-{negatives:g}",  # the report holds one result per system and experiment
    ]


def summary(report: dict[str, Any]) -> dict[str, Any]:
    """Both systems' means and selgb minus LambdaMART from one run's report."""
    means = {s["system"]: s["mean"] for s in report["systems"]}
    c = next(c for c in report["comparisons"] if c["strategy"] == "selgb")
    conv = {c["strategy"]: c for c in report.get("convergence") or []}
    return {
        "lambdamart": means["LambdaMART"],
        "selgb": means[c["system"]],
        "delta": c["mean_delta"],
        "ci95_bootstrap": c["ci95_bootstrap"],
        "perm_p": c["perm_p"],
        "queries": c["n"],
        "wins_ties_losses": [c["wins"], c["ties"], c["losses"]],
        "best_iteration": {k: conv[k]["best_iteration"] for k in ("lambdamart", "selgb") if k in conv},
    }


def table(rows: list[dict[str, Any]]) -> str:
    out = [
        "| label noise | negatives | LambdaMART | selgb | selgb - LambdaMART [95% CI] | perm p | W/T/L queries "
        "| run s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lo, hi = r["ci95_bootstrap"]
        out.append(
            f"| {r['noise']:.0%} | {r['negatives']:g} | {r['lambdamart']:.4f} | {r['selgb']:.4f} | "
            f"{r['delta']:+.4f} [{lo:+.4f}, {hi:+.4f}] | {r['perm_p']:.3f} | "
            f"{'/'.join(map(str, r['wins_ties_losses']))} | {r['seconds']:.0f} |"
        )
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--queries", type=int, default=6000)
    p.add_argument("--trees", type=int, default=500)
    p.add_argument("--negatives", default="0.01,0.1,0.3")
    p.add_argument("--noise", default="0,0.1")
    p.add_argument("--work", default="bench-out/selgb")
    p.add_argument("--reuse", action="store_true")
    a = p.parse_args(argv)
    work = Path(a.work).resolve()
    work.mkdir(parents=True, exist_ok=True)
    done_file = work / "runs.json"
    done = json.loads(done_file.read_text()) if done_file.exists() else {}
    rows = []
    for noise in (float(x) for x in a.noise.split(",")):
        wd = work / f"noise{noise:g}"
        for negatives in (float(x) for x in a.negatives.split(",")):
            name = f"noise {noise:g}, negatives {negatives:g}"
            saved = work / f"noise{noise:g}-negatives{negatives:g}.json"
            if a.reuse and name in done and saved.exists():
                seconds = done[name]
            else:
                seconds = run(wd, overrides(a, noise, negatives), saved.with_suffix(".log"))
                saved.write_text((wd / "report" / "report.json").read_text())
                done[name] = seconds
                done_file.write_text(json.dumps(done, indent=1))
            row = {"noise": noise, "negatives": negatives, "seconds": seconds, **summary(json.loads(saved.read_text()))}
            rows.append(row)
            print(f"{name}: {seconds:.0f} s, selgb - LambdaMART {row['delta']:+.4f}", flush=True)
    md = table(rows)
    (work / "selgb.md").write_text(md)
    (work / "selgb.json").write_text(json.dumps(rows, indent=1))
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
