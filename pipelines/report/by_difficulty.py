"""The effect by difficulty: did the hard queries pay for the curriculum?

For each difficulty score the study computed (``ltr difficulty``: BM25's NDCG, PageRank's NDCG, the
number of relevant documents), the paired test queries (those with a relevant document) are cut into
quartiles of that score, and per system the mean difference with the baseline and its paired t interval
are computed in each quartile. Read from the scores' Parquet (pyarrow, no Spark); a query's row is found
by its fold's test subsets when the dataset's manifest is at hand, else by its query id alone.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Mapping
from typing import Any

import numpy as np

from pipelines.report.pairing import Paired, pairs_with_baseline
from pipelines.report.records import Record, ReportError, label_of, order_systems
from pipelines.report.stats import t_interval
from pipelines.study.design import BASELINE

log = logging.getLogger(__name__)

#: The difficulty scores broken down by, and their names in the report.
SCORES = {"ndcg_bm25": "BM25 NDCG@k", "ndcg_pagerank": "PageRank NDCG@k", "n_rel": "relevant documents"}
QUARTILES = 4


def load_scores(path: str, dataset: str | None, folds: list[int]) -> dict[tuple[int, int], dict[str, float]]:
    """Difficulty scores of each fold's test queries, by (fold, query id), from ``ltr difficulty``'s output
    ``path``. ``dataset``: the ingested dataset (its manifest names each fold's test subsets); without it a
    query id must appear once in the scores. ReportError when the folder has no scores."""
    import pyarrow.dataset as pads

    if not os.path.isdir(path):
        raise ReportError(f"no difficulty scores at {path}")
    table = pads.dataset(path, format="parquet").to_table(columns=["subset", "qid", *SCORES])
    rows = table.to_pydict()
    by_key = {(s, q): i for i, (s, q) in enumerate(zip(rows["subset"], rows["qid"], strict=True))}
    subsets: dict[int, list[str]] | None = None
    if dataset:
        from pipelines.data.dataset import DatasetError, open_dataset

        try:
            ds = open_dataset(dataset)
            subsets = {f: ds.subsets(f, "test") for f in folds}
        except (DatasetError, OSError) as e:
            log.warning("difficulty by test subsets: cannot read the dataset %s (%s); matching by query id", dataset, e)
    by_qid: dict[int, int] = {}
    dup: set[int] = set()
    for (_, q), i in by_key.items():
        if q in by_qid:
            dup.add(q)
        by_qid[q] = i
    out: dict[tuple[int, int], dict[str, float]] = {}

    def row(i: int) -> dict[str, float]:
        """The scores of row ``i``."""
        return {c: math.nan if rows[c][i] is None else float(rows[c][i]) for c in SCORES}

    for f in folds:
        if subsets is not None:
            for s in subsets[f]:
                for (ss, q), i in by_key.items():
                    if ss == s:
                        out[(f, q)] = row(i)
        else:
            if dup:
                raise ReportError(
                    f"difficulty scores {path}: {len(dup)} query ids appear in several subsets (e.g. "
                    f"{sorted(dup)[:3]}) and the dataset's manifest is not at hand to pick each fold's test subset"
                )
            out.update({(f, q): row(i) for q, i in by_qid.items()})
    return out


def scores_present(scores: Mapping[tuple[int, int], Mapping[str, float]]) -> dict[str, str]:
    """The scores of :data:`SCORES` the study has: a dataset without a BM25 or PageRank feature (Istella's and
    Yahoo!'s are anonymous) leaves that score missing for every query, and it is left out of the breakdowns."""
    return {c: n for c, n in SCORES.items() if any(not math.isnan(v.get(c, math.nan)) for v in scores.values())}


def by_difficulty(
    records: list[Record],
    scores: dict[tuple[int, int], dict[str, float]],
    pairs: Mapping[tuple[str, int | None], Paired] | None = None,
) -> dict[str, dict[str, Any]]:
    """Per difficulty score: the quartile edges over the paired test queries and, per system, the mean
    difference with the baseline, its 95% paired t interval and n in each quartile (``pandas.qcut`` on the
    score; tied values stay in one bin, so a score with few distinct values, such as the number of
    relevant documents, can have fewer than four bins: the edges say which). The systems come in Table 1's
    order (:func:`pipelines.report.tables.order_systems`). ``pairs``:
    :func:`pairs_with_baseline` of ``records``, computed here when not given."""
    import pandas as pd

    if not any(r.strategy == BASELINE and r.switch is None for r in records):
        raise ReportError("the effect by difficulty needs the LambdaMART baseline")
    if pairs is None:
        pairs = pairs_with_baseline(records)
    out: dict[str, dict[str, Any]] = {}
    keys = sorted({key for p in pairs.values() for key in p.keys})  # the same queries for every score
    missing = [k for k in keys if k not in scores]
    if missing:
        raise ReportError(
            f"the difficulty scores have no row for {len(missing)} paired test queries (fold, qid), e.g. "
            f"{missing[:3]}: were they computed on the grid's dataset?"
        )
    if not keys:
        return out
    for col, name in scores_present(scores).items():
        values = pd.Series([scores[k][col] for k in keys], index=pd.MultiIndex.from_tuples(keys))
        if values.nunique() > 1:
            bins, edges = pd.qcut(values, QUARTILES, labels=False, retbins=True, duplicates="drop")
        else:  # one value for every query: one bin (qcut would drop every edge)
            bins, edges = pd.Series(0, index=values.index), np.array([values.iloc[0], values.iloc[0]])
        systems = {}
        for key in order_systems(list(pairs)):  # Table 1's order, not the order MLflow listed the runs in
            p = pairs[key]
            b = bins.loc[pd.MultiIndex.from_tuples(p.keys)].to_numpy() if p.n else np.empty(0)
            d = p.x - p.y
            cells = []
            for q in range(len(edges) - 1):
                dq = d[b == q]
                cells.append(
                    {"n": int(dq.size), "delta": float(dq.mean()) if dq.size else None, "ci_t": t_interval(dq)}
                )
            systems[label_of(*key)] = cells
        out[col] = {"name": name, "edges": [float(e) for e in edges], "systems": systems}
    return out
