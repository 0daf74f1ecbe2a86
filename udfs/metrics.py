"""NDCG@k over many queries at once: the project's one evaluator.

Definition (Järvelin & Kekäläinen 2002; the variant used by Burges et al.,
XGBoost and LightGBM)::

    DCG@k  = sum_{r=1..min(k, n)} gain(label_r) / log2(r + 1)
    gain(l) = 2**l - 1   ("exp2", default)   or   l   ("linear")
    NDCG@k = DCG@k / IDCG@k,  IDCG@k = DCG@k of the labels sorted descending

Conventions that libraries disagree on are explicit fields of :class:`NdcgSpec`:

* ``empty``: the value of a query whose IDCG is 0 (no relevant document).
  XGBoost (``ndcg@k``) and LightGBM give 1.0 (the default here); trec_eval and
  XGBoost's ``ndcg@k-`` give 0.0. MSLR has many such queries, so this moves the
  mean by several points.
* ``ties``: how documents with equal scores are ordered. ``"input"`` (default)
  keeps their order in the input, as XGBoost's stable sort does; ``"worst"``
  puts less relevant documents first (a pessimistic bound); ``"average"`` is the
  expectation over all orders of the tied documents (McSherry & Najork 2008),
  computed exactly by giving each document of a tie group the mean discount of
  the positions the group occupies.

Every function takes a whole partition of many queries: rows of a query are
contiguous and ``offsets`` (length n_queries + 1) marks where each starts. The work is
numpy segment operations (:func:`ndcg`) or one compiled numba loop over the queries
(:func:`ndcg_fast`: top-k selection per query, in parallel threads): no Python-level loop
over documents or queries.
"""

from __future__ import annotations

import math

import numba
import numpy as np

from udfs.conventions import NdcgSpec


def offsets_from_qids(qid: np.ndarray) -> np.ndarray:
    """Query boundaries of an array whose equal qids are contiguous: ``[0, ..., n]``."""
    qid = np.asarray(qid)
    if qid.size == 0:
        return np.zeros(1, dtype=np.int64)
    change = np.flatnonzero(qid[1:] != qid[:-1]) + 1
    return np.concatenate(([0], change, [qid.size])).astype(np.int64)


def _segment_ids(offsets: np.ndarray) -> np.ndarray:
    sizes = np.diff(offsets)
    if np.any(sizes <= 0):
        raise ValueError("every query needs at least one document (offsets must be strictly increasing)")
    return np.repeat(np.arange(sizes.size), sizes)


def _gain(labels: np.ndarray, kind: str) -> np.ndarray:
    lab = labels.astype(np.float64)
    return np.exp2(lab) - 1.0 if kind == "exp2" else lab


def _discounts(rank: np.ndarray, k: int) -> np.ndarray:
    """1/log2(rank+2) for 0-based ranks below k, else 0."""
    return np.where(rank < k, 1.0 / np.log2(rank + 2.0), 0.0)


def rank_order(
    offsets: np.ndarray, scores: np.ndarray, labels: np.ndarray | None = None, ties: str = "input"
) -> np.ndarray:
    """Permutation that sorts every query by descending score, ties as ``ties`` says
    (``"average"`` orders like ``"input"``; averaging is done on the discounts)."""
    seg = _segment_ids(offsets)
    pos = np.arange(seg.size)
    s = np.asarray(scores, dtype=np.float64)
    if ties == "worst":
        if labels is None:
            raise ValueError("ties='worst' needs the labels")
        return np.lexsort((pos, labels, -s, seg))
    return np.lexsort((pos, -s, seg))


def dcg(offsets: np.ndarray, labels: np.ndarray, scores: np.ndarray, spec: NdcgSpec) -> np.ndarray:
    """DCG@k of every query when its documents are ranked by ``scores``."""
    offsets = np.asarray(offsets, dtype=np.int64)
    labels = np.asarray(labels)
    seg = _segment_ids(offsets)
    order = rank_order(offsets, scores, labels, spec.ties)
    rank = np.arange(seg.size) - offsets[seg]  # ranks in sorted order (seg is unchanged by the sort)
    disc = _discounts(rank, spec.k)
    if spec.ties == "average":
        disc = _average_tied(offsets, seg, np.asarray(scores, dtype=np.float64)[order], disc)
    g = _gain(labels[order], spec.gain)
    return np.bincount(seg, weights=g * disc, minlength=offsets.size - 1).astype(np.float64)


def _average_tied(offsets: np.ndarray, seg: np.ndarray, sorted_scores: np.ndarray, disc: np.ndarray) -> np.ndarray:
    """Replace each discount by the mean discount of its tie group (same query, same score)."""
    new_group = np.ones(seg.size, dtype=bool)
    new_group[1:] = (seg[1:] != seg[:-1]) | (sorted_scores[1:] != sorted_scores[:-1])
    gid = np.cumsum(new_group) - 1
    total = np.bincount(gid, weights=disc)
    count = np.bincount(gid)
    return (total / count)[gid]


def idcg(offsets: np.ndarray, labels: np.ndarray, spec: NdcgSpec) -> np.ndarray:
    """Ideal DCG@k of every query (documents sorted by label)."""
    offsets = np.asarray(offsets, dtype=np.int64)
    labels = np.asarray(labels)
    seg = _segment_ids(offsets)
    order = np.lexsort((-labels.astype(np.int64), seg))
    rank = np.arange(seg.size) - offsets[seg]
    g = _gain(labels[order], spec.gain)
    return np.bincount(seg, weights=g * _discounts(rank, spec.k), minlength=offsets.size - 1).astype(np.float64)


def ndcg(offsets: np.ndarray, labels: np.ndarray, scores: np.ndarray, spec: NdcgSpec = NdcgSpec()) -> np.ndarray:
    """NDCG@k of every query (``spec.empty`` where the query has no relevant document)."""
    d = dcg(offsets, labels, scores, spec)
    i = idcg(offsets, labels, spec)
    out = np.full(d.size, spec.empty, dtype=np.float64)
    np.divide(d, i, out=out, where=i > 0)
    return out


# ------------------------------------------------ fast path for training curves
@numba.njit(cache=True, nogil=True, inline="always")
def _ndcg_topk_query(q, offsets, labels, scores, k, exp_gain, worst_ties, inv_idcg, empty, top):
    """NDCG@k of query ``q`` by top-k selection (O(n·k), no full sort); ``top``: k int64 of scratch."""
    a = offsets[q]
    n = offsets[q + 1] - a
    if inv_idcg[q] == 0.0:
        return empty
    m = 0  # documents held in `top`, best first
    for j in range(n):
        s = scores[a + j]
        # insertion position: after every held document that ranks above j
        pos = m
        while pos > 0:
            h = top[pos - 1]
            sh = scores[a + h]
            if sh > s:
                break
            if sh == s:
                # ties: input order (earlier first) or worst (less relevant first, then input order)
                if not worst_ties or labels[a + h] < labels[a + j]:
                    break
                if labels[a + h] == labels[a + j]:
                    break
            pos -= 1
        if pos >= k:
            continue
        end = m if m < k else k - 1
        for r in range(end, pos, -1):
            top[r] = top[r - 1]
        top[pos] = j
        if m < k:
            m += 1
    d = 0.0
    for r in range(m):
        y = labels[a + top[r]]
        d += ((2.0**y - 1.0) if exp_gain else y) / math.log2(r + 2.0)
    return d * inv_idcg[q]


@numba.njit(cache=True, nogil=True, parallel=True)
def _ndcg_topk_parallel(offsets, labels, scores, k, exp_gain, worst_ties, inv_idcg, empty, out):
    for q in numba.prange(offsets.size - 1):
        top = np.empty(k, dtype=np.int64)
        out[q] = _ndcg_topk_query(q, offsets, labels, scores, k, exp_gain, worst_ties, inv_idcg, empty, top)


@numba.njit(cache=True, nogil=True)
def _ndcg_topk_serial(offsets, labels, scores, k, exp_gain, worst_ties, inv_idcg, empty, out):
    top = np.empty(k, dtype=np.int64)
    for q in range(offsets.size - 1):
        out[q] = _ndcg_topk_query(q, offsets, labels, scores, k, exp_gain, worst_ties, inv_idcg, empty, top)


# Queries in parallel where a split is large, serially where it is small: on small splits the parallel
# kernel is faster alone but made the main job (600 queries) slower beside XGBoost's OpenMP threads
# (RESULTS.md, "The main job"). Both run the same per-query code: the same bits.
PARALLEL_MIN_ROWS = 100_000


def inverse_idcg(offsets: np.ndarray, labels: np.ndarray, spec: NdcgSpec) -> np.ndarray:
    """1 / IDCG@k per query (0 where the query has no relevant document): computed once per split."""
    i = idcg(offsets, labels, spec)
    out = np.zeros_like(i)
    np.divide(1.0, i, out=out, where=i > 0)
    return out


def ndcg_fast(
    offsets: np.ndarray,
    labels: np.ndarray,
    scores: np.ndarray,
    spec: NdcgSpec = NdcgSpec(),
    inv_idcg: np.ndarray | None = None,
) -> np.ndarray:
    """Same values as :func:`ndcg`, by top-k selection in a numba kernel (no sort).

    The evaluator of training curves (every tree, every eval split). ``ties="average"``
    falls back to :func:`ndcg`. Pass ``inv_idcg`` (:func:`inverse_idcg`) to reuse it.
    """
    if spec.ties == "average":
        return ndcg(offsets, labels, scores, spec)
    offsets = np.asarray(offsets, dtype=np.int64)
    inv = inverse_idcg(offsets, labels, spec) if inv_idcg is None else inv_idcg
    out = np.empty(offsets.size - 1, dtype=np.float64)
    # float32 labels and scores as they are (no float64 copy per call): every float32 is exact in
    # float64, so comparisons and gains are the same
    kernel = _ndcg_topk_parallel if offsets[-1] >= PARALLEL_MIN_ROWS else _ndcg_topk_serial
    kernel(
        offsets,
        _floats(labels),
        _floats(scores),
        spec.k,
        spec.gain == "exp2",
        spec.ties == "worst",
        np.ascontiguousarray(inv, dtype=np.float64),
        float(spec.empty),
        out,
    )
    return out


def _floats(a: np.ndarray) -> np.ndarray:
    a = np.asarray(a)
    return np.ascontiguousarray(a if a.dtype in (np.float32, np.float64) else a.astype(np.float64))
