"""The pair loop every pairwise objective shares (LambdaMART, RankNet, the sigmoid pairwise loss, stochastic NDCG):
a numba kernel over queries, parallel, each query writing only its own rows."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numba
import numpy as np

from udfs.metrics import NdcgSpec, inverse_idcg

_EPS64 = 1e-16


def _check_offsets(offsets: np.ndarray, n: int) -> np.ndarray:
    offsets = np.asarray(offsets, dtype=np.int64)
    if offsets.ndim != 1 or offsets[0] != 0 or offsets[-1] != n or np.any(np.diff(offsets) < 0):
        raise ValueError("offsets must start at 0, end at the number of rows and never decrease")
    return offsets


@numba.njit(cache=True, nogil=True)
def _sigmoid32(x):
    """XGBoost's ``common::Sigmoid(float)``."""
    x = -x
    if x > np.float32(88.7):
        x = np.float32(88.7)
    return np.float32(1.0) / (np.float32(math.exp(x)) + np.float32(1.0) + np.float32(1e-16))


@numba.njit(cache=True, nogil=True, parallel=True)
def _pairwise_kernel(
    offsets,
    labels,
    scores,
    rank_scores,
    inv_idcg,
    k,
    exp_gain,
    delta_mode,
    score_norm,
    normalize,
    loss,
    gamma,
    grad,
    hess,
):
    """Shared pair loop, parallel over queries (each writes only its own rows).

    ``rank_scores`` orders the documents (== ``scores`` except for stochastic
    smoothing); ``inv_idcg`` is 1/IDCG@k per query; ``delta_mode`` 0: |ΔNDCG|,
    1: 1 (RankNet); ``loss`` 0: logistic (LambdaMART / RankNet), 1: sigmoid
    (Carvalho et al.)."""
    nq = offsets.size - 1
    maxn = 1
    for q in range(nq):
        maxn = max(maxn, offsets[q + 1] - offsets[q])
    disc = np.empty(maxn)
    for i in range(maxn):
        disc[i] = 1.0 / math.log2(i + 2.0)
    for q in numba.prange(nq):
        a = offsets[q]
        n = offsets[q + 1] - a
        if n < 2:
            continue
        order = np.argsort(-rank_scores[a : a + n], kind="mergesort")  # stable: ties in input order
        inv = inv_idcg[q]
        best = rank_scores[a + order[0]]
        worst = rank_scores[a + order[n - 1]]
        sum_lambda = 0.0
        for i in range(min(n, k)):
            for j in range(i + 1, n):
                ii = order[i]
                jj = order[j]
                yi = labels[a + ii]
                yj = labels[a + jj]
                if yi == yj:
                    continue
                rh, rl, ih, il, yh, yl = i, j, ii, jj, yi, yj
                if yi < yj:
                    rh, rl, ih, il, yh, yl = j, i, jj, ii, yj, yi
                sh = rank_scores[a + ih]
                sl = rank_scores[a + il]
                diff = np.float32(sh - sl)
                if delta_mode == 0:
                    gh = (2.0**yh - 1.0) if exp_gain else yh
                    gl = (2.0**yl - 1.0) if exp_gain else yl
                    dh = disc[rh]
                    dl = disc[rl]
                    delta = abs((gh * dh + gl * dl - gl * dh - gh * dl) * inv)
                else:
                    delta = 1.0
                if score_norm and best != worst:
                    delta /= abs(float(diff)) + 0.01
                if loss == 0:
                    sig = float(_sigmoid32(diff))
                    lam = (sig - 1.0) * delta
                    hs = max(sig * (1.0 - sig), _EPS64) * delta * 2.0
                else:
                    sig = float(_sigmoid32(np.float32(gamma) * diff))
                    lam = -gamma * sig * (1.0 - sig) * delta
                    hs = max(gamma * gamma * sig * (1.0 - sig), _EPS64) * delta
                lam32 = np.float32(lam)
                hs32 = np.float32(hs)
                grad[a + ih] += lam32
                hess[a + ih] += hs32
                grad[a + il] -= lam32
                hess[a + il] += hs32
                sum_lambda += -2.0 * float(lam32)
        if normalize and sum_lambda > 0.0:
            norm = math.log2(1.0 + sum_lambda) / sum_lambda
            for r in range(a, a + n):
                grad[r] = np.float32(grad[r] * norm)
                hess[r] = np.float32(hess[r] * norm)


def pair_inverse_idcg(labels: np.ndarray, offsets: np.ndarray, k: int, exp_gain: bool = True) -> np.ndarray:
    """1 / IDCG@k per query as the pairwise objectives use it (0 for queries without relevant documents).

    Labels are fixed during training, so callers compute this once per run."""
    return inverse_idcg(
        np.asarray(offsets, np.int64),
        np.asarray(labels, np.float64),
        NdcgSpec(k=k, gain="exp2" if exp_gain else "linear"),
    )


def node_inverse_idcg(labels: np.ndarray, offsets: np.ndarray, params: Mapping[str, Any], cache: dict) -> np.ndarray:
    """:func:`pair_inverse_idcg` at the objective's ``params`` (``k``, ``exp_gain``), computed once per node (its
    labels are fixed) and kept in the node's ``cache``."""
    if "inv_idcg" not in cache:
        cache["inv_idcg"] = pair_inverse_idcg(labels, offsets, params["k"], params["exp_gain"])
    return cache["inv_idcg"]


def _run_pairwise(
    margins,
    labels,
    offsets,
    rank_scores,
    *,
    k,
    exp_gain,
    delta_mode,
    score_norm,
    normalize,
    loss=0,
    gamma=1.0,
    inv_idcg=None,
) -> tuple[np.ndarray, np.ndarray]:
    s = np.ascontiguousarray(margins, dtype=np.float32)
    y = np.ascontiguousarray(labels, dtype=np.float64)
    off = _check_offsets(offsets, s.size)
    if k < 1:
        raise ValueError(f"k (top-k pairs) must be >= 1, got {k}")
    if inv_idcg is not None:
        inv = inv_idcg
    elif delta_mode == 0:
        inv = pair_inverse_idcg(y, off, k, exp_gain)
    else:  # constant pair weights: the kernel never reads IDCG (it cost a full sort per call)
        inv = np.zeros(off.size - 1)
    grad = np.zeros(s.size, dtype=np.float32)
    hess = np.zeros(s.size, dtype=np.float32)
    _pairwise_kernel(
        off,
        y,
        s,
        np.ascontiguousarray(rank_scores, dtype=np.float32),
        np.ascontiguousarray(inv, dtype=np.float64),
        int(k),
        bool(exp_gain),
        int(delta_mode),
        bool(score_norm),
        bool(normalize),
        int(loss),
        float(gamma),
        grad,
        hess,
    )
    return grad, hess
