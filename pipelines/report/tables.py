"""Table 1 (final NDCG; significance, effect sizes and risk against the baseline) and Table 2 (the best MSE-t
against LambdaMART's size)."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from pipelines.report.inference import mde, residual_mean_square
from pipelines.report.pairing import Paired, groups, pairs_with_baseline, relevant_queries
from pipelines.report.records import Record, ReportError, label_of, order_systems
from pipelines.report.stats import (
    alpha_key,
    effect_size,
    georisk,
    holm,
    paired_t_test,
    randomization_test,
    trisk,
    urisk,
)
from pipelines.study.design import BASELINE, MSE

log = logging.getLogger(__name__)


#: Risk levels of URisk and TRisk when the config gives none (``report.risk_alphas``).
RISK_ALPHAS = (1.0, 5.0)


def table1(
    records: list[Record],
    n_perm: int = 10_000,
    seed: int = 0,
    folds: Sequence[int] | None = None,
    n_boot: int = 10_000,
    risk_alphas: Sequence[float] = RISK_ALPHAS,
    pairs: Mapping[tuple[str, int | None], Paired] | None = None,
) -> list[dict[str, Any]]:
    """Mean/std over folds of the final test NDCG per system, and paired statistics against the baseline
    (``pairs``: :func:`pairs_with_baseline` of ``records``, computed here when not given).

    ``folds``: the grid's folds (default: every fold in ``records``); a row over fewer lists the
    missing ones. The means keep every test query (the declared ``metric.empty`` convention); every
    paired figure leaves out the queries without a relevant document (:func:`paired_samples`):
    ``queries`` is the n used, ``queries_no_relevant`` the number left out.

    Per row compared with the baseline: p-values raw (``t_p``, ``perm_p``) and Holm-corrected over all
    the rows compared (``t_p_holm``, ``perm_p_holm``); the effect size (:func:`effect_size`: ``delta``,
    ``ci_t``, ``ci_boot`` from ``n_boot`` resamples seeded by ``seed``, ``d_z``, ``wins``/``ties``/
    ``losses``); ``urisk`` and ``trisk`` at each alpha of ``risk_alphas`` (keys :func:`alpha_key`, e.g. "1", "5");
    ``folds_won`` (folds whose final NDCG beats the baseline's, of ``paired_folds``). ``georisk`` (every
    row, baseline included, at each alpha): over the systems of the table that finished every fold the
    baseline did, on those folds' queries with a relevant document (:func:`georisk`); ``None`` for the
    others. ``mde``: the minimum detectable effect of the row's paired differences (:func:`mde`, alpha 0.05,
    power 0.8). ``v_e`` (the table's, the same on every row): the residual mean square of the two-way ANOVA
    without replication on the GeoRisk matrix (:func:`residual_mean_square`: the same systems and (fold, query)
    rows as GeoRisk); ``es_e``: Sakai's standardised effect ``delta`` / sqrt(``v_e``) of a compared row in
    that matrix, ``None`` for the others. ``None`` throughout where nothing could be paired.
    """
    g = groups(records)
    if pairs is None:
        pairs = pairs_with_baseline(records)
    grid_folds = sorted(set(folds) if folds is not None else {r.fold for r in records})
    base = g.get((BASELINE, None), [])
    base_final = {r.fold: r.final for r in base}
    rows = []
    keys = order_systems(list(g))
    for key in keys:
        rs = g[key]
        finals = np.array([r.final for r in rs])
        have = [r.fold for r in rs]
        row: dict[str, Any] = {
            "strategy": key[0],
            "switch": key[1],
            "label": rs[0].label,
            "folds": len(rs),
            "folds_expected": len(grid_folds),
            "fold_ids": have,
            "missing_folds": [f for f in grid_folds if f not in have],
            "mean": float(finals.mean()),
            "std": float(finals.std(ddof=1)) if len(rs) > 1 else 0.0,
            "per_fold": finals.tolist(),
            "delta": None,
            "queries": 0,
            "queries_no_relevant": 0,
            "paired_folds": [],
            "folds_won": None,
            "t_p": None,
            "perm_p": None,
            "t_p_holm": None,
            "perm_p_holm": None,
            "ci_t": None,
            "ci_boot": None,
            "d_z": None,
            "wins": None,
            "ties": None,
            "losses": None,
            "urisk": None,
            "trisk": None,
            "georisk": None,
            "mde": None,
            "es_e": None,
            "v_e": None,
        }
        if key != (BASELINE, None) and base:
            p = pairs[key]
            row.update(
                queries=p.n,
                queries_no_relevant=p.no_relevant,
                paired_folds=p.folds,
                folds_won=sum(1 for r in rs if r.fold in base_final and r.final > base_final[r.fold]),
                t_p=paired_t_test(p.x, p.y),
                perm_p=randomization_test(p.x, p.y, n_perm, seed),
            )
            if p.n:
                row.update(effect_size(p.x, p.y, n_boot, seed))
                row["urisk"] = {alpha_key(a): urisk(p.x, p.y, a) for a in risk_alphas}
                row["trisk"] = {alpha_key(a): trisk(p.x, p.y, a) for a in risk_alphas}
                row["mde"] = mde(p.x - p.y)
        rows.append(row)
    for raw, adj in (("t_p", "t_p_holm"), ("perm_p", "perm_p_holm")):
        for row, pv in zip(rows, holm([r[raw] for r in rows]), strict=True):
            row[adj] = pv
    if base:
        members, matrix = table_matrix(g, keys)
        for row, v in zip(rows, georisk_of_table(g, keys, risk_alphas, (members, matrix)), strict=True):
            row["georisk"] = v
        v_e = residual_mean_square(matrix) if matrix.size else None
        for key, row in zip(keys, rows, strict=True):
            row["v_e"] = v_e
            if key in members and row["delta"] is not None and v_e is not None and v_e > 0:
                row["es_e"] = row["delta"] / float(np.sqrt(v_e))
    return rows


def table_matrix(
    g: dict[tuple[str, int | None], list[Record]], keys: Sequence[tuple[str, int | None]]
) -> tuple[list[tuple[str, int | None]], np.ndarray]:
    """The (queries x systems) matrix of a table's risk and ANOVA figures (:func:`georisk_of_table`, Table 1's
    ``v_e``): the systems of ``keys`` that finished every fold the baseline finished (``members``, in that order)
    and one row per (fold, query) of those folds' test queries with a relevant document (an empty matrix when
    there are none). ReportError when a member has no score for one of those queries."""
    base = g[(BASELINE, None)]
    folds = {r.fold for r in base}
    members = [k for k in keys if folds <= {r.fold for r in g[k]}]
    rows = [(r.fold, q) for r in base for q in sorted(relevant_queries(r))]
    matrix = np.empty((len(rows), len(members)))
    for j, k in enumerate(members):
        by_fold = {r.fold: r for r in g[k]}
        missing = [(f, q) for f, q in rows if q not in by_fold[f].per_query]
        if missing:
            raise ReportError(f"GeoRisk: {label_of(*k)} has no score for {len(missing)} queries, e.g. {missing[:3]}")
        matrix[:, j] = [by_fold[f].per_query[q] for f, q in rows]
    return members, matrix


def georisk_of_table(
    g: dict[tuple[str, int | None], list[Record]],
    keys: Sequence[tuple[str, int | None]],
    alphas: Sequence[float],
    table: tuple[list[tuple[str, int | None]], np.ndarray] | None = None,
) -> list[dict[str, float] | None]:
    """GeoRisk (:func:`georisk`) of each system in ``keys`` at each alpha (keys :func:`alpha_key`), over the
    systems that finished every fold the baseline finished, on those folds' test queries with a relevant
    document (one matrix row per (fold, query), :func:`table_matrix`); ``None`` for a system missing one of
    those folds. ``table``: :func:`table_matrix` of ``g`` and ``keys``, computed here when not given."""
    members, matrix = table if table is not None else table_matrix(g, keys)
    if not matrix.shape[0]:
        return [None] * len(keys)
    values = {alpha_key(a): georisk(matrix, a) for a in alphas}
    return [{a: float(v[members.index(k)]) for a, v in values.items()} if k in members else None for k in keys]


def default_table2_sizes(
    steps: Sequence[int], base_vali: Sequence[float], mse_vali: Sequence[float], count: int = 3
) -> tuple[list[int], int]:
    """Table 2's sizes when ``report.table2_sizes`` is empty, chosen on validation; returns (sizes, n_max).

    LambdaMART's curve ends at T trees, so a size n says something only while LambdaMART can
    still reach MSE-t's NDCG at n within T trees. n_max: the last curve point before the MSE-t's
    mean vali NDCG first exceeds the best mean vali NDCG LambdaMART reaches within T (T when it
    never does); sizes: ``count`` evenly spaced curve points up to n_max (n_max/3, 2 n_max/3,
    n_max, each the nearest curve point; duplicates dropped). Validation, not test, so that the
    sizes do not depend on the numbers the table shows (rows LambdaMART still misses on test say
    ``> T``). Fixed fractions of T do not work across datasets: on the default synthetic grid
    (T = 100) pure MSE after 20 trees beats LambdaMART's best of 100 trees already, while the
    paper's MSE-200 at 300 trees needs 400.
    """
    steps = list(steps)
    best = max(base_vali)
    over = [s for s, v in zip(steps, mse_vali, strict=True) if v > best + 1e-12]
    before = [s for s in steps if s < over[0]] if over else steps
    if not before:
        return [steps[0]], steps[0]
    n_max = before[-1]
    targets = [n_max * k / count for k in range(1, count + 1)]
    return sorted({min(before, key=lambda s: (abs(s - t), s)) for t in targets}), n_max


def table2(records: list[Record], sizes: Sequence[int] | None = None) -> dict[str, Any]:
    """The best MSE-t (chosen on validation) at each size n vs the smallest baseline reaching its test NDCG.

    Selection: the highest mean over folds of the final vali NDCG among the MSE-t systems
    (ties: the smallest t). Every mean is over the folds the baseline and all MSE-t have
    (the same folds for the choice and the table). ``sizes`` default: :func:`default_table2_sizes`.
    Row: ``size`` n, ``mse_ndcg`` (mean test NDCG of the chosen MSE-t at n trees),
    ``baseline_trees`` (the first point of LambdaMART's mean test curve >= it; ``None`` when
    it never gets there within ``baseline_max_trees``) and ``ratio`` (baseline trees / n).
    """
    g = groups(records)
    base = g.get((BASELINE, None))
    mses = {k: v for k, v in g.items() if k[0] == MSE}
    if not base or not mses:
        raise ReportError("Table 2 needs the LambdaMART baseline and MSE-t runs")
    folds = sorted(set.intersection({r.fold for r in base}, *({r.fold for r in v} for v in mses.values())))
    if not folds:
        raise ReportError("Table 2: no fold has both the baseline and every MSE-t finished")
    vali = {k: float(np.mean([r.final_vali for r in v if r.fold in folds])) for k, v in mses.items()}
    best_key = max(sorted(mses, key=lambda k: k[1] or 0), key=lambda k: vali[k])
    best = {r.fold: r for r in mses[best_key]}
    bases = {r.fold: r for r in base}
    bsteps = bases[folds[0]].steps
    for f in folds:
        if bases[f].steps != bsteps:
            raise ReportError(
                f"LambdaMART: fold {f}'s curve has other points than fold {folds[0]}'s "
                f"({len(bases[f].steps)} vs {len(bsteps)}); were the folds trained with different "
                "train.eval_every or trees?"
            )
    T = bsteps[-1]
    if sizes:
        sizes_from = "report.table2_sizes"
    else:
        for r in [bases[f] for f in folds] + [best[f] for f in folds]:
            if r.steps != bsteps or len(r.vali) != len(r.steps):
                raise ReportError(
                    f"{r.label} fold {r.fold} (run {r.run_id}): its test/vali curves have other points "
                    "than LambdaMART's; set report.table2_sizes explicitly"
                )
        bvali = np.mean([bases[f].vali for f in folds], axis=0)
        chosen, n_max = default_table2_sizes(bsteps, bvali, np.mean([best[f].vali for f in folds], axis=0))
        sizes_from = (
            f"chosen on validation, evenly spaced up to {n_max} trees, the last point before "
            f"{label_of(MSE, best_key[1])}'s mean vali NDCG exceeds the best LambdaMART reaches within "
            f"{T} trees ({float(np.max(bvali)):.4f}); report.table2_sizes sets them"
        )
        sizes = chosen
    too_big = [n for n in sizes if n > T]
    if too_big:
        raise ReportError(f"report.table2_sizes {list(sizes)}: {too_big} exceed the {T} trees of the grid's models")
    bmean = np.mean([bases[f].test for f in folds], axis=0)
    rows = []
    for n in sizes:
        v = float(np.mean([best[f].at(n) for f in folds]))
        reach = [s for s, x in zip(bsteps, bmean, strict=True) if x >= v - 1e-12]
        m = reach[0] if reach else None
        rows.append({"size": n, "mse_ndcg": v, "baseline_trees": m, "ratio": (m / n) if m else None})
    return {
        "mse": label_of(MSE, best_key[1]),
        "switch": best_key[1],
        "selected_on": "vali",
        "vali": {label_of(MSE, k[1]): v for k, v in sorted(vali.items(), key=lambda kv: kv[0][1] or 0)},
        "folds": folds,
        "sizes_from": sizes_from,
        "rows": rows,
        "baseline_max_trees": T,
    }


#: Fraction of the baseline's final vali NDCG that :func:`convergence` counts trees to (``report.target_fraction``).
TARGET_FRACTION = 0.99


def run_convergence(r: Record, b: Record | None, fraction: float = TARGET_FRACTION) -> dict[str, Any] | None:
    """One run's convergence against the baseline's run ``b`` of its fold (:func:`convergence`'s per-fold
    entry); None when either has no vali curve."""
    if b is None or not r.vali or not b.vali:
        return None
    if len(r.vali) != len(r.steps) or len(r.test) != len(r.steps):
        raise ReportError(f"{r.label} fold {r.fold} (run {r.run_id}): its vali and test curves have different points")
    target = fraction * b.final_vali
    reached = next((s for s, v in zip(r.steps, r.vali, strict=True) if v >= target), None)
    best = int(np.argmax(r.vali))
    return {
        "fold": r.fold,
        "target": target,
        "trees_to_target": reached,
        "best_iteration": r.steps[best],
        "test_at_best": r.test[best],
        "vali_auc": float(np.mean(r.vali)),
    }


def median_trees(per_fold: Sequence[int | None]) -> tuple[float | None, list[int | None]]:
    """The median over folds of the trees to a target, a fold that never reaches it (``None``) counting as more
    than any tree count, and the [min, max] over the folds (an end ``None`` where it is such a fold).

    The median, not the mean over the folds that reach: that mean made a system reaching the target on 2 of 5
    folds look faster than one reaching it on 5 of 5 (its 3 slow folds were dropped). Returns (median, range);
    the median is ``None`` when it falls on (or between a fold and) a fold that never reached, i.e. it is
    "more than T trees", and when ``per_fold`` is empty.
    """
    if not per_fold:
        return None, [None, None]
    v = np.sort(np.array([np.inf if t is None else float(t) for t in per_fold]))
    med = float(np.median(v))
    ends = [None if np.isinf(e) else int(e) for e in (v[0], v[-1])]
    return (None if np.isinf(med) else med), ends


def convergence(records: list[Record], fraction: float = TARGET_FRACTION) -> list[dict[str, Any]]:
    """How fast each system gets there, chosen on validation and reported on test (the paper's second claim).

    Per system and fold, against the baseline's run of that fold: ``target`` = ``fraction`` x the
    baseline's final vali NDCG; ``trees_to_target``: the first curve point whose vali NDCG reaches it
    (``None`` when it never does); ``best_iteration``: the curve point of the highest vali NDCG (the first
    one on ties) and ``test_at_best`` the test NDCG there; ``vali_auc``: the area under the vali curve per
    tree (the mean of the curve's points: with one point every ``train.eval_every`` trees, the rectangle
    rule). Each row holds the means over the folds that have both the system and the baseline of
    ``best_iteration``, ``test_at_best`` and ``vali_auc``, and the per-fold values (``per_fold``).

    Trees to the target are summarised by :func:`median_trees` over the row's folds, a fold that never reaches
    the target counting as more than ``max_trees`` (T, the last point of the runs' curves, their largest when
    they differ): ``trees_to_target`` the median (``None`` when it falls on a fold that never reached: "> T"),
    ``trees_to_target_range`` [min, max] over the folds (an end ``None`` for a fold that never reached), and
    ``reached`` of ``folds`` how many folds got there. Not the mean over the folds that reach it: that made a
    system reaching the target on 2 of 5 folds look faster than one reaching it on 5 of 5.
    Systems without a vali curve are left out.
    """
    g = groups(records)
    base = {r.fold: r for r in g.get((BASELINE, None), [])}
    if not base:
        raise ReportError("convergence: no finished LambdaMART baseline run")
    rows = []
    for key in order_systems(list(g)):
        runs = [(r, p) for r in g[key] if (p := run_convergence(r, base.get(r.fold), fraction)) is not None]
        if not runs:
            continue
        per_fold = [p for _, p in runs]
        trees = [p["trees_to_target"] for p in per_fold]
        med, span = median_trees(trees)
        rows.append(
            {
                "strategy": key[0],
                "switch": key[1],
                "label": label_of(*key),
                "folds": len(per_fold),
                "reached": sum(t is not None for t in trees),
                "trees_to_target": med,
                "trees_to_target_range": span,
                "max_trees": max(r.steps[-1] for r, _ in runs),
                "best_iteration": float(np.mean([p["best_iteration"] for p in per_fold])),
                "test_at_best": float(np.mean([p["test_at_best"] for p in per_fold])),
                "vali_auc": float(np.mean([p["vali_auc"] for p in per_fold])),
                "fraction": fraction,
                "per_fold": per_fold,
                # a teacher-based curriculum's teachers, per fold: trees it needs before its first tree
                "teacher_trees": float(np.mean([r.teacher_trees for r, _ in runs])),
            }
        )
    return rows
