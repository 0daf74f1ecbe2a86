"""A worker's data path outside Spark: Arrow batches in any order -> bin codes in (qid, doc) order."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from pipelines.kernel.matrices import SPLIT_COL, from_batches
from tests.helpers import searchsorted_codes
from udfs import schema


def _batch(rows: np.ndarray, split, qid, doc, y, X, **extra: np.ndarray) -> pa.RecordBatch:
    """The worker's Arrow batch of ``rows``: split code, qid, doc, label, one column a feature and ``extra``."""
    return pa.RecordBatch.from_pydict(
        {
            SPLIT_COL: split[rows],
            schema.QID: qid[rows],
            schema.DOC: doc[rows],
            schema.LABEL: y[rows],
            **{k: v[rows] for k, v in extra.items()},
            **{c: X[rows, j] for j, c in enumerate(schema.feature_cols(X.shape[1]))},
        }
    )


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
    perm = rng.permutation(n)
    batches = [_batch(i, split, qid, doc, y, X, cur_stage=stage) for i in np.array_split(perm, 11)]
    data = from_batches(batches, f, cuts, [{"name": "cur", "column": "cur_stage", "label_filters": {}}])
    for code, sp in enumerate((data.train, data.vali, data.test)):
        rows = np.flatnonzero(split == code)
        rows = rows[np.lexsort((doc[rows], qid[rows]))]
        assert sp.codes.dtype == np.uint16
        np.testing.assert_array_equal(sp.codes, searchsorted_codes(X[rows], cuts))
        np.testing.assert_array_equal(sp.qid, qid[rows])
        np.testing.assert_array_equal(sp.doc, doc[rows])
        np.testing.assert_array_equal(sp.y, y[rows])
        if code == 0:
            np.testing.assert_array_equal(data.stages["cur"], stage[rows])


def test_features_in_one_list_column_give_the_same_worker_data():
    """The features as one array<float> column (what the barrier job hands a worker), in sliced batches as Spark's
    come, load to the same codes, labels and qids as one column per feature; a row of another length is refused."""
    import pytest

    from pipelines.kernel.matrices import FEATURES_COL, DataError, features_of_column

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


def test_spilled_codes_read_back_what_was_written_and_leave_no_file(tmp_path, monkeypatch):
    """A split's codes in a local file (pipelines.kernel.matrices.SpilledCodes): blocks and sparse rows read back as
    written, across several read windows; the file is unlinked at once, and a closed one is refused."""
    import pytest

    from pipelines.kernel.matrices import DataError, SpilledCodes, codes_of_rows, spill

    rng = np.random.default_rng(11)
    codes = rng.integers(0, 300, size=(1000, 9)).astype(np.uint16)
    codes[rng.random(codes.shape) < 0.05] = 65535
    monkeypatch.setattr(SpilledCodes, "WINDOW", 37)
    f = spill(codes, str(tmp_path), chunk_rows=128)
    assert not list(tmp_path.iterdir())  # unlinked: nothing left behind, whatever ends the worker
    np.testing.assert_array_equal(f.read(0, 1000), codes)
    np.testing.assert_array_equal(f.read(517, 519), codes[517:519])
    rows = np.sort(rng.choice(1000, 230, replace=False)).astype(np.int64)
    block, at = codes_of_rows(f, rows)
    np.testing.assert_array_equal(block[at], codes[rows])
    same, at = codes_of_rows(codes, rows)  # in memory: the array itself, no copy
    assert same is codes and at is rows
    with pytest.raises(DataError, match="ended at byte"):
        f.read(990, 1001)
    f.close()
    with pytest.raises(DataError, match="closed"):
        f.read(0, 1)


def test_training_codes_in_a_local_file_give_the_same_trees_and_curves(tmp_path, monkeypatch):
    """``train.codes_in_memory_gib: 0`` (the training split's codes in a file, read a chunk at a time for the
    matrices and for the complement of a curriculum subset) trains byte-identical models and curves to codes in
    memory, on a path with subset nodes; small read windows and chunks, so that every read spans several."""
    from pipelines.core.config import TrainConfig
    from pipelines.kernel import matrices as worker_data
    from pipelines.kernel.cuts import cuts_of, reference_matrix
    from pipelines.kernel.loop import Settings, run_nodes
    from pipelines.kernel.matrices import SpilledCodes, matrix_cuts
    from pipelines.plan.paths import parse_path, resolve
    from pipelines.plan.trie import build_plan
    from pipelines.store.checkpoints import CheckpointStore
    from pipelines.store.results import path_result
    from udfs.metrics import NdcgSpec

    monkeypatch.setattr(SpilledCodes, "WINDOW", 29)
    monkeypatch.setattr(worker_data, "CHUNK_ROWS", 41)  # the complement walk's chunks
    rng = np.random.default_rng(4)
    nq, f = 90, 6
    sizes = rng.integers(2, 25, nq)
    qid = np.repeat(np.arange(nq), sizes).astype(np.int32)
    n = qid.size
    X = np.round(rng.normal(size=(n, f)), 2).astype(np.float32)
    X[rng.random(X.shape) < 0.03] = np.nan
    y = np.clip(np.round(np.nan_to_num(X[:, 0]) + rng.normal(size=n)), 0, 4).astype(np.int8)
    split = np.repeat(rng.choice(3, nq, p=[0.6, 0.2, 0.2]), sizes).astype(np.int8)
    stage = np.repeat(rng.integers(0, 2, nq), sizes).astype(np.int32)
    perm = rng.permutation(n)
    batch = pa.RecordBatch.from_pydict(
        {
            SPLIT_COL: split[perm],
            schema.QID: qid[perm],
            schema.DOC: np.arange(n, dtype=np.int32)[perm],
            schema.LABEL: y[perm],
            "cur_stage": stage[perm],
            **{c: X[perm, j] for j, c in enumerate(schema.feature_cols(f))},
        }
    )
    train = split == 0
    ref = reference_matrix(cuts_of(X[train][np.lexsort((np.arange(n)[train], qid[train]))], 16))
    cfg = TrainConfig(leaves=8, eta=0.1, max_bin=16, score_dist_trees=[3])
    settings = Settings.of(cfg, NdcgSpec(), (0, 4), 1)
    path = resolve(parse_path("mse@cur.*:4,lambdamart:5", "p"), {"cur": 2})
    plan = build_plan([path], fold=1)
    results = []
    for spill_over in (float("inf"), 0.0):
        data = from_batches(
            [batch],
            f,
            matrix_cuts(ref),
            [{"name": "cur", "column": "cur_stage", "label_filters": {}}],
            spill_over=spill_over,
            where=str(tmp_path),
        )
        assert isinstance(data.train.codes, SpilledCodes) == (spill_over == 0.0)
        assert data.vali is not None and isinstance(data.vali.codes, np.ndarray)  # vali and test stay in memory
        store = CheckpointStore(str(tmp_path / f"ckpt-{spill_over}"))
        run_nodes(data, plan.nodes, settings, store, ref=ref)
        results.append(path_result(store, "p", plan.chains["p"]))
    a, b = results
    assert a.model == b.model
    assert a.test == b.test and a.vali == b.vali and len(a.test) == 9
    assert all(p.name.startswith("ckpt-") for p in tmp_path.iterdir())  # no codes' file left behind


def test_codes_that_cannot_be_written_are_refused_naming_the_directory_and_the_setting(tmp_path):
    import pytest

    from pipelines.kernel.matrices import DataError, spill

    missing = tmp_path / "gone"  # not a directory: the file cannot be made
    with pytest.raises(DataError, match=r"in .*gone: .*train\.codes_in_memory_gib="):
        spill(np.zeros((10, 3), np.uint16), str(missing))


def test_numpy_asks_for_no_huge_pages_while_the_rows_load_and_does_again_after(monkeypatch):
    """from_batches runs inside without_huge_pages: numpy's switch is off there and back as it was after."""
    from pipelines.kernel import env
    from pipelines.kernel import matrices as worker_data

    switch = env._numpy_huge_page_switch()
    assert switch is not None  # numpy 1 and 2 both have it
    before = switch(True)
    seen = []
    real = worker_data._Builder.add

    def add(self, *args, **kwargs):
        seen.append(switch(False))  # the state inside (left off)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(worker_data._Builder, "add", add)
    cuts = (np.array([0, 1], np.int64), np.array([0.5], np.float32))
    batch = pa.RecordBatch.from_pydict(
        {
            SPLIT_COL: np.zeros(3, np.int8),
            schema.QID: np.ones(3, np.int32),
            schema.DOC: np.arange(3, dtype=np.int32),
            schema.LABEL: np.zeros(3, np.int8),
            schema.feature_cols(1)[0]: np.array([0.0, 0.5, 1.0], np.float32),
        }
    )
    data = from_batches([batch], 1, cuts, [])
    after = switch(before)
    assert seen == [False] and after is True
    np.testing.assert_array_equal(data.train.codes[:, 0], [0, 1, 1])


def test_codes_that_come_in_order_go_to_the_file_batch_by_batch_never_joined(tmp_path, monkeypatch):
    """A training split whose rows come in (qid, doc) order (one file) is spilled batch by batch: the file holds
    what the joined codes would, the codes are never joined in memory, and vali stays in memory."""
    from pipelines.kernel import matrices as worker_data
    from pipelines.kernel.matrices import SpilledCodes

    rng = np.random.default_rng(8)
    n, f = 2000, 5
    qid = np.sort(rng.integers(0, 150, n)).astype(np.int32)
    doc = np.arange(n, dtype=np.int32)
    X = rng.normal(size=(n, f)).astype(np.float32)
    split = np.where(qid < 120, 0, 1).astype(np.int8)  # ordered train rows, then vali
    cuts = (np.arange(0, 4 * f + 1, 4, dtype=np.int64), np.tile(np.array([-1, 0, 0.5, 1], np.float32), f))
    y = np.zeros(n, np.int8)
    batches = [_batch(i, split, qid, doc, y, X) for i in np.array_split(np.arange(n), 7)]
    joined = []
    real_join = worker_data._join

    def join(parts, empty, dtype):
        joined.append(len(empty))
        return real_join(parts, empty, dtype)

    monkeypatch.setattr(worker_data, "_join", join)
    data = from_batches(batches, f, cuts, [], spill_over=0.0, where=str(tmp_path))
    assert isinstance(data.train.codes, SpilledCodes)
    rows = np.flatnonzero(split == 0)
    np.testing.assert_array_equal(data.train.codes.read(0, rows.size), searchsorted_codes(X[rows], cuts))
    np.testing.assert_array_equal(data.train.qid, qid[rows])
    assert isinstance(data.vali.codes, np.ndarray)  # vali: joined in memory (2-d parts)
    assert joined.count(2) == 2  # vali's and test's codes joined; never the training split's
    assert not list(tmp_path.iterdir())
