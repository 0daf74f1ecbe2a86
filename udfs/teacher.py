"""A teacher's judgement of a query's difficulty: per-query scores from a trained model's scores of the query's
documents (Penha & Hauff's ``BERT_pred`` and ``BERT_loss``, for graded labels and trees), and the cross-fitting
groups that keep a query's teacher from having seen it.

Per query, over its *pairs*: the ordered pairs of documents (hi, lo) whose labels differ, hi the one with the
higher label (a query of labels 2, 1, 0 has three pairs; documents of equal labels make none):

* ``teacher_margin``: the mean of ``s_hi - s_lo`` (how far the teacher scores the better document above the
  worse one): higher is easier;
* ``teacher_loss``: the mean pairwise logistic loss ``log(1 + exp(-(s_hi - s_lo)))`` (RankNet's, with its sigma 1):
  lower is easier;
* ``n_pairs``: how many pairs the means are over. A query without a pair (one document, or all its labels equal:
  no relevant document, most often) has no margin and no loss (NaN): the curriculum places it as
  ``difficulty.empty_queries`` says, as it does a query whose ``ndcg_bm25`` is undefined.

``teacher_ndcg`` is :func:`udfs.metrics.ndcg` of the teacher's scores. All of it is a function of the offsets,
labels and scores alone: no order of the rows within a query changes it but the NDCG's ties.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from udfs.metrics import NdcgSpec
from udfs.pairs import pair_scores
from udfs.spark_hashes import xxhash64


def crossfit_groups(qids: np.ndarray, k: int, seed: int) -> np.ndarray:
    """The cross-fitting group (0..k-1) of each query id: a seeded hash of the qid, so that a query's group does not
    depend on which other queries there are, their order, or the number of workers. ``k`` >= 2: the teacher of
    group g is trained on the queries of the other groups and scores only group g's."""
    if k < 2:
        raise ValueError(f"cross-fitting needs at least 2 groups, not {k}")
    ids = np.asarray(qids, dtype=np.int64)
    # the seed mixed into the id's hash (xxhash64 takes Spark's fixed seed): another seed, other groups
    mixed = (xxhash64(ids.astype(np.int32)) ^ xxhash64(np.full(ids.shape, seed, dtype=np.int32))).astype(np.uint64)
    return (xxhash64((mixed % np.uint64(2**31 - 1)).astype(np.int32)) % np.uint64(k)).astype(np.int64)


def teacher_frame(
    pdf: Any, boosters: Mapping[int, Any], crossfit: int, seed: int, features: list[str], spec: NdcgSpec
) -> Any:
    """One row per query of ``pdf`` (whole queries, rows of a query contiguous): its cross-fitting group, its pairs
    and the three teacher scores, each query scored by ``boosters[group]`` (``crossfit`` 0: group 0 for all)."""
    import pandas as pd
    import xgboost as xgb

    from udfs import schema
    from udfs.metrics import ndcg
    from udfs.per_query import run_starts

    keys = (schema.SUBSET, schema.QID)
    starts = run_starts(pdf, keys)
    sizes = np.diff(np.append(starts, len(pdf)))
    offsets = np.concatenate(([0], np.cumsum(sizes))).astype(np.int64)
    qids = pdf[schema.QID].to_numpy()[starts].astype(np.int64)
    group = crossfit_groups(qids, crossfit, seed) if crossfit else np.zeros(qids.size, np.int64)
    row_group = np.repeat(group, sizes)
    x = pdf[features].to_numpy(np.float32)
    margins = np.empty(len(pdf), np.float64)
    for g in np.unique(group):
        rows = row_group == g
        margins[rows] = boosters[int(g)].predict(xgb.DMatrix(x[rows], missing=np.nan), output_margin=True)
    labels = pdf[schema.LABEL].to_numpy()
    margin, loss, n_pairs = pair_scores(offsets, labels, margins)
    return pd.DataFrame(
        {
            schema.SUBSET: pdf[schema.SUBSET].to_numpy()[starts],
            schema.QID: qids.astype(np.int32),
            "group": group.astype(np.int32),
            "n_pairs": n_pairs,
            "teacher_margin": margin,
            "teacher_loss": loss,
            "teacher_ndcg": ndcg(offsets, labels.astype(np.float64), margins.astype(np.float32), spec),
        }
    )
