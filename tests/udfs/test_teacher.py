"""udfs.teacher: the teacher's per-query margin and loss against arithmetic written out by hand, and the
cross-fitting groups."""

from __future__ import annotations

import math

import numpy as np
import pytest

from udfs.metrics import NdcgSpec, ndcg
from udfs.pairs import pair_scores
from udfs.teacher import crossfit_groups


def _softplus(x: float) -> float:
    return math.log(1.0 + math.exp(x))


def test_margin_and_loss_by_hand():
    # query 0: labels 2, 0, 1 with scores 3.0, 1.0, 0.5 -> pairs (hi, lo): (d0, d1) 2.0, (d0, d2) 2.5, (d2, d1) -0.5
    # query 1: one document: no pair
    # query 2: labels 1, 1, 0, scores 0.2, 0.2, 0.7 (a tie in score between the two relevant documents):
    #          pairs (d0, d2) -0.5 and (d1, d2) -0.5; the two equal labels make no pair
    # query 3: every label 0 (no relevant document): no pair
    offsets = np.array([0, 3, 4, 7, 9])
    labels = np.array([2, 0, 1, 3, 1, 1, 0, 0, 0])
    scores = np.array([3.0, 1.0, 0.5, 9.0, 0.2, 0.2, 0.7, 4.0, -4.0])
    margin, loss, n = pair_scores(offsets, labels, scores)
    assert n.tolist() == [3, 0, 2, 0]
    assert margin[0] == pytest.approx((2.0 + 2.5 - 0.5) / 3)
    assert loss[0] == pytest.approx((_softplus(-2.0) + _softplus(-2.5) + _softplus(0.5)) / 3)
    assert margin[2] == pytest.approx(-0.5)
    assert loss[2] == pytest.approx(_softplus(0.5))
    assert np.isnan(margin[[1, 3]]).all() and np.isnan(loss[[1, 3]]).all()
    # the teacher's NDCG of the same queries (the metric's own conventions): query 0 ranks d0, d1, d2
    spec = NdcgSpec(k=10, gain="exp2")
    got = ndcg(offsets, labels, scores, spec)
    disc = [1 / math.log2(r + 2) for r in range(3)]
    dcg0 = 3 * disc[0] + 0 * disc[1] + 1 * disc[2]
    idcg0 = 3 * disc[0] + 1 * disc[1]
    assert got[0] == pytest.approx(dcg0 / idcg0)


def test_the_loss_is_stable_for_large_margins():
    margin, loss, _ = pair_scores(np.array([0, 2, 4]), np.array([1, 0, 1, 0]), np.array([800.0, 0.0, -800.0, 0.0]))
    assert margin.tolist() == [800.0, -800.0]
    assert loss[0] == pytest.approx(0.0, abs=1e-300) and loss[1] == pytest.approx(800.0)


def test_against_all_pairs_in_numpy():
    rng = np.random.default_rng(3)
    sizes = rng.integers(1, 30, 40)
    offsets = np.concatenate(([0], np.cumsum(sizes)))
    labels = rng.integers(0, 5, offsets[-1])
    scores = rng.normal(size=offsets[-1]).round(1)  # ties in score too
    margin, loss, n = pair_scores(offsets, labels, scores)
    for q in range(sizes.size):
        lab, s = labels[offsets[q] : offsets[q + 1]], scores[offsets[q] : offsets[q + 1]]
        hi, lo = np.nonzero(lab[:, None] > lab[None, :])
        d = s[hi] - s[lo]
        assert n[q] == d.size
        if d.size:
            assert margin[q] == pytest.approx(d.mean()) and loss[q] == pytest.approx(np.logaddexp(0, -d).mean())
        else:
            assert np.isnan(margin[q]) and np.isnan(loss[q])


@pytest.mark.parametrize(
    "offsets, labels, scores, message",
    [
        ([1, 2], [0], [0.0], "offsets must start at 0"),
        ([0, 2], [0], [0.0, 1.0], "2 rows in the offsets, 1 labels"),
        ([0, 2], [0, 1], [0.0, np.nan], "NaN or infinity"),
    ],
)
def test_bad_inputs_are_refused(offsets, labels, scores, message):
    with pytest.raises(ValueError, match=message):
        pair_scores(np.array(offsets), np.array(labels), np.array(scores))


def test_crossfit_groups_are_balanced_seeded_and_per_query():
    qids = np.arange(1, 20_001)
    g = crossfit_groups(qids, 5, seed=1)
    counts = np.bincount(g, minlength=5)
    assert counts.size == 5 and np.all(np.abs(counts - 4000) < 4 * math.sqrt(4000 * 0.8))  # binomial bounds
    # a query's group depends on its id and the seed only: not on the other queries or their order
    sub = qids[::-7]
    assert np.array_equal(crossfit_groups(sub, 5, seed=1), g[sub - 1])
    other = crossfit_groups(qids, 5, seed=2)
    assert 0.7 < np.mean(other != g) < 0.9  # another seed, other groups (4/5 differ by chance)
    # with two groups, another seed is not the same split with its groups swapped
    a, b = crossfit_groups(qids, 2, seed=1), crossfit_groups(qids, 2, seed=2)
    assert 0.4 < np.mean(a != b) < 0.6
    with pytest.raises(ValueError, match="at least 2 groups"):
        crossfit_groups(qids, 1, seed=1)
