"""The registries of curriculum strategies and pacing functions (``udfs.curriculum``): each built-in is registered
once, what the builder needs is read from its entry, and a new entry works without another file changing."""

from __future__ import annotations

import numpy as np
import pytest

from udfs import curriculum as cu


def test_the_built_in_strategies_and_what_each_needs():
    s = cu.STRATEGIES
    assert list(s) == ["q_nrel", "q_bm25", "q_pagerank", "l_hrel", "random", "none"]
    assert {n: x.score for n, x in s.items() if x.score} == {
        "q_nrel": "n_rel",
        "q_bm25": "ndcg_bm25",
        "q_pagerank": "ndcg_pagerank",
    }
    assert {n for n, x in s.items() if x.role} == {"q_bm25", "q_pagerank"} and cu.control() == "random"
    assert [n for n, x in s.items() if x.seeded] == ["random"] and s["l_hrel"].label_filter
    assert list(cu.stage_shares("none", "", 0, 0, 0, 0.25)) == [1.0]
    assert list(cu.stage_shares("l_hrel", "linear", 4, 0.25, 2, 0.25)) == [1.0, 1.0]
    assert list(cu.stage_shares("q_nrel", "", 0, 0, 0, 0.25)) == [0.25, 1.0]


def test_a_new_strategy_and_a_new_pacing_function_work_from_their_entries_alone():
    qid = np.arange(8)
    scores = {"n_rel": np.array([1, 1, 2, 3, 1, 1, 2, 3]), "n_hrel": np.array([3, 2, 1, 0, 3, 2, 1, 0])}
    from udfs.scores import SCORES, Score, score

    score(Score("n_hrel"))
    new = cu.strategy(cu.Strategy("q_nhrel_test", score="n_hrel"))
    cu.pacing("half_test")(lambda stage, stages, *, params: 0.5 if stage < stages else 1.0)
    try:
        shares = cu.stage_shares("q_nhrel_test", "half_test", 3, 0.25, 2.0, 0.25)
        assert list(shares) == [0.5, 0.5, 1.0]
        first, score, held = cu.place_queries(new.name, scores, qid, shares, "last", 0)
        assert held is None and list(score) == list(scores["n_hrel"])
        assert sorted(qid[first == 0]) == [0, 1, 4, 5]  # the highest n_hrel: easiest first, then qid
        with pytest.raises(ValueError, match="registered twice"):
            cu.strategy(cu.Strategy("q_nhrel_test", score="n_rel"))
        with pytest.raises(ValueError, match="unknown difficulty score 'n_docs'"):
            cu.strategy(cu.Strategy("q_ndocs_test", score="n_docs"))
        with pytest.raises(ValueError, match="order must be score"):
            cu.strategy(cu.Strategy("bad_test", order="score"))
    finally:
        cu.STRATEGIES.pop("q_nhrel_test")
        SCORES.pop("n_hrel")
        cu.PACINGS.pop("half_test")


def test_the_seeded_control_draws_the_same_permutation_from_the_same_seed():
    qid = np.arange(20)
    scores = {"n_rel": np.ones(20, int)}
    shares = cu.stage_shares("random", "", 0, 0, 0, 0.25)
    a = cu.place_queries("random", scores, qid, shares, "last", 3)[0]
    b = cu.place_queries("random", scores, qid, shares, "last", 3)[0]
    c = cu.place_queries("random", scores, qid, shares, "last", 4)[0]
    assert (a == b).all() and (a != c).any() and (a == 0).sum() == 5
