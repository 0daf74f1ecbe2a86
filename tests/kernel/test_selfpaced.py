"""Self-paced curricula (pipelines.kernel.selfpaced): the choice by hand, and the local twin of a self-paced
segment (its selections, its checkpoints at each, a resume bit for bit)."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from pipelines.core.config import SelfPacedConfig
from pipelines.kernel import loop
from pipelines.kernel.loop import run_nodes
from pipelines.kernel.selfpaced import choose, query_scores
from pipelines.plan.paths import PathError, paced_schedules, parse_path
from pipelines.plan.trie import build_plan
from pipelines.store.checkpoints import CheckpointStore
from pipelines.store.results import path_result, selections
from tests.plan.test_plan import _settings, _split
from udfs.curriculum import pacing_shares
from udfs.metrics import NdcgSpec, ndcg

# six queries; qid 1 has no pair (one label), the others tie at 0.5 three times
QIDS = np.array([5, 3, 9, 1, 7, 2])
EASE = np.array([0.9, 0.5, 0.5, np.nan, 0.1, 0.5])


def test_the_easiest_the_hardest_or_a_seeded_draw_ties_to_the_lower_qid_and_the_pairless_always_kept():
    # a share of 0.5 keeps ceil(0.5 * 5) = 3 of the five queries with a pair, and qid 1 (none) besides
    assert choose(QIDS, EASE, 0.5, "selfpaced", 0, 10).tolist() == [1, 2, 3, 5]  # 0.9, then 0.5's lowest qids
    assert choose(QIDS, EASE, 0.5, "antipaced", 0, 10).tolist() == [1, 2, 3, 7]  # 0.1, then the same ties
    drawn = choose(QIDS, EASE, 0.5, "randompaced", 0, 10)
    assert drawn.size == 4 and 1 in drawn
    assert choose(QIDS[::-1], EASE[::-1], 0.5, "randompaced", 0, 10).tolist() == drawn.tolist()  # not by position
    draws = {tuple(choose(QIDS, EASE, 0.5, "randompaced", seed, tree)) for seed in (0, 1) for tree in range(10)}
    assert len(draws) > 3  # another draw at another tree or seed
    assert choose(QIDS, EASE, 1.0, "antipaced", 0, 0).tolist() == sorted(QIDS.tolist())
    assert choose(QIDS, EASE, 0.01, "selfpaced", 0, 0).tolist() == [1, 5]  # at least one


def test_a_query_s_ease_by_ndcg_and_by_its_pairs_loss_by_hand():
    labels = np.array([2, 0, 1, 1, 1, 3], dtype=np.float32)  # queries: rows 0-2, 3-4 (no pair), 5 (one document)
    margins = np.array([0.3, 0.5, -0.1, 0.2, 0.4, 1.0], dtype=np.float32)
    offsets = np.array([0, 3, 5, 6])
    ease, paired = query_scores(margins, labels, offsets, "ndcg", NdcgSpec())
    assert paired.tolist() == [True, False, False]
    assert np.isnan(ease[1:]).all()
    assert ease[0] == pytest.approx(ndcg(offsets[:2], labels[:3].astype(np.float64), margins[:3])[0])
    ease, _ = query_scores(margins, labels, offsets, "loss", NdcgSpec())
    pairs = [0.3 - 0.5, 0.3 - (-0.1), -0.1 - 0.5]  # 2 > 0, 2 > 1, 1 > 0: s_hi - s_lo
    assert ease[0] == pytest.approx(-sum(math.log1p(math.exp(-d)) for d in pairs) / 3, rel=1e-6)


def test_bad_schedules_are_refused_in_one_line():
    with pytest.raises(PathError, match="takes no stage"):
        parse_path("lambdamart@selfpaced.2:30")
    with pytest.raises(PathError, match="makes 1 selection"):
        paced_schedules(SelfPacedConfig(every=10), [parse_path("lambdamart@antipaced:10")])
    from pipelines.core.config import ConfigError

    for bad in ({"every": 0}, {"every": -3}, {"by": "margin"}, {"delta": 0.0}, {"delta": 1.5}, {"pacing": "roots"}):
        with pytest.raises(ConfigError, match="selfpaced"):
            SelfPacedConfig(**bad)


PATHS = ["lambdamart@selfpaced:12,lambdamart:3", "lambdamart@antipaced:12,lambdamart:3",
         "lambdamart@randompaced:12,lambdamart:3", "lambdamart:15"]  # fmt: skip
SP = SelfPacedConfig(every=4, delta=0.3)


@pytest.fixture(scope="module")
def data():
    from pipelines.kernel.matrices import WorkerData

    rng = np.random.default_rng(3)
    return WorkerData(_split(rng, 60), _split(rng, 20), _split(rng, 20))


def _run(data, root, every=1000, events=None, spy=None):
    paths = [parse_path(p, p) for p in PATHS]
    paced = paced_schedules(SP, paths)
    plan = build_plan(paths, fold=1, paced=paced)
    store = CheckpointStore(str(root))
    run_nodes(data, plan.nodes, replace(_settings(checkpoint_every=every), paced=paced), store, events=events)
    return plan, store


def test_a_self_paced_segment_keeps_the_queries_its_rule_chooses_from_the_margins_at_each_selection(
    data, tmp_path, monkeypatch
):
    seen = []
    real = loop._Worker.select  # noqa: SLF001

    def spy(self, node, st, paced, seed):
        chosen, record = real(self, node, st, paced, seed)
        seen.append((node.data.split(".")[0], st.tree, st.train.copy(), chosen, record))
        return chosen, record

    monkeypatch.setattr(loop._Worker, "select", spy)  # noqa: SLF001
    plan, store = _run(data, tmp_path / "a")
    tr = data.train
    offsets = np.concatenate(([0], np.flatnonzero(np.diff(tr.qid)) + 1, [tr.qid.size]))
    qids = tr.qid[offsets[:-1]]
    shares = pacing_shares("root_n", 3, 0.3)
    for rule, tree, margins, chosen, record in seen:
        # by hand: each query's NDCG from udfs.metrics.ndcg (not the loop's fast one), sorted in Python
        y = tr.y.astype(np.float64)
        score = ndcg(offsets, y, margins)
        paired = [len(set(y[a:b])) > 1 for a, b in zip(offsets[:-1], offsets[1:], strict=True)]
        ranked = [q for q, p in zip(qids, paired, strict=True) if p]
        key = {q: s for q, s in zip(qids, score, strict=True)}
        share = 1.0 if tree == 0 else shares[tree // 4]  # the first tree: every score the base score, all kept
        n = math.ceil(share * len(ranked) - 1e-9)
        if rule == "selfpaced":
            want = sorted(ranked, key=lambda q: (-key[q], q))[:n]
        elif rule == "antipaced":
            want = sorted(ranked, key=lambda q: (key[q], q))[:n]
        else:
            want = None
        kept = qids if chosen is None else np.unique(tr.qid[chosen])
        expect_kept = sorted([*want, *[q for q, p in zip(qids, paired, strict=True) if not p]]) if want else None
        if expect_kept is not None:
            assert kept.tolist() == expect_kept, (rule, tree)
        assert record == [tree, share, n, len(ranked)], (rule, tree)
        assert (chosen is None) == (tree in (0, 8))  # the first and the last keep every query: the full matrix
    assert sorted((r, t) for r, t, *_ in seen) == sorted((r, t) for r in ("antipaced", "randompaced", "selfpaced")
                                                         for t in (0, 4, 8))  # fmt: skip
    # the three keep as many queries at the same trees; their trees differ from one another and from LambdaMART's
    chains = {p: plan.chains[p] for p in PATHS}
    recorded = {p: selections(store, plan, chains[p]) for p in PATHS[:3]}
    counts = [[r[:4] for rs in v.values() for r in rs] for v in recorded.values()]
    assert counts[0] == counts[1] == counts[2]
    models = [path_result(store, p, chains[p]).model for p in PATHS]
    assert len(set(models)) == 4
    # a self-paced node checkpoints at each selection, whatever train.checkpoint_every
    sp = plan.node(chains[PATHS[0]][0])
    assert (sp.data, sp.t0, sp.t1) == ("selfpaced.12", 0, 12)
    assert store.meta(sp.key, sp.t1)["segments"] == [[0, 4], [4, 8], [8, 12]]


def test_a_crashed_self_paced_node_resumes_bit_identical(data, tmp_path):
    plan, straight = _run(data, tmp_path / "straight")
    node = plan.chains[PATHS[2]][0]

    class Crash(Exception):
        pass

    def crash(ev):  # while building tree 7 of the random control (its checkpoint at tree 4 committed)
        if ev["ev"] == "tree" and ev["node"] == node and ev["tree"] == 6:
            raise Crash

    with pytest.raises(Crash):
        _run(data, tmp_path / "resumed", events=crash)
    store = CheckpointStore(str(tmp_path / "resumed"))
    assert store.latest(node) == 4
    seen = []
    _run(data, tmp_path / "resumed", events=seen.append)
    assert {e["node"]: e["tree"] for e in seen if e["ev"] == "node_start"}[node] == 4
    for p in PATHS:
        a, b = path_result(straight, p, plan.chains[p]), path_result(store, p, plan.chains[p])
        assert a.model == b.model and a.test == b.test, p
        assert selections(straight, plan, plan.chains[p]) == selections(store, plan, plan.chains[p]), p
