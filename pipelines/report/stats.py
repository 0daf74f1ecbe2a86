"""The report's statistics: paired tests, Holm's correction, KL divergence, effect sizes and intervals, and
risk against a baseline (URisk, TRisk, GeoRisk)."""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from pipelines.report.records import ReportError

log = logging.getLogger(__name__)


#: Pseudo-count added to every histogram bin before the KL divergence (Figure 2).
KL_PSEUDO_COUNT = 0.5


def paired_t_test(x: np.ndarray, y: np.ndarray) -> float | None:
    """Two-sided paired t-test of mean(x - y) = 0 (``scipy.stats.ttest_rel``).

    ``None`` with fewer than 2 pairs; 1.0 when every difference is 0 (scipy's 0/0 is nan);
    0.0 when the differences are one non-zero constant (t is infinite).
    """
    from scipy import stats

    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    if x.size < 2:
        return None
    d = x - y
    if not np.any(d):
        return 1.0
    with warnings.catch_warnings():  # constant differences: "precision loss", t = inf, p = 0
        warnings.simplefilter("ignore", RuntimeWarning)
        p = float(stats.ttest_rel(x, y).pvalue)
    if np.isnan(p):
        raise ReportError(f"paired t-test of {x.size} pairs gave nan (non-finite NDCG values?)")
    return p


def _mean_difference(x: np.ndarray, y: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.mean(x - y, axis=axis)


def randomization_test(x: np.ndarray, y: np.ndarray, n_perm: int = 10_000, seed: int = 0) -> float | None:
    """Two-sided paired randomisation test of mean(x - y) = 0 (``scipy.stats.permutation_test``).

    ``permutation_type='samples'``: each pair's two values are swapped at random (a sign
    flip of its difference); statistic: the mean difference; ``n_perm`` resamples drawn
    with ``rng=seed`` (exact null distribution when 2^pairs <= ``n_perm``). scipy's
    two-sided p-value: twice the smaller one-sided one, at most 1; Monte Carlo p-values
    count the observed statistic as one resample ((hits + 1) / (n_perm + 1)).
    ``None`` without pairs.
    """
    from scipy import stats

    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    if x.size == 0:
        return None
    if not np.any(x - y):
        return 1.0
    batch = max(1, 4_000_000 // x.size)  # memory O(batch * pairs)
    if 2**x.size > n_perm:
        return _sign_flip_test(x - y, n_perm, seed, batch)
    res = stats.permutation_test(
        (x, y),
        _mean_difference,
        permutation_type="samples",
        vectorized=True,
        n_resamples=n_perm,
        batch=batch,
        alternative="two-sided",
        rng=seed,
    )
    return float(res.pvalue)


def _swaps(seed: int) -> Callable[[int], np.ndarray]:
    """The pair swaps that ``scipy.stats.permutation_test(..., permutation_type='samples', rng=seed)`` draws, in
    its order: a function giving the next ``count`` of them (True: the pair's two values swapped).

    scipy draws them with ``Generator.permuted`` on each pair's two indices; for two elements NumPy's shuffle
    draws one bounded integer in [0, 1], the low bit of ``next_uint32``, and swaps when it is 0; PCG64 gives
    each 64-bit output as two 32-bit halves, low first. Reading those bits off ``random_raw`` is about 10 times
    faster than ``permuted``. The first draws are checked against ``permuted`` itself on a generator seeded the
    same; where NumPy ever draws otherwise, ``permuted`` is used (slower, same result)."""
    bitgen = np.random.default_rng(seed).bit_generator
    carry = np.empty(0, bool)

    def fast(count: int) -> np.ndarray:
        nonlocal carry
        need = max(0, count - carry.size)
        u = bitgen.random_raw((need + 1) // 2)
        halves = np.empty((u.size, 2), bool)
        halves[:, 0] = (u & np.uint64(1)) == 0
        halves[:, 1] = ((u >> np.uint64(32)) & np.uint64(1)) == 0
        flags = np.concatenate([carry, halves.ravel()])
        carry = flags[count:]
        return flags[:count]

    probe = 257  # odd: the check crosses a half-used 64-bit output
    want = np.random.default_rng(seed).permuted(np.tile(np.array([0, 1], np.int8), (probe, 1)), axis=-1)[:, 0] == 1
    if np.array_equal(fast(probe), want):
        bitgen = np.random.default_rng(seed).bit_generator
        carry = np.empty(0, bool)
        return fast
    log.warning("NumPy draws permutations otherwise than expected: the randomisation test uses Generator.permuted")
    rng = np.random.default_rng(seed)
    pending = np.empty(0, bool)

    def slow(count: int) -> np.ndarray:
        nonlocal pending
        while pending.size < count:
            lanes = max(count - pending.size, 1)
            drawn = rng.permuted(np.tile(np.array([0, 1], np.int8), (lanes, 1)), axis=-1)[:, 0] == 1
            pending = np.concatenate([pending, drawn])
        out, pending = pending[:count], pending[count:]
        return out

    return slow


def _sign_flip_test(d: np.ndarray, n_perm: int, seed: int, batch: int) -> float:
    """scipy.stats.permutation_test's Monte Carlo two-sided p-value for the mean of the paired differences ``d``
    (``permutation_type='samples'``, ``rng=seed``), computed as scipy computes it, from the same random draws
    (:func:`_swaps`), without building the permuted samples.

    Our own code because scipy is slow for this job: per resample it draws with ``Generator.permuted`` and
    gathers both samples through (batch, pairs, 2) index arrays before the statistic, which made the
    randomisation test most of ``ltr report``'s time on paper-scale folds. Here a swapped pair flips the sign
    of its difference (y - x is exactly -(x - y) in floating point), the null statistic is ``np.mean`` of each
    resample as scipy takes it, and the p-value is scipy's (tolerance 100 eps relative, (hits + 1) /
    (n_perm + 1) each side, twice the smaller, at most 1). tests/report/test_report.py checks it against scipy.
    """
    n = d.size
    observed = float(np.mean(d))
    draws = _swaps(seed)
    null = np.empty(n_perm)
    for k in range(0, n_perm, batch):
        m = min(batch, n_perm - k)
        null[k : k + m] = np.mean(np.where(draws(m * n).reshape(m, n), -d, d), axis=-1)
    gamma = abs(np.finfo(np.float64).eps * 100 * observed)
    less = (np.count_nonzero(null <= observed + gamma) + 1) / (n_perm + 1)
    greater = (np.count_nonzero(null >= observed - gamma) + 1) / (n_perm + 1)
    return float(min(max(min(less, greater) * 2, 0.0), 1.0))


def holm(pvalues: Sequence[float | None]) -> list[float | None]:
    """Holm-Bonferroni step-down adjusted p-values; ``None`` entries are skipped (not counted in m).

    With the m p-values sorted ascending, p_(1) <= ... <= p_(m):
    adj_(i) = max_{j <= i} min(1, (m - j + 1) p_(j)). Written here because scipy.stats
    has no Holm correction (``false_discovery_control`` is Benjamini-Hochberg/Yekutieli,
    which controls the FDR, not the family-wise error) and statsmodels is not a dependency.
    """
    given = {i: float(p) for i, p in enumerate(pvalues) if p is not None}
    idx = sorted(given, key=given.__getitem__)
    m = len(idx)
    out: list[float | None] = [None] * len(pvalues)
    running = 0.0
    for rank, i in enumerate(idx):
        running = max(running, min(1.0, (m - rank) * given[i]))
        out[i] = running
    return out


def kl_divergence(p_counts: Sequence[float], q_counts: Sequence[float], pseudo: float = KL_PSEUDO_COUNT) -> float:
    """KL(P || Q) in nats of two histograms on the same bins, ``pseudo`` added to every count
    (``scipy.stats.entropy``, which normalises both)."""
    from scipy import stats

    p = np.asarray(p_counts, np.float64) + pseudo
    q = np.asarray(q_counts, np.float64) + pseudo
    if p.shape != q.shape:
        raise ReportError(f"KL divergence of histograms with different bins: {p.size} and {q.size}")
    return float(stats.entropy(p, q))


# ------------------------------------------------------------ effect sizes
#: Confidence level of every interval in the report.
CONFIDENCE = 0.95

#: A paired difference of at most this size is a tie (:func:`effect_size`). Not 0: averaging a query's NDCG over
#: seed repetitions (:mod:`pipelines.report.seeds`) rounds (the mean (a + a + a) / 3 of three equal values can
#: differ from a by one ulp, about 1e-16), so a query both systems score the same became a win or a loss under an
#: exact comparison. NDCG values that really differ do so by far more than 1e-12.
TIE_TOLERANCE = 1e-12


def t_interval(d: np.ndarray, confidence: float = CONFIDENCE) -> tuple[float, float] | None:
    """Paired t confidence interval of the mean difference: mean(d) ± t_{(1+c)/2, n-1} sd(d) / sqrt(n)
    (``scipy.stats.ttest_1samp(d, 0).confidence_interval``, the same as ``ttest_rel``'s).

    ``None`` with fewer than 2 differences; (mean, mean) when every difference is the same (sd 0).
    """
    from scipy import stats

    d = np.asarray(d, np.float64)
    if d.size < 2:
        return None
    if np.all(d == d[0]):
        return float(d[0]), float(d[0])
    ci = stats.ttest_1samp(d, 0.0).confidence_interval(confidence)
    return float(ci.low), float(ci.high)


def bootstrap_interval(
    d: np.ndarray, n_resamples: int = 10_000, seed: int = 0, confidence: float = CONFIDENCE
) -> tuple[float, float] | None:
    """Paired bootstrap percentile interval of the mean difference (``scipy.stats.bootstrap`` over the
    per-query differences, ``method="percentile"``, ``rng=seed``): the queries are resampled with
    replacement, each keeping its pair. Percentile, not BCa: BCa's jackknife costs O(n^2) at n = 31,000.

    ``None`` with fewer than 2 differences; (mean, mean) when every difference is the same.
    """
    from scipy import stats

    d = np.asarray(d, np.float64)
    if d.size < 2:
        return None
    if np.all(d == d[0]):
        return float(d[0]), float(d[0])
    res = stats.bootstrap(
        (d,),
        np.mean,
        n_resamples=n_resamples,
        confidence_level=confidence,
        method="percentile",
        vectorized=True,
        batch=max(1, 4_000_000 // d.size),  # memory O(batch * n)
        rng=seed,
    )
    ci = res.confidence_interval
    return float(ci.low), float(ci.high)


def effect_size(x: np.ndarray, y: np.ndarray, n_resamples: int = 10_000, seed: int = 0) -> dict[str, Any]:
    """Size of the paired difference x - y (system minus baseline, one pair per query).

    ``delta`` mean difference; ``ci_t`` its paired t interval (:func:`t_interval`); ``ci_boot`` its
    bootstrap interval (:func:`bootstrap_interval`); ``d_z`` the standardised effect mean(d) / sd(d)
    (sd with ddof 1; Cohen's d for paired samples, ``None`` when sd is 0 or n < 2); ``wins`` / ``ties``
    / ``losses``: queries where x - y > tol, |x - y| <= tol, x - y < -tol, tol = :data:`TIE_TOLERANCE`.
    """
    d = np.asarray(x, np.float64) - np.asarray(y, np.float64)
    sd = float(np.std(d, ddof=1)) if d.size > 1 else 0.0
    return {
        "delta": float(d.mean()) if d.size else None,
        "ci_t": t_interval(d),
        "ci_boot": bootstrap_interval(d, n_resamples, seed),
        "d_z": float(d.mean() / sd) if sd > 0 else None,
        "wins": int(np.sum(d > TIE_TOLERANCE)),
        "ties": int(np.sum(np.abs(d) <= TIE_TOLERANCE)),
        "losses": int(np.sum(d < -TIE_TOLERANCE)),
    }


# ------------------------------------------------------------ risk against a baseline
def alpha_key(alpha: float) -> str:
    """The key of a risk level in the report's tables and ``report.json``: ``1`` for 1 and 1.0, ``0.5`` for 0.5."""
    return f"{float(alpha):g}"


def _risk_adjusted(x: np.ndarray, y: np.ndarray, alpha: float) -> np.ndarray:
    d = np.asarray(x, np.float64) - np.asarray(y, np.float64)
    return np.where(d >= 0, d, (1.0 + alpha) * d)


def urisk(x: np.ndarray, y: np.ndarray, alpha: float) -> float | None:
    """URisk of system x against baseline y (Wang, Bennett, Collins-Thompson, SIGIR 2012):

    URisk_alpha = (1/c) [ sum_{q: x_q > y_q} (x_q - y_q) - (1 + alpha) sum_{q: x_q < y_q} (y_q - x_q) ],

    c the number of queries: the mean difference with every loss weighted (1 + alpha). alpha = 0 is
    the mean difference; higher values penalise losses more. Higher is better. ``None`` without queries.
    """
    u = _risk_adjusted(x, y, alpha)
    return float(u.mean()) if u.size else None


def trisk(x: np.ndarray, y: np.ndarray, alpha: float) -> float | None:
    """TRisk of system x against baseline y (Dinçer, Macdonald, Ounis, SIGIR 2014): URisk divided by
    its standard error, TRisk = URisk / (s_u / sqrt(c)), s_u the sample standard deviation (ddof 1) of the
    per-query risk-adjusted differences u_q = x_q - y_q if x_q >= y_q else (1 + alpha)(x_q - y_q). It is
    the one-sample t statistic of the u_q (``scipy.stats.ttest_1samp(u, 0).statistic``): TRisk < -2 says
    the system significantly hurts queries at that risk level, > 2 that it significantly helps.
    ``None`` with fewer than 2 queries or when every u_q is the same.
    """
    u = _risk_adjusted(x, y, alpha)
    if u.size < 2:
        return None
    s = float(np.std(u, ddof=1))
    return float(u.mean() / (s / np.sqrt(u.size))) if s > 0 else None


def georisk(scores: np.ndarray, alpha: float) -> np.ndarray:
    """GeoRisk of every system of a set (Dinçer, Macdonald, Ounis, SIGIR 2016) from ``scores``, a
    (queries x systems) matrix of non-negative per-query effectiveness (the same queries for all):

    - S_i = sum_q x_qi (system total), T_q = sum_i x_qi (query total), N = sum_q T_q;
    - expected score e_qi = S_i T_q / N; z_qi = (x_qi - e_qi) / sqrt(e_qi), and 0 where e_qi = 0 (a
      query no system scores on, or a system that scores nothing: no evidence either way);
    - ZRisk_i = sum_{q: z_qi > 0} z_qi + (1 + alpha) sum_{q: z_qi < 0} z_qi;
    - GeoRisk_i = sqrt( (S_i / c) * Phi(ZRisk_i / c) ), c the number of queries, Phi the standard
      normal CDF (``scipy.special.ndtr``).

    The geometric mean of the system's mean effectiveness and of how consistently it does at least as
    well as expected across queries, given every system of the set; higher is better. A system's value
    depends on the other systems in the matrix, so GeoRisk compares the systems of one table only.
    """
    from scipy.special import ndtr

    x = np.asarray(scores, np.float64)
    if x.ndim != 2 or x.shape[0] == 0:
        raise ReportError(f"GeoRisk needs a (queries x systems) matrix with queries, got shape {x.shape}")
    if np.any(x < 0) or not np.all(np.isfinite(x)):
        raise ReportError("GeoRisk needs finite non-negative scores")
    c = x.shape[0]
    s = x.sum(axis=0)
    t = x.sum(axis=1)
    n = t.sum()
    e = np.outer(t, s) / n if n > 0 else np.zeros_like(x)
    with np.errstate(divide="ignore", invalid="ignore"):
        z = np.where(e > 0, (x - e) / np.sqrt(e), 0.0)
    zrisk = np.where(z > 0, z, (1.0 + alpha) * z).sum(axis=0)
    return np.sqrt((s / c) * ndtr(zrisk / c))
