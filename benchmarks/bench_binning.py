"""A worker's binning: :class:`udfs.trees.Binner` against a binary search per value, on a dataset's own rows.

Usage: ``python -m benchmarks.bench_binning --data DATASET [--fold 1] [--rows 600000] [--repeats 3]``

Reads the first ``--rows`` training rows of the fold (an ingested dataset: ``ltr ingest``), takes the fold's cuts
from a sample as training does (:func:`pipelines.store.cuts.compute_cuts`, 256 bins), and times, on all cores:

* ``search``: the kernel before (``np.searchsorted`` on the feature's cuts, per value, rows in parallel);
* ``table, rows``: :class:`~udfs.trees.Binner` on the rows in row order (``encode``, the local twin);
* ``table, columns``: the same on the rows in column order, as a worker bins a batch's columns
  (:func:`pipelines.kernel.matrices.from_batches`);
* ``xgboost``: XGBoost's own ``QuantileDMatrix`` of the same rows on the same cuts (``ref=``, fed in the worker's
  chunks), which a worker builds after its binning: XGBoost bins every value again (it takes no bin indexes it did
  not compute). Its three passes over the data are timed apart (``passes_ns_per_value``: counting the values,
  the bin index with an ``upper_bound`` per value, the column index); it gives no codes to compare
  (``same_codes`` null).

Prints nanoseconds a value (the best of ``--repeats``), whether each gives the search's codes, and the tables' size.
The figures of 2026-11-28 are in benchmarks/RESULTS.md ("The worker's binning").
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

import numba
import numpy as np

from udfs.trees import MISSING, Binner


@numba.njit(nogil=True, parallel=True)
def _search(X, indptr, values, out):  # pragma: no cover - compiled; the kernel before the bucket tables
    for r in numba.prange(X.shape[0]):
        for j in range(X.shape[1]):
            v = X[r, j]
            if np.isnan(v):
                out[r, j] = MISSING
            else:
                out[r, j] = np.searchsorted(values[indptr[j] : indptr[j + 1]], v, side="right")


def main(argv: list[str] | None = None) -> None:
    """Run the comparison and print one JSON line per way of binning."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True, help="an ingested dataset (ltr ingest)")
    ap.add_argument("--fold", type=int, default=1)
    ap.add_argument("--rows", type=int, default=600_000)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)

    from pipelines.data.dataset import open_dataset, scan_subsets
    from pipelines.kernel.matrices import matrix_cuts
    from pipelines.store.cuts import compute_cuts, reference_matrix
    from udfs import schema

    ds = open_dataset(args.data)
    ref = reference_matrix(compute_cuts(ds, args.fold, 256, 200_000, "bench"))
    indptr, values = matrix_cuts(ref)
    feats = schema.feature_cols(ds.n_features)
    parts, n = [], 0
    for batch in scan_subsets(ds.path, list(ds.subsets(args.fold, "train")), feats, threads=False):
        parts.append(np.column_stack([batch.column(f).to_numpy(zero_copy_only=False) for f in feats]))
        n += batch.num_rows
        if n >= args.rows:
            break
    X = np.ascontiguousarray(np.concatenate(parts)[: args.rows], np.float32)
    XF = np.asfortranarray(X)
    expected = np.empty(X.shape, np.uint16)
    binner = Binner((indptr, values))

    def search() -> np.ndarray:
        _search(X, indptr, values, expected)
        return expected

    ways = [("search", search), ("table, rows", lambda: binner(X)), ("table, columns", lambda: binner(XF))]
    for name, run in ways:
        codes = run()  # compiled or loaded from numba's cache outside the timing
        best = float("inf")
        for _ in range(args.repeats):
            t = time.perf_counter()
            codes = run()
            best = min(best, time.perf_counter() - t)
        row = {
            "way": name,
            "rows": int(X.shape[0]),
            "features": int(X.shape[1]),
            "ns_per_value": round(best / X.size * 1e9, 2),
            "same_codes": bool(np.array_equal(codes, expected)),
            "threads": numba.get_num_threads(),
        }
        if name != "search":
            row["tables_mb"] = round(binner.table.nbytes / 1e6, 1)
        print(json.dumps(row), flush=True)
    print(json.dumps(_xgboost(X, ref, args.repeats)), flush=True)


def _xgboost(X: np.ndarray, ref: Any, repeats: int) -> dict[str, Any]:
    """XGBoost's quantised matrix of ``X`` on ``ref``'s cuts, fed as a worker feeds it; the best of ``repeats``."""
    import xgboost as xgb

    from pipelines.kernel.matrices import CHUNK_ROWS

    class Chunks(xgb.DataIter):
        def __init__(self) -> None:
            self.i, self.starts = 0, list[float]()  # a pass starts at its first chunk
            super().__init__(release_data=True)

        def next(self, input_data: Any) -> bool:
            if self.i == 0:
                self.starts.append(time.perf_counter())
            if self.i * CHUNK_ROWS >= X.shape[0]:
                return False
            input_data(data=X[self.i * CHUNK_ROWS : (self.i + 1) * CHUNK_ROWS])
            self.i += 1
            return True

        def reset(self) -> None:
            self.i = 0

    threads = numba.get_num_threads()
    best, passes = float("inf"), []
    for _ in range(repeats):
        it = Chunks()
        xgb.QuantileDMatrix(it, ref=ref, max_bin=256, nthread=threads)
        ends = [*it.starts[1:], time.perf_counter()]
        if ends[-1] - it.starts[0] < best:
            best, passes = ends[-1] - it.starts[0], [b - a for a, b in zip(it.starts, ends)]
    return {
        "way": "xgboost",
        "rows": int(X.shape[0]),
        "features": int(X.shape[1]),
        "ns_per_value": round(best / X.size * 1e9, 2),
        "passes_ns_per_value": [round(p / X.size * 1e9, 2) for p in passes],
        "same_codes": None,
        "threads": threads,
    }


if __name__ == "__main__":
    main()
