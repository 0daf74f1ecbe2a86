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


def test_features_in_one_list_column_give_the_same_worker_data():
    """The features as one array<float> column (what the barrier job hands a worker), in sliced batches as Spark's
    come, load to the same codes, labels and qids as one column per feature; a row of another length is refused."""
    import pytest

    from pipelines.worker.data import FEATURES_COL, DataError, features_of_column

    rng = np.random.default_rng(5)
    n, f = 900, 5
    feats = schema.feature_cols(f)
    cols = {
        SPLIT_COL: rng.integers(0, 3, n).astype(np.int8),
        schema.QID: rng.integers(0, 60, n).astype(np.int32),
        schema.DOC: np.arange(n, dtype=np.int32),
        schema.LABEL: rng.integers(0, 5, n).astype(np.int8),
    }
    X = np.round(rng.normal(size=(n, f)), 1).astype(np.float32)
    X[rng.random(X.shape) < 0.1] = np.nan
    cuts = (np.arange(0, 4 * f + 1, 4, dtype=np.int64), np.tile(np.float32([-1, -0.2, 0.3, 1.1]), f))
    wide = pa.RecordBatch.from_pydict({**cols, **{c: X[:, j] for j, c in enumerate(feats)}})
    lists = pa.FixedSizeListArray.from_arrays(pa.array(X.ravel()), f).cast(pa.list_(pa.float32()))
    one = pa.RecordBatch.from_pydict({**cols, FEATURES_COL: lists})
    sliced = [one.slice(a, 77) for a in range(0, n, 77)]  # list arrays with an offset into their values
    assert sliced[1].column(FEATURES_COL).offset == 77
    a, b = from_batches([wide], f, cuts, []), from_batches(sliced, f, cuts, [])
    for x, y in zip((a.train, a.vali, a.test), (b.train, b.vali, b.test), strict=True):
        assert (y.codes == 65535).any()  # missing values stay missing
        for name in ("codes", "y", "qid", "doc"):
            np.testing.assert_array_equal(getattr(x, name), getattr(y, name))
    with pytest.raises(DataError, match=r"rows are not 5 features each"):
        features_of_column(pa.array([[1.0] * 5, [1.0] * 4, [1.0] * 6], pa.list_(pa.float32())), f)
