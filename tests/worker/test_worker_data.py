"""A worker's data path outside Spark: Arrow batches in any order -> bin codes in (qid, doc) order."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from pipelines.worker.data import SPLIT_COL, from_batches
from udfs import schema
from udfs.trees import bin_codes


def test_batches_in_any_order_become_ordered_codes():
    rng = np.random.default_rng(3)
    n, f = 3000, 7
    qid = rng.integers(0, 200, n).astype(np.int32)
    doc = np.arange(n, dtype=np.int32)
    X = np.round(rng.normal(size=(n, f)), 1).astype(np.float32)
    X[rng.random(X.shape) < 0.05] = np.nan
    split = rng.integers(0, 3, n).astype(np.int8)
    y = rng.integers(0, 5, n).astype(np.int8)
    stage = (qid % 3).astype(np.int32)
    cuts = (np.arange(0, 5 * f + 1, 5, dtype=np.int64), np.tile(np.linspace(-1.5, 1.5, 5).astype(np.float32), f))
    feats = schema.feature_cols(f)
    perm = rng.permutation(n)
    batches = [
        pa.RecordBatch.from_pydict(
            {
                SPLIT_COL: split[i],
                schema.QID: qid[i],
                schema.DOC: doc[i],
                schema.LABEL: y[i],
                "cur_stage": stage[i],
                **{c: X[i, j] for j, c in enumerate(feats)},
            }
        )
        for i in np.array_split(perm, 11)
    ]
    data = from_batches(batches, f, cuts, [{"name": "cur", "column": "cur_stage", "label_filters": {}}])
    for code, sp in enumerate((data.train, data.vali, data.test)):
        rows = np.flatnonzero(split == code)
        rows = rows[np.lexsort((doc[rows], qid[rows]))]
        assert sp.codes.dtype == np.uint16
        np.testing.assert_array_equal(sp.codes, bin_codes(X[rows], cuts))
        np.testing.assert_array_equal(sp.qid, qid[rows])
        np.testing.assert_array_equal(sp.doc, doc[rows])
        np.testing.assert_array_equal(sp.y, y[rows])
        if code == 0:
            np.testing.assert_array_equal(data.stages["cur"], stage[rows])
