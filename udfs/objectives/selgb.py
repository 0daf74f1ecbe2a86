"""Selective Gradient Boosting (Lucchese, Nardini, Orlando, Perego & Trani, SIGIR 2018): LambdaMART that, at every
tree, trains each query on all of its relevant documents and only the non-relevant ones the current model scores
highest (the most likely to be mis-ranked above a relevant one).

Followed from the authors' implementation (QuickRank's ``LambdaMartSelective``, ``sampling_query_level``, its
``RATIO`` negative strategy, read at source):

- a document is relevant when its label is above 0; every relevant document is kept;
- of a query's ``n`` non-relevant documents the top ``round(negatives * n)`` by the current score are kept (C's
  ``round``: halves away from zero), none when that rounds to 0 (such a query trains on its graded pairs among
  relevant documents only, or not at all);
- the first tree of a model (global tree 0: every document scored alike) trains on every document;
- LambdaMART's gradient is computed on the kept documents as if they were the query's whole list (their ranks,
  pairs and normalisation among themselves); the ideal DCG is the full list's, which the kept documents share
  (every relevant document is kept; a non-relevant one gains nothing);
- the others get gradient and hessian 0 at that tree, which in XGBoost is leaving them out of the tree: a row
  with both 0 adds nothing to any split's gain, cover (``min_child_weight``) or leaf value.

The paper's best setting is a selection at every tree and ``negatives`` 1% (on Istella-X, thousands of
non-relevant documents per query); its authors advise a larger share on less unbalanced data, such as MSLR's
(about 60 non-relevant documents per query: at 1% a query with fewer than 50 keeps none). Re-selecting every
``n`` trees (QuickRank's ``sampling-iterations``) is not offered: the selection would then depend on the margins of
an earlier tree, which a resumed node does not have; at every tree it is a function of the margins the tree loop
holds, so a killed node resumes bit-identical. Ties in the score go to the lower document number, so a selection
does not depend on the order of the rows or the number of workers. Deterministic: no seed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numba
import numpy as np

from udfs.objectives.lambdamart import lambdarank_grad
from udfs.objectives.pairwise import node_inverse_idcg, pair_inverse_idcg
from udfs.objectives.registry import objective


def check_negatives(negatives: Any) -> float:
    """``negatives`` as a float in (0, 1], else a ValueError saying so."""
    if isinstance(negatives, bool) or not isinstance(negatives, (int, float)) or not 0 < negatives <= 1:
        raise ValueError(f"selgb's negatives (the share of non-relevant documents kept) must be in (0, 1], got "
                         f"{negatives!r}")  # fmt: skip
    return float(negatives)


@numba.njit(cache=True, nogil=True, parallel=True)
def _keep(margins, labels, doc, offsets, negatives, kept):  # noqa: ANN001
    for q in numba.prange(offsets.size - 1):
        a, b = offsets[q], offsets[q + 1]
        neg = np.empty(b - a, np.int64)
        n = 0
        for r in range(a, b):
            if labels[r] > 0:
                kept[r] = True
            else:
                kept[r] = False
                neg[n] = r
                n += 1
        top = int(np.floor(negatives * n + 0.5))  # C's round() of a non-negative number
        if top <= 0:
            continue
        idx = neg[:n]
        idx = idx[np.argsort(doc[idx], kind="mergesort")]
        idx = idx[np.argsort(-margins[idx], kind="mergesort")]  # stable: equal scores keep the document order
        for i in range(min(top, n)):
            kept[idx[i]] = True


def selected(
    margins: np.ndarray, labels: np.ndarray, offsets: np.ndarray, doc: np.ndarray, negatives: float
) -> np.ndarray:
    """The rows SelGB trains a tree on (bool per row): every relevant document, and per query the top
    ``round(negatives * n)`` of its ``n`` non-relevant documents by ``margins`` (ties: the lower ``doc`` first)."""
    kept = np.empty(len(labels), dtype=np.bool_)
    _keep(
        np.ascontiguousarray(margins, np.float32),
        np.ascontiguousarray(labels, np.float64),
        np.ascontiguousarray(doc, np.int64),
        np.ascontiguousarray(offsets, np.int64),
        check_negatives(negatives),
        kept,
    )
    return kept


def selgb_grad(
    margins: np.ndarray,
    labels: np.ndarray,
    offsets: np.ndarray,
    kept: np.ndarray,
    *,
    k: int = 10,
    exp_gain: bool = True,
    inv_idcg: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """LambdaMART's gradient and hessian on the ``kept`` rows of each query, as if they were its whole list; 0 on
    the others. ``inv_idcg``: the full lists' (the kept rows hold every relevant document: the same ideal)."""
    offsets = np.asarray(offsets, np.int64)
    n = len(labels)
    if inv_idcg is None:
        inv_idcg = pair_inverse_idcg(labels, offsets, k, exp_gain)
    grad = np.zeros(n, dtype=np.float32)
    hess = np.zeros(n, dtype=np.float32)
    rows = np.flatnonzero(kept)
    if rows.size == 0:
        return grad, hess
    sub = np.concatenate(([0], np.cumsum(kept, dtype=np.int64)))[offsets]  # each query's first kept row, then the end
    g, h = lambdarank_grad(
        np.asarray(margins, np.float32)[rows],
        np.asarray(labels)[rows],
        sub,
        k=k,
        exp_gain=exp_gain,
        inv_idcg=inv_idcg,
    )
    grad[rows] = g
    hess[rows] = h
    return grad, hess


@objective("selgb", params={"negatives": 0.01}, check=lambda params: check_negatives(params["negatives"]))
def selgb(
    margins: np.ndarray,
    labels: np.ndarray,
    offsets: np.ndarray,
    *,
    tree: int,
    params: Mapping[str, Any],
    doc: np.ndarray,
    cache: dict,
) -> tuple[np.ndarray, np.ndarray]:
    """Selective Gradient Boosting: LambdaMART NDCG@k on every relevant document and the top ``negatives`` share
    of each query's non-relevant ones by the current score (every document at global tree 0)."""
    negatives = check_negatives(params["negatives"])
    inv = node_inverse_idcg(labels, offsets, params, cache)
    if tree == 0:
        kept = np.ones(len(labels), dtype=np.bool_)
    else:
        kept = selected(margins, labels, offsets, doc, negatives)
    return selgb_grad(margins, labels, offsets, kept, k=params["k"], exp_gain=params["exp_gain"], inv_idcg=inv)
