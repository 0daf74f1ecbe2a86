"""Pairing two systems' runs query by query, over the folds both finished."""

from __future__ import annotations

import logging

import numpy as np

from pipelines.report.records import Record, ReportError

log = logging.getLogger(__name__)


def groups(records: list[Record]) -> dict[tuple[str, int | None], list[Record]]:
    """Records by system (strategy, switch point), each sorted by fold; a fold twice is an error."""
    out: dict[tuple[str, int | None], list[Record]] = {}
    for r in records:
        out.setdefault((r.strategy, r.switch), []).append(r)
    for rs in out.values():
        rs.sort(key=lambda r: r.fold)
        for a, b in zip(rs, rs[1:]):
            if a.fold == b.fold:
                raise ReportError(
                    f"{a.label}: fold {a.fold} has two finished runs ({a.run_id}, {b.run_id}); "
                    "a system must have one run per fold (delete the stray run in MLflow)"
                )
    return out


def paired_samples(records: list[Record], base: list[Record]) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """Per-query test NDCG of ``records`` and of the baseline ``base``, paired by (fold, query id), over
    the folds both have; returns (system, baseline, folds). The two runs of a fold must have been
    evaluated on the same query ids, and each system has each fold once."""
    rs = groups(records)
    bs = groups(base)
    if len(rs) > 1 or len(bs) > 1:
        raise ReportError("paired_samples: pass the runs of one system and of the baseline")
    r_by = {r.fold: r for v in rs.values() for r in v}
    b_by = {b.fold: b for v in bs.values() for b in v}
    xs, ys, folds = [], [], []
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
        qs = sorted(r.per_query)
        xs.append(np.array([r.per_query[q] for q in qs], np.float64))
        ys.append(np.array([b.per_query[q] for q in qs], np.float64))
        folds.append(f)
    if not xs:
        return np.empty(0), np.empty(0), []
    return np.concatenate(xs), np.concatenate(ys), folds


def paired_differences(records: list[Record], base: list[Record]) -> np.ndarray:
    """Per-query differences system - baseline over the test queries of the folds both have."""
    x, y, _ = paired_samples(records, base)
    return x - y
