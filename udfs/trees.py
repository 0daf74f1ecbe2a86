"""Adding one XGBoost tree's output to margins, for per-tree evaluation curves.

XGBoost's CPU predictor fills a dense feature vector for every row on every
call, even for a one-tree (incremental) prediction; walking only the new tree's
path per row is several times cheaper and gives bit-identical float32 margins
(tested), which keeps NDCG-after-every-tree curves a small share of training
(benchmarks/RESULTS.md, "Curves over bin codes" and "Figures moved out of the code").

Semantics are XGBoost's for numerical splits: go left if ``x < split_condition``,
follow ``default_left`` for NaN; a leaf's value is its ``split_condition``.

**Bin codes.** The walk is bound by memory bandwidth: a 64-leaf tree reads most of each
row's cache lines. XGBoost's ``hist`` trees split only at the training matrix's quantile cuts
(``QuantileDMatrix.get_quantile_cut``), so with ``b(x)`` = the number of a feature's
cuts ``<= x``, ``x < cuts[j]`` holds exactly when ``b(x) <= j``. :func:`bin_codes` stores
``b(x)`` as uint16 (NaN: :data:`MISSING`) once per matrix; :func:`tree_arrays` with the
cuts adds each split's cut index; the walk over codes reads half the bytes (faster: RESULTS.md),
with the same leaves, hence bit-identical margins (tested). A tree with a
split that is not a cut (another tree method, cuts of another matrix) walks the floats.
"""

from __future__ import annotations

import json

import numba
import numpy as np
import xgboost as xgb

#: The bin code of a missing value (NaN); a feature has at most ``max_bin + 1`` codes besides.
MISSING = np.uint16(65535)

Cuts = tuple[np.ndarray, np.ndarray]  # (indptr int64, values float32): XGBoost's quantile cuts per feature


def quantile_cuts(dmatrix: xgb.QuantileDMatrix) -> Cuts | None:
    """The matrix's cuts as :func:`bin_codes` wants them; None where XGBoost cannot give them."""
    try:
        indptr, values = dmatrix.get_quantile_cut()
    except (xgb.core.XGBoostError, AttributeError, TypeError):
        return None
    indptr, values = np.asarray(indptr, np.int64), np.asarray(values, np.float32)
    if np.diff(indptr).max(initial=0) >= int(MISSING):
        return None
    return indptr, values


@numba.njit(cache=True, nogil=True, parallel=True)
def _bin_codes(X, indptr, values, out):
    for r in numba.prange(X.shape[0]):
        for j in range(X.shape[1]):
            v = X[r, j]
            if np.isnan(v):
                out[r, j] = 65535
            else:
                out[r, j] = np.searchsorted(values[indptr[j] : indptr[j + 1]], v, side="right")


def bin_codes(X: np.ndarray, cuts: Cuts) -> np.ndarray:
    """uint16 codes of ``X`` (rows x features): the number of the feature's cuts ``<= x``; NaN: :data:`MISSING`."""
    indptr, values = cuts
    if X.shape[1] != indptr.size - 1:
        raise ValueError(f"{X.shape[1]} features but cuts of {indptr.size - 1}")
    out = np.empty(X.shape, np.uint16)
    if X.size:
        _bin_codes(np.ascontiguousarray(X, np.float32), indptr, values, out)
    return out


def tree_arrays(booster: xgb.Booster, i: int, cuts: Cuts | None = None) -> tuple[np.ndarray, ...]:
    """(left, right, feature, condition, default_left) of tree ``i`` of ``booster``; with ``cuts``, and
    when every split's condition is one of its feature's cuts, a sixth array: each split's cut index."""
    doc = json.loads(booster[i : i + 1].save_raw("json"))
    t = doc["learner"]["gradient_booster"]["model"]["trees"][0]
    tree = (
        np.asarray(t["left_children"], np.int32),
        np.asarray(t["right_children"], np.int32),
        np.asarray(t["split_indices"], np.int32),
        np.asarray(t["split_conditions"], np.float32),
        np.asarray(t["default_left"], np.bool_),
    )
    if cuts is None:
        return tree
    bins = _cut_indices(tree[0], tree[2], tree[3], *cuts)
    return tree if bins is None else (*tree, bins)


def _cut_indices(
    left: np.ndarray, feature: np.ndarray, cond: np.ndarray, indptr: np.ndarray, values: np.ndarray
) -> np.ndarray | None:
    """Each split's index among its feature's cuts (exact float32 equality); None if one is not a cut."""
    out = np.zeros(cond.size, np.int32)
    for n in np.flatnonzero(left != -1):
        f = feature[n]
        if not 0 <= f < indptr.size - 1:
            return None
        cuts = values[indptr[f] : indptr[f + 1]]
        j = int(np.searchsorted(cuts, cond[n]))
        if j == cuts.size or cuts[j] != cond[n]:
            return None
        out[n] = j
    return out


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


@numba.njit(cache=True, nogil=True, inline="always")
def _leaf_coded(C, r, left, right, feature, cond, default_left, bins):
    n = 0
    while left[n] != -1:
        c = C[r, feature[n]]
        if c == 65535:
            n = left[n] if default_left[n] else right[n]
        elif c <= bins[n]:
            n = left[n]
        else:
            n = right[n]
    return cond[n]


@numba.njit(cache=True, nogil=True, parallel=True)
def _add_tree_coded(C, left, right, feature, cond, default_left, bins, out):
    for r in numba.prange(C.shape[0]):
        out[r] += _leaf_coded(C, r, left, right, feature, cond, default_left, bins)


@numba.njit(cache=True, nogil=True, parallel=True)
def _add_tree_coded_rows(C, rows, left, right, feature, cond, default_left, bins, out):
    for j in numba.prange(rows.size):
        out[rows[j]] += _leaf_coded(C, rows[j], left, right, feature, cond, default_left, bins)


def add_tree(
    X: np.ndarray,
    tree: tuple[np.ndarray, ...],
    out: np.ndarray,
    rows: np.ndarray | None = None,
    codes: np.ndarray | None = None,
) -> None:
    """``out += tree(X)`` in place (``X`` float32 rows x features, ``out`` float32); only ``rows`` if given.

    ``codes``: :func:`bin_codes` of ``X`` with the cuts that ``tree`` (six arrays) was read with: the
    faster walk, same result."""
    if codes is not None and len(tree) == 6:
        if rows is not None:
            if rows.size:
                _add_tree_coded_rows(codes, rows, *tree, out)
        elif codes.shape[0]:
            _add_tree_coded(codes, *tree, out)
        return
    tree = tree[:5]
    if rows is not None:
        if rows.size:
            _add_tree_rows(X, rows, *tree, out)
    elif X.shape[0]:
        _add_tree(X, *tree, out)
