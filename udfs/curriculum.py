"""Curriculum math as plain numpy: pacing functions and nested stage assignment.

A curriculum is a sequence of stages; stage ``i`` holds the easiest
``share[i]`` of the training queries, ``share`` never decreases and its last
value is 1 (all training data). Every query therefore gets the first stage it
enters (``first_stage``), and stage ``i`` is the set of queries with
``first_stage <= i``: stages are nested, so the weights of Bengio et al.'s
definition (2009) never decrease.

Pacing functions (Penha & Hauff, ECIR 2020, after Platanios et al. 2019), for
progress ``x = i / (K - 1)`` over ``K`` stages and first share ``delta``:

* ``linear``:    delta + (1 - delta) * x
* ``root_n``:    (delta**n + (1 - delta**n) * x) ** (1 / n)   (its setting ``n``, default 2)
* ``geometric``: delta * (1 / delta) ** x    (a geometric progression)
* ``step``:      delta, then (1 + delta) / 2, then 1, in equal thirds of x

each of which starts at ``delta`` and ends at 1.

Both kinds of component are registered here, each next to its code: pacing functions (:func:`pacing`,
:data:`PACINGS`) and ordering strategies (:func:`strategy`, :data:`STRATEGIES`, with what the rest of the system
needs to know of each: the difficulty score it ranks by, the feature role that score needs, whether it is a seeded
control). The config's checks, the CLI's help, the curriculum builder, the study's design and the report read them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import numpy as np

from udfs.components import Check, ComponentError, accepted, check_name, is_plugin, own_params, settings_of
from udfs.scores import SCORES, Score, score

# ------------------------------------------------------------ pacing functions
#: A pacing function: ``f(stage, stages, *, params)`` -> the share of the training queries at stage ``stage``
#: (1..stages), in (0, 1]; ``params`` holds ``delta`` (the share of the first stage: ``curriculum.delta``,
#: ``selfpaced.delta``) and the function's own settings (``components.<name>``).
Pacing = Callable[..., float]

#: The settings every pacing function's ``params`` holds (the curriculum's): no own setting may take one of these.
PACING_SETTINGS = ("delta",)


@dataclass(frozen=True)
class PacingFunction:
    """A registered pacing function: its name, function, module, own settings' defaults, whether a plug-in."""

    name: str
    fn: Pacing
    module: str | None
    defaults: Mapping[str, Any] = field(default_factory=dict)
    plugin: bool = False
    check: Check | None = None

    def settings(self) -> dict[str, Any]:
        """Its own settings as configured (``components.<name>`` over the declared defaults)."""
        return settings_of(self.name, self.defaults)


#: Pacing function name -> :class:`PacingFunction` (registered by :func:`pacing`).
PACINGS: dict[str, PacingFunction] = {}


def pacing(
    name: str, *, params: Mapping[str, Any] | None = None, check: Check | None = None
) -> Callable[[Pacing], Pacing]:
    """Register the decorated ``f(stage, stages, *, params)`` as pacing function ``name`` (``params``: its own
    settings and their defaults; ``check``: their check, raising ``ValueError``)."""
    check_name("pacing function", name)
    own = own_params("pacing function", name, params, PACING_SETTINGS, check)

    def register(f: Pacing) -> Pacing:
        accepted(f, "pacing function", name, 2, ("params",))
        old = PACINGS.get(name)
        if old is not None and (old.module, getattr(old.fn, "__qualname__", None)) != (f.__module__, f.__qualname__):
            raise ComponentError(
                f"pacing function {name!r} is registered twice: by {old.module} and by {f.__module__}; rename one"
            )
        PACINGS[name] = PacingFunction(name, f, f.__module__, MappingProxyType(own), is_plugin(f.__module__), check)
        return f

    return register


def _progress(stage: int, stages: int) -> float:
    """``x = (stage - 1) / (stages - 1)``: 0 at the first stage, 1 at the last."""
    return (stage - 1) / (stages - 1)


@pacing("linear")
def _linear(stage: int, stages: int, *, params: Mapping[str, Any]) -> float:
    """Linear: the share grows evenly from ``delta`` at the first stage to 1 at the last."""
    delta = params["delta"]
    return delta + (1.0 - delta) * _progress(stage, stages)


def _check_root_n(params: Mapping[str, Any]) -> None:
    if not params["n"] > 0:
        raise ValueError(f"n (the root's degree) must be > 0, got {params['n']}")


@pacing("root_n", params={"n": 2.0}, check=_check_root_n)
def _root_n(stage: int, stages: int, *, params: Mapping[str, Any]) -> float:
    """Root-n (Platanios et al., 2019): ``(delta^n + (1 - delta^n) x)^(1/n)``: fast growth early, slower later."""
    delta, n = params["delta"], params["n"]
    return (delta**n + (1.0 - delta**n) * _progress(stage, stages)) ** (1.0 / n)


@pacing("geometric")
def _geometric(stage: int, stages: int, *, params: Mapping[str, Any]) -> float:
    """Geometric: ``delta * (1 / delta)^x``, the share multiplied by the same factor at every stage."""
    delta = params["delta"]
    return delta * (1.0 / delta) ** _progress(stage, stages)


@pacing("step")
def _step(stage: int, stages: int, *, params: Mapping[str, Any]) -> float:
    """Step: ``delta`` for the first third of the stages, ``(1 + delta) / 2`` for the second, then all."""
    x, delta = _progress(stage, stages), params["delta"]
    return delta if x < 1 / 3 else (1.0 + delta) / 2 if x < 2 / 3 else 1.0


def pacing_shares(pacing: str, stages: int, delta: float) -> np.ndarray:
    """Share of the training queries in each of ``stages`` stages (first ``delta``, last 1).

    A pacing function's values are checked (:func:`check_shares`); the last stage's share is set to 1."""
    if pacing not in PACINGS:
        raise ValueError(f"unknown pacing function {pacing!r}; expected one of {', '.join(PACINGS)}")
    if stages < 2:
        raise ValueError(f"a paced curriculum needs at least 2 stages, got {stages}")
    if not 0.0 < delta <= 1.0:
        raise ValueError(f"delta (share of the first stage) must be in (0, 1], got {delta}")
    p = PACINGS[pacing]
    params = MappingProxyType({"delta": delta, **p.settings()})
    s = check_shares(pacing, [p.fn(i, stages, params=params) for i in range(1, stages + 1)])
    s[-1] = 1.0
    return np.minimum(s, 1.0)


def check_shares(name: str, values: list[Any]) -> np.ndarray:
    """A pacing function's shares, one per stage: real numbers in (0, 1] that never decrease (stages are nested);
    :class:`ComponentError` naming the function, the stage and the value otherwise."""
    out = np.empty(len(values), dtype=np.float64)
    for i, v in enumerate(values):
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float, np.integer, np.floating)):
            raise ComponentError(f"pacing function {name!r}: stage {i + 1} returned {v!r}, expected a share in (0, 1]")
        if not 0.0 < float(v) <= 1.0 + 1e-12:
            raise ComponentError(f"pacing function {name!r}: stage {i + 1} returned {float(v)!r}, outside (0, 1]")
        out[i] = float(v)
    if (np.diff(out) < -1e-12).any():
        i = int(np.flatnonzero(np.diff(out) < -1e-12)[0])
        raise ComponentError(
            f"pacing function {name!r}: stage {i + 2}'s share {float(out[i + 1])!r} is below stage {i + 1}'s "
            f"{float(out[i])!r} "
            "(stages are nested: a share never decreases)"
        )
    return out


def two_stage_shares(fraction: float) -> np.ndarray:
    """The paper's curriculum: the easiest ``fraction``, then everything."""
    if not 0.0 < fraction <= 1.0:
        raise ValueError(f"fraction must be in (0, 1], got {fraction}")
    return np.array([fraction, 1.0])


def stage_sizes(n: int, shares: np.ndarray) -> np.ndarray:
    """Queries per stage: ceil(share * n), at least 1 (if any), exactly n in the last stage."""
    sizes = np.array([min(n, max(1 if n else 0, math.ceil(s * n - 1e-9))) for s in shares], dtype=np.int64)
    sizes[-1] = n
    return np.maximum.accumulate(sizes)


def easiest_first(score: np.ndarray, qid: np.ndarray, last: np.ndarray | None = None) -> np.ndarray:
    """Order of queries from easiest to hardest: higher score first, then lower qid.

    ``last``: optional boolean mask of queries that come after all the others
    whatever their score (which may be NaN), among themselves by lower qid.
    """
    qid = np.asarray(qid)
    neg = -np.asarray(score, dtype=np.float64)
    if last is None:
        return np.lexsort((qid, neg))
    last = np.asarray(last, dtype=bool)
    return np.lexsort((qid, np.where(last, 0.0, neg), last))


def assign_first_stage(order: np.ndarray, sizes: np.ndarray, held_back: np.ndarray | None = None) -> np.ndarray:
    """``first_stage[j]`` of query ``j``, given the easiest-first ``order`` and stage ``sizes``.

    ``held_back``: optional boolean mask of queries that enter only the last
    stage; ``sizes`` then count the other queries (``sizes[-1]`` = their number),
    which fill the stages in ``order``.
    """
    n = order.size
    if held_back is None:
        rank = np.empty(n, dtype=np.int64)
        rank[order] = np.arange(n)
        return np.searchsorted(sizes, rank, side="right").astype(np.int32)
    held = np.asarray(held_back, dtype=bool)
    kept = order[~held[order]]
    if sizes[-1] != kept.size:
        raise ValueError(f"stage sizes end at {sizes[-1]}, but {kept.size} queries are not held back")
    first = np.full(n, len(sizes) - 1, dtype=np.int32)
    first[kept] = np.searchsorted(sizes, np.arange(kept.size), side="right")
    return first


# ------------------------------------------------------------ strategies: which queries come first
class HeldBackError(ValueError):
    """``empty_queries=exclude`` with no query that has a relevant document: every stage but the last empty."""


@dataclass(frozen=True)
class Strategy:
    """An ordering strategy and what the rest of the system needs to know of it.

    ``order``: ``score`` (easiest first by ``score``, a difficulty score of :data:`udfs.scores.SCORES`, which
    says which way is easier, when it is undefined and the feature role it needs), ``seeded`` (a permutation
    drawn from the curriculum's seed: the report's control, repeated by ``grid.seeds``) or ``all`` (every query
    in every stage).
    ``shares``: fixed stage shares (``none``: one stage; ``l_hrel``: two whole ones, its first filters documents).
    ``label_filter``: its first stage keeps only the documents of ``curriculum.hrel_labels``.
    ``reverse``: the anti-curriculum of the strategy ordered by the same score (hardest first; :data:`ANTI`).
    """

    name: str
    order: str = "score"
    score: str | None = None
    shares: tuple[float, ...] | None = None
    label_filter: bool = False
    reverse: bool = False

    @property
    def role(self) -> str | None:
        """The feature role its score ranks documents by (None: it needs no feature)."""
        return None if self.score is None else SCORES[self.score].role

    @property
    def seeded(self) -> bool:
        """Its queries' order depends on the curriculum's seed (the ``random`` control)."""
        return self.order == "seeded"

    @property
    def kind(self) -> str | None:
        """The kind of its difficulty score (:data:`udfs.scores.KINDS`); None for a strategy without one."""
        return None if self.score is None else SCORES[self.score].kind


#: The prefix of an anti-curriculum's name: ``anti_q_nrel`` is ``q_nrel`` hardest first. A prefix, not a suffix
#: of the path syntax (``~`` is a segment's seed there), so that ``lambdamart@anti_q_nrel:40`` reads as it is.
ANTI = "anti_"


#: Strategy name -> its :class:`Strategy` (registered by :func:`strategy`), in the order the config lists them.
STRATEGIES: dict[str, Strategy] = {}


def strategy(s: Strategy) -> Strategy:
    """Register ``s`` (a name registered twice is an error) and, for a strategy that orders queries by a score,
    its anti-curriculum ``anti_<name>`` (the same score, hardest first)."""
    if s.order not in ("score", "seeded", "all") or (s.order == "score") != (s.score is not None):
        raise ValueError(f"strategy {s.name!r}: order must be score (with a score), seeded or all")
    if s.score is not None and s.score not in SCORES:
        raise ValueError(f"strategy {s.name!r}: unknown difficulty score {s.score!r}; known: {', '.join(SCORES)}")
    if s.reverse and s.order != "score":
        raise ValueError(f"strategy {s.name!r}: only an order by a score can be reversed")
    anti = None if s.reverse or s.order != "score" else Strategy(ANTI + s.name, score=s.score, reverse=True)
    for t in (s, anti):
        if t is not None and t.name in STRATEGIES and STRATEGIES[t.name] != t:
            raise ComponentError(f"strategy {t.name!r} is registered twice ({STRATEGIES[t.name]}); rename one")
    STRATEGIES[s.name] = s
    if anti is not None:
        STRATEGIES[anti.name] = anti
    return s


def anti_of(name: str) -> str | None:
    """The anti-curriculum of strategy ``name`` (None: it has no order to reverse, or is an anti-curriculum)."""
    s = STRATEGIES.get(name)
    return ANTI + name if s is not None and s.order == "score" and not s.reverse else None


def no_order(name: str) -> str | None:
    """Why ``name`` names no strategy when it reads as the anti-curriculum of one without an order (``anti_random``:
    a random order reversed is another random order; ``none`` and ``l_hrel`` order no query); None otherwise."""
    base = name[len(ANTI) :] if name.startswith(ANTI) else None
    s = STRATEGIES.get(base) if base else None
    if s is None or s.order == "score":
        return None
    what = "a seeded random order (reversed, it is another one)" if s.seeded else "no order of its queries"
    ordered = ", ".join(n for n, t in STRATEGIES.items() if t.order == "score" and not t.reverse)
    return f"{name}: strategy {base} has {what}, so it has no anti-curriculum; anti_ takes one of {ordered}"


def difficulty(
    name: str,
    *,
    params: Mapping[str, Any] | None = None,
    features: tuple[str, ...] | list[str] | None = None,
    higher_is_easier: bool = True,
    kind: str = "oracle",
    check: Check | None = None,
) -> Callable[[Any], Any]:
    """Register the decorated ``f(labels, features, offsets, *, params) -> one score per query`` as difficulty
        score ``name``, as the curriculum strategy of the same name that ranks queries by it (easiest first) and as its
        anti-curriculum ``anti_<name>`` (hardest first).

        ``labels``, ``offsets``: the training queries' rows (each query's first row, then the end); ``features``: a
        mapping from feature name (``"f1"``, ...) to the rows' float32 column (``features=`` here: the names it reads,
        so only those are read; default all); ``params``: its own settings and their defaults (``check``: their check,
    raising ``ValueError``). ``kind``: ``oracle``
        (the default: the function is given the labels, so a score is taken to read them unless it says otherwise) or
        ``label_free`` (it reads no label: ``ltr plugins --check`` verifies that its scores do not change when the
        labels do). ``model`` is the built-in teacher scores' kind, and a plug-in is given no teacher's scores."""
    check_name("difficulty score", name)
    if kind not in ("oracle", "label_free"):
        raise ComponentError(
            f"difficulty score {name!r}: kind {kind!r}; a plug-in score is oracle (it reads the labels) or label_free"
        )
    own = own_params("difficulty score", name, params, (), check)
    cols = None if features is None else tuple(features)
    for c in cols or ():
        if not (isinstance(c, str) and c[:1] == "f" and c[1:].isdigit() and int(c[1:]) >= 1):
            raise ComponentError(f"difficulty score {name!r}: feature {c!r} is not a feature name like 'f1'")

    def register(fn: Any) -> Any:
        accepted(fn, "difficulty score", name, 3, ("params",))
        module = fn.__module__
        for s in (name, ANTI + name):  # its strategies' names before its score is registered: nothing half-done
            if s in STRATEGIES and STRATEGIES[s].score != name:
                raise ComponentError(
                    f"difficulty score {name!r} ({module}) would register the curriculum strategy {s!r}, which is "
                    f"a built-in one ({STRATEGIES[s].score or 'no score'}); rename it"
                )
        score(
            Score(
                name, higher_is_easier, False, None, fn, module, cols, MappingProxyType(own), is_plugin(module), kind,
                check,
            )
        )  # fmt: skip
        strategy(Strategy(name, score=name))
        return fn

    return register


strategy(Strategy("q_nrel", score="n_rel"))
strategy(Strategy("q_bm25", score="ndcg_bm25"))
strategy(Strategy("q_pagerank", score="ndcg_pagerank"))
strategy(Strategy("q_size", score="n_docs"))
strategy(Strategy("sigma_bm25", score="sigma_bm25"))
strategy(Strategy("teacher_margin", score="teacher_margin"))
strategy(Strategy("teacher_loss", score="teacher_loss"))
strategy(Strategy("teacher_ndcg", score="teacher_ndcg"))
strategy(Strategy("l_hrel", order="all", shares=(1.0, 1.0), label_filter=True))
strategy(Strategy("random", order="seeded"))
strategy(Strategy("none", order="all", shares=(1.0,)))


def ranked_by() -> tuple[str, ...]:
    """The difficulty scores the registered strategies rank by (the columns the builder reads)."""
    return tuple(dict.fromkeys(s.score for s in STRATEGIES.values() if s.score))


def control() -> str:
    """The strategy the report compares every curriculum with: the seeded one (a random subset of the same size)."""
    return next(name for name, s in STRATEGIES.items() if s.seeded)


def stage_shares(strategy: str, pacing: str, stages: int, delta: float, fraction: float) -> np.ndarray:
    """The share of the queries in each stage: the strategy's own (``none``, ``l_hrel``), a pacing function's,
    else two stages with ``fraction`` first."""
    fixed = STRATEGIES[strategy].shares
    if fixed is not None:
        return np.array(fixed)
    if pacing:
        return pacing_shares(pacing, stages, delta)
    return two_stage_shares(fraction)


def place_queries(
    strategy: str,
    scores: dict[str, np.ndarray],
    qid: np.ndarray,
    shares: np.ndarray,
    empty_queries: str,
    seed: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """The first stage of each query (queries sorted by qid), the score that ordered them (NaN where none did),
    and the queries held back to the last stage (None: none are).

    ``scores``: columns of the difficulty scores, ``n_rel`` among them; ``empty_queries``: how queries without a
    relevant document are placed (``last``, ``exclude``, ``as_metric``)."""
    n = qid.size
    s = STRATEGIES[strategy]
    empty = scores["n_rel"] == 0
    held = empty if empty_queries == "exclude" and len(shares) > 1 else None  # one stage: nothing to hold back
    if held is not None and held.all():
        raise HeldBackError("every query is held back: none has a relevant document")
    sizes = stage_sizes(n if held is None else int((~held).sum()), shares)  # held-back queries: last stage
    if s.score is not None:
        info = SCORES[s.score]
        score = np.array(scores[s.score], np.float64)
        if info.undefined_when_empty and empty_queries != "as_metric":
            score[empty] = np.nan  # undefined: metric.empty plays no part in the order
        if not info.higher_is_easier:
            score = -score  # easiest first is highest first
        # An anti-curriculum reverses the order of the ranked queries; the empty-queries policy places the others
        # as it does for the curriculum: with "last" they still come after every ranked query, since a query
        # without a relevant document gives LambdaMART no gradient, and a first stage of them would be a defect of
        # the control, not a finding about hard queries.
        # A label-free score orders every query by itself alone: "last" would place queries by their labels.
        last = empty if empty_queries == "last" and info.kind != "label_free" else None
        order = easiest_first(-score if s.reverse else score, qid, last=last)
    elif s.seeded:
        score = np.full(n, np.nan)
        order = np.random.default_rng(seed).permutation(n)  # of the qid-sorted queries: reproducible
    else:  # none, l_hrel: every query in every stage
        score = np.full(n, np.nan)
        order = np.arange(n)
    return assign_first_stage(order, sizes, held_back=held), score, held
