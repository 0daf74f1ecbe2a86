"""Per-query difficulty scores as a plain pandas/numpy function over many whole queries.

For every query: its size, how many documents are relevant (label >= 1) and
highly relevant (label >= 3), its best label, its ideal DCG@k, the NDCG@k
of ranking its documents by one feature: BM25 and PageRank in the paper (the
``q_bm25`` / ``q_pagerank`` curricula treat queries whose feature ranking is
good as easy), and the sample standard deviation of its BM25 values (Penha & Hauff's label-free
``sigma_BM25``: a homogeneous candidate list is easy); a dataset without such a feature (``None``:
Istella's and Yahoo's are anonymous) gets NaN there. A one-document query's BM25 values have no spread: its
``sigma_bm25`` is 0 (the sample standard deviation, with n - 1, is undefined for one value; the easiest is
what the study's reasoning makes of a list with nothing to tell apart). Conventions (cutoff, gain, empty
queries, ties) come from the :class:`~udfs.conventions.NdcgSpec`; ties in a feature (PageRank has many) follow
``spec.ties`` over the rows' input order, which is ``doc`` order here.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
from pyspark.sql import DataFrame

from udfs import schema
from udfs.metrics import NdcgSpec, idcg, ndcg
from udfs.per_query import map_queries, run_starts

#: Output schema (Spark DDL) of :func:`difficulty_frame`.
DIFFICULTY_DDL = (
    "subset string, qid int, n_docs int, n_rel int, n_hrel int, max_label tinyint, "
    "idcg double, ndcg_bm25 double, ndcg_pagerank double, sigma_bm25 double"
)

#: Labels counted as relevant / highly relevant.
REL_LABEL = 1
HREL_LABEL = 3


def difficulty_frame(
    pdf: pd.DataFrame,
    bm25_col: str | None,
    pagerank_col: str | None,
    spec: NdcgSpec,
    keys: Sequence[str] = (schema.SUBSET, schema.QID),
) -> pd.DataFrame:
    """One row per query of ``pdf`` (rows of each query contiguous, in ``doc`` order).

    ``pdf`` needs the ``keys`` columns, ``label`` and the feature columns that are not None.
    """
    starts = run_starts(pdf, keys)
    off = np.concatenate((starts, [len(pdf)])).astype(np.int64)
    label = pdf[schema.LABEL].to_numpy().astype(np.int64)
    if starts.size == 0:
        return pd.DataFrame({c.split()[0]: [] for c in DIFFICULTY_DDL.split(", ")})
    head = pdf.iloc[starts]

    def by(col: str | None) -> np.ndarray:
        return ndcg(off, label, pdf[col].to_numpy(), spec) if col else np.full(starts.size, np.nan)

    sizes = np.diff(off)
    return pd.DataFrame(
        {
            schema.SUBSET: head[schema.SUBSET].to_numpy() if schema.SUBSET in pdf else "",
            schema.QID: head[schema.QID].to_numpy().astype(np.int32),
            "n_docs": sizes.astype(np.int32),
            "n_rel": np.add.reduceat((label >= REL_LABEL).astype(np.int32), starts),
            "n_hrel": np.add.reduceat((label >= HREL_LABEL).astype(np.int32), starts),
            "max_label": np.maximum.reduceat(label, starts).astype(np.int8),
            "idcg": idcg(off, label, spec),
            "ndcg_bm25": by(bm25_col),
            "ndcg_pagerank": by(pagerank_col),
            "sigma_bm25": spread(starts, sizes, pdf[bm25_col].to_numpy()) if bm25_col else np.full(sizes.size, np.nan),
        }
    )


def spread(starts: np.ndarray, sizes: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Per query, the sample standard deviation (n - 1 in the denominator) of ``x``; 0 for a one-document query.

    Two passes in float64 (the mean, then the squared deviations from it), not the one-pass ``E[x^2] - E[x]^2``,
    which cancels badly when the values are large and close (BM25 values are)."""
    v = np.asarray(x, dtype=np.float64)
    mean = np.add.reduceat(v, starts) / sizes
    ss = np.add.reduceat((v - np.repeat(mean, sizes)) ** 2, starts)
    out = np.zeros(starts.size)
    many = sizes > 1
    out[many] = np.sqrt(ss[many] / (sizes[many] - 1))
    return out


def difficulty_one_query(pdf: pd.DataFrame, bm25_col: str, pagerank_col: str, spec: NdcgSpec) -> pd.DataFrame:
    """The straightforward version for ONE query: sort it in pandas, take the top k.

    The baseline of ``benchmarks/bench_difficulty.py`` (with
    ``groupBy("qid").applyInPandas``) and an independent check in tests. Supports
    ``ties="input"`` only (a stable sort keeps the input order of equal scores).
    """
    if spec.ties != "input":
        raise ValueError("the per-query reference supports ties='input' only")
    pdf = pdf.sort_values(schema.DOC, kind="stable")
    lab = pdf[schema.LABEL].to_numpy().astype(np.float64)
    gain = (np.exp2(lab) - 1.0) if spec.gain == "exp2" else lab
    disc = 1.0 / np.log2(np.arange(2, spec.k + 2))
    top = np.sort(gain)[::-1][: spec.k]
    ideal = float(top @ disc[: top.size])

    def by(col: str) -> float:
        """NDCG@k of the query's documents ranked by feature column ``col``, descending (ties: stored order).

        ``spec.empty`` when the query has no relevant document (IDCG 0).
        """
        order = np.argsort(-pdf[col].to_numpy(), kind="stable")
        g = gain[order][: spec.k]
        return float(g @ disc[: g.size]) / ideal if ideal > 0 else spec.empty

    return pd.DataFrame(
        {
            schema.SUBSET: [pdf[schema.SUBSET].iat[0] if schema.SUBSET in pdf else ""],
            schema.QID: [np.int32(pdf[schema.QID].iat[0])],
            "n_docs": [np.int32(len(pdf))],
            "n_rel": [np.int32((lab >= REL_LABEL).sum())],
            "n_hrel": [np.int32((lab >= HREL_LABEL).sum())],
            "max_label": [np.int8(lab.max())],
            "idcg": [ideal],
            "ndcg_bm25": [by(bm25_col)],
            "ndcg_pagerank": [by(pagerank_col)],
            "sigma_bm25": [float(np.std(pdf[bm25_col].to_numpy(np.float64), ddof=1)) if len(pdf) > 1 else 0.0],
        }
    )


def difficulty_scores(rows: DataFrame, bm25: int, pagerank: int, spec: NdcgSpec) -> DataFrame:
    """Difficulty rows of every (subset, qid) of ``rows`` (a dataset's rows, every column: the columns scored
    are chosen here): a lazy DataFrame of :data:`DIFFICULTY_DDL`. ``bm25``, ``pagerank``: feature ids, 0 where
    the dataset has none (NaN scores)."""
    bm25_col = schema.feature_col(bm25) if bm25 else None
    pr_col = schema.feature_col(pagerank) if pagerank else None
    cols = list(
        dict.fromkeys([schema.SUBSET, schema.QID, schema.DOC, schema.LABEL, *(c for c in (bm25_col, pr_col) if c)])
    )
    return map_queries(
        rows.select(*cols),
        lambda pdf: difficulty_frame(pdf, bm25_col, pr_col, spec),
        DIFFICULTY_DDL,
        keys=(schema.SUBSET, schema.QID),
        arranged=True,
    )
