"""Seed repetitions (``grid.seeds``): one seed-averaged record per system and fold for the tables and tests, and
the spread across seeds that one run per system cannot show."""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any

import numpy as np

from pipelines.report.pairing import paired_samples, sort_once
from pipelines.report.records import Record, ReportError
from pipelines.study.design import BASELINE

log = logging.getLogger(__name__)


def _average(runs: list[Record]) -> Record:
    """One record of a system and fold from its seed repetitions: each query's score, each curve point and the
    final values averaged over the seeds. The repetitions must share queries, relevance counts and curve points."""
    first = runs[0]
    for r in runs[1:]:
        if set(r.per_query) != set(first.per_query) or r.relevant != first.relevant:
            raise ReportError(
                f"{first.label} fold {first.fold}: seed {r.seed} (run {r.run_id}) was tested on other queries or "
                f"labels than seed {first.seed} (run {first.run_id}); seed repetitions must share the test set"
            )
        if r.steps != first.steps or len(r.vali) != len(first.vali):
            raise ReportError(
                f"{first.label} fold {first.fold}: seed {r.seed} (run {r.run_id}) has other curve points than seed "
                f"{first.seed} (run {first.run_id})"
            )
    per_query = {q: float(np.mean([r.per_query[q] for r in runs])) for q in first.per_query}
    return replace(
        first,
        test=np.mean([r.test for r in runs], axis=0).tolist(),
        vali=np.mean([r.vali for r in runs], axis=0).tolist() if first.vali else [],
        per_query=per_query,
        run_id=",".join(r.run_id for r in runs),
        seed=0,
        seeds=len(runs),
    )


def average_seeds(records: list[Record]) -> tuple[list[Record], list[dict[str, Any]]]:
    """The records the tables use, with each system's seed repetitions on a fold averaged into one
    (:func:`_average`; a system run once stays as it is), and per system run with several seeds a row of
    the spread across seeds:

    ``system``, ``strategy``, ``switch``, ``seeds`` (the repetitions' indices); ``per_seed``: for each seed the
    mean over folds of the final test NDCG (``final``) and the mean paired difference with the baseline on
    the queries with a relevant document (``delta``, None without a baseline), and the folds it has;
    ``final_mean``/``final_sd`` and ``delta_mean``/``delta_sd``: the mean and standard deviation (ddof 1)
    of those across seeds. Table 1's means and every paired test then use each query's score averaged over
    the seeds (one score per query, so n stays the number of queries).
    """
    by: dict[tuple[str, int | None, int], list[Record]] = {}
    for r in records:
        by.setdefault((r.strategy, r.switch, r.fold), []).append(r)
    out = []
    for runs in by.values():
        sort_once(runs, "seed")
        out.append(runs[0] if len(runs) == 1 else _average(runs))
    base = [r for r in out if (r.strategy, r.switch) == (BASELINE, None)]
    rows: list[dict[str, Any]] = []
    seeded = sorted({(r.strategy, r.switch) for r in records if r.seed}, key=lambda k: (k[0], k[1] or 0))
    for strategy, switch in seeded:
        mine = [r for r in records if (r.strategy, r.switch) == (strategy, switch)]
        per_seed: list[dict[str, Any]] = []
        for seed in sorted({r.seed for r in mine}):
            rs = [r for r in mine if r.seed == seed]
            delta = None
            if base:
                p = paired_samples(rs, base)
                delta = float(np.mean(p.x - p.y)) if p.n else None
            per_seed.append(
                {
                    "seed": seed,
                    "folds": sorted(r.fold for r in rs),
                    "final": float(np.mean([r.final for r in rs])),
                    "delta": delta,
                }
            )
        finals = [float(s["final"]) for s in per_seed]
        deltas = [float(s["delta"]) for s in per_seed if s["delta"] is not None]
        rows.append(
            {
                "system": mine[0].label,
                "strategy": strategy,
                "switch": switch,
                "seeds": [s["seed"] for s in per_seed],
                "per_seed": per_seed,
                "final_mean": float(np.mean(finals)),
                "final_sd": float(np.std(finals, ddof=1)) if len(finals) > 1 else None,
                "delta_mean": float(np.mean(deltas)) if deltas else None,
                "delta_sd": float(np.std(deltas, ddof=1)) if len(deltas) > 1 else None,
            }
        )
    if rows:
        log.info("seeds: %d systems averaged over %s seeds", len(rows), sorted({len(r["seeds"]) for r in rows}))
    return out, rows
