"""The incremental tree traversal (udfs.trees) against XGBoost's own predictions, tree by tree, bit for bit."""

from __future__ import annotations

import numpy as np
import xgboost as xgb

from udfs.trees import add_tree, tree_arrays


def test_tree_by_tree_equals_xgboost_with_missing_values_and_deep_trees():
    rng = np.random.default_rng(3)
    X = rng.normal(size=(3000, 8)).astype(np.float32)
    X[rng.random(X.shape) < 0.15] = np.nan  # missing values: default directions
    y = (np.nan_to_num(X[:, 0]) * 2 + np.nan_to_num(X[:, 1]) ** 2 + rng.normal(size=3000)).astype(np.float32)
    b = xgb.train({"tree_method": "hist", "max_depth": 0, "max_leaves": 255, "grow_policy": "lossguide",
                   "eta": 0.3, "base_score": 0.0, "nthread": 1}, xgb.DMatrix(X, y), 12)
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


def _depth(left, right, n=0):
    return 0 if left[n] == -1 else 1 + max(_depth(left, right, left[n]), _depth(left, right, right[n]))
