"""One curve point split into its parts, at the paper fold's shape: reading the new tree, walking the
bin codes of vali and test, NDCG@10 of both (the parts of the ``eval`` cost that bench_train reports).

    python -m benchmarks.bench_curve_parts [--eval-rows 760000] [--trees 25]

Synthetic data (no dataset needed): 64-leaf lossguide trees trained on 200,000 rows x 136 features whose
label depends on 60 of them, two eval splits of ``--eval-rows`` rows in queries of 60-180 documents;
2 threads. Side by side with another checkout: ``PYTHONPATH=/other/checkout python -m
benchmarks.bench_curve_parts`` run from there.
"""

from __future__ import annotations

import argparse
import sys
import time


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--eval-rows", type=int, default=760_000)
    ap.add_argument("--trees", type=int, default=25)
    args = ap.parse_args()
    import numba
    import numpy as np
    import xgboost as xgb

    from pipelines.kernel.cuts import cuts_of, reference_matrix
    from pipelines.kernel.matrices import matrix_cuts, walkable
    from udfs.metrics import NdcgSpec, inverse_idcg, ndcg_fast
    from udfs.trees import add_tree, bin_codes, tree_arrays

    numba.set_num_threads(2)
    rng = np.random.default_rng(0)
    n_tr, f = 200_000, 136
    X = rng.normal(size=(n_tr, f)).astype(np.float32)
    w = np.zeros(f, np.float32)
    w[rng.choice(f, 60, replace=False)] = rng.normal(size=60)
    y = np.clip(np.round(X @ w / 3 + 2 + rng.normal(size=n_tr)), 0, 4).astype(np.float32)
    ref = reference_matrix(cuts_of(X, 256, nthread=2), 2)
    params = {
        "tree_method": "hist",
        "grow_policy": "lossguide",
        "max_depth": 0,
        "max_leaves": 64,
        "eta": 0.05,
        "nthread": 2,
    }
    b = xgb.train(params, xgb.QuantileDMatrix(X, y, ref=ref, nthread=2), args.trees)
    cuts = matrix_cuts(ref)
    sizes = rng.integers(60, 180, args.eval_rows // 60)
    sizes = sizes[np.cumsum(sizes) <= args.eval_rows]
    off = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    splits = []
    for _ in range(2):
        codes = bin_codes(rng.normal(size=(off[-1], f)).astype(np.float32), cuts)
        lab = rng.integers(0, 5, off[-1]).astype(np.float32)
        splits.append((codes, lab, inverse_idcg(off, lab, NdcgSpec()), np.zeros(off[-1], np.float32)))
    spec = NdcgSpec()
    for codes, lab, inv, m in splits:  # compile
        add_tree(codes, walkable(tree_arrays(b, 0, cuts), 0), m, codes=codes)
        ndcg_fast(off, lab, m, spec, inv)
    t = {"read tree": 0.0, "walk": 0.0, "ndcg": 0.0}
    for i in range(args.trees):
        t0 = time.perf_counter()
        tree = walkable(tree_arrays(b, i, cuts), i)
        t1 = time.perf_counter()
        for codes, _, _, m in splits:
            add_tree(codes, tree, m, codes=codes)
        t2 = time.perf_counter()
        for _, lab, inv, m in splits:
            ndcg_fast(off, lab, m, spec, inv)
        t3 = time.perf_counter()
        t["read tree"] += t1 - t0
        t["walk"] += t2 - t1
        t["ndcg"] += t3 - t2
    parts = ", ".join(f"{k} {v / args.trees * 1000:.1f} ms" for k, v in t.items())
    print(
        f"{args.code}: per tree, 2 eval splits of {off[-1]:,} rows: {parts}; "
        f"total {sum(t.values()) / args.trees * 1000:.1f} ms"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
