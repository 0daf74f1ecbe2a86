"""A worker's binning: :class:`udfs.trees.Binner` against a binary search per value, on a dataset's own rows.

Usage: ``python -m benchmarks.bench_binning --data DATASET [--fold 1] [--rows 600000] [--repeats 3]``

Reads the first ``--rows`` training rows of the fold (an ingested dataset: ``ltr ingest``), takes the fold's cuts
from a sample as training does (:func:`pipelines.store.cuts.compute_cuts`, 256 bins), and times, on all cores:

* ``search``: the kernel before (``np.searchsorted`` on the feature's cuts, per value, rows in parallel);
* ``table, rows``: :class:`~udfs.trees.Binner` on the rows in row order (``encode``, the local twin);
* ``table, columns``: the same on the rows in column order, as a worker bins a batch's columns
  (:func:`pipelines.worker.data.from_batches`).

Prints nanoseconds a value (the best of ``--repeats``), whether each gives the search's codes, and the tables' size.
The figures of 2026-11-28 are in benchmarks/RESULTS.md ("The worker's binning").
"""

from __future__ import annotations

import argparse
import json
import time

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
    from pipelines.store.cuts import compute_cuts, reference_matrix
    from pipelines.worker.data import matrix_cuts
    from udfs import schema

    ds = open_dataset(args.data)
    indptr, values = matrix_cuts(reference_matrix(compute_cuts(ds, args.fold, 256, 200_000, "bench")))
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


if __name__ == "__main__":
    main()
