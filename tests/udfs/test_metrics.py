"""NDCG@k: the arithmetic written out, and cross-checks against XGBoost's own metric."""

from __future__ import annotations

import math

import numpy as np
import pytest
import xgboost as xgb

from udfs import metrics
from udfs.metrics import NdcgSpec, dcg, idcg, inverse_idcg, ndcg, ndcg_fast, offsets_from_qids


def test_arithmetic_single_query():
    # labels in input order, scores rank them: doc2 (s=3), doc0 (s=2), doc1 (s=1), doc3 (s=0)
    labels = np.array([3, 0, 2, 1])
    scores = np.array([2.0, 1.0, 3.0, 0.0])
    off = np.array([0, 4])
    # DCG: (2^2-1)/log2(2) + (2^3-1)/log2(3) + (2^0-1)/log2(4) + (2^1-1)/log2(5)
    want_dcg = 3 / 1 + 7 / math.log2(3) + 0 / 2 + 1 / math.log2(5)
    # IDCG: labels sorted 3, 2, 1, 0
    want_idcg = 7 / 1 + 3 / math.log2(3) + 1 / 2 + 0
    assert dcg(off, labels, scores, NdcgSpec())[0] == pytest.approx(want_dcg, rel=1e-12)
    assert idcg(off, labels, NdcgSpec())[0] == pytest.approx(want_idcg, rel=1e-12)
    assert ndcg(off, labels, scores)[0] == pytest.approx(want_dcg / want_idcg, rel=1e-12)
    # cutoff 2: only the first two ranks count
    k2 = NdcgSpec(k=2)
    assert ndcg(off, labels, scores, k2)[0] == pytest.approx((3 + 7 / math.log2(3)) / (7 + 3 / math.log2(3)), rel=1e-12)
    # linear gain
    lin = NdcgSpec(gain="linear")
    assert ndcg(off, labels, scores, lin)[0] == pytest.approx(
        (2 + 3 / math.log2(3) + 0 + 1 / math.log2(5)) / (3 + 2 / math.log2(3) + 1 / 2), rel=1e-12
    )


def test_empty_queries_and_single_documents():
    labels = np.array([0, 0, 0, 2, 1])
    scores = np.array([0.3, 0.1, 0.2, 5.0, 1.0])
    off = np.array([0, 3, 4, 5])  # q0: all zero, q1: one relevant doc, q2: one doc label 1
    assert ndcg(off, labels, scores).tolist() == [1.0, 1.0, 1.0]
    assert ndcg(off, labels, scores, NdcgSpec(empty=0.0)).tolist() == [0.0, 1.0, 1.0]


def test_tie_policies():
    # all scores tied; input order is 0, 3, 1
    labels = np.array([0, 3, 1])
    scores = np.zeros(3)
    off = np.array([0, 3])
    ideal = 7 + 1 / math.log2(3)
    inp = (0 + 7 / math.log2(3) + 1 / 2) / ideal
    worst = (0 + 1 / math.log2(3) + 7 / 2) / ideal  # less relevant first: 0, 1, 3
    mean_disc = (1 + 1 / math.log2(3) + 1 / 2) / 3  # each document gets the mean discount
    avg = (0 + 7 + 1) * mean_disc / ideal
    assert ndcg(off, labels, scores, NdcgSpec(ties="input"))[0] == pytest.approx(inp, rel=1e-12)
    assert ndcg(off, labels, scores, NdcgSpec(ties="worst"))[0] == pytest.approx(worst, rel=1e-12)
    assert ndcg(off, labels, scores, NdcgSpec(ties="average"))[0] == pytest.approx(avg, rel=1e-12)


def test_average_ties_equal_mean_over_permutations():
    rng = np.random.default_rng(4)
    labels = rng.integers(0, 5, 7)
    scores = np.array([1.0, 2.0, 1.0, 1.0, 3.0, 2.0, 0.0])
    off = np.array([0, 7])
    spec = NdcgSpec(k=3, ties="average")
    # brute force: average over all orders of the input (ties broken by input order each time)
    import itertools

    vals = []
    for perm in itertools.permutations(range(7)):
        p = np.array(perm)
        vals.append(ndcg(off, labels[p], scores[p], NdcgSpec(k=3))[0])
    assert ndcg(off, labels, scores, spec)[0] == pytest.approx(np.mean(vals), rel=1e-9)


def test_offsets_and_validation():
    assert offsets_from_qids(np.array([5, 5, 2, 2, 2, 9])).tolist() == [0, 2, 5, 6]
    assert offsets_from_qids(np.array([], dtype=np.int64)).tolist() == [0]
    with pytest.raises(ValueError, match="at least one document"):
        ndcg(np.array([0, 0, 2]), np.zeros(2), np.zeros(2))
    with pytest.raises(ValueError, match="unknown NDCG tie policy"):
        NdcgSpec(ties="random")
    assert NdcgSpec().name == "ndcg_at_10"
    assert NdcgSpec().describe() == (
        "NDCG@10: gain 2^label-1, discount 1/log2(rank+1), queries without relevant documents = 1, ties: input"
    )


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("metric, empty", [("ndcg@10", 1.0), ("ndcg@10-", 0.0), ("ndcg@3", 1.0)])
def test_equals_xgboost(seed, metric, empty):
    """Our evaluator == XGBoost's eval metric on random labels and (tie-free) scores."""
    rng = np.random.default_rng(seed)
    sizes = rng.integers(1, 40, 300)
    qid = np.repeat(np.arange(sizes.size), sizes)
    labels = rng.integers(0, 5, qid.size) * (rng.random(qid.size) < 0.6)
    labels[qid % 7 == 0] = 0  # some queries with no relevant document
    scores = rng.normal(size=qid.size).astype(np.float32)
    k = int(metric.split("@")[1].rstrip("-"))
    d = xgb.DMatrix(np.zeros((qid.size, 1)), label=labels, qid=qid, base_margin=scores)
    booster = xgb.train({"objective": "rank:ndcg", "eval_metric": metric}, d, num_boost_round=0)
    xgb_value = float(booster.eval(d).split(":")[1])
    ours = ndcg(offsets_from_qids(qid), labels, scores, NdcgSpec(k=k, empty=empty)).mean()
    assert ours == pytest.approx(xgb_value, abs=1e-6)


@pytest.mark.parametrize("parallel", [False, True])
@pytest.mark.parametrize("ties", ["input", "worst"])
@pytest.mark.parametrize("gain, k", [("exp2", 10), ("linear", 3), ("exp2", 1)])
def test_fast_path_equals_the_evaluator(ties, gain, k, parallel, monkeypatch):
    """ndcg_fast (the training curves' kernel: top-k selection, queries serially or in parallel,
    float32 as given) == ndcg (to rounding: it multiplies by 1/IDCG where ndcg divides), with many tied
    scores, float32 and float64 inputs and empty queries; the same bits whatever the input's float type."""
    monkeypatch.setattr(metrics, "PARALLEL_MIN_ROWS", 0 if parallel else 10**9)
    rng = np.random.default_rng(7)
    sizes = rng.integers(1, 60, 500)
    qid = np.repeat(np.arange(sizes.size), sizes)
    labels = (rng.integers(0, 5, qid.size) * (rng.random(qid.size) < 0.5)).astype(np.float32)
    labels[qid % 9 == 0] = 0
    scores = np.round(rng.normal(size=qid.size), 1).astype(np.float32)  # many ties within a query
    off, spec = offsets_from_qids(qid), NdcgSpec(k=k, gain=gain, ties=ties, empty=0.5)
    want = ndcg(off, labels, scores, spec)
    got = ndcg_fast(off, labels, scores, spec)
    np.testing.assert_allclose(got, want, rtol=1e-14, atol=0)
    for lab, sc in ((labels.astype(np.float64), scores.astype(np.float64)), (labels.astype(np.int64), scores)):
        np.testing.assert_array_equal(ndcg_fast(off, lab, sc, spec), got)
        np.testing.assert_array_equal(ndcg_fast(off, lab, sc, spec, inverse_idcg(off, labels, spec)), got)
    monkeypatch.setattr(metrics, "PARALLEL_MIN_ROWS", 10**9 if parallel else 0)
    np.testing.assert_array_equal(ndcg_fast(off, labels, scores, spec), got)  # the other path: the same bits
