"""One system's non-inferiority tree count and random-effects pooling of a report, recomputed apart from the
report's code paths: XGBoost's own ``predict(iteration_range=(0, n))`` on each fold's test rows (the report
replays leaves in float32), NDCG by the sort-based ``udfs.metrics.ndcg`` (the report: ``ndcg_fast``), the
one-sided t bound with scipy's quantile, DerSimonian-Laird written out here.

    python -m benchmarks.check_answer WORK_DIR EXPERIMENT REPORT_JSON SYSTEM

Prints the report's figures and the recomputed ones: the lower bound one tree before and at the report's tree
count (the first must be below -margin, the second above), and the pooled delta, interval, tau² and Q.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import numpy as np
from scipy import stats

from pipelines.core.config import load_config
from pipelines.report.loading import find_grid, load_grid, open_tracker
from pipelines.report.replay import load_test_split
from udfs.metrics import NdcgSpec, ndcg


def lower_bound(runs: list[Any], data: str, system: str, n: int, spec: NdcgSpec) -> tuple[float, int]:
    """The one-sided 95% lower bound of (``system`` after ``n`` trees - LambdaMART's final NDCG), paired per test
    query with a relevant document, folds pooled; and the number of queries."""
    import mlflow
    import xgboost as xgb

    base = {r.fold: r for r in runs if r.label == "LambdaMART"}
    d = []
    for r in (r for r in runs if r.label == system):
        split = load_test_split(data, r.fold)
        booster = mlflow.xgboost.load_model(f"runs:/{r.run_id}/model")
        margin = booster.predict(xgb.DMatrix(split.X), output_margin=True, iteration_range=(0, n))
        values = ndcg(split.offsets, split.label, margin.astype(np.float32), spec)
        b = base[r.fold]
        d += [x - b.per_query[int(q)] for q, x in zip(split.queries, values, strict=True) if b.relevant[int(q)] > 0]
    a = np.asarray(d)
    return float(a.mean() - stats.t.ppf(0.95, a.size - 1) * a.std(ddof=1) / np.sqrt(a.size)), int(a.size)


def dersimonian_laird(per_fold: list[dict[str, Any]]) -> dict[str, Any]:
    """Random effects over the folds' deltas and variances of their means."""
    y = np.array([f["delta"] for f in per_fold])
    v = np.array([f["var"] for f in per_fold])
    w = 1 / v
    fixed = (w * y).sum() / w.sum()
    q = float((w * (y - fixed) ** 2).sum())
    k = len(y)
    tau2 = max(0.0, (q - (k - 1)) / (w.sum() - (w**2).sum() / w.sum()))
    ws = 1 / (v + tau2)
    mu = float((ws * y).sum() / ws.sum())
    se = float(1 / np.sqrt(ws.sum()))
    z = float(stats.norm.ppf(0.975))
    i2 = max(0.0, (q - (k - 1)) / q) if q > 0 else None
    return {"delta": mu, "ci95": [mu - z * se, mu + z * se], "tau2": tau2, "i2": i2, "q": q}


def main(argv: list[str]) -> None:
    work, experiment, report, system = argv
    with open(report) as f:
        rep = json.load(f)
    cfg = load_config(None, [f"work_dir={work}", f"grid.experiment={experiment}"])
    tracker = open_tracker(cfg)
    runs, state = load_grid(tracker, find_grid(tracker, None), cfg.metric.name)
    ni = rep["noninferiority"][system]
    print(system, "report:", {k: ni[k] for k in ("trees", "lower_bound", "baseline_trees", "ratio", "margin")})
    spec = cfg.metric
    for n in [ni["trees"] - 1, ni["trees"]] if ni["trees"] else [ni["baseline_trees"]]:
        lb, queries = lower_bound(runs, state.params["data"], system, n, spec)
        print(f"  by hand, {n} trees: lower bound {lb:+.6f} over {queries} queries, > -margin: {lb > -ni['margin']}")
    print("  random effects, report:", {k: rep["meta"][system][k] for k in ("delta", "ci95", "tau2", "i2", "q")})
    print("  random effects, by hand:", dersimonian_laird(rep["per_fold"][system]))


if __name__ == "__main__":
    main(sys.argv[1:5])
