"""The registry of difficulty scores: the per-query columns a curriculum can order queries by.

Every score declares its *kind* (:data:`KINDS`), because what a score may read decides what a study may claim of
it: ``oracle`` scores are read from the labels (the number of relevant documents, the NDCG of one feature's
ranking), ``label_free`` scores read no label (the spread of the BM25 values, the number of documents), ``model``
scores are a trained model's judgement. A curriculum that beats the random control with an oracle score has used
the labels of its own training queries in a way no deployed ranker can; the report groups results by kind.

Each score is a column of the difficulty scores (:data:`udfs.difficulty.DIFFICULTY_DDL`, computed by
:func:`udfs.difficulty.difficulty_frame`) with what the rest of the system needs to know of it: which way is easier,
whether it is undefined for a query without a relevant document (an NDCG: its IDCG is 0), and the feature role it
ranks documents by, which a dataset must have (``conf/datasets/<name>.yaml``'s ``feature_roles``). The curriculum
strategies (:data:`udfs.curriculum.STRATEGIES`) name a score; the builder, the config's checks and the report read
the rest from here. No heavy import: reading a config imports this module.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from udfs.components import ComponentError, settings_of

#: The kinds of difficulty, what each may read: ``oracle`` (the labels), ``label_free`` (no label), ``model`` (a
#: trained model's scores of the query's documents).
KINDS = ("oracle", "label_free", "model")


@dataclass(frozen=True)
class Score:
    """A difficulty score: its column, which way is easier, when it is undefined, the feature role it needs, its
    kind (:data:`KINDS`).

    A score with a function (``fn``, registered by :func:`difficulty`) is computed per fold from the training
    queries' rows when a curriculum ranks by it (its ``features``: the feature columns it reads, None: all); the
    others are columns of the dataset's difficulty scores."""

    name: str
    higher_is_easier: bool = True
    undefined_when_empty: bool = False
    role: str | None = None
    fn: Callable[..., Any] | None = field(default=None, compare=False)
    module: str | None = None
    features: tuple[str, ...] | None = None
    defaults: Mapping[str, Any] = field(default_factory=dict, compare=False)
    plugin: bool = False
    kind: str = "oracle"
    check: Callable[[Mapping[str, Any]], object] | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ComponentError(f"difficulty score {self.name!r}: kind {self.kind!r} is not one of {', '.join(KINDS)}")

    def settings(self) -> dict[str, Any]:
        """Its own settings as configured (``components.<name>`` over the declared defaults)."""
        return settings_of(self.name, self.defaults)


#: Score name (its column) -> :class:`Score`, registered by :func:`score`.
SCORES: dict[str, Score] = {}


def score(s: Score) -> Score:
    """Register ``s`` (a name registered twice with other properties is an error)."""
    old = SCORES.get(s.name)
    if old is not None and (old != s or getattr(old.fn, "__qualname__", None) != getattr(s.fn, "__qualname__", None)):
        raise ComponentError(
            f"difficulty score {s.name!r} is registered twice: by {old.module} and by {s.module}; rename one"
        )
    SCORES[s.name] = s
    return s


_HERE = __name__  # the built-in scores' module, named by a clash with a plug-in's score
score(Score("n_rel", module=_HERE))  # relevant documents (label >= 1): more is easier
score(Score("ndcg_bm25", undefined_when_empty=True, role="bm25", module=_HERE))  # NDCG@k of the BM25 ranking
score(Score("ndcg_pagerank", undefined_when_empty=True, role="pagerank", module=_HERE))  # NDCG@k of PageRank
score(Score("n_docs", False, kind="label_free", module=_HERE))  # documents of the query: fewer is easier
score(Score("sigma_bm25", False, role="bm25", kind="label_free", module=_HERE))  # sample sd of BM25: lower is easier
# A cross-fitted teacher's judgement (udfs.teacher; computed per fold from the teachers the plan trains, not columns of
# the difficulty scores): NaN for a query without a pair of different labels, placed as an undefined NDCG is.
score(Score("teacher_margin", undefined_when_empty=True, kind="model", module=_HERE))  # mean s_hi - s_lo: higher easier
score(Score("teacher_loss", False, True, kind="model", module=_HERE))  # mean pairwise logistic loss: lower is easier
score(Score("teacher_ndcg", undefined_when_empty=True, kind="model", module=_HERE))  # the teacher's NDCG@k of the query


def teacher_scores() -> tuple[str, ...]:
    """The scores a teacher computes (kind ``model``): not columns of the difficulty scores."""
    return tuple(n for n, s in SCORES.items() if s.kind == "model")
