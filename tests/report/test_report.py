"""The report's statistics, pairing checks, Table 2 sizes and provenance, on synthetic records and on a
grid written straight into MLflow (no training, no Spark)."""

from __future__ import annotations

import json
import os
from typing import Any

import numpy as np
import pytest
from scipy import stats

from pipelines.core.config import ConfigError, ReportConfig, conf_dir, load_config
from pipelines.report import ReportError, build_report, open_tracker
from pipelines.report.pairing import groups, paired_samples
from pipelines.report.render import render
from pipelines.report.stats import (
    bootstrap_interval,
    effect_size,
    georisk,
    holm,
    paired_t_test,
    randomization_test,
    t_interval,
    trisk,
    urisk,
)
from pipelines.report.tables import convergence, default_table2_sizes, table1, table2
from pipelines.store.results import scores_npz
from pipelines.tracking.runs import TAG_FOLD, TAG_KIND, TAG_PARENT, TAG_STRATEGY, TAG_SWITCH, Tracker
from tests.helpers import record
from udfs import metrics


def _report(tracker: Tracker, out: str, parent: str | None = None, **report: Any) -> dict[str, Any]:
    """:func:`build_report` of the grid ``parent`` (None: the latest finished) with the metric ``ndcg_at_10``, no
    difficulty scores and the report settings ``report`` (:class:`ReportConfig` fields, its defaults else)."""
    return build_report(tracker, out, parent, report=ReportConfig(**report), metric_name="ndcg_at_10", difficulty=None)


# ------------------------------------------------------------ statistics
def test_holm_by_hand():
    # sorted: 0.005 (x4 = 0.02), 0.01 (x3 = 0.03), 0.03 (x2 = 0.06), 0.04 (x1 = 0.04 -> max(0.06, 0.04) = 0.06)
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    # None is not a comparison (m = 2): 0.02 x 2 = 0.04, then max(0.04, 0.5 x 1) = 0.5; capped at 1
    assert holm([None, 0.5, 0.02]) == [None, pytest.approx(0.5), pytest.approx(0.04)]
    assert holm([0.6, 0.7]) == [1.0, 1.0]
    assert holm([]) == []


def test_paired_t_test_is_scipys_ttest_rel():
    rng = np.random.default_rng(0)
    x, y = rng.uniform(size=30), rng.uniform(size=30)
    assert paired_t_test(x, y) == pytest.approx(stats.ttest_rel(x, y).pvalue)
    assert paired_t_test(x, x) == 1.0  # no difference at all (scipy: nan)
    assert paired_t_test(x + 0.1, x) == 0.0  # a constant non-zero difference (t infinite)
    assert paired_t_test(x[:1], y[:1]) is None


def test_randomization_test_is_seeded_and_matches_scipy():
    rng = np.random.default_rng(1)
    x, y = rng.uniform(size=40), rng.uniform(size=40)
    p = randomization_test(x, y, n_perm=999, seed=7)
    assert p == randomization_test(x, y, n_perm=999, seed=7)
    ref = stats.permutation_test(
        (x, y),
        lambda a, b, axis: np.mean(a - b, axis=axis),
        vectorized=True,
        permutation_type="samples",
        n_resamples=999,
        rng=7,
    )
    assert p == pytest.approx(ref.pvalue)
    # and close to the t-test on this many pairs
    assert p == pytest.approx(stats.ttest_rel(x, y).pvalue, abs=0.06)


@pytest.mark.parametrize("n, n_perm, seed", [(15, 999, 1), (117, 4001, 0), (2001, 1500, 5), (9, 999, 2)])
def test_our_sign_flips_are_scipys_draws_and_p_value(n, n_perm, seed):
    """The Monte Carlo randomisation test reads scipy's own random draws off the bit generator (stats._swaps):
    the same p-value as scipy.stats.permutation_test to the last bit, odd sizes and several batches included
    (n = 9: 2^9 <= 999, scipy's exact test)."""
    rng = np.random.default_rng(n)
    x, y = rng.uniform(size=n), rng.uniform(size=n) + 0.01
    y[::7] = x[::7]  # zero differences too
    ref = stats.permutation_test(
        (x, y),
        lambda a, b, axis: np.mean(a - b, axis=axis),
        vectorized=True,
        permutation_type="samples",
        n_resamples=n_perm,
        rng=seed,
    )
    assert randomization_test(x, y, n_perm=n_perm, seed=seed) == ref.pvalue


# ------------------------------------------------------------ pairing
def test_pairing_needs_the_same_queries_per_fold():
    base = [record(1, "lambdamart", None, [0.5], {1: 0.5, 2: 0.4}, run_id="b1")]
    other = [record(1, "mse", 2, [0.6], {1: 0.6, 3: 0.4}, run_id="m1")]
    with pytest.raises(
        ReportError,
        match=r"fold 1: MSE-2 \(run m1\) and LambdaMART \(run b1\) were evaluated on "
        r"different test queries \(1 only in MSE-2, e\.g\. \[3\]; 1 only in "
        r"LambdaMART, e\.g\. \[2\]\)",
    ):
        paired_samples(other, base)
    with pytest.raises(ReportError, match="fold 1: MSE-2"):
        table1(base + other)


def test_a_fold_twice_is_an_error():
    runs = [record(1, "mse", 2, [0.5], run_id="a"), record(1, "mse", 2, [0.6], run_id="b")]
    with pytest.raises(ReportError, match=r"MSE-2: fold 1 has two finished runs \(a, b\)"):
        groups(runs)


def test_pairs_only_the_folds_both_have():
    base = [record(f, "lambdamart", None, [0.5], {10 * f: 0.5, 10 * f + 1: 0.4}) for f in (1, 2, 3)]
    mse = [record(f, "mse", 2, [0.6], {10 * f: 0.7, 10 * f + 1: 0.4}) for f in (1, 3)]
    p = paired_samples(mse, base)
    assert p.folds == [1, 3] and p.x.tolist() == [0.7, 0.4, 0.7, 0.4] and p.y.tolist() == [0.5, 0.4, 0.5, 0.4]
    assert p.keys == [(1, 10), (1, 11), (3, 30), (3, 31)] and p.no_relevant == 0


# ------------------------------------------------------------ sound pairs, effect sizes, risk (issue 29)
def _systems(n: int, seed: int) -> tuple[dict[int, float], dict[int, float]]:
    rng = np.random.default_rng(seed)
    base = rng.uniform(0.2, 0.8, n)
    return dict(enumerate(base.tolist())), dict(enumerate(np.clip(base + rng.normal(0.02, 0.1, n), 0, 1).tolist()))


PAIRED_FIGURES = ("delta", "queries", "t_p", "perm_p", "t_p_holm", "perm_p_holm", "ci_t", "ci_boot", "d_z", "wins",
                  "ties", "losses", "urisk", "trisk", "georisk", "folds_won")  # fmt: skip


@pytest.mark.parametrize("empty", [0.0, 1.0])  # metric.empty: what every system scores on such a query
def test_queries_without_a_relevant_document_change_no_paired_figure(empty):
    """100 queries without a relevant document added to both systems' runs (and to a third system's): no
    p-value, interval, effect size, risk figure or count of wins changes; the rows say how many were left out."""
    b1, s1 = _systems(40, 1)
    b2, s2 = _systems(30, 2)
    _, t1 = _systems(40, 3)
    _, t2 = _systems(30, 4)

    def rows(extra: int) -> dict[str, dict]:
        empties = {1000 + i: empty for i in range(extra)}
        rel = lambda d: {q: (0 if q >= 1000 else 2) for q in d}  # noqa: E731
        recs = []
        for fold, (b, s, t) in {1: (b1, s1, t1), 2: (b2, s2, t2)}.items():
            for name, sw, perq, final in (("lambdamart", None, b, 0.5), ("mse", 2, s, 0.52), ("q_nrel", 2, t, 0.49)):
                d = {**perq, **empties} if fold == 1 else perq
                recs.append(record(fold, name, sw, [final + 0.01 * fold], d, rel=rel(d)))
        return {r["label"]: r for r in table1(recs, n_perm=300, seed=3, n_boot=500, risk_alphas=(1, 5))}

    before, after = rows(0), rows(100)
    for label in ("MSE-2", "q_nrel-2"):
        assert after[label]["queries"] == 70 and after[label]["queries_no_relevant"] == 100
        assert before[label]["queries_no_relevant"] == 0
        for k in PAIRED_FIGURES:
            assert after[label][k] == before[label][k], (label, k)
        assert before[label]["ci_boot"] is not None and before[label]["urisk"]["5"] is not None
    assert after["LambdaMART"]["georisk"] == before["LambdaMART"]["georisk"] is not None


def test_effect_size_by_hand():
    x = np.array([0.5, 0.7, 0.4, 0.9, 0.3, 0.6])
    y = np.array([0.4, 0.7, 0.5, 0.6, 0.3, 0.2])
    d = x - y  # 0.1, 0, -0.1, 0.3, 0, 0.4
    e = effect_size(x, y, n_resamples=2000, seed=5)
    mean, sd = d.sum() / 6, np.sqrt(((d - d.sum() / 6) ** 2).sum() / 5)
    assert e["delta"] == pytest.approx(0.7 / 6) and e["d_z"] == pytest.approx(mean / sd)
    half = stats.t.ppf(0.975, 5) * sd / np.sqrt(6)
    assert e["ci_t"] == pytest.approx((mean - half, mean + half))
    assert (e["wins"], e["ties"], e["losses"]) == (3, 2, 1)
    lo, hi = e["ci_boot"]
    assert lo < mean < hi and e["ci_boot"] == bootstrap_interval(d, 2000, 5)  # seeded: the same interval again
    assert bootstrap_interval(d, 2000, 6) != e["ci_boot"]
    # the bootstrap and t intervals agree on many queries
    rng = np.random.default_rng(0)
    big = rng.normal(0.01, 0.1, 3000)
    assert bootstrap_interval(big, 2000, 0) == pytest.approx(t_interval(big), abs=0.002)
    # degenerate: one pair, constant differences
    assert effect_size(x[:1], y[:1])["ci_t"] is None and effect_size(x[:1], y[:1])["d_z"] is None
    dyadic = np.array([0.5, 0.75, 0.25, 1.0])  # exact in binary: every difference exactly 0.125
    const = effect_size(dyadic, dyadic - 0.125)
    assert const["ci_t"] == (0.125, 0.125) and const["ci_boot"] == (0.125, 0.125) and const["d_z"] is None
    # a tie within TIE_TOLERANCE (1e-12): the mean of three equal NDCG values can differ from the value by an ulp
    a = 0.8132702392002724
    assert np.mean([a, a, a]) - a == pytest.approx(1.1e-16, rel=0.01)  # one ulp: counted a win before
    near = effect_size(np.array([np.mean([a, a, a]), 0.5, 0.3, 0.4]), np.array([a, 0.5 - 1e-16, 0.2, 0.4 + 1e-9]))
    assert (near["wins"], near["ties"], near["losses"]) == (1, 2, 1)  # d: 1.1e-16 and ~1e-16 tie; 0.1 wins; -1e-9 loses


def test_urisk_and_trisk_by_hand():
    x = np.array([0.6, 0.2, 0.5, 0.9])
    y = np.array([0.4, 0.5, 0.5, 0.8])
    # differences 0.2, -0.3, 0, 0.1; wins 0.3 in all, one loss of 0.3
    assert urisk(x, y, 0) == pytest.approx((0.2 - 0.3 + 0 + 0.1) / 4)
    assert urisk(x, y, 1) == pytest.approx((0.2 + 0.1 - 2 * 0.3) / 4)
    assert urisk(x, y, 5) == pytest.approx((0.2 + 0.1 - 6 * 0.3) / 4)
    u = np.array([0.2, -0.6, 0.0, 0.1])  # alpha 1
    se = np.sqrt(((u - u.mean()) ** 2).sum() / 3) / 2
    assert trisk(x, y, 1) == pytest.approx(u.mean() / se)
    assert trisk(x, y, 1) == pytest.approx(stats.ttest_1samp(u, 0).statistic)
    assert trisk(x[:1], y[:1], 1) is None and urisk(x[:0], y[:0], 1) is None


def test_georisk_by_hand():
    x = np.array([[0.5, 0.3], [0.2, 0.4], [0.0, 0.0]])  # 3 queries x 2 systems; nobody scores on the third
    s, t, n, c = np.array([0.7, 0.7]), np.array([0.8, 0.6, 0.0]), 1.4, 3
    e = np.outer(t, s) / n  # 0.4 0.4 / 0.3 0.3 / 0 0
    z0 = [(0.5 - 0.4) / np.sqrt(0.4), (0.2 - 0.3) / np.sqrt(0.3), 0.0]
    z1 = [(0.3 - 0.4) / np.sqrt(0.4), (0.4 - 0.3) / np.sqrt(0.3), 0.0]
    assert e[0, 0] == pytest.approx(0.4)
    for alpha in (0.0, 1.0, 5.0):
        zr0 = z0[0] + (1 + alpha) * z0[1]
        zr1 = (1 + alpha) * z1[0] + z1[1]
        want = [np.sqrt(s[0] / c * stats.norm.cdf(zr0 / c)), np.sqrt(s[1] / c * stats.norm.cdf(zr1 / c))]
        np.testing.assert_allclose(georisk(x, alpha), want, rtol=1e-12)
    # the system that loses on the query where the other wins by less ranks lower as alpha grows
    assert georisk(x, 5.0)[0] < georisk(x, 5.0)[1]
    with pytest.raises(ReportError, match="non-negative"):
        georisk(-x, 1.0)


def test_runs_without_relevance_counts_are_refused():
    base = [record(1, "lambdamart", None, [0.5], {1: 0.5, 2: 0.4})]
    old = [record(1, "mse", 2, [0.6], {1: 0.6, 2: 0.4}, run_id="old1")]
    old[0].relevant = None
    with pytest.raises(ReportError, match=r"MSE-2 fold 1 \(run old1\): its per_query_test.json has no relevant"):
        table1(base + old)
    other = [record(1, "mse", 2, [0.6], {1: 0.6, 2: 0.4}, rel={1: 1, 2: 0}, run_id="m1")]
    with pytest.raises(ReportError, match="count relevant documents differently for 1 test queries"):
        paired_samples(other, base)


def test_latex_tables_mark_significance_as_ranx_does_and_csv_has_every_query():
    """A mean significantly better than the baseline carries the baseline's letter, one significantly worse
    the loss mark before it, by the primary test's Holm-corrected p (the caption says which test); the
    caption says what Mean and what the paired figures cover."""
    import csv
    import io

    from pipelines.report.latex import LOSS_MARK, per_query_csv, risk_tex, table1_tex

    rng = np.random.default_rng(7)
    b = rng.uniform(0.2, 0.8, 60)
    recs = [record(1, "lambdamart", None, [0.5], dict(enumerate(b.tolist())))]
    recs.append(record(1, "mse", 2, [0.6], dict(enumerate((b + 0.1).tolist()))))  # better on every query
    recs.append(record(1, "q_nrel", 2, [0.4], dict(enumerate((b - rng.uniform(0, 0.01, 60)).tolist()))))  # worse
    t1 = table1(recs, n_perm=100, n_boot=100)
    tex = table1_tex(t1, "NDCG@10")
    assert tex.count(r"\toprule") == 1 and r"\bottomrule" in tex and r"\caption{" in tex
    lines = {line.split(" & ")[0]: line for line in tex.splitlines() if line.startswith("(")}
    assert lines["(b) MSE-2"].split(" & ")[1] == r"0.6000\textsuperscript{a}"  # better than (a), the baseline
    rows1 = {r["label"]: r for r in t1}
    assert rows1["q_nrel-2"]["perm_p_holm"] < 0.05 and rows1["q_nrel-2"]["delta"] < 0  # worse on every query
    assert lines[r"(c) q\_nrel-2"].split(" & ")[1] == rf"0.4000\textsuperscript{{{LOSS_MARK}a}}"
    assert r"\textsuperscript" not in lines["(a) LambdaMART"]
    assert "randomisation test, two-sided, Holm-corrected" in tex and "significantly worse" in tex
    assert "over every test query" in tex and "relevant document only" in tex
    # the primary test decides: significant by the t-test only, marked with primary_test="t" only
    split = [dict(r) for r in t1]
    split[1].update(t_p_holm=0.01, perm_p_holm=0.2)
    split[2].update(t_p_holm=0.2, perm_p_holm=0.01)

    def means(text: str) -> dict[str, str]:
        return {x.split(" & ")[0]: x.split(" & ")[1] for x in text.splitlines() if x.startswith("(")}

    by_t, by_r = means(table1_tex(split, "NDCG@10", "t")), means(table1_tex(split, "NDCG@10"))
    assert by_t["(b) MSE-2"] == r"0.6000\textsuperscript{a}" and by_r["(b) MSE-2"] == "0.6000"
    assert by_t[r"(c) q\_nrel-2"] == "0.4000" and by_r[r"(c) q\_nrel-2"].endswith(f"{LOSS_MARK}a}}")
    assert "(paired t-test, two-sided" in table1_tex(split, "NDCG@10", "t")
    assert "GeoRisk$_{5}$" in risk_tex(t1, [1.0, 5.0])
    rows = list(csv.DictReader(io.StringIO(per_query_csv(recs, "ndcg_at_10"))))
    assert len(rows) == 180 and {r["system"] for r in rows} == {"LambdaMART", "MSE-2", "q_nrel-2"}
    first = next(r for r in rows if r["system"] == "MSE-2" and r["qid"] == "3")
    assert float(first["ndcg_at_10"]) == recs[1].per_query[3] and first["relevant"] == "1"


def test_the_effect_by_difficulty_in_quartiles(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from pipelines.report.by_difficulty import by_difficulty, load_scores

    # 2 folds x 8 test queries; query q's BM25 NDCG is q / 10: the system gains 0.1 on the 4 hardest of a fold
    base, sys_ = [], []
    for f in (1, 2):
        qs = range(10 * f, 10 * f + 8)
        b = {q: 0.5 for q in qs}
        base.append(record(f, "lambdamart", None, [0.5], b))
        sys_.append(record(f, "mse", 2, [0.5], {q: 0.6 if q % 10 < 4 else 0.5 for q in qs}))
    subset = {1: "S5", 2: "S1"}
    rows = [(subset[f], q, q % 10 / 10, 0.3, 1 + q % 10 // 4) for f in (1, 2) for q in range(10 * f, 10 * f + 8)]
    rows.append(("S2", 10, 0.9, 0.9, 9))  # the same qid in another subset (not a test query of fold 1)
    folder = tmp_path / "scores"
    folder.mkdir()
    cols = list(zip(*rows, strict=True))
    pq.write_table(
        pa.table({"subset": cols[0], "qid": cols[1], "ndcg_bm25": cols[2], "ndcg_pagerank": cols[3], "n_rel": cols[4]}),
        folder / "part-0.parquet",
    )
    with pytest.raises(ReportError, match="appear in several subsets"):
        load_scores(str(folder), None, [1, 2])  # qid 10 twice and no manifest to tell
    data = tmp_path / "ds"
    data.mkdir()
    (data / "_manifest.json").write_text(json.dumps({"folds": {"1": {"test": ["S5"]}, "2": {"test": ["S1"]}}}))
    scores = load_scores(str(folder), str(data), [1, 2])
    assert scores[(1, 10)]["ndcg_bm25"] == 0.0 and len(scores) == 16
    t = by_difficulty(base + sys_, scores)
    bm25 = t["ndcg_bm25"]
    assert len(bm25["edges"]) == 5 and bm25["systems"]["MSE-2"][0]["n"] == 4
    assert [c["delta"] for c in bm25["systems"]["MSE-2"]] == pytest.approx([0.1, 0.1, 0.0, 0.0])
    assert bm25["systems"]["MSE-2"][0]["ci_t"] == pytest.approx((0.1, 0.1))
    # PageRank's NDCG is one value for every query: one bin holding all 16
    assert [c["n"] for c in t["ndcg_pagerank"]["systems"]["MSE-2"]] == [16]
    from pipelines.report.latex import difficulty_tex

    latex = difficulty_tex(t, "NDCG@10")
    assert latex.count(r"\begin{table}") == len(t) and "MSE-2 & +0.1000 (4) & +0.1000 (4)" in latex
    # the systems in Table 1's order (baseline's comparisons: MSE-t by switch, then the other strategies), not in
    # the order MLflow lists the runs
    others = [
        record(f, name, sw, [0.5], {q: 0.5 for q in range(10 * f, 10 * f + 8)})
        for name, sw in (("q_nrel", 2), ("mse", 4))
        for f in (1, 2)
    ]
    t = by_difficulty(others + sys_ + base, scores)
    assert list(t["ndcg_bm25"]["systems"]) == ["MSE-2", "MSE-4", "q_nrel-2"]
    assert list(t["n_rel"]["systems"]) == [r["label"] for r in table1(others + sys_ + base, n_perm=10)][1:]


def test_convergence_by_hand():
    base = [
        record(1, "lambdamart", None, [0.1, 0.2, 0.3, 0.35], vali=[0.1, 0.2, 0.3, 0.4]),
        record(2, "lambdamart", None, [0.1, 0.2, 0.3, 0.35], vali=[0.2, 0.3, 0.5, 0.5]),
    ]
    mse = [
        record(1, "mse", 2, [0.3, 0.33, 0.36, 0.34], vali=[0.2, 0.39, 0.45, 0.44]),
        record(2, "mse", 2, [0.3, 0.33, 0.36, 0.34], vali=[0.2, 0.3, 0.4, 0.45]),  # never 0.99 x 0.5
    ]
    rows = {r["label"]: r for r in convergence(base + mse, 0.99)}
    m = rows["MSE-2"]
    assert m["per_fold"][0] == {
        "fold": 1,
        "target": pytest.approx(0.396),
        "trees_to_target": 3,  # 0.39 < 0.396 <= 0.45
        "best_iteration": 3,
        "test_at_best": 0.36,
        "vali_auc": pytest.approx((0.2 + 0.39 + 0.45 + 0.44) / 4),
    }
    assert m["per_fold"][1]["trees_to_target"] is None and m["per_fold"][1]["best_iteration"] == 4
    # median of {3, never}: (3 + "more than 4") / 2 is more than T = 4 trees: None, the range [3, never]
    assert (m["reached"], m["folds"], m["trees_to_target"], m["max_trees"]) == (1, 2, None, 4)
    assert m["trees_to_target_range"] == [3, None]
    assert m["best_iteration"] == 3.5 and m["test_at_best"] == pytest.approx((0.36 + 0.34) / 2)
    b = rows["LambdaMART"]  # the baseline reaches 0.99 of its own final value: fold 1 at tree 4, fold 2 at tree 3
    assert b["trees_to_target"] == 3.5 and b["best_iteration"] == 3.5  # fold 2's first maximum: tree 3
    assert b["trees_to_target_range"] == [3, 4] and b["reached"] == 2
    half = convergence(base + mse, 0.5)[1]  # fold 1 at tree 1 (0.2 >= 0.2), fold 2 at 2: median (1 + 2) / 2
    assert (half["trees_to_target"], half["trees_to_target_range"]) == (1.5, [1, 2])
    # 5 folds (baseline final vali 0.5, target 0.99 x 0.5 = 0.495): q_nrel-2 gets there at tree 1 on folds 1-2 and
    # never on 3-5; MSE-2 at tree 3 on every fold. The old mean over reaching folds said 1.0 vs 3.0, q_nrel-2
    # faster; the median: sorted {1, 1, never, never, never}, the third is never -> None (> 4 trees) vs 3.0
    five = [record(f, "lambdamart", None, [0.1, 0.2, 0.3, 0.4], vali=[0.2, 0.3, 0.4, 0.5]) for f in range(1, 6)]
    fast = [0.5, 0.5, 0.5, 0.5]
    slow = [0.1, 0.2, 0.3, 0.4]
    five += [record(f, "q_nrel", 2, [0.3] * 4, vali=fast if f <= 2 else slow) for f in range(1, 6)]
    five += [record(f, "mse", 2, [0.3] * 4, vali=[0.1, 0.2, 0.5, 0.5]) for f in range(1, 6)]
    rows5 = {r["label"]: r for r in convergence(five, 0.99)}
    q, s = rows5["q_nrel-2"], rows5["MSE-2"]
    assert (q["reached"], q["folds"], q["trees_to_target"], q["trees_to_target_range"]) == (2, 5, None, [1, None])
    assert (s["reached"], s["trees_to_target"], s["trees_to_target_range"], s["max_trees"]) == (5, 3.0, [3, 3], 4)
    # 3 of 5 reaching (folds 1-3 at tree 1): sorted {1, 1, 1, never, never}, the median is the third: 1
    three = five[:5] + [record(f, "q_nrel", 2, [0.3] * 4, vali=fast if f <= 3 else slow) for f in range(1, 6)]
    assert convergence(three, 0.99)[1]["trees_to_target"] == 1.0


# ------------------------------------------------------------ Table 1
def test_table1_holm_over_the_comparisons_and_missing_folds():
    q = {1: 0.5, 2: 0.4, 3: 0.6, 4: 0.3}
    base = [record(f, "lambdamart", None, [0.5], q) for f in (1, 2, 3)]
    a = [record(f, "mse", 2, [0.55], {k: v + 0.05 + 0.01 * k for k, v in q.items()}) for f in (1, 2, 3)]
    b = [record(f, "q_nrel", 2, [0.52], {k: v + (0.02 if k % 2 else -0.01) for k, v in q.items()}) for f in (1, 2)]
    rows = {r["label"]: r for r in table1(base + a + b, n_perm=500, seed=0, folds=[1, 2, 3])}
    ra, rb = rows["MSE-2"], rows["q_nrel-2"]
    assert ra["t_p_holm"] == pytest.approx(holm([ra["t_p"], rb["t_p"]])[0])
    assert rb["perm_p_holm"] == pytest.approx(holm([ra["perm_p"], rb["perm_p"]])[1])
    assert (rb["folds"], rb["folds_expected"], rb["missing_folds"], rb["queries"]) == (2, 3, [3], 8)
    assert ra["missing_folds"] == [] and rows["LambdaMART"]["t_p"] is None
    md, page = render(list(rows.values()), None, None, _meta())
    assert "0.5200 ± 0.0000 [2/3 folds]" in md and "0.5500 ± 0.0000 |" in md
    assert "[k/3 folds]: the cell averages only the k folds" in md
    assert "mean ± standard deviation over the grid's 3 folds" in md
    assert "| t-test p | t-test p, Holm | randomisation p | randomisation p, Holm |" in md
    assert "raw and Holm-corrected side by side" in md and "<th>t-test p, Holm</th>" in page


def _meta(**extra):
    return {
        "title": "t",
        "experiment": "e",
        "parent": "p",
        "status": "FINISHED",
        "folds": [1, 2, 3],
        "data": "d",
        "fingerprint": "sha256:x",
        "metric": "NDCG@10: ...",
        "metric_name": "ndcg_at_10",
        "n_perm": 500,
        "seed": 0,
        **extra,
    }


# ------------------------------------------------------------ Table 2
def test_default_table2_sizes_are_chosen_on_validation():
    steps = list(range(1, 11))
    base = [0.05 * k for k in steps]  # LambdaMART's best within T = 10 trees: 0.5
    # MSE-t first exceeds 0.5 at 6 trees: n_max = 5; sizes nearest 5/3, 10/3, 5
    assert default_table2_sizes(steps, base, [0.1 * k for k in steps]) == ([2, 3, 5], 5)
    # never exceeds it: up to T
    assert default_table2_sizes(steps, base, [0.04 * k for k in steps]) == ([3, 7, 10], 10)
    # better from the first tree: the first point only (the table then says > T)
    assert default_table2_sizes(steps, base, [0.9] * 10) == ([1], 1)
    # curve points every 10 trees (train.eval_every = 10), exceeding at 70: 20, 40, 60
    tens = list(range(10, 101, 10))
    assert default_table2_sizes(tens, [0.5] * 10, [0.1, 0.2, 0.3, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8, 0.9]) == (
        [20, 40, 60],
        60,
    )


def test_table2_says_more_than_T_when_the_baseline_never_gets_there():
    base = [record(f, "lambdamart", None, [0.1, 0.2, 0.3, 0.4]) for f in (1, 2)]
    mse = [record(f, "mse", 2, [0.15, 0.35, 0.45, 0.5]) for f in (1, 2)]
    # default sizes: MSE-2's vali curve (= its test curve here) exceeds LambdaMART's best (0.4) at 3 trees,
    # so n_max = 2 and the sizes are 1 and 2; LambdaMART reaches 0.15 at 2 trees and 0.35 at 4
    t2 = table2(base + mse)
    assert [(r["size"], r["mse_ndcg"], r["baseline_trees"]) for r in t2["rows"]] == [(1, 0.15, 2), (2, 0.35, 4)]
    assert t2["sizes_from"].startswith("chosen on validation, evenly spaced up to 2 trees")
    t2 = table2(base + mse, [1, 3])
    assert [(r["size"], r["baseline_trees"], r["ratio"]) for r in t2["rows"]] == [(1, 2, 2.0), (3, None, None)]
    md, _ = render([], t2, None, _meta())
    assert "| 1 | 0.1500 | 2 | 2.00 |" in md and "| 3 | 0.4500 | > 4 | > 1.33 |" in md
    assert "best mean final NDCG@10 on validation (MSE-2 0.5000)" in md and "Sizes: report.table2_sizes." in md
    with pytest.raises(ReportError, match=r"report.table2_sizes \[2, 5\]: \[5\] exceed the 4 trees"):
        table2(base + mse, [2, 5])


def test_table2_means_over_the_folds_all_have():
    base = [record(f, "lambdamart", None, [0.1, 0.2, 0.3, 0.4]) for f in (1, 2)]
    # MSE-1 is best on fold 1 alone, MSE-2 on the folds both have: the choice uses folds common to all
    m1 = [record(1, "mse", 1, [0.2, 0.2, 0.2, 0.2], vali=[0.3] * 4)]
    m2 = [record(f, "mse", 2, [0.3, 0.3, 0.3, 0.3], vali=[0.9 if f == 2 else 0.2] * 4) for f in (1, 2)]
    t2 = table2(base + m1 + m2, [1])
    assert t2["folds"] == [1] and t2["mse"] == "MSE-1"


def test_seed_repetitions_are_averaged_query_by_query_and_their_spread_reported():
    """grid.seeds: Table 1 tests one score per query, its mean over the seeds (n = queries, not seeds x
    queries); the seeds table gives each seed's mean final NDCG and difference, and their mean and sd."""
    from dataclasses import replace

    from pipelines.report.seeds import average_seeds

    rel = {1: 1, 2: 1, 3: 0}
    base = [record(f, "lambdamart", None, [0.5], {1: 0.5, 2: 0.5, 3: 1.0}, rel=rel, run_id=f"b{f}") for f in (1, 2)]
    seeds = {  # (fold, seed) -> per-query NDCG of random-4
        (1, 0): {1: 0.7, 2: 0.3, 3: 1.0},
        (1, 1): {1: 0.9, 2: 0.5, 3: 1.0},
        (2, 0): {1: 0.6, 2: 0.6, 3: 1.0},
        (2, 1): {1: 0.2, 2: 0.4, 3: 1.0},
    }
    runs = [
        replace(record(f, "random", 4, [float(np.mean(list(v.values())))], v, rel=rel, run_id=f"r{f}{s}"), seed=s)
        for (f, s), v in seeds.items()
    ]
    recs, rows = average_seeds(base + runs)
    avg = {r.fold: r for r in recs if r.strategy == "random"}
    assert avg[1].per_query == pytest.approx({1: 0.8, 2: 0.4, 3: 1.0}) and avg[1].seeds == 2
    assert avg[2].per_query == pytest.approx({1: 0.4, 2: 0.5, 3: 1.0}) and avg[1].run_id == "r10,r11"
    t1 = {r["label"]: r for r in table1(recs, n_perm=100, n_boot=100)}
    assert t1["random-4"]["queries"] == 4 and t1["random-4"]["queries_no_relevant"] == 2
    assert t1["random-4"]["delta"] == pytest.approx(np.mean([0.3, -0.1, -0.1, 0.0]))
    (row,) = rows
    finals = [np.mean([np.mean(list(seeds[(f, s)].values())) for f in (1, 2)]) for s in (0, 1)]
    deltas = [np.mean([0.2, -0.2, 0.1, 0.1]), np.mean([0.4, 0.0, -0.3, -0.1])]
    assert [p["final"] for p in row["per_seed"]] == pytest.approx(finals)
    assert [p["delta"] for p in row["per_seed"]] == pytest.approx(deltas)
    assert row["delta_sd"] == pytest.approx(np.std(deltas, ddof=1)) and row["seeds"] == [0, 1]
    md, _ = render(table1(recs, n_perm=10, n_boot=10), None, None, _meta(seeds=rows))
    assert "## Seeds: final NDCG@10 on test" in md and "| random-4 | 2 |" in md
    from pipelines.report.latex import seeds_tex

    assert f"random-4 & 2 & {np.mean(finals):.4f} & {np.std(finals, ddof=1):.4f}" in seeds_tex(rows, "NDCG@10")
    with pytest.raises(ReportError, match=r"random-4 fold 1: seed 1 \(run r11\) was tested on other queries"):
        average_seeds([runs[0], replace(runs[1], per_query={1: 0.1})])


# ------------------------------------------------------------ config
def test_report_config():
    assert ReportConfig().table2_sizes == []
    assert load_config(None, ["report.table2_sizes=[20, 40]"]).report.table2_sizes == [20, 40]
    with pytest.raises(ConfigError, match=r"report.table2_sizes must each be >= 1 \(numbers of trees\), got \[0, 20\]"):
        load_config(None, ["report.table2_sizes=[0, 20]"])
    with pytest.raises(ConfigError, match=r"report.permutations must be >= 1, got 0"):
        load_config(None, ["report.permutations=0"])
    assert load_config(conf_dir() / "paper.yaml").report.table2_sizes == [100, 200, 300]


# ------------------------------------------------------------ a grid written into MLflow
def _child(
    tracker, parent, fold, strategy, switch, test, vali, qids, status="FINISHED", git="abc", key="k", counts=True
):
    t = tracker.client.create_run(
        tracker.experiment_id,
        run_name=f"fold{fold}/{strategy}",
        tags={
            TAG_KIND: "child",
            TAG_PARENT: parent,
            TAG_FOLD: str(fold),
            TAG_STRATEGY: strategy,
            TAG_SWITCH: "" if switch is None else str(switch),
            "ltr.child_key": f"{key}-{fold}-{strategy}-{switch}",
        },
    )
    rid = t.info.run_id
    tracker.log_params(
        rid,
        {
            "metric": "NDCG@10: gain 2^label-1",
            **{f"metric.{k}": v for k, v in metrics.NdcgSpec().to_dict().items()},
            "code.ltr": "0.1",
            "code.git": git,
            "code.xgboost": "3.0.0",
            "code.pyspark": "4.0",
            "code.numpy": "2.0",
        },
    )
    steps = list(range(1, len(test) + 1))
    tracker.log_history(rid, "ndcg_at_10_test", steps, test)
    tracker.log_history(rid, "ndcg_at_10_vali", steps, vali)
    # 12 documents a query; the labels are the fold's (every system), the scores the system's; query x5 has no
    # relevant document; one tie of different labels in query x0's top 10. NDCG@10 by the trainer's function.
    labels = np.random.default_rng(fold).integers(0, 5, size=(len(qids), 12)).astype(np.int8)
    labels[:, 0] = np.where(labels[:, 0] == 0, 1, labels[:, 0])  # x5 aside, at least one relevant document
    labels[[i for i, q in enumerate(qids) if q % 10 == 5]] = 0
    rng = np.random.default_rng(fold * 100 + len(strategy) + (switch or 0))
    scores = rng.normal(size=labels.shape).astype(np.float32)
    labels[0, :2] = [0, 4]
    scores[0, :2] = scores[0].max() + 1.0  # ranks 1 and 2 tied, different labels
    offsets = np.arange(0, labels.size + 1, 12)
    ndcg = metrics.ndcg(offsets, labels.ravel(), scores.ravel(), metrics.NdcgSpec()).tolist()
    relevant = (labels > 0).sum(axis=1).tolist()
    perq = {"qid": qids, "ndcg_at_10": ndcg, **({"relevant": relevant} if counts else {})}
    tracker.log_text(rid, json.dumps(perq), "per_query_test.json")
    if counts:  # a run of today's ltr: every test document's final score
        doc = np.tile(np.arange(12, dtype=np.int32), len(qids))
        arrays = {"qid": np.repeat(qids, 12), "doc": doc, "label": labels.ravel(), "score": scores.ravel()}
        tracker.log_text(rid, scores_npz(arrays), "test_scores.npz")
    tracker.log_text(rid, json.dumps({"runs": [], "score_dists": []}), "training.json")
    tracker.finish(rid, status)
    return rid


@pytest.fixture(scope="module")
def fake_grid(tmp_path_factory):
    """Folds 1..3: the baseline finished on every fold, MSE-2 on folds 1 and 2 (fold 3 FAILED), MSE-3 on
    folds 1..3; one run with another git commit. The parent is FINISHED."""
    work = tmp_path_factory.mktemp("fake") / "work"
    work.mkdir()
    cfg = load_config(None, [f"work_dir={work}", "grid.experiment=fake-grid"])
    tracker = Tracker.for_config(cfg)
    parent = tracker.client.create_run(tracker.experiment_id, run_name="fake-grid", tags={TAG_KIND: "grid"})
    pid = parent.info.run_id
    tracker.log_params(
        pid, {"folds": [1, 2, 3], "data": "/d", "data_fingerprint": "sha256:ff", "metric": "NDCG@10: gain 2^label-1"}
    )
    curve = [0.1, 0.2, 0.3, 0.4]
    for f in (1, 2, 3):
        q = [10 * f + i for i in range(6)]
        _child(tracker, pid, f, "lambdamart", None, curve, curve, q)
        _child(
            tracker,
            pid,
            f,
            "mse",
            2,
            [0.25, 0.3, 0.35, 0.45],
            [0.2, 0.3, 0.3, 0.5],
            q,
            status="FAILED" if f == 3 else "FINISHED",
        )
        _child(
            tracker, pid, f, "mse", 3, [0.2, 0.25, 0.3, 0.42], [0.2, 0.3, 0.3, 0.4], q, git="def" if f == 3 else "abc"
        )
    tracker.finish(pid)
    return cfg, tracker, pid


def test_report_of_a_grid_with_missing_folds_and_mixed_code(fake_grid, tmp_path):
    cfg, tracker, pid = fake_grid
    r = _report(tracker, str(tmp_path / "r"), permutations=100)  # the latest finished grid
    assert r["parent"] == pid and r["records"] == 8
    assert r["problems"] == ["1 child run not finished (fold3/MSE-2 FAILED)", "finished runs missing for MSE-2: fold 3"]
    assert r["versions"]["git"] == {"abc": 7, "def": 1}
    md = (tmp_path / "r" / "report.md").read_text()
    assert (
        "- **Warning: this grid is unfinished**: 1 child run not finished (fold3/MSE-2 FAILED); finished runs "
        "missing for MSE-2: fold 3. The tables use the finished child runs only."
    ) in md
    assert "**Warning: the children of this grid ran different code**: git: `abc` (7 runs), `def` (1 run)" in md
    assert "- Code of the runs: ltr `0.1`, git (differs), xgboost `3.0.0`, pyspark `4.0`, numpy `2.0`" in md
    assert "[2/3 folds]" in md and "grid folds [1, 2, 3]" in md
    # Table 2: MSE-2 has the best validation NDCG (0.5 vs 0.4), over the folds all finished (1, 2);
    # default sizes: its vali curve exceeds LambdaMART's best (0.4) at 4 trees -> 1, 2, 3;
    # its test NDCG there 0.25, 0.3, 0.35: LambdaMART reaches them at 3, 3, 4 trees
    t2 = r["table2"]
    assert (t2["mse"], t2["folds"], [(x["size"], x["baseline_trees"]) for x in t2["rows"]]) == (
        "MSE-2",
        [1, 2],
        [(1, 3), (2, 3), (3, 4)],
    )
    assert json.loads((tmp_path / "r" / "table2.json").read_text())["selected_on"] == "vali"
    # the paired figures leave out query x5 of each fold (no relevant document): MSE-3 pairs 3 folds x 5 queries
    rows = {x["label"]: x for x in r["table1"]}
    assert (rows["MSE-3"]["queries"], rows["MSE-3"]["queries_no_relevant"]) == (15, 3)
    assert (rows["MSE-2"]["queries"], rows["MSE-2"]["queries_no_relevant"]) == (10, 2)
    assert "| MSE-3 | " in md.split("## Effect sizes and risk against LambdaMART")[1]
    assert "## Folds side by side" in md and "## Convergence: chosen on validation, reported on test" in md
    conv = {x["label"]: x for x in json.loads((tmp_path / "r" / "convergence.json").read_text())}
    assert conv["MSE-2"]["folds"] == 2 and conv["LambdaMART"]["folds"] == 3
    for name in ("table1.tex", "risk.tex", "table2.tex", "convergence.tex", "folds.tex", "per_query.csv"):
        assert (tmp_path / "r" / name).stat().st_size > 0, name
    folds = (tmp_path / "r" / "folds.tex").read_text()
    assert "Fold 1 & Fold 2 & Fold 3 & Mean & Folds won" in folds and r"\toprule" in folds


@pytest.mark.heavy
def test_report_json_and_trec_runs_that_trec_eval_reads(fake_grid, tmp_path):
    """report.json holds every comparison under the documented names; trec_eval (pytrec_eval, the C code) on the
    exported runs and qrels gives back each query's NDCG@10 of the report to 1e-9 (gain 2^label-1 from the
    exp2 qrels), except the one query whose top 10 holds a tie of different labels, which the export counts."""
    import pytrec_eval

    cfg, tracker, pid = fake_grid
    out = tmp_path / "r"
    r = _report(tracker, str(out), pid, permutations=50, bootstrap=200)
    rep = json.loads((out / "report.json").read_text())
    comp = {c["system"]: c for c in rep["comparisons"]}
    assert set(comp) == {"MSE-2", "MSE-3"} and rep["georisk"].keys() == {"LambdaMART", "MSE-3"}
    want = {"system", "baseline", "n", "n_without_relevant", "mean_delta", "ci95_t", "ci95_bootstrap", "d_z", "wins",
            "ties", "losses", "t_p", "t_p_holm", "perm_p", "perm_p_holm", "urisk", "trisk"}  # fmt: skip
    assert want <= comp["MSE-3"].keys() and comp["MSE-3"]["baseline"] == "LambdaMART"
    # every field the report writes is documented (docs/reference/report-json.md), and every documented one written
    from pipelines.report.export import REPORT_FIELDS

    written = {*rep, *(f"settings.{k}" for k in rep["settings"])}
    written |= {f"{name}[].{k}" for name in ("systems", "comparisons") for k in rep[name][0]}
    assert written == set(REPORT_FIELDS)
    row = {x["label"]: x for x in r["table1"]}["MSE-3"]
    assert (comp["MSE-3"]["n"], comp["MSE-3"]["n_without_relevant"]) == (15, 3)
    assert comp["MSE-3"]["ci95_t"] == list(row["ci_t"]) and comp["MSE-3"]["t_p_holm"] == row["t_p_holm"]
    assert comp["MSE-3"]["urisk"].keys() == {"1", "5"} and rep["settings"]["bootstrap"] == 200
    assert (out / "runs" / "MSE-3.fold3.trec").exists()
    names = sorted(p.name for p in (out / "runs").iterdir())
    assert len(names) == 8 and sorted(p.name for p in (out / "qrels").iterdir()) == [
        f"fold{f}.{g}qrels" for f in (1, 2, 3) for g in ("exp2.", "")
    ]
    from pipelines.report.export import load_test_scores

    assert load_test_scores(tracker, pid) is None  # a run without test scores (an older ltr's child): no run file
    kids = {k.info.run_id: k for k in tracker.children(pid)}
    for name in names:
        info = rep["trec"]["runs"][f"runs/{name}"]
        assert info["tied_queries"] == 1 and info["lines"] == 6 * 12
        perq = tracker.load_json(info["run_id"], "per_query_test.json")
        assert kids[info["run_id"]].data.tags[TAG_FOLD] == str(info["fold"])
        run: dict[str, dict[str, float]] = {}
        for line in (out / "runs" / name).read_text().splitlines():
            q, q0, doc, rank, score, tag = line.split()
            assert q0 == "Q0" and tag == info["system"]
            run.setdefault(q, {})[doc] = float(score)
        qrels: dict[str, dict[str, int]] = {}
        for line in (out / "qrels" / f"fold{info['fold']}.exp2.qrels").read_text().splitlines():
            q, _, doc, gain = line.split()
            qrels.setdefault(q, {})[doc] = int(gain)
        got = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10"}).evaluate(run)
        for q, ours, n_rel in zip(perq["qid"], perq["ndcg_at_10"], perq["relevant"], strict=True):
            theirs = got[str(q)]["ndcg_cut_10"]
            if n_rel == 0:  # trec_eval: 0 for a query without relevant documents, the report: metric.empty (1)
                assert (theirs, ours) == (0.0, 1.0)
            elif q % 10 == 0:  # the tie of labels 0 and 4 at ranks 1-2: the report puts position 0 first
                assert theirs > ours
            else:
                assert abs(theirs - ours) < 1e-9, (name, q)


def test_trec_export_follows_the_conventions_the_children_logged():
    """k and the gain of the export come from the children's ``metric.k`` and ``metric.gain`` params: with
    linear gain there is no exp2 qrels file, and ties are counted at the logged k (a tie at ranks 4-5 counts
    at k=5, not at k=3); a run that logged neither is refused by name."""
    from dataclasses import replace

    from pipelines.report.export import trec_files

    scores = {
        "qid": np.repeat([1, 2], 6),
        "doc": np.tile(np.arange(6, dtype=np.int32), 2),
        "label": np.array([3, 2, 1, 0, 2, 0, 1, 0, 0, 0, 0, 0], dtype=np.int8),
        "score": np.array([6, 5, 4, 2, 2, 1, 6, 5, 4, 3, 2, 1], dtype=np.float32),
    }
    rec = record(1, "lambdamart", None, [0.5], perq={1: 0.9, 2: 1.0}, run_id="r1")
    files, info = trec_files([replace(rec, conventions={"k": "5", "gain": "linear"})], {"r1": scores}, 1000)
    assert sorted(files) == ["qrels/fold1.qrels", "runs/LambdaMART.fold1.trec"]
    assert (info["k"], info["gain"], info["runs"]["runs/LambdaMART.fold1.trec"]["tied_queries"]) == (5, "linear", 1)
    files, info = trec_files([replace(rec, conventions={"k": "3", "gain": "exp2"})], {"r1": scores}, 1000)
    assert "qrels/fold1.exp2.qrels" in files and info["runs"]["runs/LambdaMART.fold1.trec"]["tied_queries"] == 0
    with pytest.raises(ReportError, match=r"LambdaMART fold 1 \(run r1\) logged no metric.k and metric.gain"):
        trec_files([rec], {"r1": scores}, 1000)


def test_trec_lines_are_the_bytes_pandas_writes():
    """The run and qrels files' writer (``export._lines``, written for speed) gives the bytes of
    ``DataFrame.to_csv(sep=" ", float_format="%.9g")``, the writer it replaced: integers, floats of every
    magnitude and sign (NaN, infinities, -0), a text field with a space or a quote, booleans, no rows."""
    import io

    import pandas as pd

    from pipelines.report.export import _lines

    def pandas_lines(cols: dict[str, Any]) -> bytes:
        buf = io.StringIO()
        pd.DataFrame(cols).to_csv(buf, sep=" ", header=False, index=False, float_format="%.9g", lineterminator="\n")
        return buf.getvalue().encode()

    rng = np.random.default_rng(0)
    n = 2000
    score = (rng.standard_normal(n) * rng.choice([1e-9, 1.0, 1e6, 1e12], n)).astype(np.float32).astype(np.float64)
    score[:6] = [np.nan, 0.0, -0.0, np.inf, -np.inf, 1e-300]
    cases = [
        {
            "qid": rng.integers(0, 10**6, n),
            "q0": "Q0",
            "docno": rng.integers(0, 10**7, n).astype(np.int32),
            "rank": np.arange(1, n + 1),
            "score": score,
            "tag": "q_bm25-20.seed1",
        },
        {"qid": np.array([1, 2]), "zero": 0, "docno": np.array([3, 4]), "rel": np.array([0, 3], dtype=np.int8)},
        {"x": np.array([1.5]), "tag": 'a "quoted" system'},
        {"x": np.array(["x y", 'q"'], dtype=object), "b": np.array([True, False])},
        {"x": np.array([], dtype=np.float64), "tag": "t"},
    ]
    for cols in cases:
        assert _lines(cols) == pandas_lines(cols)
    assert _lines(cases[0]).count(b"\n") == n


def test_trec_runs_of_a_seeded_system_name_every_seed():
    """With grid.seeds, each seed of a repeated system has its run file ``<label>.seed<i>``, seed 0 too (the tables
    average the seeds, so no file stands for the system alone); a system trained once keeps its bare name."""
    from dataclasses import replace

    from pipelines.report.export import trec_files

    scores = {
        "qid": np.repeat([1, 2], 3),
        "doc": np.tile(np.arange(3, dtype=np.int32), 2),
        "label": np.array([2, 0, 1, 0, 1, 0], dtype=np.int8),
        "score": np.array([3, 2, 1, 1, 2, 3], dtype=np.float32),
    }
    conv = {"k": "10", "gain": "exp2"}
    recs = [replace(record(1, "lambdamart", None, [0.5], {1: 1.0, 2: 0.5}, run_id="b"), conventions=conv)]
    recs += [
        replace(record(1, "random", 4, [0.5], {1: 1.0, 2: 0.5}, run_id=f"r{s}"), seed=s, conventions=conv)
        for s in (0, 1)
    ]
    files, info = trec_files(recs, {"b": scores, "r0": scores}, 1000)
    runs = sorted(n for n in files if n.startswith("runs/"))
    assert runs == ["runs/LambdaMART.fold1.trec", "runs/random-4.seed0.fold1.trec"]
    assert info["without_scores"] == ["random-4 seed 1 fold 1"]
    assert {line.split()[-1] for line in files["runs/random-4.seed0.fold1.trec"].decode().splitlines()} == {
        "random-4.seed0"
    }
    assert info["runs"]["runs/LambdaMART.fold1.trec"]["system"] == "LambdaMART"


@pytest.mark.heavy
def test_the_report_logs_its_figures_on_the_children_once(fake_grid, tmp_path):
    """MLflow's run comparison can sort by what the tables say: each child gets its final NDCG, best vali
    iteration, trees to target and its system's figures against the baseline; a second report adds nothing."""
    cfg, tracker, pid = fake_grid
    r = _report(tracker, str(tmp_path / "a"), pid, permutations=20)
    rows = {x["label"]: x for x in r["table1"]}
    conv = {x["label"]: x for x in r["convergence"]}
    kids = {
        (k.data.tags[TAG_STRATEGY], k.data.tags[TAG_SWITCH], k.data.tags[TAG_FOLD]): k for k in tracker.children(pid)
    }
    m = tracker.client.get_run(kids[("mse", "3", "2")].info.run_id).data.metrics
    assert m["report.delta_ndcg_at_10"] == rows["MSE-3"]["delta"] and m["report.d_z"] == rows["MSE-3"]["d_z"]
    assert m["report.t_p_holm"] == rows["MSE-3"]["t_p_holm"]
    assert m["report.urisk_alpha1"] == rows["MSE-3"]["urisk"]["1"]
    fold2 = next(p for p in conv["MSE-3"]["per_fold"] if p["fold"] == 2)
    assert m["report.best_vali_iteration"] == fold2["best_iteration"] and m["final_ndcg_at_10_test"] == 0.42
    base = tracker.client.get_run(kids[("lambdamart", "", "1")].info.run_id).data.metrics
    assert "report.delta_ndcg_at_10" not in base and base["report.trees_to_target"] == 4  # no NaN for "none"
    _report(tracker, str(tmp_path / "b"), pid, permutations=30)
    for k in kids.values():
        if k.info.status == "FINISHED":
            hist = tracker.client.get_metric_history(k.info.run_id, "report.best_vali_iteration")
            assert len(hist) == 1, k.info.run_name


def test_report_on_an_unknown_or_unfinished_grid(fake_grid, tmp_path):
    cfg, tracker, pid = fake_grid
    with pytest.raises(
        ReportError,
        match=r"--experiment: no MLflow experiment 'fake-gird' at sqlite:///.*; "
        r"existing experiments: Default, fake-grid",
    ):
        open_tracker(cfg, "fake-gird")
    assert tracker.client.get_experiment_by_name("fake-gird") is None
    with pytest.raises(ReportError, match=r"--run-id nope: no such run"):
        _report(tracker, str(tmp_path / "x"), "nope")
    child = tracker.children(pid)[0].info.run_id
    with pytest.raises(ReportError, match=rf"--run-id {child}: not a grid's parent run \(tag ltr.kind = 'child'\)"):
        _report(tracker, str(tmp_path / "x"), child)
    empty = load_config(None, [f"work_dir={tmp_path / 'none'}"])
    with pytest.raises(ReportError, match=r"no MLflow tracking database .*none/mlflow.db: run `ltr grid` first"):
        open_tracker(empty)
    assert not os.path.exists(tmp_path / "none")


@pytest.mark.heavy
def test_report_reads_the_latest_finished_grid_or_says_it_is_unfinished(fake_grid, tmp_path):
    cfg, tracker, pid = fake_grid
    newer = tracker.client.create_run(tracker.experiment_id, run_name="newer", tags={TAG_KIND: "grid"})
    try:
        assert _report(tracker, str(tmp_path / "a"), permutations=20)["parent"] == pid  # not the RUNNING one
        tracker.client.update_run(pid, status="FAILED")
        with pytest.raises(
            ReportError,
            match=rf"experiment 'fake-grid' has no finished grid; the latest grid run "
            rf"{newer.info.run_id} is RUNNING: resume it with `ltr grid`, or pass "
            rf"--run-id {newer.info.run_id}",
        ):
            _report(tracker, str(tmp_path / "b"), permutations=20)
        r = _report(tracker, str(tmp_path / "c"), pid, permutations=20)
        assert r["status"] == "FAILED" and r["problems"][0] == "parent run status FAILED"
        assert (
            "- **Warning: this grid is unfinished**: parent run status FAILED; 1 child run"
            in (tmp_path / "c" / "report.md").read_text()
        )
    finally:
        tracker.client.update_run(pid, status="FINISHED")
        tracker.client.delete_run(newer.info.run_id)


@pytest.mark.heavy
def test_ltr_report_command(fake_grid, tmp_path, capsys):
    from pipelines.app.cli import main

    cfg, tracker, pid = fake_grid
    common = ["--set", f"work_dir={cfg.work_dir}", "--out", str(tmp_path / "r"), "--set", "report.permutations=20"]
    assert main(["report", "--experiment", "fake-gird", *common]) == 2
    err = capsys.readouterr().err
    assert "ltr report: error: --experiment: no MLflow experiment 'fake-gird'" in err and "fake-grid" in err
    assert tracker.client.get_experiment_by_name("fake-gird") is None and not (tmp_path / "r").exists()
    assert main(["report", "--experiment", "fake-grid", "--run-id", " ", *common]) == 2  # a template found none
    assert "--run-id is empty" in capsys.readouterr().err
    assert (
        main(["report", "--experiment", "fake-grid", "--run-id", pid, *common, "--set", "report.table2_sizes=[1, 4]"])
        == 0
    )
    t2 = json.loads((tmp_path / "r" / "table2.json").read_text())
    assert [(r["size"], r["baseline_trees"]) for r in t2["rows"]] == [(1, 3), (4, None)]
    assert "(unfinished grid)" in capsys.readouterr().err


@pytest.mark.heavy
def test_copies_of_one_child_are_reported_once_and_different_results_refused(tmp_path):
    """Two FINISHED runs of one child with the same key (one result logged twice, as a scheduler running units
    at once made them before children were owned) are reported once, the copies named with the command that
    deletes them; runs of different training for one table cell, or two values at one step, are errors."""
    cfg = load_config(None, [f"work_dir={tmp_path}", "grid.experiment=dups"])
    tracker = Tracker.for_config(cfg)
    pid = tracker.client.create_run(tracker.experiment_id, run_name="dups", tags={TAG_KIND: "grid"}).info.run_id
    tracker.log_params(pid, {"folds": [1], "metric": "NDCG@10: gain 2^label-1"})
    curve, q = [0.1, 0.2, 0.3], list(range(6))
    first = _child(tracker, pid, 1, "lambdamart", None, curve, curve, q)
    copy = _child(tracker, pid, 1, "lambdamart", None, curve, curve, q)
    tracker.log_history(copy, "ndcg_at_10_test", [2], [0.2])  # a batch logged twice: same value, same step
    _child(tracker, pid, 1, "mse", 2, curve, curve, q)
    tracker.finish(pid)
    r = _report(tracker, str(tmp_path / "r"), pid, permutations=20)
    assert r["records"] == 2
    assert r["problems"] == [
        f"LambdaMART fold 1: 2 finished runs of the same child (key k-1-lambdamart-None, the "
        f"same checkpoints): reporting {first}; remove the copies with "
        f"mlflow runs delete --run-id {copy}"
    ]
    tracker.log_history(first, "ndcg_at_10_test", [3], [0.9])
    with pytest.raises(ReportError, match=rf"run {first}: ndcg_at_10_test has two values at step 3 \(0.3, 0.9\)"):
        _report(tracker, str(tmp_path / "r2"), pid, permutations=20)
    other = _child(tracker, pid, 1, "mse", 2, curve, curve, q, key="other")
    with pytest.raises(ReportError, match=rf"MSE-2: fold 1 has 2 finished runs of different training \(.*{other}"):
        _report(tracker, str(tmp_path / "r3"), pid, permutations=20)


def test_the_config_s_primary_tests_are_the_report_s():
    """``report.primary_test``'s choices are declared with the config (which cannot import the report, a higher
    layer): they must be the report's paired tests (pipelines.report.significance), no more and no fewer."""
    from pipelines.core.config import PRIMARY_TESTS, declared
    from pipelines.report.significance import TESTS

    assert tuple(TESTS) == PRIMARY_TESTS == declared(ReportConfig)["primary_test"].choices
