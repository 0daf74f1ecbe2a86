"""Per query, over its *pairs*: the ordered pairs of documents (hi, lo) whose labels differ, hi the one with the
higher label (a query of labels 2, 1, 0 has three pairs; documents of equal labels make none), the mean score
margin ``s_hi - s_lo`` and the mean pairwise logistic loss ``log(1 + exp(-(s_hi - s_lo)))`` (RankNet's, with its
sigma 1) of some scores: a teacher's (:mod:`udfs.teacher`) or the model being trained (a self-paced selection,
:mod:`pipelines.kernel.selfpaced`). A module of its own, so that neither's code is in the other's key."""

from __future__ import annotations

import numba
import numpy as np


@numba.njit(cache=True, nogil=True)
def _pairs(offsets, labels, scores, margin, loss, count):  # pragma: no cover - compiled
    for q in range(offsets.size - 1):
        a, b = offsets[q], offsets[q + 1]
        n = 0
        sum_d = 0.0
        sum_l = 0.0
        for i in range(a, b):
            for j in range(a, b):
                if labels[i] > labels[j]:
                    d = scores[i] - scores[j]
                    n += 1
                    sum_d += d
                    # log(1 + exp(-d)), stable for any d: max(-d, 0) + log1p(exp(-|d|))
                    sum_l += max(-d, 0.0) + np.log1p(np.exp(-abs(d)))
        count[q] = n
        if n > 0:
            margin[q] = sum_d / n
            loss[q] = sum_l / n
        else:
            margin[q] = np.nan
            loss[q] = np.nan


def pair_scores(
    offsets: np.ndarray, labels: np.ndarray, scores: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per query (rows ``offsets[q]:offsets[q + 1]``): ``teacher_margin``, ``teacher_loss`` (float64, NaN for a
    query without a pair) and ``n_pairs`` (int64), as the module docstring defines them. The scores are taken in
    float64 (a float32 margin's difference would round)."""
    off = np.ascontiguousarray(offsets, dtype=np.int64)
    if off.ndim != 1 or off.size == 0 or off[0] != 0 or np.any(np.diff(off) < 0):
        raise ValueError("offsets must start at 0 and never decrease")
    lab = np.ascontiguousarray(labels, dtype=np.float64)
    s = np.ascontiguousarray(scores, dtype=np.float64)
    if lab.shape != (off[-1],) or s.shape != (off[-1],):
        raise ValueError(f"{off[-1]} rows in the offsets, {lab.size} labels and {s.size} scores")
    if not np.all(np.isfinite(s)):
        raise ValueError("the teacher's scores hold NaN or infinity")
    nq = off.size - 1
    margin, loss, count = np.empty(nq), np.empty(nq), np.empty(nq, dtype=np.int64)
    _pairs(off, lab, s, margin, loss, count)
    return margin, loss, count
