"""The report's inference beyond Table 1's tests (pipelines.report.inference) and Table 1's MDE and ES_E, checked
against arithmetic by hand in the comments or an independent implementation (numpy lstsq, a loop over resamples)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from pipelines.report.inference import (
    _percentile_interval,
    _resampled_trees,
    difficulty_interaction,
    difficulty_rank,
    fold_effects,
    mde,
    noninferiority,
    random_effects,
    residual_mean_square,
    slope,
)
from pipelines.report.pairing import Paired
from pipelines.report.records import ReportError
from pipelines.report.tables import table1
from tests.helpers import record

Z975 = 1.959963984540054  # standard normal quantiles (tables)
Z80 = 0.8416212335729143
T975_1 = math.tan(math.pi * 0.475)  # t with 1 df is Cauchy: quantile tan(pi (p - 1/2)) = 12.7062...
T95_3 = 2.353363434801823  # t_{0.95, 3} (tables)


def test_mde_by_hand():
    d = np.array([0.1, 0.3, 0.2, 0.4])  # mean 0.25; squared deviations .0225 .0025 .0025 .0225 = .05
    sd = math.sqrt(0.05 / 3)
    assert mde(d) == pytest.approx((Z975 + Z80) * sd / 2)  # / sqrt(4)
    assert mde(d, alpha=0.05, power=0.5) == pytest.approx(Z975 * sd / 2)  # z_0.5 = 0
    assert mde(d[:1]) is None and mde(np.array([0.1, 0.1])) == 0.0
    with pytest.raises(ReportError):
        mde(d, power=1.0)


def test_residual_mean_square_by_hand_and_by_lstsq():
    x = np.array([[0.2, 0.4], [0.5, 0.5], [0.8, 0.6]])
    # row means .3 .5 .7, column means .5 .5, grand mean .5: residuals x - row - col + grand
    # [-.1, .1], [0, 0], [.1, -.1]: sum of squares .04, df (3 - 1)(2 - 1) = 2 -> .02
    assert residual_mean_square(x) == pytest.approx(0.02)
    assert residual_mean_square(x[:1]) is None and residual_mean_square(x[:, :1]) is None
    # the additive model (intercept + query and system dummies) fit by least squares leaves the same residuals
    rng = np.random.default_rng(0)
    m = rng.uniform(0, 1, (12, 5))
    nq, ns = m.shape
    design = np.zeros((nq * ns, 1 + (nq - 1) + (ns - 1)))
    design[:, 0] = 1
    for q in range(nq):
        for s in range(ns):
            if q:
                design[q * ns + s, q] = 1
            if s:
                design[q * ns + s, nq - 1 + s] = 1
    y = m.ravel()
    coef = np.linalg.lstsq(design, y, rcond=None)[0]
    sse = float(np.sum((y - design @ coef) ** 2))
    assert residual_mean_square(m) == pytest.approx(sse / ((nq - 1) * (ns - 1)))
    with pytest.raises(ReportError):
        residual_mean_square(np.ones(3))


def test_random_effects_by_hand():
    # deltas 0, .4, .5 with variances .01, .01, .04: w = 100, 100, 25 (sum 225)
    # fixed = (0 + 40 + 12.5) / 225 = 7/30; Q = 100 (7/30)^2 + 100 (5/30)^2 + 25 (8/30)^2 = (4900 + 2500 + 1600)/900
    # = 10; C = 225 - (100^2 + 100^2 + 25^2) / 225 = 225 - 91.67 = 400/3; tau2 = (10 - 2) / (400/3) = .06
    # I2 = (10 - 2) / 10 = .8; w* = 1/.07, 1/.07, 1/.1: sum 270/7; delta = (.4 x 100/7 + .5 x 10) / (270/7)
    # = 75/270 = 5/18; se = sqrt(7/270)
    r = random_effects([0.0, 0.4, 0.5], [0.01, 0.01, 0.04])
    assert r["fixed_delta"] == pytest.approx(7 / 30) and r["q"] == pytest.approx(10)
    assert r["tau2"] == pytest.approx(0.06) and r["i2"] == pytest.approx(0.8) and r["k"] == 3
    half = Z975 * math.sqrt(7 / 270)
    assert r["delta"] == pytest.approx(5 / 18) and r["ci95"] == pytest.approx([5 / 18 - half, 5 / 18 + half])
    # Q below k - 1: tau2 0, the fixed-effect answer. deltas .2, .24 with w 100, 100: fixed .22, Q = 2 x 100 x .0004
    # = .08 < 1: tau2 0, I2 max(0, (.08 - 1) / .08) = 0
    r = random_effects([0.2, 0.24], [0.01, 0.01])
    assert (r["tau2"], r["i2"]) == (0.0, 0.0) and r["delta"] == pytest.approx(0.22) == r["fixed_delta"]
    assert r["ci95"] == pytest.approx([0.22 - Z975 * math.sqrt(1 / 200), 0.22 + Z975 * math.sqrt(1 / 200)])
    # equal deltas: Q = 0, I2 undefined
    assert random_effects([0.3, 0.3], [0.01, 0.04])["i2"] is None
    # one fold: its own normal interval, tau2 0
    one = random_effects([0.3], [0.04])
    assert (one["tau2"], one["i2"], one["q"], one["k"]) == (0.0, None, 0.0, 1)
    assert one["ci95"] == pytest.approx([0.3 - Z975 * 0.2, 0.3 + Z975 * 0.2])
    assert random_effects([], [])["delta"] is None
    with pytest.raises(ReportError):
        random_effects([0.1, 0.2], [0.01, 0.0])
    with pytest.raises(ReportError):
        random_effects([0.1], [0.01, 0.02])


def _paired(ds: dict[int, list[float]], base: float = 0.5) -> Paired:
    """A :class:`Paired` whose differences on fold f are ``ds[f]`` (query ids 1, 2, ...)."""
    keys = [(f, q) for f, d in ds.items() for q in range(1, len(d) + 1)]
    d = np.array([v for vs in ds.values() for v in vs])
    return Paired(base + d, np.full(d.size, base), list(ds), keys, 0)


def test_fold_effects_by_hand():
    # fold 1: d .1, .3 -> mean .2, sd^2 = (.01 + .01) / 1 = .02, var of the mean .01, t interval .2 ± t_1 x .1
    # fold 2: d .2, .6 -> mean .4, sd^2 .08, var .04; fold 3: one pair (no variance); fold 4: d .25, .25 (var 0)
    p = _paired({1: [0.1, 0.3], 2: [0.2, 0.6], 3: [0.5], 4: [0.25, 0.25]})
    per_fold, pooled = fold_effects({("mse", 2): p})
    cells = {c["fold"]: c for c in per_fold["MSE-2"]}
    assert list(cells) == [1, 2, 3, 4]
    assert cells[1]["n"] == 2 and cells[1]["delta"] == pytest.approx(0.2) and cells[1]["var"] == pytest.approx(0.01)
    assert cells[1]["ci95"] == pytest.approx([0.2 - T975_1 * 0.1, 0.2 + T975_1 * 0.1])
    assert cells[2]["delta"] == pytest.approx(0.4) and cells[2]["var"] == pytest.approx(0.04)
    assert (cells[3]["n"], cells[3]["var"], cells[3]["ci95"]) == (1, None, None)
    assert cells[4]["var"] == 0.0 and cells[4]["ci95"] == pytest.approx([0.25, 0.25])
    # pooled over folds 1 and 2: w 100, 25; fixed (20 + 10) / 125 = .24; Q = 100 x .04^2 + 25 x .16^2 = .8 < 1:
    # tau2 0, I2 0, delta .24 ± z sqrt(1/125)
    r = pooled["MSE-2"]
    assert r["left_out"] == [3, 4] and r["k"] == 2 and r["tau2"] == 0.0 and r["i2"] == 0.0
    assert r["q"] == pytest.approx(0.8) and r["delta"] == pytest.approx(0.24)
    assert r["ci95"] == pytest.approx([0.24 - Z975 * math.sqrt(1 / 125), 0.24 + Z975 * math.sqrt(1 / 125)])


def test_slope_by_hand_and_by_lstsq():
    # d = 0, 2, 1 on x = 0, 1, 2: centred x -1, 0, 1 (S_xx 2), centred d -1, 1, 0: S_xd = 1, slope .5;
    # residuals -.5, 1, -.5: SSE 1.5, s^2 = 1.5 / (3 - 2), se = sqrt(1.5 / 2)
    s = slope(np.array([0.0, 2.0, 1.0]), np.array([0.0, 1.0, 2.0]))
    half = T975_1 * math.sqrt(0.75)
    assert s is not None and s["n"] == 3 and s["slope"] == pytest.approx(0.5)
    assert s["ci95"] == pytest.approx([0.5 - half, 0.5 + half])
    exact = slope(np.array([0.0, 1.0, 2.0, 3.0]), np.array([0.0, 0.5, 1.0, 1.5]))
    assert exact is not None and exact["slope"] == pytest.approx(2.0) and exact["ci95"] == pytest.approx([2.0, 2.0])
    assert slope(np.array([1.0, 2.0]), np.array([0.0, 1.0])) is None
    assert slope(np.array([1.0, 2.0, 3.0]), np.array([0.5, 0.5, 0.5])) is None
    # against numpy's least squares: slope and standard error (ci half-width / t quantile from the hand case)
    rng = np.random.default_rng(1)
    x = rng.uniform(0, 1, 50)
    d = 0.3 * x + rng.normal(0, 0.1, 50)
    design = np.column_stack([np.ones(50), x])
    coef, sse, *_ = np.linalg.lstsq(design, d, rcond=None)
    se = math.sqrt(sse[0] / 48 * np.linalg.inv(design.T @ design)[1, 1])
    got = slope(d, x)
    assert got is not None and got["slope"] == pytest.approx(coef[1])
    from scipy import stats  # the quantile only

    assert (got["ci95"][1] - got["ci95"][0]) / 2 == pytest.approx(stats.t.ppf(0.975, 48) * se)


def test_difficulty_rank_by_hand():
    # -values -.5 -.1 -.9 -.1: ranks 2, 3.5, 1, 3.5 (ties averaged): (rank - 1) / 3
    r = difficulty_rank(np.array([0.5, 0.1, 0.9, 0.1]))
    assert r.tolist() == pytest.approx([1 / 3, 2.5 / 3, 0.0, 2.5 / 3])  # 0.9 the easiest, the 0.1s the hardest
    assert difficulty_rank(np.array([0.3])).tolist() == [0.0] and difficulty_rank(np.array([])).size == 0


def test_difficulty_interaction_shares_one_rank_scale_and_compares_with_random():
    keys = [(1, 1), (1, 2), (2, 1), (2, 2)]
    # BM25 .9 .6 .3 0 -> ranks 0, 1/3, 2/3, 1 (the last the hardest); PageRank reversed; n_rel all 1 (one rank)
    scores = {k: {"ndcg_bm25": b, "ndcg_pagerank": 1 - b, "n_rel": 1.0} for k, b in zip(keys, [0.9, 0.6, 0.3, 0.0])}

    def paired(d: list[float], ks: list[tuple[int, int]]) -> Paired:
        return Paired(0.5 + np.array(d), np.full(len(d), 0.5), sorted({f for f, _ in ks}), ks, 0)

    pairs = {
        ("q_nrel", 2): paired([0.0, 0.1, 0.2, 0.3], keys),  # d = .3 x rank: slope .3 on BM25's rank
        ("random", 2): paired([0.0, 0.05, 0.1, 0.15], keys),  # slope .15
        ("mse", 2): paired([0.0, 0.2, 0.4], keys[:3]),  # three keys, ranked on the grid's scale (0, 1/3, 2/3): .6
    }
    out = difficulty_interaction(pairs, scores, lambda k: ("random", k[1]) if k[0] == "q_nrel" else None)
    q = out["q_nrel-2"]
    assert q["ndcg_bm25"]["slope"] == pytest.approx(0.3) and q["ndcg_bm25"]["n"] == 4
    assert q["ndcg_bm25"]["ci95"] == pytest.approx([0.3, 0.3])
    assert q["ndcg_pagerank"]["slope"] == pytest.approx(-0.3)  # the same queries, ranked the other way
    assert q["n_rel"]["slope"] is None and q["n_rel"]["ci95"] is None  # one rank for all: no slope
    vs = q["ndcg_bm25"]["vs_random"]  # d_q_nrel - d_random = 0, .05, .1, .15: slope .15
    assert vs["random"] == "random-2" and vs["diff"] == pytest.approx(0.15) and vs["n"] == 4
    assert vs["ci95"] == pytest.approx([0.15, 0.15])
    assert out["random-2"]["ndcg_bm25"]["vs_random"] is None and out["MSE-2"]["ndcg_bm25"]["vs_random"] is None
    assert out["random-2"]["ndcg_bm25"]["slope"] == pytest.approx(0.15)
    assert out["MSE-2"]["ndcg_bm25"]["slope"] == pytest.approx(0.6)  # .2 per 1/3 of rank
    # a random curriculum absent from the pairs: no comparison
    del pairs[("random", 2)]
    alone = difficulty_interaction(pairs, scores, lambda k: ("random", k[1]))
    assert alone["q_nrel-2"]["ndcg_bm25"]["vs_random"] is None
    with pytest.raises(ReportError, match=r"no row for 2 paired test queries .*\(2, 1\)"):
        difficulty_interaction(pairs, {k: v for k, v in scores.items() if k[0] == 1}, lambda k: None)
    assert difficulty_interaction({}, scores, lambda k: None) == {}


# ------------------------------------------------------------ non-inferiority in trees
BASE4 = np.full(4, 0.5)


def test_noninferiority_by_hand():
    # steps 1, 2, 3; d at step 1: -.3 everywhere (LB -.3); step 2: -.1, .1, -.1, .1 (mean 0, sd sqrt(.04/3), LB =
    # -t_{.95,3} sqrt(.04/3) / 2 = -.1359); step 3: 0 everywhere (LB 0)
    d = np.array([[-0.3, -0.1, 0.0], [-0.3, 0.1, 0.0], [-0.3, -0.1, 0.0], [-0.3, 0.1, 0.0]])
    lb2 = -T95_3 * math.sqrt(0.04 / 3) / 2
    r = noninferiority(BASE4[:, None] + d, [1, 2, 3], BASE4, 4, 0.2, 2000, 0)
    assert (r["trees"], r["ratio"], r["baseline_trees"], r["queries"], r["margin"]) == (2, 0.5, 4, 4, 0.2)
    assert r["lower_bound"] == pytest.approx(lb2) and r["delta_at_trees"] == pytest.approx(0.0)
    # every resample of step 2 stays above -.2 (the worst, 3 x -.1 and one .1: mean -.05, sd .1, LB -.05 - t .05
    # = -.168; 4 x -.1: LB -.1) and step 1 never does: the interval is [2, 2]
    assert r["trees_ci95"] == [2.0, 2.0] and r["ratio_ci95"] == [0.5, 0.5] and r["n_boot"] == 2000
    # margin .1: step 2's LB -.136 misses, step 3's 0 passes: 3 trees; a resample passes at step 2 only with 3 or
    # 4 of its draws from the .1 queries (LB -.068 or .1; probability 5/16), else at 3: the interval [2, 3]
    r = noninferiority(BASE4[:, None] + d, [1, 2, 3], BASE4, 4, 0.1, 2000, 0)
    assert (r["trees"], r["ratio"], r["trees_ci95"], r["ratio_ci95"]) == (3, 0.75, [2.0, 3.0], [0.5, 0.75])
    # margin 0: LB must exceed 0; no step does. A resample passes (at step 2) only with its 4 draws all from the
    # .1 queries (mean .1, sd 0; probability 1/16 > 2.5%), else never (+inf): the interval [2, never]
    r = noninferiority(BASE4[:, None] + d, [1, 2, 3], BASE4, 4, 0.0, 2000, 0)
    assert (r["trees"], r["ratio"], r["delta_at_trees"], r["lower_bound"]) == (None, None, None, 0.0)
    assert r["trees_ci95"] == [2.0, None] and r["ratio_ci95"] == [0.5, None]
    # steps 1 and 3 only (-.3 and 0 on every query, in every resample too): never passes: [never, never]
    r = noninferiority(BASE4[:, None] + d[:, [0, 2]], [1, 3], BASE4, 4, 0.0, 500, 0)
    assert (r["trees"], r["lower_bound"], r["trees_ci95"], r["ratio_ci95"]) == (None, 0.0, [None, None], [None, None])
    # constant dyadic differences: -.25 then -1/256 (margin .01): 20 trees of a 40-tree baseline, no spread
    c = BASE4[:, None] + np.array([[-0.25, -1 / 256]] * 4)
    r = noninferiority(c, [10, 20], BASE4, 40, 0.01, 300, 7)
    assert (r["trees"], r["ratio"], r["lower_bound"], r["trees_ci95"], r["ratio_ci95"]) == (
        20,
        0.5,
        -1 / 256,
        [20.0, 20.0],
        [0.5, 0.5],
    )
    assert noninferiority(c, [10, 20], BASE4, 40, 0.01, 0, 7)["trees_ci95"] is None


def test_noninferiority_bootstrap_is_the_rule_on_resampled_rows_and_seeded():
    rng = np.random.default_rng(3)
    n, steps = 30, [5, 10, 15, 20, 25, 30]
    base = rng.uniform(0.3, 0.7, n)
    x = base[:, None] + np.linspace(-0.1, 0.02, len(steps)) + rng.normal(0, 0.05, (n, len(steps)))
    # each resample's trees, vectorised, equal the rule applied to the resampled rows themselves (a loop)
    counts = rng.multinomial(n, np.full(n, 1 / n), size=40)
    d = x - base[:, None]
    mu = d.mean(axis=0)
    dc = d - mu
    fast = _resampled_trees(dc, dc * dc, mu, counts, 0.03, np.array(steps, float))
    for w, t in zip(counts, fast, strict=True):
        idx = np.repeat(np.arange(n), w)
        loop = noninferiority(x[idx], steps, base[idx], 30, 0.03, 0, 0)["trees"]
        assert (np.inf if loop is None else loop) == t
    r = noninferiority(x, steps, base, 30, 0.03, 1000, 11)
    lo, hi = r["trees_ci95"]
    assert r["trees"] is not None and lo is not None and lo <= r["trees"] and (hi is None or r["trees"] <= hi)
    assert r == noninferiority(x, steps, base, 30, 0.03, 1000, 11)  # seeded
    with pytest.raises(ReportError):
        noninferiority(x, steps[:-1], base, 30, 0.03, 10, 0)
    with pytest.raises(ReportError):
        noninferiority(x, steps, base[:-1], 30, 0.03, 10, 0)
    with pytest.raises(ReportError):
        noninferiority(x, steps[::-1], base, 30, 0.03, 10, 0)


def test_percentile_interval_with_never():
    # 40 values: 2.5% at h = 39 x .025 = .975 (between the 1st and 2nd), 97.5% at h = 38.025
    v = np.array([1.0, 2.0] + [3.0] * 36 + [np.inf, np.inf])
    assert _percentile_interval(v) == [pytest.approx(1.975), None]
    assert _percentile_interval(np.array([4.0] * 10)) == [4.0, 4.0]
    v = np.array([2.0] * 39 + [3.0])  # 97.5% at h = 38.025: 2 + .025 x (3 - 2)
    assert _percentile_interval(v) == [2.0, pytest.approx(2.025)]
    finite = np.random.default_rng(0).uniform(0, 1, 77)  # without infinities: numpy's percentiles
    assert _percentile_interval(finite) == pytest.approx(np.percentile(finite, [2.5, 97.5]).tolist())


# ------------------------------------------------------------ Table 1's MDE and ES_E
def test_table1_mde_and_sakai_es_e():
    q = {1: 0.5, 2: 0.4, 3: 0.6, 4: 0.3}
    base = [record(f, "lambdamart", None, [0.5], q) for f in (1, 2)]
    a = [record(f, "mse", 2, [0.55], {k: v + 0.05 + 0.01 * k * f for k, v in q.items()}) for f in (1, 2)]
    b = [record(1, "q_nrel", 2, [0.52], {k: v + (0.02 if k % 2 else -0.01) for k, v in q.items()})]
    rows = {r["label"]: r for r in table1(base + a + b, n_perm=100, seed=0, n_boot=100)}
    ra = rows["MSE-2"]
    d = np.array([0.05 + 0.01 * k * f for f in (1, 2) for k in q])
    assert ra["mde"] == pytest.approx((Z975 + Z80) * np.std(d, ddof=1) / np.sqrt(8))
    # V_E over the matrix of the systems that finished both folds (LambdaMART, MSE-2), by least squares
    m = np.array([[q[k], q[k] + 0.05 + 0.01 * k * f] for f in (1, 2) for k in q])
    # one row per (query row, system): intercept, 7 query dummies, the MSE-2 dummy
    rows_q = np.column_stack([np.ones(8), np.eye(8)[:, 1:]])
    design = np.vstack([np.column_stack([rows_q, np.zeros(8)]), np.column_stack([rows_q, np.ones(8)])])
    y = np.concatenate([m[:, 0], m[:, 1]])
    coef, sse, *_ = np.linalg.lstsq(design, y, rcond=None)
    v_e = float(sse[0]) / 7  # (8 - 1)(2 - 1)
    assert ra["v_e"] == pytest.approx(v_e) and rows["LambdaMART"]["v_e"] == ra["v_e"]
    assert ra["es_e"] == pytest.approx(d.mean() / math.sqrt(v_e))
    assert rows["q_nrel-2"]["es_e"] is None and rows["q_nrel-2"]["mde"] is not None  # outside the matrix
    assert rows["LambdaMART"]["es_e"] is None and rows["LambdaMART"]["mde"] is None
