"""What the report reads of one finished child run (:class:`Record`), and its error."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from pipelines.core.errors import UserError
from pipelines.study.design import BASELINE, MSE

log = logging.getLogger(__name__)


class ReportError(UserError):
    """Nothing (or not enough, or inconsistent data) to report on."""


def label_of(strategy: str, switch: int | None) -> str:
    """Display name of a system: ``LambdaMART``, ``MSE-t``, ``<strategy>-t`` or an extra path's name."""
    if strategy == BASELINE:
        return "LambdaMART"
    if strategy == MSE:
        return f"MSE-{switch}"
    return strategy + ("" if switch is None else f"-{switch}")


def order_systems(keys: Sequence[tuple[str, int | None]]) -> list[tuple[str, int | None]]:
    """The report's order of systems: the baseline, the MSE-t, then the other strategies, each by switch point."""
    return sorted(keys, key=lambda k: (k[0] != BASELINE, k[0] != MSE, k[0], k[1] or 0))


@dataclass
class Record:
    """What the report needs of one finished child run (one system on one fold)."""

    fold: int
    strategy: str
    switch: int | None
    steps: list[int]
    test: list[float]
    vali: list[float] = field(default_factory=list)
    per_query: dict[int, float] = field(default_factory=dict)
    #: relevant documents (label > 0) of each test query; None: not logged (a run of an older ltr)
    relevant: dict[int, int] | None = field(default_factory=dict)
    score_dists: list[dict[str, Any]] = field(default_factory=list)
    #: the path's starting score (``training.json``): where :mod:`pipelines.report.replay` starts the margins
    base_margin: float = 0.0
    run_id: str = ""
    code: dict[str, str] = field(default_factory=dict)  # the child's code.* params without the prefix
    metric: str = ""  # the child's metric conventions in words (its ``metric`` param)
    #: the same conventions as the child logged them, one param each (``metric.k``, ``metric.gain``, ...; values
    #: as MLflow keeps params, strings), without the prefix
    conventions: dict[str, str] = field(default_factory=dict)
    seed: int = 0  # the grid.seeds repetition (0: the child itself)
    #: the seed repetitions averaged into this record (:func:`pipelines.report.seeds.average_seeds`); 1: a run
    seeds: int = 1
    #: the run's metrics (latest values) when the report read it: what :func:`log_child_metrics` need not log again
    logged: dict[str, float] = field(default_factory=dict)
    #: the trees of the teachers its curriculum was ordered by (a teacher-based curriculum; 0: none): its cost too
    teacher_trees: int = 0
    #: a self-paced segment's selections (``training.json``): [tree, share, queries kept, queries chosen among]
    selections: list[list[float]] = field(default_factory=list)

    @property
    def label(self) -> str:
        """The system's name in the report (``LambdaMART``, ``MSE-20``, ``q_nrel-20``)."""
        return label_of(self.strategy, self.switch)

    @property
    def final(self) -> float:
        """Test NDCG after the last tree."""
        return self.test[-1]

    @property
    def final_vali(self) -> float:
        """Validation NDCG after the last tree."""
        if not self.vali:
            raise ReportError(f"{self.label} fold {self.fold} (run {self.run_id}): no validation curve")
        return self.vali[-1]

    def at(self, tree: int) -> float:
        """Test NDCG after ``tree`` trees."""
        if tree not in self.steps:
            raise ReportError(
                f"{self.label} fold {self.fold}: no NDCG recorded after {tree} trees "
                "(train.eval_every must divide the report's model sizes, report.table2_sizes)"
            )
        return self.test[self.steps.index(tree)]
