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


#: A feature's bucket table holds at most this many buckets (:class:`Binner`): 128 KiB of uint16 a feature.
_MAX_BUCKETS = 65536
#: Buckets of more cuts than this are searched by halves, fewer one cut after another.
_SCAN = 8
#: Rows binned together from columns (:func:`_bin_columns`): their codes, 2 bytes a feature, stay in cache.
_BLOCK = 1024


@numba.njit(cache=True, nogil=True, inline="always")
def _key(bits):
    """An int64 that orders as the float32 whose bits are ``bits`` (not NaN); -0.0 and 0.0 get the same key."""
    if bits == 0x80000000:
        bits = 0
    return 0xFFFFFFFF - bits if bits >= 0x80000000 else bits + 0x80000000


@numba.njit(cache=True, nogil=True)
def _bin_tables(indptr, value_bits, max_buckets):
    """Per feature (shift, first bucket, buckets, table offset), the cuts' keys, and the tables: for each bucket
    ``k`` of a feature (keys ``>> shift``), the number of its cuts in buckets before ``k``; -1 as the first
    parameter of a feature whose cuts are not ascending or hold a NaN."""
    m = indptr.size - 1
    params = np.zeros((m, 4), np.int64)
    keys = np.empty(value_bits.size, np.int64)
    total = 0
    for j in range(m):
        a, b = indptr[j], indptr[j + 1]
        params[j, 0] = 32  # no cut: every key is in bucket 0, past an empty table: code 0
        params[j, 3] = total
        for i in range(a, b):
            bits = np.int64(value_bits[i])
            if (bits & 0x7FFFFFFF) > 0x7F800000:
                params[j, 0] = -1
                return params, keys, np.zeros(0, np.uint16)
            keys[i] = _key(bits)
            if i > a and keys[i] < keys[i - 1]:
                params[j, 0] = -1
                return params, keys, np.zeros(0, np.uint16)
        if b == a:
            continue
        shift = 16
        while (keys[b - 1] >> shift) - (keys[a] >> shift) + 1 > max_buckets:
            shift += 1
        params[j, 0] = shift
        params[j, 1] = keys[a] >> shift
        params[j, 2] = (keys[b - 1] >> shift) - (keys[a] >> shift) + 1
        total += params[j, 2] + 1
    table = np.empty(total, np.uint16)
    for j in range(m):
        a, b = indptr[j], indptr[j + 1]
        shift, first, n_buckets, off = params[j, 0], params[j, 1], params[j, 2], params[j, 3]
        i = a
        for t in range(n_buckets + 1):
            while i < b and (keys[i] >> shift) < first + t:
                i += 1
            table[off + t] = i - a
    return params, keys, table


@numba.njit(cache=True, nogil=True, inline="always")
def _code(bits, j, indptr, params, keys, table):
    """The bin code of the float32 whose bits are ``bits`` (as int64) on feature ``j``'s cuts."""
    if (bits & 0x7FFFFFFF) > 0x7F800000:
        return 65535
    u = _key(bits)
    k = (u >> params[j, 0]) - params[j, 1]
    if k < 0:
        return 0
    if k >= params[j, 2]:
        return indptr[j + 1] - indptr[j]
    t = params[j, 3] + k
    lo = np.int64(table[t])
    hi = np.int64(table[t + 1])
    base = indptr[j]
    if hi - lo > _SCAN:  # the first cut above u in [lo, hi), by halves
        while lo < hi:
            mid = (lo + hi) >> 1
            if keys[base + mid] <= u:
                lo = mid + 1
            else:
                hi = mid
    else:
        while lo < hi and keys[base + lo] <= u:
            lo += 1
    return lo


@numba.njit(cache=True, nogil=True, parallel=True)
def _bin_rows(X_bits, indptr, params, keys, table, out):
    """``X_bits`` [rows, features], a row at a time."""
    for r in numba.prange(X_bits.shape[0]):
        for j in range(X_bits.shape[1]):
            out[r, j] = _code(np.int64(X_bits[r, j]), j, indptr, params, keys, table)


@numba.njit(cache=True, nogil=True, parallel=True)
def _bin_columns(XT_bits, indptr, params, keys, table, out):
    """``XT_bits`` [features, rows] (the columns), a block of rows at a time: each feature's values of the block
    are read in order, and the block's codes stay in cache while they are written across."""
    n = XT_bits.shape[1]
    for b in numba.prange((n + _BLOCK - 1) // _BLOCK):
        r0 = b * _BLOCK
        r1 = min(r0 + _BLOCK, n)
        for j in range(XT_bits.shape[0]):
            for r in range(r0, r1):
                out[r, j] = _code(np.int64(XT_bits[j, r]), j, indptr, params, keys, table)


class Binner:
    """:func:`bin_codes` on one set of cuts, its tables built once (a worker bins every batch of a fold on the same
    cuts).

    The code of ``x`` is ``np.searchsorted(cuts, x, side="right")`` (tested against it), found without a search
    for most values: each float32 is mapped to an integer key that orders as the floats do, and a feature's keys
    are cut into buckets (their top 16 bits; fewer where the feature's cuts span more than ``max_buckets``
    buckets). A table gives the count of the feature's cuts before each bucket, and only the cuts inside a
    value's own bucket (most often none) are compared: about five times faster than a binary search per value at
    paper scale (benchmarks/RESULTS.md, "The worker's binning")."""

    def __init__(self, cuts: Cuts, max_buckets: int = _MAX_BUCKETS) -> None:
        indptr, values = cuts
        self.indptr = np.asarray(indptr, np.int64)
        if np.diff(self.indptr).max(initial=0) >= int(MISSING):
            raise ValueError(
                f"a feature has {int(np.diff(self.indptr).max())} cuts: bin codes hold at most {int(MISSING) - 1}"
            )
        bits = np.ascontiguousarray(values, np.float32).view(np.uint32)
        self.params, self.keys, self.table = _bin_tables(self.indptr, bits, max_buckets)
        bad = np.flatnonzero(self.params[:, 0] < 0)
        if bad.size:
            raise ValueError(f"the cuts of feature {int(bad[0])} are not ascending or hold a NaN")

    @property
    def n_features(self) -> int:
        """Number of features the cuts are for."""
        return int(self.indptr.size - 1)

    def __call__(self, X: np.ndarray) -> np.ndarray:
        """uint16 codes of ``X`` (rows x features, float32): the number of the feature's cuts ``<= x``; NaN:
        :data:`MISSING`. ``X`` in column order (``XT.T`` of a [features, rows] array: a batch's columns) is read
        column after column, block by block; in row order, row after row."""
        if X.shape[1] != self.n_features:
            raise ValueError(f"{X.shape[1]} features but cuts of {self.n_features}")
        out = np.empty(X.shape, np.uint16)
        if not X.size:
            return out
        tables = (self.indptr, self.params, self.keys, self.table)
        if X.dtype == np.float32 and X.T.flags.c_contiguous and not X.flags.c_contiguous:
            _bin_columns(X.T.view(np.uint32), *tables, out)  # the columns of a batch, one after the other
        else:
            _bin_rows(np.ascontiguousarray(X, np.float32).view(np.uint32), *tables, out)
        return out


def bin_codes(X: np.ndarray, cuts: Cuts) -> np.ndarray:
    """uint16 codes of ``X`` (rows x features): the number of the feature's cuts ``<= x``; NaN: :data:`MISSING`
    (:class:`Binner`, its tables built for this call)."""
    return Binner(cuts)(X)


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
