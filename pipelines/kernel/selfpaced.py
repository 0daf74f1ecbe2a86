"""Self-paced curricula: a training-path segment whose queries are chosen from the model being trained.

A segment ``OBJ@selfpaced:T`` (or ``@antipaced``, ``@randompaced``, its controls) re-chooses its training queries
every ``every`` trees, at the segment's trees ``t0, t0 + every, ...``: selection ``i`` keeps a share ``shares[i]``
of the training queries (a pacing function from ``delta`` to 1 over the segment's selections, computed on the
driver: :func:`pipelines.plan.paths.paced_schedules`), chosen by the margins the loop holds at that tree:

* ``selfpaced``: the easiest first (Kumar et al. 2010's self-paced learning, Penha & Hauff 2020's next step): by
  ``ndcg``, the query's NDCG under the current margins, highest first; by ``loss``, its mean pairwise logistic loss
  ``log(1 + exp(-(s_hi - s_lo)))`` over its pairs of documents with different labels, lowest first;
* ``antipaced``: the hardest first, by the same score (the anti-curriculum control);
* ``randompaced``: a seeded random order of the queries, drawn anew at each selection (the random control).

All three keep exactly the same number of queries at the same trees: ``ceil(share * n)`` (at least 1) of the
``n`` queries that have a pair of documents with different labels (as a static curriculum's stages count them);
a query without such a pair adds nothing to a pairwise objective's gradient and is always kept, so no rule can
fill its share with queries that teach nothing. Ties go to the lower qid.

Where it runs: in the barrier task, on the rows each worker holds (whole queries). Each worker scores its own
queries; their qids and scores are gathered over XGBoost's collective (one float per query: the rows never leave
their worker), so every worker makes the same choice from the same numbers, whatever the number of workers. The
kept rows' matrix is built from the bin codes the worker already holds (the fold's cuts: no re-binning, no
re-read), as a static curriculum stage's is.

At a path's first tree (global tree 0) every document has the base score, so there is no judgement to choose by:
that selection keeps every query (share 1), for all three rules. Ordering by the documents' tie order instead would
be an oracle: the NDCG of an arbitrary order grows with the share of relevant documents.

Determinism: a selection is a function of the margins at its tree, and a self-paced node checkpoints at every
selection (its segments end there), so a killed node resumes from the margins the choice was made from and builds
the same trees, bit for bit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from udfs.metrics import NdcgSpec, ndcg_fast
from udfs.pairs import pair_scores
from udfs.spark_hashes import xxhash64

#: The rules of a dynamic segment (the ``@DATA`` of a path segment): the self-paced curriculum and its two controls.
RULES = ("selfpaced", "antipaced", "randompaced")
#: What a query's score under the current margins is: ``ndcg`` (higher is easier) or ``loss`` (lower is easier).
BY = ("ndcg", "loss")


def is_dynamic(data: str) -> bool:
    """Whether a segment's or node's ``data`` (``NAME.SPAN``) is a self-paced rule's."""
    return data.split(".")[0] in RULES


@dataclass(frozen=True)
class Schedule:
    """What a worker needs to run the dynamic segments of one span: the rule's settings and the share of each
    selection (the last one 1)."""

    every: int
    by: str
    seed: int
    shares: tuple[float, ...]

    def share_at(self, t0: int, tree: int) -> float:
        """The share of the selection at global ``tree`` of a segment starting at ``t0``."""
        return self.shares[(tree - t0) // self.every]


def query_scores(
    margins: np.ndarray, labels: np.ndarray, offsets: np.ndarray, by: str, spec: NdcgSpec
) -> tuple[np.ndarray, np.ndarray]:
    """Per query: its ease under ``margins`` (higher is easier: the NDCG, or minus the mean pair loss) and whether
    it has a pair of documents with different labels (the queries a selection chooses among)."""
    off = np.asarray(offsets, np.int64)
    y = np.asarray(labels)
    if y.size:
        lo = np.minimum.reduceat(y, off[:-1]) if off.size > 1 else np.zeros(0)
        hi = np.maximum.reduceat(y, off[:-1]) if off.size > 1 else np.zeros(0)
        paired = (hi > lo) & (np.diff(off) > 1)
    else:
        paired = np.zeros(off.size - 1, dtype=bool)
    if by == "ndcg":
        ease = ndcg_fast(off, y.astype(np.float64), np.asarray(margins, np.float32), spec)
    elif by == "loss":
        _, loss, _ = pair_scores(off, y, np.asarray(margins, np.float64))
        ease = -loss
    else:
        raise ValueError(f"a self-paced selection's score is one of {', '.join(BY)}, not {by!r}")
    return np.where(paired, ease, np.nan), paired


def _random_order_key(qids: np.ndarray, seed: int, tree: int) -> np.ndarray:
    """A seeded pseudo-random key per qid, another at every tree (the random control's order at that selection)."""
    n = qids.size
    salt = xxhash64(np.full(n, seed, dtype=np.int32)) ^ xxhash64(np.full(n, tree, dtype=np.int32) + 7919)
    mixed = (xxhash64(qids.astype(np.int32)) ^ salt).astype(np.uint64)
    return xxhash64((mixed % np.uint64(2**31 - 1)).astype(np.int32))


def keep_count(share: float, n: int) -> int:
    """Queries a selection keeps of ``n``: ``ceil(share * n)``, at least 1 (if any), at most ``n`` (a static
    curriculum stage's count, :func:`udfs.curriculum.stage_sizes`)."""
    return min(n, max(1 if n else 0, math.ceil(share * n - 1e-9)))


def choose(qids: np.ndarray, ease: np.ndarray, share: float, rule: str, seed: int, tree: int) -> np.ndarray:
    """The qids a selection keeps (sorted): :func:`keep_count` of the queries with a score (``ease`` not NaN) in
    ``rule``'s order, ties by qid, and every query without one."""
    q = np.asarray(qids, np.int64)
    s = np.asarray(ease, np.float64)
    scored = ~np.isnan(s)
    qs, ss = q[scored], s[scored]
    if rule == "selfpaced":
        order = np.lexsort((qs, -ss))
    elif rule == "antipaced":
        order = np.lexsort((qs, ss))
    elif rule == "randompaced":
        order = np.lexsort((qs, _random_order_key(qs, seed, tree)))
    else:
        raise ValueError(f"a self-paced rule is one of {', '.join(RULES)}, not {rule!r}")
    kept = qs[order[: keep_count(share, qs.size)]]
    return np.sort(np.concatenate([kept, q[~scored]]))
