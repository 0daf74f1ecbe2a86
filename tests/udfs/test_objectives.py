"""Objectives: same trees as XGBoost's built-ins, gradients against finite differences, edge cases."""

from __future__ import annotations

import numpy as np
import pytest
import xgboost as xgb

from udfs.metrics import ndcg, offsets_from_qids
from udfs.objectives.blend import BlendSchedule, blend
from udfs.objectives.lambdamart import lambdarank_grad
from udfs.objectives.mse import mse_grad
from udfs.objectives.noisy_lambdamart import noisy_lambdamart_grad
from udfs.objectives.sigmoid_pairwise import sigmoid_pairwise_grad

PARAMS = {
    "tree_method": "hist",
    "grow_policy": "lossguide",
    "max_depth": 0,
    "max_leaves": 16,
    "eta": 0.1,
    "base_score": 0.0,
    "nthread": 1,
    "max_bin": 64,
}


def _data(seed: int, n_queries: int = 300):
    rng = np.random.default_rng(seed)
    sizes = rng.integers(1, 80, n_queries)
    qid = np.repeat(np.arange(n_queries), sizes)
    X = rng.normal(size=(qid.size, 8)).astype(np.float32)
    y = np.clip(np.round(X[:, 0] + 0.5 * X[:, 1] + rng.normal(size=qid.size)), 0, 4).astype(np.float32)
    y[qid % 9 == 0] = 0  # queries without a relevant document
    return X, y, qid, offsets_from_qids(qid)


def test_mse_grows_the_same_trees_as_reg_squarederror():
    X, y, qid, _ = _data(0)
    d = xgb.DMatrix(X, y)
    built_in = xgb.train({**PARAMS, "objective": "reg:squarederror"}, d, 20)
    custom = xgb.train({**PARAMS, "disable_default_eval_metric": 1}, d, 20, obj=lambda p, _: mse_grad(p, y))
    assert np.array_equal(built_in.predict(d, output_margin=True), custom.predict(d, output_margin=True))


def test_lambdamart_matches_rank_ndcg():
    X, y, qid, off = _data(1)
    d = xgb.DMatrix(X, y, qid=qid)
    p = {**PARAMS, "lambdarank_pair_method": "topk", "lambdarank_num_pair_per_sample": 10}
    built_in = xgb.train({**p, "objective": "rank:ndcg"}, d, 1)
    custom = xgb.train({**p, "disable_default_eval_metric": 1}, d, 1, obj=lambda s, _: lambdarank_grad(s, y, off, k=10))
    # one tree: the same up to float rounding of exp
    np.testing.assert_allclose(
        built_in.predict(d, output_margin=True), custom.predict(d, output_margin=True), atol=1e-6
    )
    built_in = xgb.train({**p, "objective": "rank:ndcg"}, d, 100)
    custom = xgb.train(
        {**p, "disable_default_eval_metric": 1}, d, 100, obj=lambda s, _: lambdarank_grad(s, y, off, k=10)
    )
    Xt, yt, qt, ot = _data(2)
    dt = xgb.DMatrix(Xt)
    a = ndcg(ot, yt, built_in.predict(dt)).mean()
    b = ndcg(ot, yt, custom.predict(dt)).mean()
    assert abs(a - b) < 0.005, (a, b)


def _lambdamart_pair(d, y, off, rounds: int, exp_gain: bool = True, **builtin):
    """Margins of rank:ndcg and of our lambdamart after ``rounds`` trees from ``d``'s base margins."""
    p = {**PARAMS, "lambdarank_pair_method": "topk", "lambdarank_num_pair_per_sample": 10, "ndcg_exp_gain": exp_gain}
    a = xgb.train({**p, "objective": "rank:ndcg", **builtin}, d, rounds).predict(d, output_margin=True)
    b = xgb.train(
        {**p, "disable_default_eval_metric": 1},
        d,
        rounds,
        obj=lambda s, _: lambdarank_grad(s, y, off, k=10, exp_gain=exp_gain),
    ).predict(d, output_margin=True)
    return a, b


@pytest.mark.parametrize("exp_gain", [True, False])
def test_lambdamart_margins_equal_rank_ndcg_where_score_normalisation_matters(exp_gain):
    """Margins, not NDCG: after 40 trees, and one tree from the spread-out scores of another model
    (XGBoost divides each pair's |delta NDCG| by |s_i - s_j| + 0.01 once scores differ)."""
    X, y, qid, off = _data(3)
    a, b = _lambdamart_pair(xgb.DMatrix(X, y, qid=qid), y, off, 40, exp_gain)
    assert np.abs(a).max() > 1.0  # the scores have spread: normalisation is at work
    np.testing.assert_allclose(a, b, rtol=0, atol=5e-6)
    start = xgb.train({**PARAMS, "objective": "reg:squarederror"}, xgb.DMatrix(X, y), 25)
    m = start.predict(xgb.DMatrix(X), output_margin=True)
    d = xgb.DMatrix(X, y, qid=qid, base_margin=m)
    a, b = _lambdamart_pair(d, y, off, 1, exp_gain)
    np.testing.assert_allclose(a, b, rtol=0, atol=1e-6)
    # the comparison can fail: rank:ndcg without score normalisation grows another tree from these scores
    c, _ = _lambdamart_pair(d, y, off, 1, exp_gain, lambdarank_score_normalization=False)
    assert np.abs(c - b).max() > 1e-3


def _pair_loss(s, y, off, kind, gamma=1.0, delta=None):
    """The loss whose gradient the pairwise objectives compute, over all pairs (k >= n)."""
    total = 0.0
    for q in range(off.size - 1):
        a, b = off[q], off[q + 1]
        for i in range(a, b):
            for j in range(a, b):
                if y[i] > y[j]:
                    d = s[i] - s[j]
                    w = 1.0 if delta is None else delta[(i, j)]
                    total += w * (np.log1p(np.exp(-d)) if kind == "logistic" else 1 / (1 + np.exp(gamma * d)))
    return total


@pytest.mark.parametrize("kind", ["ranknet", "sigmoid"])
def test_gradients_match_finite_differences(kind):
    rng = np.random.default_rng(3)
    sizes = np.array([5, 1, 7, 4])
    qid = np.repeat(np.arange(4), sizes)
    off = offsets_from_qids(qid)
    y = rng.integers(0, 3, qid.size).astype(np.float64)
    s = rng.normal(size=qid.size)
    if kind == "ranknet":
        g, _ = lambdarank_grad(s, y, off, k=100, delta="one", score_norm=False, normalize=False)
        loss = lambda x: _pair_loss(x, y, off, "logistic")  # noqa: E731
    else:
        g, _ = sigmoid_pairwise_grad(s, y, off, k=100, gamma=2.0, normalize=False)
        loss = lambda x: _pair_loss(x, y, off, "sigmoid", gamma=2.0)  # noqa: E731
    eps = 1e-4
    fd = np.array([(loss(s + eps * e) - loss(s - eps * e)) / (2 * eps) for e in np.eye(s.size)])
    s32 = s.astype(np.float32).astype(np.float64)  # the objectives work on float32 scores
    fd32 = np.array([(loss(s32 + eps * e) - loss(s32 - eps * e)) / (2 * eps) for e in np.eye(s.size)])
    np.testing.assert_allclose(g, fd32, atol=2e-3)
    assert np.abs(fd - fd32).max() < 1e-3


def test_lambdamart_is_the_gradient_of_its_weighted_logistic_loss():
    """With the ranking fixed, λ is the gradient of sum |ΔNDCG_ij| log(1 + exp(-(s_i - s_j)))."""
    y = np.array([2.0, 0.0, 1.0, 0.0, 3.0])
    s = np.array([0.3, 0.1, -0.2, 0.05, -0.4])
    off = np.array([0, 5])
    g, _ = lambdarank_grad(s, y, off, k=100, score_norm=False, normalize=False)
    order = np.argsort(-s, kind="stable")
    rank = np.empty(5, int)
    rank[order] = np.arange(5)
    disc = 1 / np.log2(np.arange(5) + 2)
    ideal = ((2 ** np.sort(y)[::-1] - 1) * disc).sum()
    delta = {
        (i, j): abs((2 ** y[i] - 2 ** y[j]) * (disc[rank[i]] - disc[rank[j]])) / ideal
        for i in range(5)
        for j in range(5)
        if y[i] > y[j]
    }
    eps = 1e-5
    fd = np.array(
        [
            (
                _pair_loss(s + eps * e, y, off, "logistic", delta=delta)
                - _pair_loss(s - eps * e, y, off, "logistic", delta=delta)
            )
            / (2 * eps)
            for e in np.eye(5)
        ]
    )
    np.testing.assert_allclose(g, fd, atol=1e-5)


@pytest.mark.parametrize(
    "fn",
    [
        lambda s, y, o: lambdarank_grad(s, y, o),
        lambda s, y, o: lambdarank_grad(s, y, o, delta="one"),
        lambda s, y, o: sigmoid_pairwise_grad(s, y, o),
        lambda s, y, o: noisy_lambdamart_grad(s, y, o, noise=0.5),
    ],
)
def test_single_document_and_all_zero_queries(fn):
    y = np.array([3.0, 0.0, 0.0, 0.0, 2.0, 1.0])
    off = np.array([0, 1, 4, 6])  # one document; all zero; a normal query
    s = np.array([0.5, 0.1, 0.2, 0.3, 0.0, 0.4])
    g, h = fn(s, y, off)
    assert np.all(np.isfinite(g)) and np.all(np.isfinite(h)) and np.all(h >= 0)
    assert np.all(g[:4] == 0) and np.all(h[:4] == 0)
    assert g[4] < 0 < g[5]  # the more relevant document is pushed up


def test_stochastic_without_noise_is_lambdamart_and_noise_is_seeded():
    X, y, qid, off = _data(4, 50)
    s = np.random.default_rng(0).normal(size=y.size).astype(np.float32)
    np.testing.assert_array_equal(noisy_lambdamart_grad(s, y, off, noise=0.0)[0], lambdarank_grad(s, y, off)[0])
    a = noisy_lambdamart_grad(s, y, off, noise=0.3, rng=np.random.default_rng(7))[0]
    b = noisy_lambdamart_grad(s, y, off, noise=0.3, rng=np.random.default_rng(7))[0]
    c = noisy_lambdamart_grad(s, y, off, noise=0.3, rng=np.random.default_rng(8))[0]
    assert np.array_equal(a, b) and not np.array_equal(a, c)


def test_blend_schedules():
    assert [BlendSchedule("step", 3, 0).gamma(t) for t in range(5)] == [0, 0, 0, 1, 1]
    lin = BlendSchedule("linear", at=10, width=4)
    assert [lin.gamma(t) for t in (7, 8, 9, 10, 11, 12, 13)] == [0, 0, 0.25, 0.5, 0.75, 1, 1]
    sig = BlendSchedule("sigmoid", at=10, width=8)
    assert sig.gamma(10) == 0.5 and sig.gamma(6) == pytest.approx(1 / (1 + np.e**4))
    m = (np.ones(3, np.float32), np.ones(3, np.float32))
    r = (np.zeros(3, np.float32), np.full(3, 3, np.float32))
    assert blend(0.0, m, r) is m and blend(1.0, m, r) is r
    g, h = blend(0.25, m, r)
    np.testing.assert_allclose(g, 0.75)
    np.testing.assert_allclose(h, 0.75 * 1 + 0.25 * 3)
    with pytest.raises(ValueError, match="unknown blend schedule"):
        BlendSchedule("cosine", 40, 40)
    with pytest.raises(ValueError, match="width must be > 0"):
        BlendSchedule("linear", 40, 0)


def test_sigmoid_pairwise_takes_its_own_settings_from_the_config():
    """``components.sigmoid_pairwise``: ``gamma`` and ``ndcg_weighted`` reach the gradient (and nothing else)."""
    from tests.helpers import component_settings
    from udfs.objectives.registry import get

    rng = np.random.default_rng(3)
    off = np.array([0, 6, 13])
    y = rng.integers(0, 5, 13).astype(np.float32)
    s = rng.normal(size=13).astype(np.float32)
    shared = {"k": 10, "eta": 0.05, "exp_gain": True, "seed": 0}
    ids = np.arange(13)
    for own in ({"gamma": 2.0}, {"ndcg_weighted": True}):
        with component_settings(sigmoid_pairwise=own):
            g, h = get("sigmoid_pairwise").make(shared, y, off, ids, ids)(s, 0)
        want = sigmoid_pairwise_grad(s, y, off, k=10, **{"gamma": 1.0, "ndcg_weighted": False, **own})
        np.testing.assert_array_equal(g, want[0])
        np.testing.assert_array_equal(h, want[1])
        assert not np.array_equal(g, sigmoid_pairwise_grad(s, y, off, k=10)[0])
