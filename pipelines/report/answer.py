"""The inference the report opens with: the headline, non-inferiority in trees, folds pooled by random effects
and the difficulty interaction against the random curriculum (``report.json``'s ``headline``,
``noninferiority``, ``per_fold``, ``meta`` and ``difficulty_interaction``)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pipelines.report.inference as inference
from pipelines.core.config import ReportConfig
from pipelines.report.headline import choose_on_vali, headline
from pipelines.report.pairing import Paired
from pipelines.report.records import Record, ReportError, label_of
from pipelines.report.replay import Curves, per_query_curves, seed_runs_of
from pipelines.study.design import BASELINE, MSE
from pipelines.tracking.runs import Tracker
from udfs.curriculum import control

log = logging.getLogger(__name__)

#: The curriculum strategy every other one is compared with in the difficulty interaction (the control).
RANDOM = control()  # the seeded strategy: a random subset of the same size
#: Bootstrap resamples of the non-inferiority tree count (``report.bootstrap``, at most this many): each one
#: evaluates the lower bound at every replayed curve point (queries x points), 1,000 keep paper scale in minutes.
NONINF_BOOT = 1000


@dataclass
class Answer:
    """What :func:`answer` found; ``notes`` say why a part is missing."""

    headline: dict[str, Any] | None = None
    noninferiority: dict[str, dict[str, Any]] = field(default_factory=dict)
    per_fold: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    meta: dict[str, dict[str, Any]] = field(default_factory=dict)
    interaction: dict[str, dict[str, Any]] | None = None
    chosen: dict[str, int | None] = field(default_factory=dict)  # strategy -> switch chosen on validation
    notes: dict[str, str] = field(default_factory=dict)


def random_control(
    pairs: Mapping[tuple[str, int | None], Paired],
) -> Callable[[tuple[str, int | None]], tuple[str, int | None] | None]:
    """``random_of`` for :func:`inference.difficulty_interaction`: a curriculum system's random-curriculum twin
    at the same switch point, when the grid has it (None for MSE-t, extra paths and the random system)."""

    def random_of(key: tuple[str, int | None]) -> tuple[str, int | None] | None:
        twin = (RANDOM, key[1])
        curriculum = key[0] not in (RANDOM, MSE, BASELINE) and key[1] is not None
        return twin if curriculum and twin in pairs else None

    return random_of


def noninferiority_of(
    curves: Mapping[tuple[str, int | None], Curves],
    pairs: Mapping[tuple[str, int | None], Paired],
    base_trees: int,
    report: ReportConfig,
) -> dict[str, dict[str, Any]]:
    """:func:`inference.noninferiority` of every system with curves, on its pairs with LambdaMART's final NDCG."""
    out = {}
    for key, c in curves.items():
        p = pairs.get(key)
        if key == (BASELINE, None) or p is None or not p.n:
            continue
        ni = inference.noninferiority(
            c.rows(p.keys), c.steps, p.y, base_trees, report.margin, min(report.bootstrap, NONINF_BOOT), report.seed
        )
        ni["max_trees"] = c.steps[-1]
        out[label_of(*key)] = ni
    return out


def answer(
    tracker: Tracker,
    t1: list[dict[str, Any]],
    records: list[Record],
    runs: list[Record],
    pairs: Mapping[tuple[str, int | None], Paired],
    scores: dict[tuple[int, int], dict[str, float]] | None,
    *,
    dataset: str | None,
    report: ReportConfig,
    metric: str,
) -> Answer:
    """The report's inference over the seed-averaged ``records`` (``runs``: every run read, seed repetitions
    apart), ``pairs`` (:func:`pipelines.report.pairing.pairs_with_baseline`) and the difficulty ``scores``
    (None: none at hand)."""
    a = Answer()
    if not pairs:
        a.notes["headline"] = "the grid has no finished LambdaMART baseline"
        return a
    a.per_fold, a.meta = inference.fold_effects(pairs)
    if scores is not None:
        a.interaction = inference.difficulty_interaction(pairs, scores, random_control(pairs))
    base = [r for r in records if (r.strategy, r.switch) == (BASELINE, None)]
    base_trees = max(r.steps[-1] for r in base)
    t0 = time.perf_counter()
    try:
        curves, why = per_query_curves(tracker, records, dataset, seed_runs_of(runs, records))
    except ReportError as e:  # a replay that disagrees: no tree counts, said at the top
        curves, why = {}, str(e)
        log.warning("no non-inferiority in trees: %s", e)
    if why:
        a.notes["noninferiority"] = why
        log.warning("no non-inferiority in trees: %s", why)
    a.noninferiority = noninferiority_of(curves, pairs, base_trees, report)
    if curves:
        log.info("non-inferiority of %d systems in %.1f s", len(a.noninferiority), time.perf_counter() - t0)
    a.chosen = {s: k[1] for s, k in choose_on_vali(records).items()}
    a.headline = headline(
        t1,
        records,
        a.noninferiority if curves else None,
        primary_test=report.primary_test,
        margin=report.margin,
        metric=metric,
        random_strategy=RANDOM,
        note=a.notes.get("noninferiority"),
    )
    if a.headline is None:
        a.notes["headline"] = "no system has a validation curve to choose its switch point on"
    return a
