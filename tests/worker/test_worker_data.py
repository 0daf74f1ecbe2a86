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


def test_codes_binned_before_the_shuffle_give_the_same_worker_data():
    """The scan tasks' binary codes (codes_batch), sliced and filtered as Spark's batches come, load to the same
    codes, labels, qids and stages as the float features binned by the worker; a value that is not one row's
    codes is refused."""
    import pytest

    from pipelines.worker.data import CODES_COL, DataError, codes_batch, codes_of_column

    rng = np.random.default_rng(5)
    n, f = 900, 5
    feats = schema.feature_cols(f)
    cols = {
        SPLIT_COL: rng.integers(0, 3, n).astype(np.int8),
        schema.QID: rng.integers(0, 60, n).astype(np.int32),
        schema.DOC: np.arange(n, dtype=np.int32),
        schema.LABEL: rng.integers(0, 5, n).astype(np.int8),
        "cur_stage": rng.integers(0, 2, n).astype(np.int32),
    }
    X = np.round(rng.normal(size=(n, f)), 1).astype(np.float32)
    X[rng.random(X.shape) < 0.1] = np.nan
    whole = pa.RecordBatch.from_pydict({**cols, **{c: X[:, j] for j, c in enumerate(feats)}})
    cuts = (np.arange(0, 4 * f + 1, 4, dtype=np.int64), np.tile(np.float32([-1, -0.2, 0.3, 1.1]), f))
    keep = list(cols)
    floats = [whole.slice(a, 100) for a in range(0, n, 100)]
    coded = [codes_batch(b, feats, keep, cuts).slice(7, 93) for b in floats] + [
        codes_batch(b, feats, keep, cuts).slice(0, 7) for b in floats
    ]  # sliced: Arrow arrays with an offset into their buffers
    assert coded[0].schema.names == [*keep, CODES_COL] and coded[0].column(CODES_COL).offset == 7
    cur = [{"name": "cur", "column": "cur_stage", "label_filters": {}}]
    a, b = from_batches(floats, f, cuts, cur), from_batches(coded, f, cuts, cur)
    for x, y in zip((a.train, a.vali, a.test), (b.train, b.vali, b.test), strict=True):
        assert y.codes.dtype == np.uint16 and (y.codes == 65535).any()  # missing values stay missing
        for name in ("codes", "y", "qid", "doc"):
            np.testing.assert_array_equal(getattr(x, name), getattr(y, name))
    np.testing.assert_array_equal(a.stages["cur"], b.stages["cur"])

    with pytest.raises(DataError, match=r"values are not 10 bytes \(5 features x 2\) each"):
        codes_of_column(pa.array([b"\x00" * 10, b"\x00" * 8], pa.binary()), f)
    large = pa.array([b"\x01\x00" * f], pa.large_binary())  # Spark's Arrow may hand large binary
    np.testing.assert_array_equal(codes_of_column(large, f), np.ones((1, f), np.uint16))
