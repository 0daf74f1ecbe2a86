"""The study as a plan of checkpointed nodes: pure planning (no Spark, no MLflow, no I/O).

The training paths of one fold (:mod:`pipelines.plan.paths`) form a prefix trie. This
module cuts it into **nodes**: a node is a run of trees ``t0..t1`` (global tree
indices) with one objective on one data subset, continuing from its parent
node's output; it is split wherever a path ends or two paths part, so a node's
output (its trees and the margins after ``t1``) is exactly what its children,
and the paths that end there, need.

::

    MSE-20 and MSE-40 with T = 100         key          objective@data   trees
                                           a1b2...      mse              0..20
                                           c3d4...      |- lambdamart    20..100   ends mse-20
                                           e5f6...      |- mse           20..40
                                           0718...         |- lambdamart 40..100   ends mse-40

Every node has a content key (:func:`pipelines.core.keys.node_key`): a hash of its
parent's key, its objective, data subset and trees, and the plan's context
(hyperparameters, data fingerprint, fold, global cuts, metric conventions, code
identity: :func:`pipelines.core.keys.plan_context`) plus the content key of the
curriculum its data comes from. Equal keys mean equal trees, so a key names a checkpoint that any
later run (a retry, a resumed grid, another grid sharing the prefix) may use;
a changed input changes the key, never reuses a stale result.

A node's state comes from the checkpoints (:mod:`pipelines.store.checkpoints`):
``done`` (its output exists), ``partial`` (a checkpoint at tree ``k``) or
``todo``. A node is *ready* when its parent is done (or it has none): it can
run as an independent unit (a retry, a scheduler task, one of several
concurrent Spark jobs).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from pipelines.core.keys import make_key, node_key, objective_code, seed_field
from pipelines.kernel.nodes import Node
from pipelines.kernel.selfpaced import Schedule, is_dynamic
from pipelines.plan.paths import PathError, Segment, TrainingPath
from udfs.objectives import registry

DONE, PARTIAL, TODO = "done", "partial", "todo"


@dataclass(frozen=True)
class NodeState:
    """``done``, ``partial`` (checkpoint at global tree ``tree``) or ``todo``."""

    state: str
    tree: int

    def trees_left(self, node: Node) -> int:
        """Trees ``node`` (the node this is the state of) still has to build: 0 when done, else from the
        checkpoint (or ``t0``) to ``t1``."""
        return 0 if self.state == DONE else node.t1 - max(self.tree, node.t0)


@dataclass(frozen=True)
class Plan:
    """The nodes of one fold in topological order (parents first) and each path's chain of nodes."""

    fold: int
    nodes: tuple[Node, ...]
    chains: dict[str, tuple[str, ...]] = field(default_factory=dict)  # path label -> node keys, root first
    # node key -> the document it hashes (pipelines.core.keys), to tell which input changed a key; not serialised
    inputs: dict[str, dict[str, Any]] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_by_key", {n.key: n for n in self.nodes})

    def node(self, key: str) -> Node:
        """The node with key ``key``.

        Raises
        ------
        PathError
            When the plan has no such node.
        """
        try:
            return self._by_key[key]  # type: ignore[attr-defined]
        except KeyError:
            raise PathError(f"fold {self.fold} has no plan node {key!r}") from None

    def children(self, key: str | None) -> list[Node]:
        """The nodes whose parent is ``key`` (None: the root nodes), in plan order."""
        return [n for n in self.nodes if n.parent == key]

    @property
    def trees(self) -> int:
        """Trees the plan builds (shared prefixes counted once)."""
        return sum(n.trees for n in self.nodes)

    def depth(self, node: Node) -> int:
        """Number of ancestors of ``node`` (0 for a root node)."""
        d = 0
        while node.parent is not None:
            node, d = self.node(node.parent), d + 1
        return d

    def subtree(self, key: str) -> list[str]:
        """``key`` and every node below it, in plan order."""
        keep = {key}
        for n in self.nodes:  # parents come before their children
            if n.parent in keep:
                keep.add(n.key)
        return [n.key for n in self.nodes if n.key in keep]

    def signature(self, key: str) -> str:
        """A node's place in the trie, independent of keys: its chain from the root, e.g.
        ``mse 0..40 > lambdamart 40..100`` (what stays when an input changes every key)."""
        chain = []
        node: Node | None = self.node(key)
        while node is not None:
            chain.append(node.describe())
            node = self.node(node.parent) if node.parent else None
        return " > ".join(reversed(chain))

    def units(self) -> list[list[str]]:
        """The plan's independent units of work: each root node with every node below it, in plan order.

        No two units share a node and every path's chain lies within one unit, so a scheduler may run
        them in any order or at once (``ltr grid --fold F --node K ...`` per unit, as the Airflow DAG
        does), and each finishes the MLflow children of its paths.
        """
        return [self.subtree(n.key) for n in self.nodes if n.parent is None]

    def subplan(self, keys: Iterable[str]) -> Plan:
        """The nodes in ``keys`` (plan order) and the chains of the paths they end."""
        keep = set(keys)
        nodes = tuple(n for n in self.nodes if n.key in keep)
        ended = {p for n in nodes for p in n.ends}
        return Plan(
            self.fold,
            nodes,
            {p: c for p, c in self.chains.items() if p in ended},
            {k: v for k, v in self.inputs.items() if k in keep},
        )

    # -- serialisation ---------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """The plan as JSON-ready data: ``fold``, ``nodes`` and ``chains`` (``inputs`` is not serialised)."""
        return {
            "fold": self.fold,
            "nodes": [
                {**{k: v for k, v in asdict(n).items() if k != "seed"}, "ends": list(n.ends), **seed_field(n.seed)}
                for n in self.nodes
            ],
            "chains": {p: list(c) for p, c in self.chains.items()},
        }

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> Plan:
        """The plan :meth:`to_dict` wrote (without ``inputs``, which is not serialised)."""
        nodes = tuple(Node(**{**n, "ends": tuple(n["ends"])}) for n in doc["nodes"])
        return cls(int(doc["fold"]), nodes, {p: tuple(c) for p, c in doc["chains"].items()})


def build_plan(
    paths: list[TrainingPath],
    *,
    fold: int = 0,
    context: Mapping[str, Any] | None = None,
    curriculum_keys: Mapping[str, str] | None = None,
    paced: Mapping[str, Schedule] | None = None,
) -> Plan:
    """The node plan of ``paths`` (already resolved: curriculum stages explicit).

    ``context``: everything besides the path that determines the trees
    (hyperparameters, data fingerprint, metric conventions, code version);
    ``curriculum_keys``: curriculum name -> key of its content, for the nodes
    that train on a curriculum stage; ``paced``: the schedule of each self-paced segment's data
    (:func:`pipelines.plan.paths.paced_schedules`), whose key is in its node's.
    """
    labels = [p.label for p in paths]
    dup = sorted({x for x in labels if labels.count(x) > 1})
    if dup:
        raise PathError(f"training paths must have distinct names; repeated: {dup}")
    for p in paths:
        for s in p.segments:
            if s.objective not in registry.objectives():
                raise PathError(f"path {p.label!r}: unknown objective {s.objective!r}")
            if s.data != "all" and s.data.split(".")[1] == "*":
                raise PathError(f"path {p.label!r}: resolve {s.data!r} into stages before planning")
            if is_dynamic(s.data) and s.data not in (paced or {}):
                raise PathError(f"path {p.label!r}: no self-paced schedule for {s.shorthand()} ({s.data})")
    ctx = dict(context or {})
    if ctx.setdefault("fold", fold) != fold:  # a fold's nodes train on its own data: never shared across folds
        raise PathError(f"the plan of fold {fold} was given the context of fold {ctx['fold']}")
    ckeys = dict(curriculum_keys or {})
    for data, sch in (paced or {}).items():  # a self-paced node's "curriculum": its rule and the shares of its choices
        doc = {"rule": data.split(".")[0], "every": sch.every, "by": sch.by, "shares": list(sch.shares),
               "seed": sch.seed}  # fmt: skip
        ckeys[data] = make_key("selfpaced", doc)
    nodes: list[Node] = []
    chains: dict[str, list[str]] = {p.label: [] for p in paths}
    inputs: dict[str, dict[str, Any]] = {}
    _split([(p.label, p.segments) for p in paths], 0, None, ctx, ckeys, nodes, chains, inputs)
    return Plan(fold, tuple(nodes), {p: tuple(c) for p, c in chains.items()}, inputs)


def _split(
    items: list[tuple[str, tuple[Segment, ...]]],
    t: int,
    parent: str | None,
    ctx: dict[str, Any],
    ckeys: dict[str, str],
    nodes: list[Node],
    chains: dict[str, list[str]],
    inputs: dict[str, dict[str, Any]],
) -> None:
    groups: dict[tuple[str, str, int], list[tuple[str, tuple[Segment, ...]]]] = {}
    for name, segs in items:
        groups.setdefault((segs[0].objective, segs[0].data, segs[0].seed), []).append((name, segs))
    for (obj, data, seed), members in groups.items():
        step = min(segs[0].trees for _, segs in members)  # the first point where a member ends or parts
        cur = None if data == "all" else data if is_dynamic(data) else data.split(".")[0]
        if cur is not None and cur not in ckeys and ckeys:
            raise PathError(f"no key for curriculum {cur!r} (curricula: {sorted(ckeys)})")
        doc: dict[str, Any] = {
            "parent": parent,
            "objective": obj,
            "objective_code": objective_code(obj),
            "data": data,
            "t0": t,
            "t1": t + step,
            "curriculum": ckeys.get(cur) if cur else None,
            "context": ctx,
            **seed_field(seed),
        }
        key = node_key(**doc)
        inputs[key] = doc
        ends, rest = [], []
        for name, segs in members:
            chains[name].append(key)
            head = segs[0]
            remaining = segs[1:] if head.trees == step else (Segment(obj, head.trees - step, data, seed), *segs[1:])
            if remaining:
                rest.append((name, remaining))
            else:
                ends.append(name)
        nodes.append(Node(key, parent, obj, data, t, t + step, tuple(ends), seed))
        if rest:
            _split(rest, t + step, key, ctx, ckeys, nodes, chains, inputs)


# ------------------------------------------------------------------ states
def node_states(plan: Plan, latest: Mapping[str, int | None]) -> dict[str, NodeState]:
    """State of every node from ``latest`` (node key -> global tree of its newest checkpoint, or None)."""
    out = {}
    for n in plan.nodes:
        k = latest.get(n.key)
        if k is None or k <= n.t0:
            out[n.key] = NodeState(TODO, n.t0)
        elif k >= n.t1:
            out[n.key] = NodeState(DONE, n.t1)
        else:
            out[n.key] = NodeState(PARTIAL, k)
    return out


def states_of(plan: Plan, store: Any) -> dict[str, NodeState]:
    """State of every node from the checkpoints in ``store`` (a :class:`pipelines.store.checkpoints.CheckpointStore`:
    its ``intact_latest_all``, which sets aside a checkpoint changed on disk, so that its node is trained again from
    its newest intact one)."""
    return node_states(plan, store.intact_latest_all([n.key for n in plan.nodes]))


def ready(plan: Plan, states: Mapping[str, NodeState]) -> list[Node]:
    """Nodes not done whose parent is done (or that have none), in plan order."""
    return [
        n for n in plan.nodes if states[n.key].state != DONE and (n.parent is None or states[n.parent].state == DONE)
    ]


def pending(plan: Plan, states: Mapping[str, NodeState]) -> list[Node]:
    """Nodes not done, in plan order (parents first)."""
    return [n for n in plan.nodes if states[n.key].state != DONE]


def trees_left(plan: Plan, states: Mapping[str, NodeState]) -> int:
    """Trees the plan still has to build: :meth:`NodeState.trees_left` summed over its nodes.

    Parameters
    ----------
    plan : Plan
        The plan.
    states : Mapping[str, NodeState]
        State of every node of ``plan`` by key (:func:`node_states`, :func:`states_of`).

    Returns
    -------
    int
        0 when every node is done.
    """
    return sum(states[n.key].trees_left(n) for n in plan.nodes)


def format_plan(plan: Plan, states: Mapping[str, NodeState], why: Mapping[str, list[str]] | None = None) -> str:
    """One line per node, indented by depth: key, objective@data, trees, state, paths ending there;
    under a node, ``why[key]``: the inputs that changed its key since a stored plan (one line each)."""
    done = plan.trees - trees_left(plan, states)
    lines = [f"fold {plan.fold}: {len(plan.nodes)} nodes, {plan.trees} trees ({done} done), {len(plan.chains)} paths"]
    for n in plan.nodes:
        st = states[n.key]
        state = {DONE: "done", TODO: "to do"}.get(st.state, f"partial at tree {st.tree}")
        ends = f"  ends: {', '.join(n.ends)}" if n.ends else ""
        lines.append(f"  {n.key}  {'  ' * plan.depth(n)}{n.describe():<28} {state}{ends}")
        for reason in (why or {}).get(n.key, []):
            lines.append(f"  {'':20}  {'  ' * plan.depth(n)}  {reason}")
    return "\n".join(lines)
