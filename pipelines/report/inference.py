"""Inference beyond Table 1's tests: the smallest effect the study could detect, Sakai's standardised effect,
the effect per fold pooled by a random-effects model, the interaction of the effect with query difficulty, and
how many trees a system needs to be non-inferior to LambdaMART.

Every interval is 95% and two-sided unless said; every function is pure (arrays in, numbers out) and raises
:class:`ReportError` on input it cannot use.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from pipelines.report.by_difficulty import scores_present
from pipelines.report.pairing import Paired
from pipelines.report.records import ReportError, label_of
from pipelines.report.stats import CONFIDENCE, t_interval

log = logging.getLogger(__name__)

#: One-sided level of the non-inferiority lower bound (:func:`noninferiority`).
NONINFERIORITY_LEVEL = 0.95


def _z(p: float) -> float:
    """The standard normal quantile of ``p``."""
    from scipy.special import ndtri

    return float(ndtri(p))


def _t(p: float, df: int) -> float:
    """Student's t quantile of ``p`` with ``df`` degrees of freedom."""
    from scipy import stats

    return float(stats.t.ppf(p, df))


# ------------------------------------------------------------ power and Sakai's effect size
def mde(d: np.ndarray, alpha: float = 0.05, power: float = 0.8) -> float | None:
    """Minimum detectable effect of a paired comparison with the differences ``d``.

    MDE = (z_{1-alpha/2} + z_{power}) sd(d) / sqrt(n), sd with ddof 1: the true mean difference a two-sided
    test at level ``alpha`` on n pairs with this spread would detect with probability ``power`` (the normal
    approximation; with alpha 0.05 and power 0.8 about 2.80 standard errors). A non-significant difference
    says little about effects smaller than the MDE.

    Parameters
    ----------
    d : np.ndarray
        Per-query paired differences (system - baseline).
    alpha : float
        Two-sided significance level, in (0, 1).
    power : float
        Power wanted, in (0, 1).

    Returns
    -------
    float or None
        The MDE; ``None`` with fewer than 2 differences.
    """
    if not (0 < alpha < 1 and 0 < power < 1):
        raise ReportError(f"mde: alpha {alpha} and power {power} must lie in (0, 1)")
    d = np.asarray(d, np.float64).ravel()
    if d.size < 2:
        return None
    if not np.all(np.isfinite(d)):
        raise ReportError("mde: non-finite differences")
    return (_z(1 - alpha / 2) + _z(power)) * float(np.std(d, ddof=1)) / math.sqrt(d.size)


def residual_mean_square(scores: np.ndarray) -> float | None:
    """V_E, the residual mean square of a two-way ANOVA without replication (topic x system) on ``scores``.

    e_qi = x_qi - mean_q. - mean_.i + mean_.. and V_E = sum e_qi^2 / ((n_q - 1)(n_s - 1)). Sakai's standardised
    effect of system i against the baseline is ES_E = delta / sqrt(V_E) (T. Sakai, "Statistical reform in
    information retrieval?", SIGIR Forum 48(1), 2014; "Topic set size design", Information Retrieval Journal
    19(3), 2016): the difference in units of the score's spread once the topics' and systems' main effects
    are removed, which, unlike d_z, uses every system of the table.

    Parameters
    ----------
    scores : np.ndarray
        (queries x systems) matrix, the same queries for every system.

    Returns
    -------
    float or None
        V_E; ``None`` with fewer than 2 queries or 2 systems.
    """
    x = np.asarray(scores, np.float64)
    if x.ndim != 2:
        raise ReportError(f"residual_mean_square needs a (queries x systems) matrix, got shape {x.shape}")
    n_q, n_s = x.shape
    if n_q < 2 or n_s < 2:
        return None
    if not np.all(np.isfinite(x)):
        raise ReportError("residual_mean_square: non-finite scores")
    e = x - x.mean(axis=1, keepdims=True) - x.mean(axis=0, keepdims=True) + x.mean()
    return float(np.sum(e**2) / ((n_q - 1) * (n_s - 1)))


# ------------------------------------------------------------ the effect per fold, pooled
def random_effects(deltas: Sequence[float], variances: Sequence[float]) -> dict[str, Any]:
    """DerSimonian-Laird random-effects pooling of k estimates with their (within-study) variances.

    w_i = 1 / v_i; fixed-effect estimate mu_F = sum w_i d_i / sum w_i; Cochran's Q = sum w_i (d_i - mu_F)^2;
    tau^2 = max(0, (Q - (k - 1)) / (sum w_i - sum w_i^2 / sum w_i)); w*_i = 1 / (v_i + tau^2);
    delta = sum w*_i d_i / sum w*_i with the interval delta ± z_0.975 sqrt(1 / sum w*_i); Higgins' I^2 =
    max(0, (Q - (k - 1)) / Q), the share of the spread between estimates beyond chance (R. DerSimonian,
    N. Laird, Controlled Clinical Trials 7, 1986; J. Higgins, S. Thompson, Statistics in Medicine 21, 2002).

    Parameters
    ----------
    deltas : Sequence[float]
        The k estimates.
    variances : Sequence[float]
        Their variances, each finite and > 0.

    Returns
    -------
    dict
        ``delta``, ``ci95`` ([lo, hi]), ``tau2``, ``i2`` (``None`` when Q is 0 or k < 2), ``q``, ``k``,
        ``fixed_delta``. k = 1: tau2 0, i2 ``None``, the estimate's own normal interval. k = 0: ``None``
        throughout (``k`` 0).
    """
    d = np.asarray(deltas, np.float64).ravel()
    v = np.asarray(variances, np.float64).ravel()
    if d.shape != v.shape:
        raise ReportError(f"random_effects: {d.size} estimates but {v.size} variances")
    if not (np.all(np.isfinite(d)) and np.all(np.isfinite(v)) and np.all(v > 0)):
        raise ReportError("random_effects needs finite estimates and finite variances > 0")
    k = int(d.size)
    if k == 0:
        return {"delta": None, "ci95": None, "tau2": None, "i2": None, "q": None, "k": 0, "fixed_delta": None}
    w = 1.0 / v
    fixed = float(np.sum(w * d) / np.sum(w))
    q = float(np.sum(w * (d - fixed) ** 2))
    if k == 1:
        tau2 = 0.0
    else:
        c = float(np.sum(w) - np.sum(w**2) / np.sum(w))
        tau2 = max(0.0, (q - (k - 1)) / c) if c > 0 else 0.0
    ws = 1.0 / (v + tau2)
    delta = float(np.sum(ws * d) / np.sum(ws))
    half = _z(0.5 + CONFIDENCE / 2) * math.sqrt(1.0 / float(np.sum(ws)))
    return {
        "delta": delta,
        "ci95": [delta - half, delta + half],
        "tau2": tau2,
        "i2": max(0.0, (q - (k - 1)) / q) if k >= 2 and q > 0 else None,
        "q": q,
        "k": k,
        "fixed_delta": fixed,
    }


def fold_effects(
    pairs: Mapping[tuple[str, int | None], Paired],
) -> tuple[dict[str, list[dict[str, Any]]], dict[str, dict[str, Any]]]:
    """The effect of each system on each fold, and the folds pooled by a random-effects model.

    The folds are different query sets, so their effects may differ beyond sampling error; the
    random-effects pooling (:func:`random_effects`) widens the interval by the spread between folds (tau^2),
    where the pooled paired t interval of Table 1 treats every query as from one population.

    Parameters
    ----------
    pairs : Mapping
        (strategy, switch) -> :class:`Paired` with the baseline (:func:`pairs_with_baseline`).

    Returns
    -------
    tuple of dict, dict
        Per system label: the list over its paired folds of ``{fold, n, delta, ci95, var}`` (``delta`` the
        mean of x - y over the fold's pairs, ``ci95`` its paired t interval as [lo, hi] (:func:`t_interval`,
        ``None`` with n < 2), ``var`` = sd^2 / n the variance of the fold's mean, ``None`` with n < 2); and per
        system label the pooling :func:`random_effects` of the folds with a variance > 0, plus ``left_out``:
        the folds without one (n < 2 or every difference equal), which the pooling cannot weigh.
    """
    per_fold: dict[str, list[dict[str, Any]]] = {}
    pooled: dict[str, dict[str, Any]] = {}
    for key, p in pairs.items():
        label = label_of(*key)
        d = p.x - p.y
        fold_of = np.array([f for f, _ in p.keys], np.int64)
        if fold_of.size != d.size:
            raise ReportError(f"{label}: {d.size} pairs but {fold_of.size} (fold, query) keys")
        cells: list[dict[str, Any]] = []
        for f in p.folds:
            df = d[fold_of == f]
            n = int(df.size)
            ci = t_interval(df)
            cells.append(
                {
                    "fold": f,
                    "n": n,
                    "delta": float(df.mean()) if n else None,
                    "ci95": list(ci) if ci is not None else None,
                    "var": float(np.var(df, ddof=1) / n) if n > 1 else None,
                }
            )
        use = [c for c in cells if c["var"] is not None and c["var"] > 0]
        left_out = [c["fold"] for c in cells if not (c["var"] is not None and c["var"] > 0)]
        if left_out:
            log.info("%s: folds %s left out of the random-effects pooling (no variance)", label, left_out)
        re = random_effects([c["delta"] for c in use], [c["var"] for c in use])
        per_fold[label] = cells
        pooled[label] = {**re, "left_out": left_out}
    return per_fold, pooled


# ------------------------------------------------------------ the effect against difficulty
def slope(d: np.ndarray, x: np.ndarray) -> dict[str, Any] | None:
    """Ordinary least squares slope of ``d`` on ``x`` (with an intercept) and its t interval.

    b = S_xd / S_xx; s^2 = sum of squared residuals / (n - 2); se(b) = s / sqrt(S_xx); interval
    b ± t_{0.975, n-2} se(b).

    Parameters
    ----------
    d : np.ndarray
        Responses (per-query differences).
    x : np.ndarray
        Regressor, the same length.

    Returns
    -------
    dict or None
        ``{slope, ci95: [lo, hi], n}``; ``None`` with fewer than 3 points or a constant ``x``.
    """
    d = np.asarray(d, np.float64).ravel()
    x = np.asarray(x, np.float64).ravel()
    if d.shape != x.shape:
        raise ReportError(f"slope: {d.size} responses but {x.size} regressor values")
    if not (np.all(np.isfinite(d)) and np.all(np.isfinite(x))):
        raise ReportError("slope: non-finite values")
    n = int(d.size)
    if n < 3:
        return None
    xc = x - x.mean()
    sxx = float(np.sum(xc**2))
    if sxx == 0 or np.all(x == x[0]):
        return None
    b = float(np.sum(xc * (d - d.mean())) / sxx)
    resid = d - d.mean() - b * xc
    se = math.sqrt(float(np.sum(resid**2)) / (n - 2) / sxx)
    half = _t(0.5 + CONFIDENCE / 2, n - 2) * se
    return {"slope": b, "ci95": [b - half, b + half], "n": n}


def difficulty_rank(values: np.ndarray) -> np.ndarray:
    """Each query's difficulty rank scaled to [0, 1], 1 the hardest.

    The difficulty scores (:data:`pipelines.report.by_difficulty.SCORES`) are all "higher = easier", so the
    queries are ranked by -value (``scipy.stats.rankdata``, ties get their average rank) and mapped to
    (rank - 1) / (n - 1): the easiest query 0, the hardest 1. A regression of the paired difference on it has
    a slope in "difference from the easiest to the hardest query", whatever the score's scale and skew.

    Parameters
    ----------
    values : np.ndarray
        One difficulty score per query.

    Returns
    -------
    np.ndarray
        The scaled ranks; all 0 for a single query.
    """
    from scipy.stats import rankdata

    v = np.asarray(values, np.float64).ravel()
    if not np.all(np.isfinite(v)):
        raise ReportError("difficulty_rank: non-finite difficulty scores")
    if v.size < 2:
        return np.zeros(v.size)
    return (rankdata(-v, method="average") - 1.0) / (v.size - 1)


def difficulty_interaction(
    pairs: Mapping[tuple[str, int | None], Paired],
    scores: dict[tuple[int, int], dict[str, float]],
    random_of: Callable[[tuple[str, int | None]], tuple[str, int | None] | None],
) -> dict[str, dict[str, dict[str, Any]]]:
    """Does the gain over LambdaMART grow with the query's difficulty? A slope per system and score.

    For each score of :data:`SCORES`, the paired query keys of the whole grid (the union of the pairs' keys)
    are ranked once (:func:`difficulty_rank`), so every system shares one scale; per system, the slope
    (:func:`slope`) of its paired differences x - y on that rank: a positive slope means the system gains more
    over LambdaMART on hard queries. ``vs_random``: the same against the random curriculum of the same switch
    point (``random_of``), the slope of d_system - d_random over the queries both have, so that what any
    curriculum of that switch would do is taken out.

    Parameters
    ----------
    pairs : Mapping
        (strategy, switch) -> :class:`Paired` with the baseline.
    scores : dict
        (fold, query id) -> {score column: value} (:func:`pipelines.report.by_difficulty.load_scores`).
    random_of : Callable
        (strategy, switch) -> the key of the random-curriculum system of that switch point, or ``None``.

    Returns
    -------
    dict
        label -> score column -> ``{slope, ci95, n, vs_random}``; ``slope`` and ``ci95`` ``None`` where
        :func:`slope` is (fewer than 3 queries, one rank for all); ``vs_random`` ``{random: its label, diff,
        ci95, n}`` for a system whose random curriculum is among ``pairs``, ``None`` otherwise (and for the
        random system itself).
    """
    keys = sorted({k for p in pairs.values() for k in p.keys})
    missing = [k for k in keys if k not in scores]
    if missing:
        raise ReportError(
            f"the difficulty scores have no row for {len(missing)} paired test queries (fold, qid), e.g. "
            f"{missing[:3]}: were they computed on the grid's dataset?"
        )
    out: dict[str, dict[str, dict[str, Any]]] = {}
    if not keys:
        return out
    diffs = {key: dict(zip(p.keys, (p.x - p.y).tolist(), strict=True)) for key, p in pairs.items()}
    for col in scores_present(scores):
        rank = dict(zip(keys, difficulty_rank(np.array([scores[k][col] for k in keys])).tolist(), strict=True))
        for key, p in pairs.items():
            s = slope(p.x - p.y, np.array([rank[k] for k in p.keys]))
            vs = None
            rk = random_of(key)
            if rk is not None and rk != key and rk in pairs:
                mine, theirs = diffs[key], diffs[rk]
                both = [k for k in p.keys if k in theirs]
                sr = slope(np.array([mine[k] - theirs[k] for k in both]), np.array([rank[k] for k in both]))
                vs = {
                    "random": label_of(*rk),
                    "diff": sr["slope"] if sr else None,
                    "ci95": sr["ci95"] if sr else None,
                    "n": len(both),
                }
            out.setdefault(label_of(*key), {})[col] = {
                "slope": s["slope"] if s else None,
                "ci95": s["ci95"] if s else None,
                "n": p.n,
                "vs_random": vs,
            }
    return out


# ------------------------------------------------------------ non-inferiority in trees
def _first_reaching(mean: np.ndarray, var: np.ndarray, n: int, margin: float, steps: np.ndarray) -> np.ndarray:
    """Per row of ``mean``/``var`` ((r x S): the mean and the variance (ddof 1) of the differences at each step),
    the first step whose one-sided lower bound mean - t sd / sqrt(n) exceeds -margin; +inf where none does."""
    lb = mean - _t(NONINFERIORITY_LEVEL, n - 1) * np.sqrt(np.maximum(var, 0.0) / n)
    ok = lb > -margin
    first = np.argmax(ok, axis=-1)
    return np.where(ok.any(axis=-1), steps[first], np.inf)


def _resampled_trees(
    dc: np.ndarray, dc2: np.ndarray, mu: np.ndarray, counts: np.ndarray, margin: float, steps: np.ndarray
) -> np.ndarray:
    """The trees of the non-inferiority rule in each bootstrap resample given by ``counts`` ((B x N): how often
    each query is drawn, rows summing to N), from the centred differences ``dc`` = d - ``mu`` (N x S, the column
    means removed: the same variances, less cancellation in E[d^2] - E[d]^2) and ``dc2`` = dc^2. Two matrix
    products, not one on [dc, dc^2]: OpenBLAS took several times longer on the (N x 2S) matrix."""
    n = dc.shape[0]
    w = counts.astype(np.float64)
    m1 = w @ dc / n
    m2 = w @ dc2 / n
    var = (m2 - m1 * m1) * (n / (n - 1))
    return _first_reaching(m1 + mu, var, n, margin, steps)


def _percentile_interval(values: np.ndarray, confidence: float = CONFIDENCE) -> list[float | None]:
    """Percentile interval of ``values`` (numpy's linear interpolation between order statistics) where some
    values may be +inf; an end that is, or interpolates towards, +inf is ``None``."""
    v = np.sort(np.asarray(values, np.float64))
    out: list[float | None] = []
    for q in ((1 - confidence) / 2, (1 + confidence) / 2):
        h = (v.size - 1) * q
        lo = int(math.floor(h))
        hi = min(lo + 1, v.size - 1)
        frac = h - lo
        a, b = v[lo], v[hi]
        if np.isinf(a) or (frac > 0 and np.isinf(b)):
            out.append(None)
        else:
            out.append(float(a + frac * (b - a)) if frac > 0 else float(a))
    return out


def noninferiority(
    sys_values: np.ndarray,
    steps: Sequence[int],
    base_final: np.ndarray,
    base_trees: int,
    margin: float,
    n_boot: int,
    seed: int,
) -> dict[str, Any]:
    """How many trees a system needs to be non-inferior to LambdaMART's final model, with a bootstrap interval.

    d_n = sys_values[:, n] - base_final per query; the system is non-inferior at step n when the one-sided 95%
    lower bound LB_n = mean(d_n) - t_{0.95, N-1} sd(d_n) / sqrt(N) exceeds -``margin``; ``trees`` is the first
    such step. Its uncertainty: a paired bootstrap over the queries (percentile), each resample re-applying the
    rule (mean and sd recomputed) on the resampled rows; a resample that never gets there counts as +inf.

    Cost: the resamples are drawn as multinomial query counts (``default_rng(seed).multinomial``) in batches of
    about 4e6 / N resamples, and each batch's means and variances at every step come from two matrix products
    (W @ D and W @ D^2): O(n_boot N S) flops and O(N S + batch N) memory, no Python loop per
    resample.

    Parameters
    ----------
    sys_values : np.ndarray
        (queries x len(steps)) per-query test NDCG of the system after each step.
    steps : Sequence[int]
        The number of trees of each column, increasing.
    base_final : np.ndarray
        The baseline's per-query test NDCG after its last tree, the same query order.
    base_trees : int
        The baseline's number of trees.
    margin : float
        Non-inferiority margin in NDCG, >= 0.
    n_boot : int
        Bootstrap resamples (0: no intervals).
    seed : int
        Seed of the resampling.

    Returns
    -------
    dict
        ``margin``; ``trees`` (``None`` when no step is non-inferior); ``lower_bound`` (LB at ``trees``, at
        the last step when none); ``delta_at_trees`` (mean(d) at ``trees``, ``None`` when none);
        ``baseline_trees``; ``ratio`` (trees / baseline_trees, ``None``); ``trees_ci95`` and ``ratio_ci95``
        (percentile intervals [lo, hi], an end ``None`` where it is infinite, i.e. resamples that never get
        there; ``None`` without resamples); ``n_boot``; ``queries`` (N).
    """
    x = np.asarray(sys_values, np.float64)
    b = np.asarray(base_final, np.float64).ravel()
    st = np.asarray(list(steps), np.float64)
    if x.ndim != 2 or x.shape[1] != st.size or st.size == 0:
        raise ReportError(f"noninferiority: values of shape {x.shape} for {st.size} steps")
    if x.shape[0] != b.size:
        raise ReportError(f"noninferiority: {x.shape[0]} queries of the system but {b.size} of the baseline")
    if x.shape[0] < 2:
        raise ReportError(f"noninferiority needs at least 2 queries, got {x.shape[0]}")
    if np.any(np.diff(st) <= 0):
        raise ReportError(f"noninferiority: steps {list(steps)} are not increasing")
    if not (np.all(np.isfinite(x)) and np.all(np.isfinite(b))):
        raise ReportError("noninferiority: non-finite NDCG values")
    if base_trees <= 0 or margin < 0 or n_boot < 0:
        raise ReportError(f"noninferiority: base_trees {base_trees} > 0, margin {margin} >= 0, n_boot {n_boot} >= 0")
    n = x.shape[0]
    d = x - b[:, None]
    mu = d.mean(axis=0)
    var = np.var(d, axis=0, ddof=1)
    lb = mu - _t(NONINFERIORITY_LEVEL, n - 1) * np.sqrt(var / n)
    hit = np.flatnonzero(lb > -margin)
    i = int(hit[0]) if hit.size else None
    trees = int(steps[i]) if i is not None else None
    out: dict[str, Any] = {
        "margin": float(margin),
        "trees": trees,
        "lower_bound": float(lb[i if i is not None else -1]),
        "delta_at_trees": float(mu[i]) if i is not None else None,
        "baseline_trees": int(base_trees),
        "ratio": trees / base_trees if trees is not None else None,
        "ratio_ci95": None,
        "trees_ci95": None,
        "n_boot": int(n_boot),
        "queries": int(n),
    }
    if n_boot == 0:
        return out
    rng = np.random.default_rng(seed)
    dc = d - mu
    dc2 = dc * dc
    p = np.full(n, 1.0 / n)
    batch = max(1, 4_000_000 // n)  # W is (batch x N) float64: about 32 MB
    boot = np.empty(n_boot)
    for k in range(0, n_boot, batch):
        m = min(batch, n_boot - k)
        boot[k : k + m] = _resampled_trees(dc, dc2, mu, rng.multinomial(n, p, size=m), margin, st)
    ci = _percentile_interval(boot)
    out["trees_ci95"] = ci
    out["ratio_ci95"] = [c / base_trees if c is not None else None for c in ci]
    return out
