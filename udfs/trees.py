"""Adding one XGBoost tree's output to margins, for per-tree evaluation curves.

XGBoost's CPU predictor fills a dense feature vector for every row on every
call, so even a one-tree (incremental) prediction of 80,000 rows x 136
features costs about 15 ms. Walking only the new tree's path per row costs
about 4 ms and gives bit-identical float32 margins (tested), which keeps
NDCG-after-every-tree curves at a few percent of training time.

Semantics are XGBoost's for numerical splits: go left if ``x < split_condition``,
follow ``default_left`` for NaN; a leaf's value is its ``split_condition``.
"""

from __future__ import annotations

import json

import numba
import numpy as np
import xgboost as xgb


def tree_arrays(booster: xgb.Booster, i: int) -> tuple[np.ndarray, ...]:
    """(left, right, feature, condition, default_left) of tree ``i`` of ``booster``."""
    doc = json.loads(booster[i:i + 1].save_raw("json"))
    t = doc["learner"]["gradient_booster"]["model"]["trees"][0]
    return (np.asarray(t["left_children"], np.int32), np.asarray(t["right_children"], np.int32),
            np.asarray(t["split_indices"], np.int32), np.asarray(t["split_conditions"], np.float32),
            np.asarray(t["default_left"], np.bool_))


@numba.njit(cache=True, nogil=True, inline="always")
def _leaf(X, r, left, right, feature, cond, default_left):
    n = 0
    while left[n] != -1:
        v = X[r, feature[n]]
        if np.isnan(v):
            n = left[n] if default_left[n] else right[n]
        elif v < cond[n]:
            n = left[n]
        else:
            n = right[n]
    return cond[n]


@numba.njit(cache=True, nogil=True, parallel=True)
def _add_tree(X, left, right, feature, cond, default_left, out):
    for r in numba.prange(X.shape[0]):
        out[r] += _leaf(X, r, left, right, feature, cond, default_left)


@numba.njit(cache=True, nogil=True, parallel=True)
def _add_tree_rows(X, rows, left, right, feature, cond, default_left, out):
    for j in numba.prange(rows.size):
        out[rows[j]] += _leaf(X, rows[j], left, right, feature, cond, default_left)


def add_tree(X: np.ndarray, tree: tuple[np.ndarray, ...], out: np.ndarray, rows: np.ndarray | None = None) -> None:
    """``out += tree(X)`` in place (``X`` float32 rows x features, ``out`` float32); only ``rows`` if given."""
    if rows is not None:
        if rows.size:
            _add_tree_rows(X, rows, *tree, out)
    elif X.shape[0]:
        _add_tree(X, *tree, out)
