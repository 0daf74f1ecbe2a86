"""StochasticRank (``stochastic_rank``) side by side with CatBoost's own, the paper's Table 3 ablation on ours, and
its cost per tree against LambdaMART.

    python -m benchmarks.bench_stochastic_rank [--part compare,ablation] [--datasets mslr,yahoo] [--seeds 5]
                                                [--trees 200] [--lr 0.1] [--out bench-out/stochastic_rank]
    python -m benchmarks.bench_stochastic_rank --part cost [--cost-rows 138000,2290000] [--cost-trees 40,10]
    python -m benchmarks.bench_stochastic_rank --table        # the tables of what is done so far, no training

CatBoost is a benchmark dependency (``pip install -e .[bench]``), never a runtime one. No Spark: ours is the worker
loop a barrier task runs (:func:`pipelines.kernel.loop.run_nodes`, one worker, all cores as threads), on data
generated in memory:

* ``mslr``: MSLR-shaped rows (:func:`benchmarks.bench_gpu.make_data`: 136 dense features, labels 0-4, about 121
  documents a query), ``--mslr-rows`` training rows in whole queries and ``--test-queries`` test queries;
* ``yahoo``: Yahoo!-shaped rows (:func:`pipelines.data.shapes.simulate_yahoo`: 699 sparse features in [0, 1], an
  absent feature 0 as LETOR's convention has it, about 24 documents a query), ``--yahoo-queries`` training
  queries and the same test queries.

**Resumable:** every finished run appends one line to ``<out>/runs.jsonl`` and writes its per-query test NDCG@10 to
``<out>/perquery/<dataset>/<system>/<seed>.npy``; a rerun skips what is there (the data are regenerated
identically from a constant seed). Runs go in order of importance: the two StochasticRanks over every seed first,
then the scale references, then the ablation.

**Compare** (``--part compare``), per dataset and seed, same data, trees and learning rate:

* ``ours_stochastic_rank``: our ``stochastic_rank`` with CatBoost's defaults (sigma 1, mu 0, nu 0.01, lambda 1,
  one estimation, no Langevin), our trees (64 leaves, lossguide, ``hist`` with 256 bins, ``reg_lambda`` 1);
* ``catboost_stochastic_rank``: ``StochasticRank:metric=NDCG;top=10`` with CatBoost's defaults (symmetric trees
  of depth 6: 64 leaves, 254 borders, ``l2_leaf_reg`` 3, its default bootstrap and random strength);
* ``ours_stochastic_rank_catboost_reg``: the same with CatBoost's regularisation of its trees as near as XGBoost
  has it (``reg_lambda`` 3 for its ``l2_leaf_reg``, ``subsample`` 0.8 for its MVS sampling at 0.8);
* for scale: ``ours_lambdamart`` (deterministic: one run stands for every seed), ``catboost_lambdamart``
  (``LambdaMart:metric=NDCG;top=10``) and ``catboost_yetirank`` (``YetiRank``).

NDCG@10 with the project's conventions (:class:`udfs.metrics.NdcgSpec`: exp2 gain, a query without a relevant
document scores 1, as ``metric.empty`` defaults) for every system. The table: the mean over seeds of the mean test
NDCG@10, the seeds' sd, and each system against CatBoost's StochasticRank paired over the test queries (each
query's NDCG averaged over the seeds, scipy's ``ttest_rel``): the difference, its 95% interval and the two-sided p.
Each run's seconds a tree are in ``runs.jsonl``, not in the table: the cost part measures cost, alone.

**Ablation** (``--part ablation``, the paper's Table 3 on ours; each row adds one part):
``reinforce`` (the score-function estimate, lambda 0), ``ccs`` (lambda 0: no SFA projection), ``ccs_sfa``
(= ``ours_stochastic_rank``), ``ccs_sfa_sglb`` (``langevin``: CatBoost's temperature 1e4 and shrink rate 0.001),
``ccs_sfa_sglb_mu`` (+ consistent smoothing, ``mu`` ``--mu``). Each row paired with the one before it. And, as a
check of our SGLB, ``catboost_sglb``: CatBoost's StochasticRank with ``langevin`` on (its defaults otherwise),
paired with CatBoost's without.

**Cost** (``--part cost``): per-tree time of ``lambdamart`` and ``stochastic_rank`` (``num_estimations`` 1) in
the worker loop, interleaved (ABAB), at each ``--cost-rows``; objective and boosting apart.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.bench_gpu import loop, machine, make_data, settings_for
from pipelines.kernel.loop import SplitData
from udfs import components
from udfs.metrics import NdcgSpec, ndcg

ROOT = Path(__file__).resolve().parent.parent
DATA_SEED = 4242

#: CatBoost's regularisation of its trees, as near as XGBoost has it: its ``l2_leaf_reg`` 3 as ``reg_lambda`` and
#: its default row sampling (MVS at 0.8) as ``subsample`` 0.8 (uniform, per tree).
CATBOOST_REGULARISATION = {"reg_lambda": 3.0, "subsample": 0.8}

#: system -> (kind, objective or CatBoost loss, our objective's settings or CatBoost's parameters, our tree
#: settings that differ from the project's)
Spec = tuple[str, str, dict[str, Any], dict[str, Any]]
COMPARE: dict[str, Spec] = {
    "ours_stochastic_rank": ("ours", "stochastic_rank", {}, {}),
    "catboost_stochastic_rank": ("catboost", "StochasticRank:metric=NDCG;top=10", {}, {}),
    "ours_stochastic_rank_catboost_reg": ("ours", "stochastic_rank", {}, CATBOOST_REGULARISATION),
    "ours_lambdamart": ("ours", "lambdamart", {}, {}),
    "catboost_lambdamart": ("catboost", "LambdaMart:metric=NDCG;top=10", {}, {}),
    "catboost_yetirank": ("catboost", "YetiRank", {}, {}),
}
ABLATION_ROWS = ("reinforce", "ccs", "ccs_sfa", "ccs_sfa_sglb", "ccs_sfa_sglb_mu", "catboost_sglb")


def ablation(mu: float) -> dict[str, Spec]:
    sr = "stochastic_rank"
    return {
        "reinforce": ("ours", sr, {"estimator": "reinforce", "lambda_": 0.0}, {}),
        "ccs": ("ours", sr, {"lambda_": 0.0}, {}),
        "ccs_sfa": COMPARE["ours_stochastic_rank"],
        "ccs_sfa_sglb": ("ours", sr, {"langevin": True}, {}),
        "ccs_sfa_sglb_mu": ("ours", sr, {"langevin": True, "mu": mu}, {}),
        "catboost_sglb": ("catboost", "StochasticRank:metric=NDCG;top=10", {"langevin": True}, {}),
    }


# ------------------------------------------------------------ data
def yahoo_data(train_queries: int, test_queries: int) -> tuple[SplitData, SplitData]:
    """Yahoo!-shaped rows in memory: dense float32, an absent feature 0."""
    from pipelines.data.shapes import YAHOO, shape_queries, simulate_yahoo

    qid, n_docs, _ = shape_queries(YAHOO, train_queries + test_queries, DATA_SEED)
    parts = []
    for b, s in enumerate(range(0, qid.size, 500)):
        nd = n_docs[s : s + 500]
        label, rows, cols, values = simulate_yahoo(np.random.default_rng([DATA_SEED, 9, b]), nd)
        X = np.zeros((label.size, YAHOO.n_features), np.float32)
        X[rows, cols] = values
        parts.append((label.astype(np.float32), X))
    y = np.concatenate([p[0] for p in parts])
    X = np.concatenate([p[1] for p in parts])
    q = np.repeat(qid, n_docs).astype(np.int32)
    split = int(n_docs[:train_queries].sum())
    return SplitData(X[:split], y[:split], q[:split]), SplitData(X[split:], y[split:], q[split:])


def dataset(name: str, args: argparse.Namespace, threads: int) -> tuple[SplitData, SplitData]:
    if name == "mslr":
        train, test, _ = make_data(args.mslr_rows, args.test_queries, threads)
        return train, test
    if name == "yahoo":
        return yahoo_data(args.yahoo_queries, args.test_queries)
    raise SystemExit(f"unknown dataset {name!r}: mslr or yahoo")


# ------------------------------------------------------------ runs
def run_ours(objective: str, own: dict[str, Any], trees: dict[str, Any], train: SplitData, test: SplitData,
             seed: int, args: Any, threads: int) -> tuple[np.ndarray, float]:  # fmt: skip
    """Per-query test NDCG@10 and seconds a tree of our worker loop."""
    components.configure({objective: own} if own else {})
    s = settings_for("cpu", threads, args.trees)
    s = replace(s, model=replace(s.model, eta=args.lr, seed=seed, **trees))
    try:
        return _loop_result(objective, train, test, s, args.trees)
    finally:
        components.configure({})


def _loop_result(objective: str, train: SplitData, test: SplitData, s: Any, trees: int) -> tuple[np.ndarray, float]:
    from pipelines.kernel.loop import WorkerData, run_nodes
    from pipelines.plan.paths import parse_path
    from pipelines.plan.trie import build_plan
    from pipelines.store.checkpoints import CheckpointStore
    from pipelines.store.results import path_result

    plan = build_plan([parse_path(f"{objective}:{trees}", "run")])
    data = WorkerData(SplitData(train.X, train.y, train.qid), None, SplitData(test.X, test.y, test.qid))
    with tempfile.TemporaryDirectory(prefix="bench-sr-") as d:
        store = CheckpointStore(d)
        t0 = time.perf_counter()
        run_nodes(data, plan.nodes, s, store)
        wall = time.perf_counter() - t0
        res = path_result(store, "run", plan.chains["run"], with_model=False)
    qids = np.unique(test.qid)
    if not np.array_equal(np.asarray(res.test_qid), qids):
        raise RuntimeError("the loop's per-query NDCG does not cover the test queries")
    return np.asarray(res.test_ndcg, np.float64), wall / trees


def run_catboost(loss: str, own: dict[str, Any], train: SplitData, test: SplitData, seed: int, args: Any,
                 threads: int) -> tuple[np.ndarray, float]:  # fmt: skip
    from catboost import CatBoost, Pool

    model = CatBoost({"loss_function": loss, "iterations": args.trees, "learning_rate": args.lr,
                      "thread_count": threads, "random_seed": seed, "verbose": 0, "allow_writing_files": False,
                      **own})  # fmt: skip
    t0 = time.perf_counter()
    model.fit(Pool(train.X, train.y, group_id=train.qid))
    wall = time.perf_counter() - t0
    scores = model.predict(Pool(test.X, group_id=test.qid), prediction_type="RawFormulaVal")
    return ndcg(test.offsets, test.y.astype(np.float64), np.asarray(scores, np.float64), NdcgSpec()), wall / args.trees


# ------------------------------------------------------------ resumable store
class Runs:
    def __init__(self, out: Path) -> None:
        self.out = out
        out.mkdir(parents=True, exist_ok=True)
        self.file = out / "runs.jsonl"
        self.rows = [json.loads(x) for x in self.file.read_text().splitlines()] if self.file.exists() else []

    def have(self, ds: str, system: str, seed: int) -> bool:
        return any(r["dataset"] == ds and r["system"] == system and r["seed"] == seed for r in self.rows)

    def add(self, row: dict[str, Any], per_query: np.ndarray) -> None:
        p = self.out / "perquery" / row["dataset"] / row["system"]
        p.mkdir(parents=True, exist_ok=True)
        np.save(p / f"{row['seed']}.npy", per_query)
        with self.file.open("a") as f:
            f.write(json.dumps(row) + "\n")
        self.rows.append(row)

    def per_query(self, ds: str, system: str) -> np.ndarray | None:
        """Each test query's NDCG@10 averaged over the finished seeds (None if none)."""
        p = self.out / "perquery" / ds / system
        files = sorted(p.glob("*.npy")) if p.exists() else []
        return np.mean([np.load(f) for f in files], axis=0) if files else None

    def seeds(self, ds: str, system: str) -> list[float]:
        return [r["ndcg10"] for r in self.rows if r["dataset"] == ds and r["system"] == system]


# ------------------------------------------------------------ tables
def paired(a: np.ndarray, b: np.ndarray) -> dict[str, float]:
    """a - b paired over queries: mean difference, its 95% interval, two-sided p (t-test)."""
    from scipy import stats

    d = a - b
    t = stats.ttest_rel(a, b)
    ci = t.confidence_interval(0.95)
    return {"diff": float(d.mean()), "lo": float(ci.low), "hi": float(ci.high), "p": float(t.pvalue),
            "queries": int(d.size)}  # fmt: skip


def _fmt_seeds(v: list[float]) -> str:
    if not v:
        return "-"
    sd = statistics.stdev(v) if len(v) > 1 else 0.0
    return f"{statistics.mean(v):.4f} ± {sd:.4f} ({len(v)})"


def tables(runs: Runs, datasets: list[str]) -> str:
    lines = []
    for ds in datasets:
        lines += [f"\n### {ds}: compare", "", "| system | NDCG@10, mean ± sd over seeds (n) | "
                  "vs CatBoost StochasticRank, paired over queries: diff [95% CI], p |",
                  "|---|---:|---|"]  # fmt: skip
        ref = runs.per_query(ds, "catboost_stochastic_rank")
        for system in COMPARE:  # (each run's s_per_tree is in runs.jsonl; the cost part measures cost, alone)
            pq = runs.per_query(ds, system)
            cmp = "-"
            if pq is not None and ref is not None and system != "catboost_stochastic_rank":
                t = paired(pq, ref)
                cmp = f"{t['diff']:+.4f} [{t['lo']:+.4f}, {t['hi']:+.4f}], p={t['p']:.3g}"
            lines.append(f"| {system} | {_fmt_seeds(runs.seeds(ds, system))} | {cmp} |")
        abl = [r for r in ABLATION_ROWS if runs.per_query(ds, _abl(r)) is not None]
        if abl:
            lines += [f"\n### {ds}: ablation (each row against the row before it)", "",
                      "| variant | NDCG@10, mean ± sd over seeds (n) | vs previous: diff [95% CI], p |",
                      "|---|---:|---|"]  # fmt: skip
            prev = None
            for r in abl:
                pq = runs.per_query(ds, _abl(r))
                cmp = "-"
                if r == "catboost_sglb":
                    prev = runs.per_query(ds, "catboost_stochastic_rank")
                if prev is not None and pq is not None:
                    t = paired(pq, prev)
                    cmp = f"{t['diff']:+.4f} [{t['lo']:+.4f}, {t['hi']:+.4f}], p={t['p']:.3g}"
                lines.append(f"| {r} | {_fmt_seeds(runs.seeds(ds, _abl(r)))} | {cmp} |")
                prev = pq
    return "\n".join(lines)


def _abl(row: str) -> str:
    """The system name an ablation row is stored under (``ccs_sfa`` is the compare table's own run)."""
    return "ours_stochastic_rank" if row == "ccs_sfa" else f"ablation_{row}"


# ------------------------------------------------------------ cost
def cost(args: argparse.Namespace, threads: int, out: Path) -> dict[str, Any]:
    rows = [int(x) for x in args.cost_rows.split(",")]
    trees = [int(x) for x in args.cost_trees.split(",")]
    report: dict[str, Any] = {"machine": machine(), "threads": threads, "sizes": []}
    for n, t in zip(rows, trees, strict=True):
        train, test, _ = make_data(n, 200, threads)
        s = settings_for("cpu", threads, t)
        for run in ("lambdamart", "stochastic_rank"):  # warm-up: numba compilation, out of the timings
            _cost_loop(run, train, test, settings_for("cpu", threads, 2), 2)
        res: dict[str, list[dict[str, Any]]] = {"lambdamart": [], "stochastic_rank": []}
        for _ in range(args.repeats):
            for run in res:
                r = _cost_loop(run, train, test, s, t)
                res[run].append(r)
                print(f"{train.y.size:,} rows {run}: {r['per_tree_s'] * 1e3:.1f} ms/tree "
                      f"(objective {r['objective_per_tree_s'] * 1e3:.1f} ms)", flush=True)  # fmt: skip
        size: dict[str, Any] = {"rows": int(train.y.size), "trees": t}
        for run, rs in res.items():
            size[run] = {
                "per_tree_ms": statistics.median(r["per_tree_s"] for r in rs) * 1e3,
                "objective_ms": statistics.median(r["objective_per_tree_s"] for r in rs) * 1e3,
                "each_ms": [round(r["per_tree_s"] * 1e3, 1) for r in rs],
            }
        size["ratio"] = size["stochastic_rank"]["per_tree_ms"] / size["lambdamart"]["per_tree_ms"]
        report["sizes"].append(size)
        (out / "cost.json").write_text(json.dumps(report, indent=2))
        del train, test
    return report


def _cost_loop(run: str, train: SplitData, test: SplitData, s: Any, trees: int) -> dict[str, Any]:
    from benchmarks import bench_gpu

    bench_gpu.LOOP_PATH.setdefault(run, run)
    return loop(run, train, test, s, trees)


# ------------------------------------------------------------ main
def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--part", default="compare,ablation", help="compare, ablation, cost (comma-separated)")
    p.add_argument("--datasets", default="mslr,yahoo")
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--trees", type=int, default=200)
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--mu", type=float, default=0.1, help="the ablation's consistent-smoothing shift")
    p.add_argument("--mslr-rows", type=int, default=150_000)
    p.add_argument("--yahoo-queries", type=int, default=5000)
    p.add_argument("--test-queries", type=int, default=2000)
    p.add_argument("--cost-rows", default="138000,2290000")
    p.add_argument("--cost-trees", default="40,10")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--threads", type=int, default=0, help="threads (0: all cores)")
    p.add_argument("--table", action="store_true", help="print the tables of the finished runs and stop")
    p.add_argument("--out", default=str(ROOT / "bench-out" / "stochastic_rank"))
    args = p.parse_args()
    threads = args.threads or os.cpu_count() or 1
    out = Path(args.out)
    runs = Runs(out)
    datasets = args.datasets.split(",")
    parts = args.part.split(",")
    if args.table:
        print(tables(runs, datasets))
        return 0
    if "cost" in parts:
        rep = cost(args, threads, out)
        for sz in rep["sizes"]:
            print(f"{sz['rows']:,} rows: lambdamart {sz['lambdamart']['per_tree_ms']:.1f} ms/tree, stochastic_rank "
                  f"{sz['stochastic_rank']['per_tree_ms']:.1f} ms/tree ({sz['ratio']:.2f}x)")  # fmt: skip
    todo: list[tuple[str, str, Spec]] = []
    seeds = list(range(1, args.seeds + 1))
    if "compare" in parts:
        first, scale = list(COMPARE)[:3], list(COMPARE)[3:]
        for group in (first, scale):
            for ds in datasets:
                for seed in seeds:
                    for system in group:
                        if system == "ours_lambdamart" and seed != seeds[0]:
                            continue  # deterministic
                        todo.append((ds, system, COMPARE[system]))
    if "ablation" in parts:
        spec = ablation(args.mu)
        for ds in datasets:
            for variant in ABLATION_ROWS:
                for _ in seeds:
                    if _abl(variant) != "ours_stochastic_rank" or "compare" not in parts:
                        todo.append((ds, _abl(variant), spec[variant]))
    # seeds in the order above: the i-th entry of a (dataset, system) pair is seed i
    count: dict[tuple[str, str], int] = {}
    loaded: dict[str, tuple[SplitData, SplitData]] = {}
    for ds, system, (kind, what, own, tree_set) in todo:
        i = count.get((ds, system), 0)
        count[(ds, system)] = i + 1
        seed = seeds[i]
        if runs.have(ds, system, seed):
            continue
        if ds not in loaded:
            loaded.clear()
            t0 = time.perf_counter()
            loaded[ds] = dataset(ds, args, threads)
            tr, te = loaded[ds]
            print(f"{ds}: {tr.y.size:,} train rows, {te.y.size:,} test rows ({te.offsets.size - 1} queries), "
                  f"{time.perf_counter() - t0:.1f} s", flush=True)  # fmt: skip
        train, test = loaded[ds]
        if kind == "ours":
            pq, spt = run_ours(what, own, tree_set, train, test, seed, args, threads)
        else:
            pq, spt = run_catboost(what, own, train, test, seed, args, threads)
        row: dict[str, Any] = {
            "dataset": ds, "system": system, "seed": seed, "ndcg10": float(pq.mean()), "s_per_tree": spt,
            "trees": args.trees, "lr": args.lr, "settings": own, "tree_settings": tree_set, "what": what,
            "train_rows": int(train.y.size), "test_queries": int(test.offsets.size - 1),
        }  # fmt: skip
        runs.add(row, pq)
        print(f"{ds} {system} seed {seed}: NDCG@10 {row['ndcg10']:.4f}, {spt:.3f} s/tree", flush=True)
    if todo:
        print(tables(runs, datasets))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
