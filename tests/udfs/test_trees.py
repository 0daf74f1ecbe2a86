"""The incremental tree traversal (udfs.trees) against XGBoost's own predictions, tree by tree, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest
import xgboost as xgb

from tests.helpers import searchsorted_codes
from udfs.trees import MISSING, Binner, add_tree, bin_codes, quantile_cuts, tree_arrays


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


def _awkward_cuts() -> list[np.ndarray]:
    """Cuts of features that exercise every path of the bucket tables."""
    f32 = np.float32
    tiny = np.finfo(f32).tiny
    return [
        np.array([], f32),  # no cut: every value is code 0
        np.array([0.0], f32),  # one cut at zero (-0.0 <= 0.0)
        np.array([-0.0, 1.0], f32),  # a cut at -0.0 (0.0 <= -0.0)
        np.array([-3e38, -1.0, -tiny, 0.0, tiny, 1e-30, 1.0, 3e38], f32),  # every magnitude and both signs
        np.nextafter(f32(1000.0), f32(np.inf)) + np.arange(60, dtype=f32) * f32(2**-4),  # 60 cuts in one bucket
        np.array([1.0, 1.0000001, 1.0000002, 2.0, 2.0000002], f32),  # neighbours a float apart
        np.sort(np.random.default_rng(1).normal(size=255)).astype(f32),  # a full feature of 255 cuts
        np.array([-np.inf, 5.0, np.inf], f32),  # infinite cuts
        np.array([1.5, 1.5, 2.5], f32),  # a repeated cut: both count
        np.array([1e-44, 1e-40, 1e-38], f32),  # subnormal cuts
    ]


@pytest.mark.parametrize("max_buckets", [65536, 64, 2])
def test_binner_counts_the_cuts_at_or_below_each_value_as_searchsorted_does(max_buckets):
    """Every cut, the floats next to it both ways, both zeros, both infinities, NaN and random values of every
    magnitude, in row and in column order, against numpy's searchsorted. Few buckets (64, 2) make the tables
    take fewer bits of each key, so the searches inside a bucket run long."""
    cols = _awkward_cuts()
    indptr = np.concatenate([[0], np.cumsum([c.size for c in cols])]).astype(np.int64)
    values = np.concatenate(cols).astype(np.float32)
    rng = np.random.default_rng(7)
    probes = np.concatenate(
        [
            values,
            np.nextafter(values, np.float32(np.inf)),
            np.nextafter(values, np.float32(-np.inf)),
            np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 3.4e38, -3.4e38], np.float32),
            (rng.normal(size=2000) * 10.0 ** rng.integers(-40, 38, 2000)).astype(np.float32),
            rng.random(1000).astype(np.float32) * 4 + 999,
        ]
    )
    X = np.repeat(probes[:, None], len(cols), axis=1)
    X[rng.permutation(X.size)[: X.size // 3] // len(cols), 0] = np.nan  # NaN rows scattered in feature 0
    expected = searchsorted_codes(X, (indptr, values))
    binner = Binner((indptr, values), max_buckets)
    np.testing.assert_array_equal(binner(X), expected)  # row order
    np.testing.assert_array_equal(binner(np.asfortranarray(X)), expected)  # column order, in blocks
    np.testing.assert_array_equal(binner(np.asfortranarray(X[:1500])), expected[:1500])  # a part block
    assert binner(X[:0]).shape == (0, len(cols))
    if max_buckets == 2:
        assert (binner.params[1:, 0] > 16).any()  # keys took fewer bits: the wide features' buckets hold many cuts


@pytest.mark.parametrize(
    "values, message",
    [
        (np.array([2.0, 1.0], np.float32), "feature 0 are not ascending"),
        (np.array([1.0, np.nan], np.float32), "feature 0 are not ascending or hold a NaN"),
    ],
)
def test_binner_refuses_cuts_it_cannot_count(values, message):
    with pytest.raises(ValueError, match=message):
        Binner((np.array([0, values.size], np.int64), values))


def test_binner_refuses_more_cuts_than_codes_hold_and_rows_of_other_widths():
    with pytest.raises(ValueError, match="65535 cuts"):
        Binner((np.array([0, 65535], np.int64), np.arange(65535, dtype=np.float32)))
    binner = Binner((np.array([0, 1, 2], np.int64), np.array([0.5, 0.5], np.float32)))
    with pytest.raises(ValueError, match="3 features but cuts of 2"):
        binner(np.zeros((4, 3), np.float32))


def _depth(left, right, n=0):
    return 0 if left[n] == -1 else 1 + max(_depth(left, right, left[n]), _depth(left, right, right[n]))
