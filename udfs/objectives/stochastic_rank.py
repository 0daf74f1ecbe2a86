"""StochasticRank (Ustimenko & Prokhorenkova, ICML 2020) for NDCG@k, after CatBoost's ``StochasticRank`` loss.

Followed from CatBoost's source (``catboost/private/libs/algo_helpers/error_functions.cpp``,
``TStochasticRankError::CalcDersForSingleQuery``, ``CalcMonteCarloEstimateForSingleQueryPermutation``,
``CalcDCGMetricDiff``, ``CalcDCGCumulativeStatistics``, ``ComputeDCGPosWeights``), per query:

1. *Consistent smoothing*: ``z = a - sigma * mu * y``, centred (the relevance shift breaks ties in favour of the
   ideal order, so the smoothed loss's maximum is the true one).
2. *Coordinate conditional sampling* (CCS), ``num_estimations`` times: draw ``eps``, rank ``s = z + sigma * eps``;
   for each document, integrate its own noise out given the others': NDCG is piecewise constant in its score, so
   the derivative of the smoothed NDCG is the sum over its possible positions of the NDCG change times the
   difference of two normal densities at the neighbouring scores. All positions at or below ``k`` are one bucket
   (CatBoost's ``top`` trick): O(n log n + n * min(n, k + 1)) per query and sample, with prefix sums of the DCG for
   the O(1) metric change. The conditional law is CatBoost's (the others' mean noise shifted out): mean
   ``z_i + sigma * (sum(eps) - eps_i) / (n - 1)``, sd ``sigma * sqrt(n / (n - 1))``. CatBoost's source leaves
   ``sum(eps)`` unscaled by ``sigma`` there, which biases the estimate for ``sigma != 1`` (40% on a 3-document
   query at sigma 0.3, checked against exact integration); this is the consistent formula, equal at sigma 1.
3. *Scale-free acceleration* (SFA): the estimate minus its mean, minus ``lambda * <d, a~> / (|a~| + nu)^2 * a~``
   with ``a~`` the centred margins (the projection that keeps a step from only rescaling the scores).

The result is an ascent direction of the smoothed NDCG (CatBoost's ``Der1``); CatBoost uses no second derivative.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numba
import numpy as np

from udfs.objectives.noise import document_normal, stream_seed
from udfs.objectives.registry import objective

_INV_SQRT_2PI = 0.398942280401432677939946


@numba.njit(cache=True, nogil=True)
def _density(x: float, mean: float, sd: float) -> float:
    t = (x - mean) / sd
    return math.exp(-0.5 * t * t) * _INV_SQRT_2PI / sd


@numba.njit(cache=True, nogil=True)
def _shifted(
    a: np.ndarray, y: np.ndarray, sigma: float, mu: float, top: int, exp_gain: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """A query's consistent-smoothing scores ``z`` (shifted by ``-sigma * mu * y``, centred), gains, position
    weights normalised by the ideal DCG@k (``n + 1`` of them, the last 0: one past the last position), and ``k``."""
    n = a.size
    z = np.empty(n)
    g = np.empty(n)
    for i in range(n):
        z[i] = a[i] - sigma * mu * y[i]
        g[i] = 2.0 ** y[i] - 1.0 if exp_gain else y[i]
    z -= z.mean()
    k = n if top <= 0 or top > n else top
    w = np.zeros(n + 1)
    for p in range(k):
        w[p] = 1.0 / math.log2(2.0 + p)
    ideal = 0.0
    gs_ideal = np.sort(g)[::-1]
    for p in range(k):
        ideal += gs_ideal[p] * w[p]
    if ideal > 2.220446049250313e-16:
        for p in range(k):
            w[p] /= ideal
    return z, g, w, k


@numba.njit(cache=True, nogil=True)
def _project(der: np.ndarray, a: np.ndarray, nu: float, lam: float) -> None:
    """SFA, in place: ``der`` minus its mean, minus ``lam * <der, a~> / (|a~| + nu)^2 * a~`` (``a~``: the centred
    margins)."""
    der -= der.mean()
    if a.size > 2:
        at = a - a.mean()
        norm = math.sqrt((at * at).sum()) + nu
        der -= lam * (der * at).sum() / (norm * norm) * at


@numba.njit(cache=True, nogil=True)
def _query(
    a: np.ndarray,
    y: np.ndarray,
    eps: np.ndarray,
    sigma: float,
    mu: float,
    nu: float,
    lam: float,
    top: int,
    exp_gain: bool,
    sfa: bool,
    out: np.ndarray,
) -> None:
    n = a.size
    if n <= 1:
        out[:] = 0.0
        return
    z, g, w, k = _shifted(a, y, sigma, mu, top, exp_gain)
    der = np.zeros(n)
    samples = eps.shape[0]
    sd = sigma * math.sqrt(n / (n - 1.0))
    cum = np.zeros(n + 1)
    up = np.zeros(n + 1)
    low = np.zeros(n + 1)
    s = np.empty(n)
    for r in range(samples):
        e = eps[r]
        for i in range(n):
            s[i] = z[i] + sigma * e[i]
        order = np.argsort(-s, kind="mergesort")  # stable: ties by input order, as CatBoost's StableSort
        noise_sum = e.sum()
        for p in range(n):
            gp = g[order[p]]
            cum[p + 1] = cum[p] + gp * w[p]
            low[p + 1] = low[p] + gp * w[p + 1] if p + 1 < n else low[p]
            up[p + 1] = up[p] + gp * w[p - 1] if p > 0 else 0.0
        max_new = min(n - 1, k)
        last = min(n, k + 1) - 1
        for pos in range(n):
            doc = order[pos]
            mean = z[doc] + sigma * (noise_sum - e[doc]) / (n - 1)
            total = 0.0
            for new in range(max_new + 1):
                if new == pos:
                    continue
                if min(pos, new) >= k:
                    continue  # below the cutoff either way: no change
                diff = g[doc] * (w[new] - w[pos])
                if new < pos:
                    diff += (low[pos] - low[new]) - (cum[pos] - cum[new])
                else:
                    diff += (up[new + 1] - up[pos + 1]) - (cum[new + 1] - cum[pos + 1])
                if new == 0:
                    dens = _density(s[order[0]], mean, sd)
                elif new == last:  # the bucket of every position from `new` down
                    if new < pos:
                        dens = -_density(s[order[k - 1]], mean, sd)
                    else:
                        dens = -_density(s[order[min(k, n - 1)]], mean, sd)
                elif new < pos:
                    dens = _density(s[order[new]], mean, sd) - _density(s[order[new - 1]], mean, sd)
                else:
                    dens = _density(s[order[new + 1]], mean, sd) - _density(s[order[new]], mean, sd)
                total += diff * dens
            der[doc] += total / samples
    if sfa:
        _project(der, a, nu, lam)
    out[:] = der


@numba.njit(cache=True, nogil=True)
def _ndcg_of(s: np.ndarray, g: np.ndarray, w: np.ndarray) -> float:
    order = np.argsort(-s, kind="mergesort")
    total = 0.0
    for p in range(s.size):
        total += g[order[p]] * w[p]
    return total


@numba.njit(cache=True, nogil=True)
def _query_reinforce(
    a: np.ndarray,
    y: np.ndarray,
    eps: np.ndarray,
    sigma: float,
    mu: float,
    nu: float,
    lam: float,
    top: int,
    exp_gain: bool,
    out: np.ndarray,
) -> None:
    """The REINFORCE (score-function) estimate of the same smoothed NDCG, the paper's baseline estimator:
    ``grad_z E[L(z + sigma * eps)] = E[(L(z + sigma * eps) - b) * eps] / sigma``, with the noiseless NDCG as the
    baseline ``b`` (a control variate: ``E[eps] = 0`` keeps it unbiased). Unbiased but not bounded: its variance
    grows with the number of documents, which is what CCS removes. Same shift, centring and SFA as :func:`_query`."""
    n = a.size
    if n <= 1:
        out[:] = 0.0
        return
    z, g, w, _ = _shifted(a, y, sigma, mu, top, exp_gain)
    base = _ndcg_of(z, g, w)
    der = np.zeros(n)
    samples = eps.shape[0]
    s = np.empty(n)
    for r in range(samples):
        e = eps[r]
        for i in range(n):
            s[i] = z[i] + sigma * e[i]
        delta = (_ndcg_of(s, g, w) - base) / (sigma * samples)
        for i in range(n):
            der[i] += delta * e[i]
    _project(der, a, nu, lam)
    out[:] = der


@numba.njit(cache=True, nogil=True, parallel=True)
def _all_queries(a, y, offsets, eps, sigma, mu, nu, lam, top, exp_gain, sfa, reinforce, out):  # noqa: ANN001
    for q in numba.prange(offsets.size - 1):
        lo, hi = offsets[q], offsets[q + 1]
        if reinforce:
            _query_reinforce(a[lo:hi], y[lo:hi], eps[:, lo:hi], sigma, mu, nu, lam, top, exp_gain, out[lo:hi])
        else:
            _query(a[lo:hi], y[lo:hi], eps[:, lo:hi], sigma, mu, nu, lam, top, exp_gain, sfa, out[lo:hi])


def stochastic_rank_ders(
    margins: np.ndarray,
    labels: np.ndarray,
    offsets: np.ndarray,
    eps: np.ndarray,
    *,
    sigma: float = 1.0,
    mu: float = 0.0,
    nu: float = 0.01,
    lam: float = 1.0,
    top: int = 10,
    exp_gain: bool = True,
    sfa: bool = True,
    estimator: str = "ccs",
) -> np.ndarray:
    """The StochasticRank estimate (CatBoost's ``Der1``: an ascent direction of the smoothed NDCG@``top``) of every
    row; ``eps``: standard normals, one row of ``num_estimations`` per sample (shape ``(samples, rows)``).
    ``estimator``: ``ccs`` (coordinate conditional sampling, the paper's and CatBoost's) or ``reinforce`` (the
    score-function estimate, the paper's baseline in its ablation; centred and SFA-projected the same way)."""
    if sigma <= 0 or mu < 0 or nu <= 0:
        raise ValueError(f"StochasticRank needs sigma > 0, mu >= 0 and nu > 0; got {sigma}, {mu}, {nu}")
    if estimator not in ("ccs", "reinforce"):
        raise ValueError(f"StochasticRank's estimator is 'ccs' or 'reinforce', got {estimator!r}")
    a = np.ascontiguousarray(margins, dtype=np.float64)
    out = np.zeros(a.size)
    e = np.ascontiguousarray(np.atleast_2d(eps), dtype=np.float64)
    off = np.asarray(offsets, dtype=np.int64)
    y = np.asarray(labels, dtype=np.float64)
    _all_queries(a, y, off, e, float(sigma), float(mu), float(nu), float(lam), int(top), bool(exp_gain), sfa,
                 estimator == "reinforce", out)  # fmt: skip
    return out


def shrink_factor(tree: int, eta: float, rate: float, mode: str) -> float:
    """``C_t``: the product of SGLB's model shrinkage factors up to global tree ``tree`` (CatBoost's
    ``TrainOneIteration``: from the second tree on, the whole model times ``1 - rate * eta`` (``constant``) or
    ``1 - rate / t`` (``decreasing``) before the gradients are computed)."""
    if rate <= 0 or tree <= 0:
        return 1.0
    if mode == "constant":
        return (1.0 - rate * eta) ** tree
    return math.prod(1.0 - rate / t for t in range(1, tree + 1))


def _check(params: Mapping[str, Any]) -> None:
    """StochasticRank's own settings, those that need no training setting (``model_shrink_rate`` against ``eta``
    is checked where both are known, at the first tree)."""
    if int(params["num_estimations"]) < 1:
        raise ValueError(f"num_estimations must be >= 1, got {params['num_estimations']}")
    if params["model_shrink_mode"] not in ("constant", "decreasing"):
        raise ValueError(f"model_shrink_mode is 'constant' or 'decreasing', got {params['model_shrink_mode']!r}")
    if params["langevin"] and not float(params["diffusion_temperature"]) > 0:
        raise ValueError(f"diffusion_temperature must be > 0, got {params['diffusion_temperature']}")
    if params["estimator"] not in ("ccs", "reinforce"):
        raise ValueError(f"estimator is 'ccs' or 'reinforce', got {params['estimator']!r}")
    if not (float(params["sigma"]) > 0 and float(params["mu"]) >= 0 and float(params["nu"]) > 0):
        raise ValueError(f"sigma > 0, mu >= 0 and nu > 0; got {params['sigma']}, {params['mu']}, {params['nu']}")


@objective(
    "stochastic_rank",
    seeded=True,
    params={
        "sigma": 1.0,
        "mu": 0.0,
        "nu": 0.01,
        "lambda_": 1.0,
        "num_estimations": 1,
        "langevin": False,
        "diffusion_temperature": 10000.0,
        "model_shrink_rate": None,
        "model_shrink_mode": "constant",
        "estimator": "ccs",
    },
    check=_check,
)
def stochastic_rank(
    margins: np.ndarray,
    labels: np.ndarray,
    offsets: np.ndarray,
    *,
    tree: int,
    params: Mapping[str, Any],
    qid: np.ndarray,
    doc: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """StochasticRank NDCG@``k`` with CatBoost's settings (``lambda_`` is CatBoost's ``lambda``) and SGLB.

    SGLB (``langevin``: CatBoost's defaults ``diffusion_temperature`` 1e4 and ``model_shrink_rate`` 0.001 in
    ``constant`` mode) on a booster that only adds trees: CatBoost multiplies the whole model by ``c_t`` before
    tree ``t``, so its model is ``F_t = C_t * M_t`` with ``M_t`` the sum of its trees each divided by ``C`` at its
    time. NDCG depends on the order only, so ``M`` ranks as ``F`` does at every tree; the gradient does not (sigma
    is absolute), so it is computed at ``C * M``, and the tree grown here is CatBoost's divided by ``C``: the
    gradients are divided by ``C`` with the hessians 1 (leaves ``-sum(g) / (n + lambda)`` scale by ``1 / C``, every
    split's gain by ``1 / C^2``: the same splits, ``gamma`` being 0). Langevin's noise, ``sqrt(2 / (eta * T))`` a
    row, is added to the gradient before (CatBoost adds it to the split search's derivatives; its second, leaf-level
    draw has no counterpart in XGBoost's one gradient vector). Noise: (seed, tree, qid, doc), a stream per sample.
    CatBoost uses no hessian (its leaves: ``lr * sum(Der1) / (n + l2_leaf_reg)``), which ``hess = 1`` reproduces
    with ``train.reg_lambda`` as ``l2_leaf_reg`` (CatBoost's default 3)."""
    _check(params)
    s, seed, eta = int(params["num_estimations"]), int(params["seed"]), float(params["eta"])
    mode = str(params["model_shrink_mode"])
    eps = np.stack([document_normal(stream_seed(seed, r), tree, qid, doc) for r in range(s)])
    rate = params["model_shrink_rate"]
    if rate is None:
        rate = 0.001 if params["langevin"] else 0.0  # CatBoost's default, with Langevin
    if not 0 <= float(rate) * (eta if mode == "constant" else 1.0) < 1:
        raise ValueError(f"model_shrink_rate must be >= 0 and shrink by less than all (rate * eta < 1), got {rate}")
    c = shrink_factor(tree, eta, float(rate), mode)
    d = stochastic_rank_ders(
        c * np.asarray(margins, np.float64),
        labels,
        offsets,
        eps,
        sigma=float(params["sigma"]),
        mu=float(params["mu"]),
        nu=float(params["nu"]),
        lam=float(params["lambda_"]),
        top=int(params["k"]),
        exp_gain=bool(params["exp_gain"]),
        estimator=str(params["estimator"]),
    )
    if params["langevin"]:
        t = float(params["diffusion_temperature"])
        d += math.sqrt(2.0 / (eta * t)) * document_normal(stream_seed(seed, 1000 + s), tree, qid, doc)
    grad = (-d / c).astype(np.float32)
    return grad, np.ones_like(grad)
