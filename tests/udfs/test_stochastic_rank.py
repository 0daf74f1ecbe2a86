"""StochasticRank's CCS estimate (udfs.objectives.stochastic_rank) against the exact gradient of the smoothed NDCG,
computed independently: E[NDCG] as a sum over permutations of each order's probability (iterated 1-D integrals on
a fine grid), differentiated by central differences."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy.special import ndtr

from udfs.objectives.stochastic_rank import stochastic_rank_ders


def _weights(y: np.ndarray, top: int, exp_gain: bool) -> tuple[np.ndarray, np.ndarray]:
    n = y.size
    k = n if top <= 0 or top > n else top
    g = np.exp2(y) - 1 if exp_gain else y.astype(float)
    w = np.zeros(n)
    w[:k] = 1 / np.log2(np.arange(k) + 2.0)
    ideal = float(np.sort(g)[::-1] @ w)
    return g, w / ideal if ideal > 0 else w


def smoothed_ndcg(z: np.ndarray, y: np.ndarray, sigma: float, top: int, exp_gain: bool, grid: int = 20001) -> float:
    """E[NDCG@top of the order of z + sigma * eps], eps standard normal, by exact integration (n <= 5)."""
    g, w = _weights(y, top, exp_gain)
    x = np.linspace(z.min() - 9 * sigma, z.max() + 9 * sigma, grid)
    dx = x[1] - x[0]
    f = np.exp(-0.5 * ((x[None, :] - z[:, None]) / sigma) ** 2) / (sigma * math.sqrt(2 * math.pi))
    cdf = ndtr((x[None, :] - z[:, None]) / sigma)
    total = 0.0
    for perm in itertools.permutations(range(z.size)):  # P(s_perm[0] > s_perm[1] > ...)
        h = cdf[perm[-1]]
        for j in range(z.size - 2, 0, -1):
            v = f[perm[j]] * h
            h = np.concatenate([[0.0], np.cumsum(0.5 * (v[1:] + v[:-1]) * dx)])
        v = f[perm[0]] * h
        total += float(np.sum(0.5 * (v[1:] + v[:-1])) * dx) * float(g[list(perm)] @ w)
    return total


def _per_sample(a: np.ndarray, y: np.ndarray, eps: np.ndarray, **kw: object) -> np.ndarray:
    """The estimate of one query for each row of ``eps`` (one noise draw each): the query repeated as many
    queries, in one call."""
    m, n = eps.shape
    out = stochastic_rank_ders(np.tile(a, m), np.tile(y, m), np.arange(m + 1) * n, eps.reshape(1, -1), **kw)
    return out.reshape(m, n)


CASES = {
    "4 documents, NDCG": (np.array([0.3, 0.5, -0.2, 0.1]), np.array([2, 1, 0, 1]), 1.0, 0.0, -1),
    "4 documents, NDCG@2, mu 0.5": (np.array([0.3, 0.5, -0.2, 0.1]), np.array([3, 0, 1, 2]), 1.0, 0.5, 2),
    "3 documents, sigma 0.3": (np.array([0.2, 0.0, -0.1]), np.array([2, 0, 1]), 0.3, 0.0, -1),
}


@pytest.mark.parametrize("case", list(CASES))
def test_the_ccs_estimate_is_unbiased_and_bounded(case):
    a, y, sigma, mu, top = CASES[case]
    y = y.astype(float)
    z = a - sigma * mu * y  # the consistent smoothing's shift: the smoothed loss is a function of z
    h = 1e-4
    exact = np.array([(smoothed_ndcg(z + h * e, y, sigma, top, True) - smoothed_ndcg(z - h * e, y, sigma, top, True))
                      / (2 * h) for e in np.eye(a.size)])  # fmt: skip
    m = 100_000
    eps = np.random.default_rng(7).normal(size=(m, a.size))
    per_sample = _per_sample(a, y, eps, sigma=sigma, mu=mu, top=top, sfa=False)
    est, se = per_sample.mean(0), per_sample.std(0) / math.sqrt(m)
    # without SFA's mean removal the estimate is of the gradient itself (which sums to 0 by shift invariance)
    z_scores = np.abs(est - exact) / se
    assert (z_scores < 4).all(), (est, exact, se)
    # uniformly bounded: a document's estimate is at most the metric's range times the density's peak
    # (the NDCG changes of its positions telescope against the densities' differences: Ustimenko & Prokhorenkova's
    # bounded estimate; sd is the conditional law's)
    bound = 1.0 / (sigma * math.sqrt(a.size / (a.size - 1.0)) * math.sqrt(2 * math.pi))
    assert np.abs(per_sample).max() <= bound
    # the REINFORCE estimate (the ablation's baseline; centred, lambda 0: no projection) of the same gradient:
    # unbiased too, with a larger spread on every document (what CCS's partial integration buys)
    rf = _per_sample(a, y, eps, sigma=sigma, mu=mu, top=top, lam=0.0, estimator="reinforce")
    rf_est, rf_se = rf.mean(0), rf.std(0) / math.sqrt(m)
    assert (np.abs(rf_est - exact) / rf_se < 4).all(), (rf_est, exact, rf_se)
    assert (rf.std(0) > per_sample.std(0)).all()


def test_sfa_removes_the_radial_part_and_keeps_the_estimate_unbiased():
    a, y = np.array([0.3, 0.5, -0.2, 0.1]), np.array([2.0, 1, 0, 1])
    eps = np.random.default_rng(3).normal(size=(20_000, 4))
    raw = _per_sample(a, y, eps, sfa=False)
    sfa = _per_sample(a, y, eps, nu=1e-12)
    at = a - a.mean()
    # SFA is linear: the mean of the projected estimates is the projection of their mean
    d = raw.mean(0) - raw.mean(0).mean()
    np.testing.assert_allclose(sfa.mean(0), d - (d @ at) / (at @ at) * at, atol=1e-12)
    assert np.abs(sfa @ at).max() < 1e-9 and np.abs(sfa.sum(1)).max() < 1e-12  # orthogonal to a~ and to 1


def test_sglb_shrinkage_as_scaled_trees_ranks_as_the_shrinking_model():
    """CatBoost's SGLB multiplies the model by c before each tree; here the gradients are divided by C (the product
    of the c's so far) at C times the tracked margins. On a toy booster (a tree: the mean gradient over a fixed
    random partition of the rows, as a Gradient leaf), both give F = C * M at every tree: the same ranking."""
    from udfs.objectives import registry
    from udfs.objectives.noise import document_normal, stream_seed
    from udfs.objectives.stochastic_rank import shrink_factor

    rng = np.random.default_rng(1)
    sizes = rng.integers(2, 12, 30)
    off = np.concatenate([[0], np.cumsum(sizes)])
    n = int(off[-1])
    y = rng.integers(0, 5, n).astype(np.float32)
    qid, doc = np.repeat(np.arange(30), sizes), np.concatenate([np.arange(s) for s in sizes])
    eta, rate, lam = 0.3, 0.5, 3.0
    spec = registry.get("stochastic_rank")
    shared = {"k": 5, "eta": eta, "exp_gain": True, "seed": 0}
    f = spec.make(shared, y, off, qid, doc, {**spec.defaults, "model_shrink_rate": rate})

    def leaves(g: np.ndarray, t: int) -> np.ndarray:  # a fixed partition per tree; leaf = -sum g / (n + lambda)
        part = np.random.default_rng(100 + t).integers(0, 8, n)
        out = np.zeros(n)
        for leaf in range(8):
            sel = part == leaf
            out[sel] = -g[sel].sum() / (sel.sum() + lam)
        return eta * out

    m = np.zeros(n)  # ours: the tracked margins
    big_f = np.zeros(n)  # CatBoost's: the whole model shrunk before each tree
    for t in range(25):
        if t:
            big_f *= 1 - rate * eta
        g, h = f(m.astype(np.float32), t)
        assert (h == 1).all()
        m += leaves(g.astype(np.float64), t)
        # CatBoost's own step: its gradient at its model, its tree added as it is
        eps = document_normal(stream_seed(0, 0), t, qid, doc)[None, :]  # the draw the objective made
        g_cb = -stochastic_rank_ders(big_f, y, off, eps, top=5)  # CatBoost's gradient at its own model
        big_f += leaves(g_cb, t)
        np.testing.assert_allclose(big_f, shrink_factor(t, eta, rate, "constant") * m, rtol=1e-5, atol=1e-9)
        for lo, hi in zip(off[:-1], off[1:], strict=True):
            assert (np.argsort(-big_f[lo:hi], kind="stable") == np.argsort(-m[lo:hi], kind="stable")).all()


@pytest.mark.parametrize(
    "setting, message",
    [
        ("estimator=foo", "estimator is 'ccs' or 'reinforce', got 'foo'"),
        ("num_estimations=0", "num_estimations must be >= 1, got 0"),
        ("sigma=-1", "sigma > 0, mu >= 0 and nu > 0; got -1"),
        ("model_shrink_mode=bar", "model_shrink_mode is 'constant' or 'decreasing', got 'bar'"),
        ("model_shrink_rate=-0.5", "model_shrink_rate must be >= 0"),
        ("sigma=fast", "sigma"),
    ],
)
def test_a_bad_setting_is_refused_when_the_config_loads_not_in_a_spark_task(setting, message):
    """A built-in's settings from ``components`` are checked as a plug-in's are (by the check it declares, else on
    the synthetic batch): a bad value exits 2 with one line before any Spark job."""
    from pipelines.core.errors import UserError
    from pipelines.plugins.run_config import load_run_config

    with pytest.raises(UserError, match=message) as e:
        load_run_config(None, [f"components.stochastic_rank.{setting}"])
    assert "\n" not in str(e.value) and "stochastic_rank" in str(e.value)
    cfg = load_run_config(None, ["components.stochastic_rank.estimator=reinforce"])
    assert cfg.components == {"stochastic_rank": {"estimator": "reinforce"}}
