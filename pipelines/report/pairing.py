"""Pairing two systems' runs query by query, over the folds both finished."""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

from pipelines.report.records import Record, ReportError
from pipelines.study.design import BASELINE

log = logging.getLogger(__name__)


def sort_once(rs: list[Record], by: str) -> list[Record]:
    """``rs`` (one system's runs) sorted in place by ``by`` (``fold`` or ``seed``); two runs with the same value
    are an error naming both."""
    rs.sort(key=lambda r: getattr(r, by))
    for a, b in zip(rs, rs[1:]):
        if getattr(a, by) == getattr(b, by):
            seed = f" seed {a.seed}" if by == "seed" else ""
            raise ReportError(
                f"{a.label}: fold {a.fold}{seed} has two finished runs ({a.run_id}, {b.run_id}); "
                f"a system must have one run per fold{' and seed' if seed else ''} (delete the stray run in MLflow)"
            )
    return rs


def groups(records: list[Record]) -> dict[tuple[str, int | None], list[Record]]:
    """Records by system (strategy, switch point), each sorted by fold; a fold twice is an error."""
    out: dict[tuple[str, int | None], list[Record]] = {}
    for r in records:
        out.setdefault((r.strategy, r.switch), []).append(r)
    for rs in out.values():
        sort_once(rs, "fold")
    return out


@dataclass(frozen=True)
class Paired:
    """Two systems' per-query test scores, paired by (fold, query id) over the folds both finished, the
    queries without a relevant document left out (:func:`paired_samples`)."""

    x: np.ndarray  #: the system's scores
    y: np.ndarray  #: the baseline's scores
    folds: list[int]  #: the folds paired
    keys: list[tuple[int, int]]  #: (fold, query id) of each pair
    no_relevant: int  #: queries of those folds left out: no relevant document

    @property
    def n(self) -> int:
        """Pairs used."""
        return int(self.x.size)


def relevant_queries(r: Record) -> set[int]:
    """Query ids of ``r``'s test queries with at least one relevant document; ReportError if the run did not
    log the counts (per_query_test.json of an ltr before the paired statistics left such queries out)."""
    if r.relevant is None:
        raise ReportError(
            f"{r.label} fold {r.fold} (run {r.run_id}): its per_query_test.json has no relevant-document counts "
            "(a run of an older ltr): the paired statistics leave out the queries without a relevant document "
            "and cannot tell which those are; train the grid again with this version"
        )
    return {q for q, n in r.relevant.items() if n > 0}


def paired_samples(records: list[Record], base: list[Record]) -> Paired:
    """Per-query test NDCG of ``records`` and of the baseline ``base``, paired by (fold, query id), over
    the folds both have. The two runs of a fold must have been evaluated on the same query ids with the
    same relevance counts, and each system has each fold once.

    Queries without a relevant document are left out: every system scores them ``metric.empty``, so each
    would add a zero difference, inflating n and shrinking every p-value and interval by a convention that
    says nothing about ranking. Their number is ``no_relevant``.
    """
    rs = groups(records)
    bs = groups(base)
    if len(rs) > 1 or len(bs) > 1:
        raise ReportError("paired_samples: pass the runs of one system and of the baseline")
    r_by = {r.fold: r for v in rs.values() for r in v}
    b_by = {b.fold: b for v in bs.values() for b in v}
    xs, ys, folds, keys = [], [], [], []
    left_out = 0
    for f in sorted(set(r_by) & set(b_by)):
        r, b = r_by[f], b_by[f]
        if set(r.per_query) != set(b.per_query):
            only_r = sorted(set(r.per_query) - set(b.per_query))
            only_b = sorted(set(b.per_query) - set(r.per_query))
            raise ReportError(
                f"fold {f}: {r.label} (run {r.run_id}) and {b.label} (run {b.run_id}) were evaluated "
                f"on different test queries ({len(only_r)} only in {r.label}, e.g. {only_r[:3]}; "
                f"{len(only_b)} only in {b.label}, e.g. {only_b[:3]}): they cannot be paired"
            )
        rel, rel_b = relevant_queries(r), relevant_queries(b)
        if rel != rel_b:
            diff = sorted(rel ^ rel_b)
            raise ReportError(
                f"fold {f}: {r.label} (run {r.run_id}) and {b.label} (run {b.run_id}) count relevant documents "
                f"differently for {len(diff)} test queries (e.g. {diff[:3]}): were they evaluated on the same labels?"
            )
        qs = sorted(q for q in r.per_query if q in rel)
        left_out += len(r.per_query) - len(qs)
        xs.append(np.array([r.per_query[q] for q in qs], np.float64))
        ys.append(np.array([b.per_query[q] for q in qs], np.float64))
        folds.append(f)
        keys += [(f, q) for q in qs]
    if not xs:
        return Paired(np.empty(0), np.empty(0), [], [], 0)
    return Paired(np.concatenate(xs), np.concatenate(ys), folds, keys, left_out)


def pairs_with_baseline(records: list[Record]) -> dict[tuple[str, int | None], Paired]:
    """Every system of ``records`` but LambdaMART paired with LambdaMART (:func:`paired_samples`): computed once by
    the report, read by Table 1 and the effect by difficulty. Empty without the baseline."""
    g = groups(records)
    base = g.get((BASELINE, None))
    if not base:
        return {}
    return {k: paired_samples(v, base) for k, v in g.items() if k != (BASELINE, None)}


def paired_differences(records: list[Record], base: list[Record]) -> np.ndarray:
    """Per-query differences system - baseline over the test queries of the folds both have (queries with a
    relevant document)."""
    p = paired_samples(records, base)
    return p.x - p.y
