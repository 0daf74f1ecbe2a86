"""The registry of difficulty scores: the per-query columns a curriculum can order queries by.

Each score is a column of the difficulty scores (:data:`udfs.difficulty.DIFFICULTY_DDL`, computed by
:func:`udfs.difficulty.difficulty_frame`) with what the rest of the system needs to know of it: which way is easier,
whether it is undefined for a query without a relevant document (an NDCG: its IDCG is 0), and the feature role it
ranks documents by, which a dataset must have (``conf/datasets/<name>.yaml``'s ``feature_roles``). The curriculum
strategies (:data:`udfs.curriculum.STRATEGIES`) name a score; the builder, the config's checks and the report read
the rest from here. No heavy import: reading a config imports this module.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Score:
    """A difficulty score: its column, which way is easier, when it is undefined, the feature role it needs."""

    name: str
    higher_is_easier: bool = True
    undefined_when_empty: bool = False
    role: str | None = None


#: Score name (its column) -> :class:`Score`, registered by :func:`score`.
SCORES: dict[str, Score] = {}


def score(s: Score) -> Score:
    """Register ``s`` (a name registered twice with other properties is an error)."""
    if s.name in SCORES and SCORES[s.name] != s:
        raise ValueError(f"difficulty score {s.name!r} is registered twice")
    SCORES[s.name] = s
    return s


score(Score("n_rel"))  # relevant documents (label >= 1): more is easier
score(Score("ndcg_bm25", undefined_when_empty=True, role="bm25"))  # NDCG@k of the BM25 ranking
score(Score("ndcg_pagerank", undefined_when_empty=True, role="pagerank"))  # NDCG@k of the PageRank ranking
