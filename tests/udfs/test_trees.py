"""The incremental tree traversal (udfs.trees) against XGBoost's own predictions, tree by tree, bit for bit."""

from __future__ import annotations

import numpy as np
import xgboost as xgb

from udfs.trees import MISSING, add_tree, bin_codes, quantile_cuts, tree_arrays


def test_tree_by_tree_equals_xgboost_with_missing_values_and_deep_trees():
    rng = np.random.default_rng(3)
    X = rng.normal(size=(3000, 8)).astype(np.float32)
    X[rng.random(X.shape) < 0.15] = np.nan  # missing values: default directions
    y = (np.nan_to_num(X[:, 0]) * 2 + np.nan_to_num(X[:, 1]) ** 2 + rng.normal(size=3000)).astype(np.float32)
    b = xgb.train(
        {
            "tree_method": "hist",
            "max_depth": 0,
            "max_leaves": 255,
            "grow_policy": "lossguide",
            "eta": 0.3,
            "base_score": 0.0,
            "nthread": 1,
        },
        xgb.DMatrix(X, y),
        12,
    )
    margins = np.zeros(X.shape[0], np.float32)
    rows = np.arange(0, X.shape[0], 3)
    part = np.zeros(X.shape[0], np.float32)
    d = xgb.DMatrix(X, base_margin=np.zeros(X.shape[0], np.float32))
    depth = 0
    for i in range(12):
        tree = tree_arrays(b, i)
        add_tree(X, tree, margins)
        add_tree(X, tree, part, rows)
        expected = b.predict(d, output_margin=True, iteration_range=(0, i + 1))
        np.testing.assert_array_equal(margins, expected)  # bit for bit
        np.testing.assert_array_equal(part[rows], expected[rows])
        assert not part[np.setdiff1d(np.arange(X.shape[0]), rows)].any()  # other rows untouched
        depth = max(depth, _depth(tree[0], tree[1]))
    assert depth >= 8  # deep, unbalanced trees were exercised


def test_bin_codes_walk_equals_xgboost_bit_for_bit():
    """Trees trained on a QuantileDMatrix, walked over the bin codes of other rows (eval rows: values
    outside the training range, huge ones, NaN), whole and by rows, against XGBoost's predictions."""
    rng = np.random.default_rng(5)
    X = rng.normal(size=(4000, 6)).astype(np.float32)
    X[:, 5] = rng.integers(0, 4, 4000)  # few distinct values: few cuts
    X[rng.random(X.shape) < 0.1] = np.nan
    y = (np.nan_to_num(X[:, 0]) - np.nan_to_num(X[:, 5]) + rng.normal(size=4000)).astype(np.float32)
    train, ev = X[:3000], X[3000:].copy()
    ev[:50, 0] *= 10  # beyond the training range
    ev[50, 1], ev[51, 1] = 3e38, -3e38
    dq = xgb.QuantileDMatrix(train, label=y[:3000], max_bin=32)
    b = xgb.train(
        {
            "tree_method": "hist",
            "max_depth": 0,
            "max_leaves": 63,
            "grow_policy": "lossguide",
            "eta": 0.3,
            "base_score": 0.0,
            "nthread": 1,
            "max_bin": 32,
        },
        dq,
        8,
    )
    cuts = quantile_cuts(dq)
    assert cuts is not None
    codes = bin_codes(ev, cuts)
    assert codes.dtype == np.uint16 and (codes[np.isnan(ev)] == MISSING).all()
    assert codes[~np.isnan(ev[:, 5]), 5].max() <= 4  # 4 distinct values: at most 4 cuts
    d = xgb.DMatrix(ev, base_margin=np.zeros(ev.shape[0], np.float32))
    margins, part = np.zeros(ev.shape[0], np.float32), np.zeros(ev.shape[0], np.float32)
    rows = np.arange(1, ev.shape[0], 2)
    for i in range(8):
        tree = tree_arrays(b, i, cuts)
        assert len(tree) == 6  # every split is a cut: the coded walk is the one tested
        add_tree(np.full_like(ev, np.nan), tree, margins, codes=codes)  # the floats are not read
        add_tree(ev, tree, part, rows, codes=codes)
        expected = b.predict(d, output_margin=True, iteration_range=(0, i + 1))
        np.testing.assert_array_equal(margins, expected)
        np.testing.assert_array_equal(part[rows], expected[rows])


def test_a_split_that_is_not_a_cut_walks_the_floats():
    """Cuts of another matrix: no cut indices, and add_tree with codes still adds the float walk's values."""
    rng = np.random.default_rng(6)
    X = rng.normal(size=(2000, 3)).astype(np.float32)
    y = (X[:, 0] + rng.normal(size=2000)).astype(np.float32)
    b = xgb.train(
        {
            "tree_method": "hist",
            "max_leaves": 15,
            "grow_policy": "lossguide",
            "max_depth": 0,
            "base_score": 0.0,
            "nthread": 1,
        },
        xgb.QuantileDMatrix(X, label=y),
        1,
    )
    other = quantile_cuts(xgb.QuantileDMatrix(X[:500] * 1.5, label=y[:500], max_bin=16))
    tree = tree_arrays(b, 0, other)
    assert len(tree) == 5
    out = np.zeros(2000, np.float32)
    add_tree(X, tree, out, codes=bin_codes(X, other))
    np.testing.assert_array_equal(out, b.predict(xgb.DMatrix(X), output_margin=True))


def _depth(left, right, n=0):
    return 0 if left[n] == -1 else 1 + max(_depth(left, right, left[n]), _depth(left, right, right[n]))
