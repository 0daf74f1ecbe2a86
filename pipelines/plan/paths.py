"""Training paths: typed stages and their shorthand (the plan that shares their prefixes: :mod:`pipelines.plan.trie`).

A training path is a list of segments ``(objective, data, trees)``; segment
``i+1`` continues from the model after segment ``i``, and the tree count is
global (segment 2 starts at tree ``t``). Shorthand::

    OBJ[@DATA][~SEED]:TREES[,OBJ[@DATA][~SEED]:TREES...]

    mse:200,lambdamart:300                 the continuation method, MSE-200
    lambdamart@q_bm25:200,lambdamart:300   curriculum: q_bm25's first stage, then all
    lambdamart@q_bm25.*:300,lambdamart:200 every stage of a paced curriculum (300 trees split evenly)
    xgb_mse:200,xgb_lambdamart:300         the same with XGBoost's built-in objectives
    noisy_lambdamart~2:500                 the noisy objective with train.seed + 2 (grid.seeds)
    lambdamart@selfpaced:300,lambdamart:200  a self-paced segment (queries chosen by the model every
                                           selfpaced.every trees), then all

``DATA`` is ``all`` (default), ``NAME[.STAGE]`` where NAME is the strategy of
a curriculum passed to ``ltr train --curriculum`` and STAGE its stage index
(default 0) or ``*``, or a self-paced rule (``selfpaced``, ``antipaced``, ``randompaced``:
:mod:`pipelines.kernel.selfpaced`), which takes no stage: its segment is one node whose data is
``RULE.TREES`` (the span its shares are paced over).

Paths that start alike share their common prefix (:func:`pipelines.plan.trie.build_plan`): MSE-100,
-200, -300 and -400 with T = 500 train one MSE run of 400 trees and continue
each slice, 1,400 trees instead of 2,000.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass

from pipelines.core.config import SelfPacedConfig, unknown_name
from pipelines.core.errors import UserError
from pipelines.kernel.selfpaced import RULES, Schedule, is_dynamic
from udfs.objectives import registry

log = logging.getLogger(__name__)

_SEGMENT = re.compile(
    r"(?P<obj>[a-z][a-z0-9_]*)(?:@(?P<data>[A-Za-z0-9_]+(?:\.(?:\d+|\*))?))?(?:~(?P<seed>\d+))?:(?P<trees>\d+)"
)


class PathError(UserError):
    """A training path that cannot be parsed or resolved."""


@dataclass(frozen=True)
class Segment:
    """``trees`` trees with ``objective`` on ``data`` (``all`` or ``NAME.STAGE``); ``seed``: added to
    ``train.seed`` for this segment's randomness (the noise of noisy_lambdamart and stochastic_rank, XGBoost's
    sampling): 0, the config's seed, for every path but a ``grid.seeds`` repetition."""

    objective: str
    trees: int
    data: str = "all"
    seed: int = 0

    @property
    def builtin(self) -> str | None:
        """The XGBoost objective of a built-in objective (``xgb_*``); None for the Python objectives."""
        return registry.get(self.objective).builtin

    @property
    def curriculum(self) -> str | None:
        """Name of the curriculum the segment trains on; None when it trains on all rows or a self-paced rule's."""
        return None if self.data == "all" or is_dynamic(self.data) else self.data.split(".")[0]

    @property
    def stage(self) -> int | None:
        """Index of the curriculum stage the segment trains on; None when it trains on all rows.

        Raises
        ------
        ValueError
            For ``NAME.*``, which has no index until :func:`resolve` expands it.
        """
        return None if self.data == "all" or is_dynamic(self.data) else int(self.data.split(".")[1])

    def shorthand(self) -> str:
        """The segment as ``OBJ[@DATA][~SEED]:TREES`` (``@DATA`` left out for all rows, ``~SEED`` for seed 0), as
        :func:`parse_path` reads it."""
        data = "" if self.data == "all" else "@" + (self.data.split(".")[0] if is_dynamic(self.data) else self.data)
        return f"{self.objective}{data}{f'~{self.seed}' if self.seed else ''}:{self.trees}"


@dataclass(frozen=True)
class TrainingPath:
    """A named list of segments."""

    segments: tuple[Segment, ...]
    name: str = ""

    @property
    def trees(self) -> int:
        """Trees of the whole path: the sum over its segments."""
        return sum(s.trees for s in self.segments)

    def shorthand(self) -> str:
        """The path as comma-separated :meth:`Segment.shorthand`, as :func:`parse_path` reads it."""
        return ",".join(s.shorthand() for s in self.segments)

    @property
    def curricula(self) -> list[str]:
        """Names of the curricula the segments train on, sorted."""
        return sorted({s.curriculum for s in self.segments if s.curriculum})

    @property
    def label(self) -> str:
        """The path's name, else its shorthand: what names the path in plans (its chain) and results."""
        return self.name or self.shorthand()

    def boundaries(self) -> list[int]:
        """Global tree index at which each segment starts."""
        out, t = [], 0
        for s in self.segments:
            out.append(t)
            t += s.trees
        return out


#: Old names of objectives -> their names now (CHANGELOG.md): a path with an old name still parses, and says so once a
#: process (one line). Here, where names are read, not in the registry, which every node's key covers: an alias
#: re-keys nothing.
ALIASES = {"stochastic_ndcg": "noisy_lambdamart"}
_warned: set[str] = set()


def canonical(name: str) -> str:
    """``name``, or the name an old name (:data:`ALIASES`) now has, with one deprecation line a process."""
    new = ALIASES.get(name)
    if new is None:
        return name
    if name not in _warned:
        _warned.add(name)
        log.warning("objective %r is deprecated: it is now called %r (the same objective); use the new name", name, new)
    return new


def parse_path(text: str, name: str = "") -> TrainingPath:
    """Parse the shorthand; errors name the segment and the expected form."""
    segs = []
    for raw in text.replace(" ", "").split(","):
        m = _SEGMENT.fullmatch(raw)
        if not m:
            raise PathError(
                f"--path {text!r}: segment {raw!r} is not OBJECTIVE[@DATA][~SEED]:TREES (e.g. mse:200, "
                "lambdamart@q_bm25:100, noisy_lambdamart~1:100)"
            )
        obj = canonical(m.group("obj"))
        known = registry.objectives()
        if obj not in known:
            raise PathError(f"--path {text!r}: {unknown_name('objective', obj, list(known))}")
        trees = int(m.group("trees"))
        if trees < 1:
            raise PathError(f"--path {text!r}: segment {raw!r} has no trees")
        data = m.group("data") or "all"
        if data.split(".")[0] in RULES:  # one node of its own, its data the span its shares are paced over
            if "." in data:
                raise PathError(
                    f"--path {text!r}: segment {raw!r}: @{data.split('.')[0]} takes no stage (it chooses its "
                    f"queries every selfpaced.every trees), e.g. {obj}@{data.split('.')[0]}:{trees}"
                )
            data = f"{data}.{trees}"
        elif data != "all" and "." not in data:
            data += ".0"
        segs.append(Segment(obj, trees, data, int(m.group("seed") or 0)))
    if not segs:
        raise PathError("--path is empty")
    return TrainingPath(tuple(segs), name)


def resolve(path: TrainingPath, stages: dict[str, int]) -> TrainingPath:
    """Check curriculum references against ``stages`` (name -> number of stages) and
    expand ``NAME.*`` into one segment per stage (trees split evenly, the rest to the last)."""
    out = []
    for s in path.segments:
        if s.data == "all" or is_dynamic(s.data):
            out.append(s)
            continue
        name, st = s.data.split(".")
        if name not in stages:
            known = ", ".join(sorted(stages)) or "none; pass --curriculum DIR"
            raise PathError(f"path {path.shorthand()!r}: no curriculum {name!r} (curricula: {known})")
        n = stages[name]
        if st == "*":
            if s.trees < n:
                raise PathError(f"path {path.shorthand()!r}: {s.shorthand()} has fewer trees than {name}'s {n} stages")
            base, extra = divmod(s.trees, n)
            out += [Segment(s.objective, base + (extra if i == n - 1 else 0), f"{name}.{i}", s.seed) for i in range(n)]
        else:
            if int(st) >= n:
                raise PathError(f"path {path.shorthand()!r}: {name} has stages 0..{n - 1}, not {st}")
            out.append(s)
    return TrainingPath(tuple(out), path.name)


def paced_schedules(cfg: SelfPacedConfig, paths: list[TrainingPath]) -> dict[str, Schedule]:
    """The schedule of every self-paced segment's data in ``paths`` (``RULE.TREES``): ``cfg``'s settings and the
    share of each of its ``ceil(TREES / every)`` selections, the pacing function's from ``delta`` to 1 (the last
    one all the queries). A segment with fewer than two selections, or a pacing function that is unknown, leaves
    (0, 1] or decreases, is refused in one line (:class:`PathError`) before any Spark job."""
    from udfs.components import ComponentError
    from udfs.curriculum import pacing_shares

    out: dict[str, Schedule] = {}
    for p in paths:
        for s in p.segments:
            if not is_dynamic(s.data) or s.data in out:
                continue
            rule, span = s.data.split(".")
            selections = -(-int(span) // cfg.every)
            if selections < 2:
                raise PathError(
                    f"path {p.label!r}: {s.shorthand()} makes {selections} selection of its queries (one every "
                    f"selfpaced.every = {cfg.every} trees), which keeps them all; give it more than {cfg.every} trees "
                    "or a smaller selfpaced.every"
                )
            try:
                shares = pacing_shares(cfg.pacing, selections, cfg.delta)
            except (ComponentError, ValueError) as e:
                raise PathError(f"selfpaced.pacing {cfg.pacing!r}: {e}") from None
            out[s.data] = Schedule(cfg.every, cfg.by, cfg.seed, tuple(float(x) for x in shares))
    return out
