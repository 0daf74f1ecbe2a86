"""The plan of checkpointed nodes: pure planning (keys, states, serialisation) and the local twin of
resuming (a run cut into checkpoints == an uninterrupted run, bit for bit)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from pipelines.core.config import TrainConfig
from pipelines.kernel.loop import Settings, SplitData, WorkerData, run_nodes
from pipelines.plan.paths import PathError, parse_path
from pipelines.plan.trie import DONE, PARTIAL, TODO, Plan, build_plan, format_plan, node_states, ready, trees_left
from pipelines.store.checkpoints import CheckpointStore
from pipelines.store.results import path_result
from tests.helpers import XGB_PARAMS, component_settings
from udfs.metrics import NdcgSpec
from udfs.objectives.noise import document_normal

PARAMS = XGB_PARAMS


def _settings(metric: NdcgSpec | None = None, **train: Any) -> Settings:
    """Worker settings of the local twin: small trees (as ``PARAMS``), the other settings the config's
    (``train``: TrainConfig fields to change), one thread, labels 0..4."""
    cfg = TrainConfig(**{"leaves": PARAMS["max_leaves"], "eta": PARAMS["eta"], "max_bin": PARAMS["max_bin"], **train})
    return Settings.of(cfg, metric or NdcgSpec(), (0, 4), PARAMS["nthread"])


def _paths():
    return [
        parse_path("mse:20,lambdamart:80", "mse-20"),
        parse_path("mse:40,lambdamart:60", "mse-40"),
        parse_path("lambdamart:100", "lm"),
    ]


def test_nodes_split_where_paths_end_or_part():
    plan = build_plan(_paths(), fold=1)
    got = [(n.objective, n.t0, n.t1, n.ends) for n in plan.nodes]
    assert got == [
        ("mse", 0, 20, ()),
        ("lambdamart", 20, 100, ("mse-20",)),
        ("mse", 20, 40, ()),
        ("lambdamart", 40, 100, ("mse-40",)),
        ("lambdamart", 0, 100, ("lm",)),
    ]
    assert plan.trees == 20 + 80 + 20 + 60 + 100
    chain = [plan.node(k) for k in plan.chains["mse-40"]]
    assert [(n.t0, n.t1) for n in chain] == [(0, 20), (20, 40), (40, 100)]
    assert all(b.parent == a.key for a, b in zip(chain, chain[1:]))
    assert Plan.from_dict(plan.to_dict()) == plan


def test_units_are_root_subtrees_that_share_no_node_and_hold_whole_chains():
    plan = build_plan(
        [*_paths(), parse_path("lambdamart@q_nrel.0:20,lambdamart:80", "cl")], fold=1, curriculum_keys={"q_nrel": "k"}
    )
    by_key = {n.key: n for n in plan.nodes}
    units = plan.units()
    # by hand: the MSE subtree (mse 0..20 and the four nodes below it), LambdaMART 0..100, the curriculum's two
    assert [[(by_key[k].objective, by_key[k].t0, by_key[k].t1) for k in u] for u in units] == [
        [("mse", 0, 20), ("lambdamart", 20, 100), ("mse", 20, 40), ("lambdamart", 40, 100)],
        [("lambdamart", 0, 100)],
        [("lambdamart", 0, 20), ("lambdamart", 20, 100)],
    ]
    assert sorted(k for u in units for k in u) == sorted(by_key)  # every node once
    for label, chain in plan.chains.items():
        assert sum(set(chain) <= set(u) for u in units) == 1, label
    assert plan.subtree(units[0][2]) == units[0][2:]  # mse 20..40 and its child


def test_keys_change_with_everything_that_determines_the_trees():
    base = build_plan(_paths(), context={"eta": 0.05, "data": "fp1"})
    same = build_plan(list(reversed(_paths())), context={"data": "fp1", "eta": 0.05})
    assert {n.key for n in base.nodes} == {n.key for n in same.nodes}
    for ctx in ({"eta": 0.1, "data": "fp1"}, {"eta": 0.05, "data": "fp2"}):
        assert not {n.key for n in base.nodes} & {n.key for n in build_plan(_paths(), context=ctx).nodes}
    # folds of one dataset (same fingerprint) train on other rows: no node is shared across folds
    folds = [{n.key for n in build_plan(_paths(), fold=f, context={"eta": 0.05, "data": "fp1"}).nodes} for f in (1, 2)]
    assert not folds[0] & folds[1]
    # a child's key depends on its parent's: another prefix, other keys downstream
    other = build_plan([parse_path("mse:30,lambdamart:70", "x")], context={"eta": 0.05, "data": "fp1"})
    assert other.nodes[0].key not in {n.key for n in base.nodes}
    cur = [parse_path("lambdamart@q_nrel.0:20,lambdamart:80", "cl")]
    a = build_plan(cur, curriculum_keys={"q_nrel": "k1"})
    b = build_plan(cur, curriculum_keys={"q_nrel": "k2"})
    assert a.nodes[0].key != b.nodes[0].key and a.nodes[1].key != b.nodes[1].key
    with pytest.raises(PathError, match="distinct names"):
        build_plan([parse_path("mse:1", "a"), parse_path("mse:2", "a")])
    with pytest.raises(PathError, match="resolve 'q_nrel.\\*' into stages"):
        build_plan([parse_path("mse@q_nrel.*:4", "p")])


def test_states_ready_nodes_and_the_printed_plan():
    plan = build_plan(_paths(), fold=3)
    k = [n.key for n in plan.nodes]
    states = node_states(plan, {k[0]: 20, k[2]: 30, k[4]: None})
    assert [states[x].state for x in k] == [DONE, TODO, PARTIAL, TODO, TODO]
    assert states[k[2]].tree == 30
    assert [n.key for n in ready(plan, states)] == [k[1], k[2], k[4]]  # k[3]'s parent is partial
    assert trees_left(plan, states) == 80 + 10 + 60 + 100
    text = format_plan(plan, states)
    assert text.splitlines()[0] == "fold 3: 5 nodes, 280 trees (30 done), 3 paths"
    assert f"  {k[2]}    mse 20..40" in text and "partial at tree 30" in text
    assert "lambdamart 40..100" in text and "ends: mse-40" in text


def _split(rng, n_queries: int) -> SplitData:
    sizes = rng.integers(1, 30, n_queries)
    qid = np.repeat(np.arange(n_queries) * 3 + 7, sizes).astype(np.int32)
    X = rng.integers(0, 10, size=(qid.size, 6)).astype(np.float32) / 2
    y = np.clip(np.round(X[:, 0] / 2 + X[:, 1] / 3 + rng.normal(size=qid.size) - 1), 0, 4).astype(np.float32)
    return SplitData(X, y, qid)


@pytest.fixture(scope="module")
def data() -> WorkerData:
    rng = np.random.default_rng(1)
    train = _split(rng, 80)
    stage = np.where(np.unique(train.qid, return_inverse=True)[1] % 4 == 0, 0, 1).astype(np.int32)
    return WorkerData(train, _split(rng, 30), _split(rng, 30), stages={"cur": stage})


PATHS = [
    "mse:5,lambdamart:7",
    "noisy_lambdamart:12",
    "lambdamart@cur.0:4,lambdamart:8",
    "xgb_lambdamart:12",
    "stochastic_rank:12",  # with SGLB: its shrinkage and noise depend on the global tree
]


def _run(data, root, every, nodes=None, events=None):
    from udfs import components

    components.configure(
        {
            "stochastic_rank": {"langevin": True, "model_shrink_rate": 0.05, "num_estimations": 2},
            "noisy_lambdamart": {"anneal": 12},
        }
    )
    try:
        plan = build_plan([parse_path(p, p) for p in PATHS], fold=1, curriculum_keys={"cur": "c"})
        store = CheckpointStore(str(root))
        s = _settings(checkpoint_every=every, score_dist_trees=[4])
        run_nodes(data, plan.nodes if nodes is None else nodes(plan), s, store, events=events)
    finally:
        components.configure({})
    return plan, store


@pytest.mark.heavy  # (checkpoints written and resumed: the next test, on every Python)
def test_checkpoints_do_not_change_the_trees(data, tmp_path):
    """Every objective and a curriculum: checkpoints every 2 trees == none at all."""
    plan, a = _run(data, tmp_path / "a", every=2)
    _, b = _run(data, tmp_path / "b", every=1000)
    for p in PATHS:
        ra, rb = path_result(a, p, plan.chains[p]), path_result(b, p, plan.chains[p])
        assert ra.model == rb.model, p
        assert (ra.trees, ra.vali, ra.test, ra.test_ndcg) == (rb.trees, rb.vali, rb.test, rb.test_ndcg), p
        assert ra.trees == list(range(1, 13))
    assert a.trees(plan.nodes[0].key) == [4, 5]  # older ones are removed; the previous is kept (a reader may load it)


def test_resume_after_a_crash_is_bit_identical(data, tmp_path):
    plan, straight = _run(data, tmp_path / "straight", every=3)
    root = tmp_path / "resumed"
    sto = plan.chains["noisy_lambdamart:12"][0]

    class Crash(Exception):
        pass

    def crash(ev):  # dies while building tree 11 of the stochastic node (its checkpoint at tree 9 is committed)
        if ev["ev"] == "tree" and ev["node"] == sto and ev["tree"] == 10:
            raise Crash

    with pytest.raises(Crash):
        _run(data, root, every=3, events=crash)
    store = CheckpointStore(str(root))
    assert store.latest(sto) == 9
    finished = {n.key: store.latest(n.key) for n in plan.nodes if store.latest(n.key) == n.t1}
    assert finished  # the nodes before it are done ...
    seen = []
    _run(data, root, every=3, events=seen.append)
    started = {e["node"]: e["tree"] for e in seen if e["ev"] == "node_start"}
    assert not set(started) & set(finished)  # ... and not trained again
    assert started[sto] == 9  # the crashed node continues from its checkpoint
    for p in PATHS:
        ra, rb = path_result(straight, p, plan.chains[p]), path_result(store, p, plan.chains[p])
        assert ra.model == rb.model and ra.test == rb.test and ra.vali == rb.vali, p
    # each node's checkpoint says what its committed trees cost, across the crash: every tree counted once
    for s in (straight, store):
        for n in plan.nodes:
            cost = s.meta(n.key, n.t1)["cost"]
            assert cost["trees"] == n.trees and cost["boost"] > 0 and cost["checkpoint"] > 0, n.key
            assert (cost["eval"] > 0) and (cost["objective"] > 0) == (n.objective != "xgb_lambdamart"), n.key
    assert store.cost([n.key for n in plan.nodes])["trees"] == plan.trees


CURRICULUM = ["lambdamart@cur.0:2,lambdamart:4", "lambdamart@cur.0:4,lambdamart:2", "lambdamart:6"]


def test_one_training_matrix_at_a_time_and_the_same_trees(data, tmp_path, monkeypatch):
    """A curriculum at two switch points: the subset chain runs before the full-data continuations, the
    worker never holds two training matrices at once, and the models equal node-by-node plan order's."""
    import gc
    import weakref

    import pipelines.kernel.loop as wl

    plan = build_plan([parse_path(p, p) for p in CURRICULUM], fold=1, curriculum_keys={"cur": "c"})
    assert [n.data for n in plan.nodes] == ["cur.0", "all", "cur.0", "all", "all"]  # DFS: alternating
    assert [n.data for n in wl.matrix_order(list(plan.nodes))] == ["cur.0", "cur.0", "all", "all", "all"]
    alive: list[weakref.ref] = []
    built = []

    def counted(*args, **kw):
        gc.collect()
        built.append(sum(r() is not None for r in alive))  # matrices still alive when the next one is built
        dm = real(*args, **kw)
        alive.append(weakref.ref(dm))
        return dm

    real = wl.training_matrix
    s = _settings(checkpoint_every=1)
    monkeypatch.setattr(wl, "training_matrix", counted)
    together = CheckpointStore(str(tmp_path / "together"))
    timing = run_nodes(data, plan.nodes, s, together)
    assert built == [0, 0] and timing["matrices"] == 2  # the subset's, then the full one: each built once
    monkeypatch.setattr(wl, "training_matrix", real)
    apart = CheckpointStore(str(tmp_path / "apart"))
    for n in plan.nodes:  # plan order, one call per node (each parent's output read back from the store)
        run_nodes(data, [n], s, apart)
    for p in CURRICULUM:
        ra, rb = path_result(together, p, plan.chains[p]), path_result(apart, p, plan.chains[p])
        assert ra.model == rb.model and ra.test == rb.test and ra.vali == rb.vali, p


def test_a_seed_repetition_is_its_own_node_and_trains_as_the_config_with_that_seed(data, tmp_path):
    """``noisy_lambdamart~1`` (a grid.seeds repetition): a node of its own after the shared deterministic prefix,
    keys of seed-0 nodes as before seeds existed, and the trees of a study whose train.seed is 1 higher."""
    plain, rep = "lambdamart:4,noisy_lambdamart:8", "lambdamart:4,noisy_lambdamart~1:8"
    plan = build_plan([parse_path(plain, "s0"), parse_path(rep, "s1")], fold=1)
    c0, c1 = plan.chains["s0"], plan.chains["s1"]
    assert c0[0] == c1[0] and c0[1] != c1[1] and plan.node(c1[1]).seed == 1 and plan.node(c0[1]).seed == 0
    alone = build_plan([parse_path(plain, "s0")], fold=1)
    assert alone.chains["s0"] == c0  # no seed in the key of a seed-0 node
    assert "noisy_lambdamart~1 4..12" in format_plan(plan, {n.key: node_states(plan, {})[n.key] for n in plan.nodes})
    assert Plan.from_dict(plan.to_dict()).nodes == plan.nodes
    s = _settings(seed=5, score_dist_trees=[4])
    store = CheckpointStore(str(tmp_path / "a"))
    other = build_plan([parse_path(plain, "s0")], fold=1, context={"seed": 6})
    store6 = CheckpointStore(str(tmp_path / "b"))
    with component_settings(noisy_lambdamart={"anneal": 12}):
        run_nodes(data, plan.nodes, s, store)
        run_nodes(data, other.nodes, _settings(seed=6, score_dist_trees=[4]), store6)
    r0, r1 = path_result(store, "s0", c0), path_result(store, "s1", c1)
    r6 = path_result(store6, "s0", other.chains["s0"])
    assert r0.model != r1.model and r1.test == r6.test and r1.test_scores is not None
    np.testing.assert_array_equal(r1.test_scores["score"], r6.test_scores["score"])


def test_stochastic_noise_depends_on_tree_query_document_only():
    qid, doc = np.array([5, 5, 5, 9]), np.array([0, 1, 2, 0])
    a = document_normal(3, 10, qid, doc)
    np.testing.assert_array_equal(a[[1, 3]], document_normal(3, 10, qid[[1, 3]], doc[[1, 3]]))  # any row split
    assert not np.array_equal(a, document_normal(3, 11, qid, doc))
    assert not np.array_equal(a, document_normal(4, 10, qid, doc))
    z = document_normal(0, 1, np.repeat(np.arange(2000), 10), np.tile(np.arange(10), 2000))
    assert abs(z.mean()) < 0.03 and abs(z.std() - 1) < 0.03  # standard normal
