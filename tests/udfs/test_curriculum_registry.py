"""The registries of curriculum strategies and pacing functions (``udfs.curriculum``): each built-in is registered
once, what the builder needs is read from its entry, and a new entry works without another file changing."""

from __future__ import annotations

import numpy as np
import pytest

from udfs import curriculum as cu


def test_the_built_in_strategies_and_what_each_needs():
    s = cu.STRATEGIES
    ordered = [
        "q_nrel",
        "q_bm25",
        "q_pagerank",
        "q_size",
        "sigma_bm25",
        "teacher_margin",
        "teacher_loss",
        "teacher_ndcg",
    ]
    assert list(s) == [n for o in ordered for n in (o, "anti_" + o)] + ["l_hrel", "random", "none"]
    base = {"q_nrel": "n_rel", "q_bm25": "ndcg_bm25", "q_pagerank": "ndcg_pagerank", "q_size": "n_docs"}
    base |= {n: n for n in ("sigma_bm25", "teacher_margin", "teacher_loss", "teacher_ndcg")}
    assert {n: x.score for n, x in s.items() if x.score and not x.reverse} == base
    assert {n: x.score for n, x in s.items() if x.reverse} == {"anti_" + n: v for n, v in base.items()}
    assert {n: x.kind for n, x in s.items() if x.score and not x.reverse} == {
        "q_nrel": "oracle",
        "q_bm25": "oracle",
        "q_pagerank": "oracle",
        "q_size": "label_free",
        "sigma_bm25": "label_free",
        "teacher_margin": "model",
        "teacher_loss": "model",
        "teacher_ndcg": "model",
    }
    with_role = {"q_bm25", "q_pagerank", "sigma_bm25"}
    assert {n for n, x in s.items() if x.role} == with_role | {"anti_" + n for n in with_role}
    assert cu.control() == "random"
    assert [n for n, x in s.items() if x.seeded] == ["random"] and s["l_hrel"].label_filter
    assert list(cu.stage_shares("none", "", 0, 0, 0.25)) == [1.0]
    assert list(cu.stage_shares("l_hrel", "linear", 4, 0.25, 0.25)) == [1.0, 1.0]
    assert list(cu.stage_shares("q_nrel", "", 0, 0, 0.25)) == [0.25, 1.0]


def test_a_new_strategy_and_a_new_pacing_function_work_from_their_entries_alone():
    qid = np.arange(8)
    scores = {"n_rel": np.array([1, 1, 2, 3, 1, 1, 2, 3]), "n_hrel": np.array([3, 2, 1, 0, 3, 2, 1, 0])}
    from udfs.scores import SCORES, Score, score

    score(Score("n_hrel"))
    new = cu.strategy(cu.Strategy("q_nhrel_test", score="n_hrel"))
    cu.pacing("half_test")(lambda stage, stages, *, params: 0.5 if stage < stages else 1.0)
    try:
        shares = cu.stage_shares("q_nhrel_test", "half_test", 3, 0.25, 0.25)
        assert list(shares) == [0.5, 0.5, 1.0]
        first, score, held = cu.place_queries(new.name, scores, qid, shares, "last", 0)
        assert held is None and list(score) == list(scores["n_hrel"])
        assert sorted(qid[first == 0]) == [0, 1, 4, 5]  # the highest n_hrel: easiest first, then qid
        with pytest.raises(ValueError, match="registered twice"):
            cu.strategy(cu.Strategy("q_nhrel_test", score="n_rel"))
        with pytest.raises(ValueError, match="unknown difficulty score 'n_lines'"):
            cu.strategy(cu.Strategy("q_nlines_test", score="n_lines"))
        with pytest.raises(ValueError, match="order must be score"):
            cu.strategy(cu.Strategy("bad_test", order="score"))
        assert cu.STRATEGIES["anti_q_nhrel_test"].reverse  # registered with it
    finally:
        cu.STRATEGIES.pop("q_nhrel_test")
        cu.STRATEGIES.pop("anti_q_nhrel_test")
        SCORES.pop("n_hrel")
        cu.PACINGS.pop("half_test")


def test_the_seeded_control_draws_the_same_permutation_from_the_same_seed():
    qid = np.arange(20)
    scores = {"n_rel": np.ones(20, int)}
    shares = cu.stage_shares("random", "", 0, 0, 0.25)
    a = cu.place_queries("random", scores, qid, shares, "last", 3)[0]
    b = cu.place_queries("random", scores, qid, shares, "last", 3)[0]
    c = cu.place_queries("random", scores, qid, shares, "last", 4)[0]
    assert (a == b).all() and (a != c).any() and (a == 0).sum() == 5


def test_an_anti_curriculum_is_its_strategy_hardest_first_ties_by_qid_and_the_empty_queries_still_last():
    # qid 0..7; n_rel 3 3 1 2 0 1 2 0: easiest first (more relevant documents, then lower qid) is 0 1 3 6 2 5, then
    # the queries without a relevant document (4, 7) under "last"; the anti-curriculum reverses the ranked ones
    # only (2 5 3 6 0 1: fewest first, ties by lower qid) and keeps 4 and 7 after them
    qid = np.arange(8)
    scores = {"n_rel": np.array([3, 3, 1, 2, 0, 1, 2, 0])}
    shares = np.array([0.25, 0.5, 1.0])  # stages of 2, 4 and 8 queries

    def stages(name: str, empty: str) -> list[list[int]]:
        first = cu.place_queries(name, scores, qid, shares, empty, 0)[0]
        return [sorted(qid[first == i].tolist()) for i in range(3)]

    assert stages("q_nrel", "last") == [[0, 1], [3, 6], [2, 4, 5, 7]]
    assert stages("anti_q_nrel", "last") == [[2, 5], [3, 6], [0, 1, 4, 7]]
    # with as_metric the empty queries are ranked like the others: n_rel 0 is the hardest, first when reversed
    assert stages("anti_q_nrel", "as_metric") == [[4, 7], [2, 5], [0, 1, 3, 6]]
    # a score where lower is easier (q_size: fewer documents) reverses the same way
    scores["n_docs"] = np.array([5, 1, 9, 9, 2, 7, 3, 4])
    assert stages("q_size", "as_metric") == [[1, 4], [6, 7], [0, 2, 3, 5]]
    assert stages("anti_q_size", "as_metric") == [[2, 3], [0, 5], [1, 4, 6, 7]]  # 9 9 (by qid), then 7 and 5


def test_strategies_without_an_order_have_no_anti_curriculum_and_say_why():
    assert cu.anti_of("q_bm25") == "anti_q_bm25" and cu.anti_of("random") is None and cu.anti_of("anti_q_bm25") is None
    assert "seeded random order" in str(cu.no_order("anti_random"))
    assert "no order of its queries" in str(cu.no_order("anti_none"))
    assert cu.no_order("anti_q_nrel") is None and cu.no_order("q_nrel") is None and cu.no_order("anti_foo") is None
