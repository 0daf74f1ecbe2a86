"""Per-query curves replayed from a model (pipelines.report.replay) against XGBoost's own predictions."""

from __future__ import annotations

import numpy as np
import pytest
import xgboost as xgb

from pipelines.report.records import ReportError
from pipelines.report.replay import EvalSplit, _check, points, replay
from tests.helpers import record
from udfs.metrics import NdcgSpec, ndcg_fast, offsets_from_qids


def _split(seed: int = 0, queries: int = 40) -> EvalSplit:
    rng = np.random.default_rng(seed)
    sizes = rng.integers(1, 15, queries)
    qid = np.repeat(np.arange(100, 100 + queries), sizes).astype(np.int64)
    X = rng.normal(size=(qid.size, 5)).astype(np.float32)
    X[rng.random(X.shape) < 0.1] = np.nan  # missing values take the default direction
    label = np.clip(np.round(np.nan_to_num(X[:, 0]) + rng.normal(size=qid.size)), 0, 4).astype(np.float32)
    return EvalSplit(qid, label, X, offsets_from_qids(qid))


@pytest.mark.parametrize("chunk", [100, 4])  # the trees walked in one chunk, or in three (9 trees, 4 a chunk)
def test_replay_is_xgboosts_prediction_tree_by_tree(chunk, monkeypatch):
    from pipelines.report import replay as module

    monkeypatch.setattr(module, "LEAF_CHUNK", chunk)
    s = _split()
    base = 0.37
    booster = xgb.train(
        {"tree_method": "hist", "max_leaves": 8, "grow_policy": "lossguide", "eta": 0.3, "base_score": base},
        xgb.DMatrix(s.X, s.label),
        9,
    )
    spec = NdcgSpec(k=5, gain="exp2", empty=1.0, ties="input")
    steps = [0, 2, 3, 9]
    model = bytes(booster.save_raw("json"))
    got = replay(model, base, s, spec, steps)
    d = xgb.DMatrix(s.X)
    for j, n in enumerate(steps):
        margin = booster.predict(d, output_margin=True, iteration_range=(0, n)) if n else np.full(s.qid.size, base)
        np.testing.assert_array_equal(got[:, j], ndcg_fast(s.offsets, s.label, margin.astype(np.float32), spec))
    assert got.shape == (40, 4) and not np.array_equal(got[:, 0], got[:, -1])  # the trees changed the ranking
    with pytest.raises(ReportError, match="has 9 trees"):
        replay(model, base, s, spec, [10])


def test_points_keep_the_last_and_are_evenly_spaced():
    assert points([1, 2, 3], most=5) == [1, 2, 3]
    # 0..9 into 4 picks: positions round(0, 3, 6, 9)
    assert points(list(range(10, 20)), most=4) == [10, 13, 16, 19]
    assert points(list(range(1, 1001)), most=200)[-1] == 1000


def test_a_replay_that_disagrees_with_the_logged_run_is_an_error():
    s = _split(queries=3)
    values = np.array([[0.5, 0.7], [0.2, 0.4], [1.0, 1.0]])  # queries x steps [1, 2]
    q = [int(x) for x in s.queries]
    rec = record(1, "q_nrel", 2, [values[:, 0].mean(), values[:, 1].mean()], dict(zip(q, values[:, 1], strict=True)))
    _check(rec, s, [1, 2], values)  # agrees
    rec.per_query[q[0]] = 0.7 + 1e-6
    with pytest.raises(ReportError, match="does not give back what it logged"):
        _check(rec, s, [1, 2], values)
    rec.per_query[q[0]] = 0.7
    rec.test[0] += 1e-6  # the curve's mean after tree 1
    with pytest.raises(ReportError, match="on the curve's means"):
        _check(rec, s, [1, 2], values)
