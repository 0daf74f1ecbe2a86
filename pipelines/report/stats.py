"""The report's statistics: paired t-test, paired randomisation test, Holm's correction, KL divergence."""

from __future__ import annotations

import logging
import warnings
from collections.abc import Sequence

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
