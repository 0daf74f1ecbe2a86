"""``ltr report``: the paper's tables and figures, rebuilt from the tracked runs.

Which grid: ``--run-id`` (a grid's parent run in ``--experiment``), else the
experiment's latest FINISHED grid parent run. A mistyped experiment is an error
(the existing ones are listed); the report never creates one. A grid whose parent
is not FINISHED, or whose children are not all finished, is still reported, from
its finished children, with a warning at the top saying what is missing.

From the FINISHED children of that grid's parent run (MLflow):

* **Table 1**: NDCG@k on test after the last tree, mean and sample standard
  deviation (ddof 1) over the folds, for the baseline and every strategy and switch
  point. Every cell says over how many of the grid's folds it averages: a cell
  short of folds (a child missing or unfinished) is marked ``[k/n folds]``.
* **Significance**: every row of Table 1 against LambdaMART, paired per test
  query over the folds both finished (the same query ids in both runs of a fold,
  else an error; one difference per query, folds pooled): two-sided paired t-test
  (``scipy.stats.ttest_rel``) and two-sided randomisation test
  (``scipy.stats.permutation_test``, paired: signs flipped within pairs, statistic
  the mean difference, ``report.permutations`` resamples seeded with
  ``report.seed``; exact when 2^queries is fewer). p-values raw and Holm-corrected
  (Holm-Bonferroni step-down over all the comparisons, each test separately).
* **Table 2**: the best MSE-t, chosen on *validation* (highest mean over folds of
  the final vali NDCG, so the choice does not peek at test), at model sizes n
  (``report.table2_sizes``; empty: three sizes chosen on validation up to the
  last size at which LambdaMART can still reach MSE-t within T trees, see
  :func:`default_table2_sizes`): its mean test NDCG at n trees, the smallest
  number of trees at which LambdaMART's mean test NDCG reaches it, and the size
  ratio. LambdaMART's curve ends at T trees: a row it never reaches says ``> T``
  (and the ratio ``> T/n``). Means over the folds both finished.
* **Figure 1**: NDCG@k on test (mean over folds) against the number of trees,
  baseline against every MSE-t.
* **Figure 2**: after ``tree`` trees, the distribution of test scores of the
  least and the most relevant documents, for MSE (an MSE-t with t >= tree, so
  still pure MSE at that point) and for LambdaMART, with
  KL(P_lowest || P_highest) (``scipy.stats.entropy``, natural log) on the
  trainer's histogram bins (100 bins over the score range, 0.5 added to every
  bin count so that empty bins stay finite).

The header states the metric conventions, the dataset fingerprint, the code
versions of the children (their ``code.*`` params; a warning when they differ)
and of the report itself. Output: ``report.md``, ``report.html``, PNG figures and
JSON tables in ``--out``, also logged to the parent run under ``report/``.
"""

from __future__ import annotations

import html
import json
import logging
import math
import os
import re
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pipelines.layout import mlflow_uri
from pipelines.study import BASELINE, MSE
from pipelines.tracking import (
    TAG_CHILD_KEY,
    TAG_FOLD,
    TAG_KIND,
    TAG_PATH,
    TAG_STRATEGY,
    TAG_SWITCH,
    Tracker,
    UnknownExperiment,
    png_bytes,
    pyplot,
)

log = logging.getLogger(__name__)

#: Pseudo-count added to every histogram bin before the KL divergence (Figure 2).
KL_PSEUDO_COUNT = 0.5


class ReportError(ValueError):
    """Nothing (or not enough, or inconsistent data) to report on."""


def label_of(strategy: str, switch: int | None) -> str:
    """Display name of a system: ``LambdaMART``, ``MSE-t``, ``<strategy>-t`` or an extra path's name."""
    if strategy == BASELINE:
        return "LambdaMART"
    if strategy == MSE:
        return f"MSE-{switch}"
    return strategy + ("" if switch is None else f"-{switch}")


@dataclass
class Record:
    """What the report needs of one finished child run (one system on one fold)."""

    fold: int
    strategy: str
    switch: int | None
    steps: list[int]
    test: list[float]
    vali: list[float] = field(default_factory=list)
    per_query: dict[int, float] = field(default_factory=dict)
    score_dists: list[dict[str, Any]] = field(default_factory=list)
    run_id: str = ""
    code: dict[str, str] = field(default_factory=dict)  # the child's code.* params without the prefix
    metric: str = ""  # the child's metric conventions (its ``metric`` param)

    @property
    def label(self) -> str:
        return label_of(self.strategy, self.switch)

    @property
    def final(self) -> float:
        """Test NDCG after the last tree."""
        return self.test[-1]

    @property
    def final_vali(self) -> float:
        """Validation NDCG after the last tree."""
        if not self.vali:
            raise ReportError(f"{self.label} fold {self.fold} (run {self.run_id}): no validation curve")
        return self.vali[-1]

    def at(self, tree: int) -> float:
        """Test NDCG after ``tree`` trees."""
        if tree not in self.steps:
            raise ReportError(
                f"{self.label} fold {self.fold}: no NDCG recorded after {tree} trees "
                "(train.eval_every must divide the report's model sizes, report.table2_sizes)"
            )
        return self.test[self.steps.index(tree)]


# ------------------------------------------------------------ statistics
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
    idx = sorted((i for i, p in enumerate(pvalues) if p is not None), key=lambda i: pvalues[i])
    m = len(idx)
    out: list[float | None] = [None] * len(pvalues)
    running = 0.0
    for rank, i in enumerate(idx):
        running = max(running, min(1.0, (m - rank) * float(pvalues[i])))
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


# ------------------------------------------------------------ pairing
def groups(records: list[Record]) -> dict[tuple[str, int | None], list[Record]]:
    """Records by system (strategy, switch point), each sorted by fold; a fold twice is an error."""
    out: dict[tuple[str, int | None], list[Record]] = {}
    for r in records:
        out.setdefault((r.strategy, r.switch), []).append(r)
    for rs in out.values():
        rs.sort(key=lambda r: r.fold)
        for a, b in zip(rs, rs[1:]):
            if a.fold == b.fold:
                raise ReportError(
                    f"{a.label}: fold {a.fold} has two finished runs ({a.run_id}, {b.run_id}); "
                    "a system must have one run per fold (delete the stray run in MLflow)"
                )
    return out


def paired_samples(records: list[Record], base: list[Record]) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """Per-query test NDCG of ``records`` and of the baseline ``base``, paired by (fold, query id), over
    the folds both have; returns (system, baseline, folds). The two runs of a fold must have been
    evaluated on the same query ids, and each system has each fold once."""
    rs = groups(records)
    bs = groups(base)
    if len(rs) > 1 or len(bs) > 1:
        raise ReportError("paired_samples: pass the runs of one system and of the baseline")
    r_by = {r.fold: r for v in rs.values() for r in v}
    b_by = {b.fold: b for v in bs.values() for b in v}
    xs, ys, folds = [], [], []
    for f in sorted(set(r_by) & set(b_by)):
        r, b = r_by[f], b_by[f]
        if set(r.per_query) != set(b.per_query):
            only_r = sorted(set(r.per_query) - set(b.per_query))
            only_b = sorted(set(b.per_query) - set(r.per_query))
            raise ReportError(
                f"fold {f}: {r.label} (run {r.run_id}) and {b.label} (run {b.run_id}) were evaluated "
                f"on different test queries ({len(only_r)} only in {r.label}, e.g. {only_r[:3]}; "
                f"{len(only_b)} only in {b.label}, e.g. {only_b[:3]}): they cannot be paired"
            )
        qs = sorted(r.per_query)
        xs.append(np.array([r.per_query[q] for q in qs], np.float64))
        ys.append(np.array([b.per_query[q] for q in qs], np.float64))
        folds.append(f)
    if not xs:
        return np.empty(0), np.empty(0), []
    return np.concatenate(xs), np.concatenate(ys), folds


def paired_differences(records: list[Record], base: list[Record]) -> np.ndarray:
    """Per-query differences system - baseline over the test queries of the folds both have."""
    x, y, _ = paired_samples(records, base)
    return x - y


# ------------------------------------------------------------ tables
def _order(keys: Sequence[tuple[str, int | None]]) -> list[tuple[str, int | None]]:
    return sorted(keys, key=lambda k: (k[0] != BASELINE, k[0] != MSE, k[0], k[1] or 0))


def table1(
    records: list[Record], n_perm: int = 10_000, seed: int = 0, folds: Sequence[int] | None = None
) -> list[dict[str, Any]]:
    """Mean/std over folds of the final test NDCG per system, and paired tests against the baseline.

    ``folds``: the grid's folds (default: every fold in ``records``); a row over fewer lists the
    missing ones. p-values: raw (``t_p``, ``perm_p``) and Holm-corrected over all the rows compared
    with the baseline (``t_p_holm``, ``perm_p_holm``); ``None`` where nothing could be paired.
    """
    g = groups(records)
    grid_folds = sorted(set(folds) if folds is not None else {r.fold for r in records})
    base = g.get((BASELINE, None), [])
    rows = []
    for key in _order(list(g)):
        rs = g[key]
        finals = np.array([r.final for r in rs])
        have = [r.fold for r in rs]
        row = {
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
            "paired_folds": [],
            "t_p": None,
            "perm_p": None,
            "t_p_holm": None,
            "perm_p_holm": None,
        }
        if key != (BASELINE, None) and base:
            x, y, pf = paired_samples(rs, base)
            row.update(
                delta=float(np.mean(x - y)) if x.size else None,
                queries=int(x.size),
                paired_folds=pf,
                t_p=paired_t_test(x, y),
                perm_p=randomization_test(x, y, n_perm, seed),
            )
        rows.append(row)
    for raw, adj in (("t_p", "t_p_holm"), ("perm_p", "perm_p_holm")):
        for row, p in zip(rows, holm([r[raw] for r in rows]), strict=True):
            row[adj] = p
    return rows


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
    from_config = sizes is not None and len(sizes) > 0
    if from_config:
        sizes_from = "report.table2_sizes"
    else:
        for r in [bases[f] for f in folds] + [best[f] for f in folds]:
            if r.steps != bsteps or len(r.vali) != len(r.steps):
                raise ReportError(
                    f"{r.label} fold {r.fold} (run {r.run_id}): its test/vali curves have other points "
                    "than LambdaMART's; set report.table2_sizes explicitly"
                )
        bvali = np.mean([bases[f].vali for f in folds], axis=0)
        sizes, n_max = default_table2_sizes(bsteps, bvali, np.mean([best[f].vali for f in folds], axis=0))
        sizes_from = (
            f"chosen on validation, evenly spaced up to {n_max} trees, the last point before "
            f"{label_of(MSE, best_key[1])}'s mean vali NDCG exceeds the best LambdaMART reaches within "
            f"{T} trees ({float(np.max(bvali)):.4f}); report.table2_sizes sets them"
        )
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


# ------------------------------------------------------------ figures
def figure1(records: list[Record], metric: str, split: str = "test") -> bytes:
    plt = pyplot()
    g = groups(records)
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for key in sorted(g, key=lambda k: (k[0] != BASELINE, k[1] or 0)):
        if key[0] not in (BASELINE, MSE):
            continue
        rs = g[key]
        steps = rs[0].steps
        ax.plot(
            steps,
            np.mean([r.test for r in rs], axis=0),
            label=rs[0].label,
            lw=2.2 if key[0] == BASELINE else 1.2,
            color="black" if key[0] == BASELINE else None,
        )
    ax.set_xlabel("number of trees")
    ax.set_ylabel(f"{metric} ({split}, mean over folds)")
    ax.set_title("Figure 1: LambdaMART vs MSE-t")
    ax.legend(fontsize=8)
    out = png_bytes(fig)
    plt.close(fig)
    return out


def figure2(records: list[Record], tree: int) -> tuple[bytes, dict[str, Any]]:
    plt = pyplot()
    g = groups(records)
    mse_keys = sorted([k for k in g if k[0] == MSE and (k[1] or 0) >= tree], key=lambda k: k[1])
    if (BASELINE, None) not in g or not mse_keys:
        raise ReportError(f"Figure 2 needs the baseline and an MSE-t with t >= {tree}")
    which = {"MSE": g[mse_keys[0]], "LambdaMART": g[(BASELINE, None)]}
    kl: dict[str, list[float]] = {k: [] for k in which}
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    for ax, (name, rs) in zip(axes, which.items(), strict=True):
        for i, r in enumerate(rs):
            d = next((x for x in r.score_dists if x["tree"] == tree), None)
            if d is None:
                raise ReportError(
                    f"{r.label} fold {r.fold}: no score distribution after {tree} trees (train.score_dist_trees)"
                )
            counts = d["counts"]
            lo = next(c for c in counts if sum(c) > 0)
            hi = next(c for c in reversed(counts) if sum(c) > 0)
            kl[name].append(kl_divergence(lo, hi))
            if i == 0:
                e = np.asarray(d["edges"])
                mid = (e[:-1] + e[1:]) / 2
                for c, lab in (
                    (lo, f"label {d['labels'][counts.index(lo)]}"),
                    (hi, f"label {d['labels'][counts.index(hi)]}"),
                ):
                    c = np.asarray(c, np.float64)
                    ax.plot(mid, c / max(c.sum(), 1) / np.diff(e), label=lab)
        ax.set_title(f"{name} after {tree} trees: KL = {np.mean(kl[name]):.3f}")
        ax.set_xlabel("predicted score")
        ax.legend(fontsize=8)
    axes[0].set_ylabel(f"density (fold {min(r.fold for r in which['MSE'])})")
    out = png_bytes(fig)
    plt.close(fig)
    return out, {
        "tree": tree,
        "mse_run": which["MSE"][0].label,
        "kl_mean": {k: float(np.mean(v)) for k, v in kl.items()},
        "kl_per_fold": kl,
    }


# ------------------------------------------------------------ loading
@dataclass
class GridState:
    """The grid a report reads: its parent run and what of it finished."""

    parent: str
    status: str  # the parent run's MLflow status
    folds: list[int]  # the grid's folds (the parent's ``folds`` param)
    params: dict[str, str] = field(default_factory=dict)  # the parent's params
    unfinished: list[tuple[str, int, str]] = field(default_factory=list)  # (label, fold, status), no finished twin
    systems: list[tuple[str, int | None]] = field(default_factory=list)  # every (strategy, switch) seen, any status
    split: str = "test"  # the split of the tables: test, or vali for a dataset without a test split
    duplicates: list[str] = field(default_factory=list)  # FINISHED copies of one child left out (one note each)

    def missing(self, records: list[Record]) -> dict[str, list[int]]:
        """label -> the grid's folds without a finished run of that system."""
        have: dict[tuple[str, int | None], set[int]] = {}
        for r in records:
            have.setdefault((r.strategy, r.switch), set()).add(r.fold)
        out = {}
        for key in _order(list(set(self.systems) | set(have))):
            gone = [f for f in self.folds if f not in have.get(key, set())]
            if gone:
                out[label_of(*key)] = gone
        return out

    def problems(self, records: list[Record]) -> list[str]:
        """Why this grid is unfinished (empty when the parent is FINISHED and nothing is missing)."""
        out = []
        if self.status != "FINISHED":
            out.append(f"parent run status {self.status}")
        if self.unfinished:
            shown = ", ".join(f"fold{f}/{lab} {st}" for lab, f, st in self.unfinished[:8])
            more = f" and {len(self.unfinished) - 8} more" if len(self.unfinished) > 8 else ""
            n = len(self.unfinished)
            out.append(f"{n} child run{'s' * (n != 1)} not finished ({shown}{more})")
        missing = self.missing(records)
        if missing:
            items = list(missing.items())
            shown = "; ".join(f"{lab}: fold {', '.join(map(str, fs))}" for lab, fs in items[:8])
            more = f" and {len(items) - 8} more systems" if len(items) > 8 else ""
            out.append(f"finished runs missing for {shown}{more}")
        return out + self.duplicates


def _ensure_store(uri: str) -> None:
    if uri.startswith("sqlite:///"):
        path = uri[len("sqlite:///") :]
        if not os.path.exists(path):
            raise ReportError(
                f"no MLflow tracking database {path}: run `ltr grid` first, or point the report at "
                "the grid's store (work_dir, or tracking.uri)"
            )


def open_tracker(cfg: Any, experiment: str | None = None) -> Tracker:
    """The report's tracker: an existing experiment only (default ``grid.experiment``), never a new one."""
    _ensure_store(cfg.tracking.uri or mlflow_uri(cfg.work_dir))
    try:
        return Tracker.for_config(cfg, experiment, create=False)
    except UnknownExperiment as e:
        raise ReportError(f"--experiment: {e}") from None


def find_grid(tracker: Tracker, parent: str | None = None) -> Any:
    """The parent run of the grid to report: ``parent`` (checked to be a grid of this experiment), else
    the experiment's latest FINISHED grid."""
    from mlflow.exceptions import MlflowException

    if parent:
        try:
            run = tracker.client.get_run(parent)
        except MlflowException:
            raise ReportError(f"--run-id {parent}: no such run in {tracker.uri}") from None
        if run.info.experiment_id != tracker.experiment_id:
            exp = tracker.client.get_experiment(run.info.experiment_id).name
            raise ReportError(
                f"--run-id {parent}: the run belongs to experiment {exp!r}, not {tracker.experiment!r}; "
                f"pass --experiment {exp}"
            )
        kind = run.data.tags.get(TAG_KIND)
        if kind != "grid":
            raise ReportError(
                f"--run-id {parent}: not a grid's parent run (tag {TAG_KIND} = {kind!r}); "
                "pass the parent run of `ltr grid`"
            )
        return run
    search = tracker.client.search_runs
    runs = search(
        [tracker.experiment_id],
        filter_string=f"tags.`{TAG_KIND}` = 'grid' and attributes.status = 'FINISHED'",
        order_by=["attributes.start_time DESC"],
        max_results=1,
    )
    if runs:
        return runs[0]
    runs = search(
        [tracker.experiment_id],
        filter_string=f"tags.`{TAG_KIND}` = 'grid'",
        order_by=["attributes.start_time DESC"],
        max_results=1,
    )
    if runs:
        r = runs[0]
        raise ReportError(
            f"experiment {tracker.experiment!r} has no finished grid; the latest grid run "
            f"{r.info.run_id} is {r.info.status}: resume it with `ltr grid`, or pass --run-id "
            f"{r.info.run_id} to report on what it has finished"
        )
    raise ReportError(f"experiment {tracker.experiment!r} has no grid run; run `ltr grid` first")


def _folds_param(text: str | None) -> list[int] | None:
    try:
        folds = json.loads(text) if text else None
    except ValueError:
        return None
    return sorted({int(f) for f in folds}) if isinstance(folds, list) else None


def load_grid(tracker: Tracker, run: Any, metric: str) -> tuple[list[Record], GridState]:
    """The FINISHED children of parent ``run`` as records (curves, per-query NDCG, score distributions,
    code versions), and the grid's state (its folds, the children that did not finish)."""
    parent = run.info.run_id
    records: list[Record] = []
    others = []
    systems: set[tuple[str, int | None]] = set()
    splits: set[str] = set()
    runs, duplicates = _one_finished_run_per_child(tracker.children(parent))
    for r in runs:
        tags = r.data.tags
        sw = tags.get(TAG_SWITCH, "")
        fold, strategy, switch = int(tags[TAG_FOLD]), tags[TAG_STRATEGY], int(sw) if sw else None
        systems.add((strategy, switch))
        if r.info.status != "FINISHED":
            others.append((strategy, switch, fold, r.info.status))
            continue
        rid = r.info.run_id
        hist = _one_point_per_step(tracker.client.get_metric_history(rid, f"{metric}_test"), rid)
        vh = _one_point_per_step(tracker.client.get_metric_history(rid, f"{metric}_vali"), rid)
        if not hist and not vh:
            raise ReportError(
                f"run {rid} ({label_of(strategy, switch)}, fold {fold}) has no {metric}_test "
                f"history: was the grid run with another metric than {metric}? (metric.k)"
            )
        # a dataset without a test split: the curves on vali stand in (said in the report), no pairing
        splits.add("test" if hist else "vali")
        perq = tracker.load_json(rid, "per_query_test.json") if hist else {"qid": [], metric: []}
        if len(set(perq["qid"])) != len(perq["qid"]):
            raise ReportError(
                f"run {rid} ({label_of(strategy, switch)}, fold {fold}): per_query_test.json lists a query id twice"
            )
        training = tracker.load_json(rid, "training.json")
        params = r.data.params
        records.append(
            Record(
                fold=fold,
                strategy=strategy,
                switch=switch,
                steps=[m.step for m in hist or vh],
                test=[m.value for m in hist or vh],
                vali=[m.value for m in vh],
                per_query=dict(zip(perq["qid"], perq[metric], strict=True)),
                score_dists=training.get("score_dists", []),
                run_id=rid,
                code={k[5:]: v for k, v in params.items() if k.startswith("code.")},
                metric=params.get("metric", ""),
            )
        )
    done = {(r.strategy, r.switch, r.fold) for r in records}
    unfinished = sorted(
        {(label_of(s, t), f, st) for s, t, f, st in others if (s, t, f) not in done}, key=lambda x: (x[1], x[0])
    )
    folds = _folds_param(run.data.params.get("folds"))
    if folds is None:
        log.warning("grid run %s records no folds param: taking the folds of its children", parent)
        folds = sorted({r.fold for r in records} | {f for _, _, f, _ in others})
    if len(splits) > 1:
        raise ReportError(f"grid run {parent}: some children have test curves and some only vali curves")
    state = GridState(
        parent,
        run.info.status,
        folds,
        dict(run.data.params),
        unfinished,
        sorted(systems, key=lambda k: (k[0], k[1] or 0)),
        split=splits.pop() if splits else "test",
        duplicates=duplicates,
    )
    if duplicates:
        log.warning("grid %s: %s", parent, "; ".join(duplicates))
    return records, state


def _one_point_per_step(history: list[Any], run_id: str) -> list[Any]:
    """A metric history sorted by step, a step logged twice with the same value kept once (an HTTP retry of
    the tracking client can log a batch twice); two values at one step are an error naming the run."""
    out: dict[int, Any] = {}
    for m in sorted(history, key=lambda m: (m.step, m.timestamp)):
        seen = out.setdefault(m.step, m)
        if seen.value != m.value and not (math.isnan(seen.value) and math.isnan(m.value)):
            raise ReportError(
                f"run {run_id}: {m.key} has two values at step {m.step} ({seen.value}, {m.value}): "
                "the run mixes two trainings; delete it (`mlflow runs delete --run-id "
                f"{run_id}`) and resume the grid to train it again"
            )
    return list(out.values())


def _one_finished_run_per_child(children: list[Any]) -> tuple[list[Any], list[str]]:
    """The grid's child runs with at most one FINISHED run per (fold, strategy, switch point), and a note per
    run left out.

    Two FINISHED runs of one child with the same ``ltr.child_key`` (the same path and last plan node, so the
    same checkpoints and results: what a scheduler running a study's units at once made before children were
    owned) are one result logged twice: the earliest is reported, the others are named with the command
    that deletes them. Two with different keys are two different results for one cell of the tables: an
    error that names both runs and how to repair the grid."""
    finished: dict[tuple[str, str, str], list[Any]] = {}
    out = []
    for r in children:
        tags = r.data.tags
        if tags.get(TAG_KIND) != "child":
            continue
        if r.info.status == "FINISHED":
            finished.setdefault(
                (tags.get(TAG_FOLD, ""), tags.get(TAG_STRATEGY, ""), tags.get(TAG_SWITCH, "")), []
            ).append(r)
        else:
            out.append(r)
    notes = []
    for (fold, strategy, switch), rs in finished.items():
        rs.sort(key=lambda r: (r.info.start_time or 0, r.info.run_id))
        out.append(rs[0])
        if len(rs) == 1:
            continue
        label = label_of(strategy, int(switch) if switch else None)
        keys = {r.data.tags.get(TAG_CHILD_KEY, "") for r in rs}
        ids = [r.info.run_id for r in rs]
        if len(keys) > 1 or "" in keys:
            raise ReportError(
                f"{label}: fold {fold} has {len(rs)} finished runs of different training ({', '.join(ids)}; "
                f"paths {sorted({r.data.tags.get(TAG_PATH, '?') for r in rs})}, child keys {sorted(keys)}): a table "
                "cell must hold one result. Keep the run of the grid's current plan (`ltr grid --plan` lists its "
                "keys) and delete the other with `mlflow runs delete --run-id ID`, or start the study over with "
                "`ltr grid --new-parent`"
            )
        notes.append(
            f"{label} fold {fold}: {len(rs)} finished runs of the same child (key {keys.pop()}, the same "
            f"checkpoints): reporting {ids[0]}; remove the copies with "
            + " && ".join(f"mlflow runs delete --run-id {i}" for i in ids[1:])
        )
    return out, notes


def code_versions(records: list[Record]) -> dict[str, dict[str, int]]:
    """``code.*`` key -> value -> number of runs (every run counted; a run without the key counts as '');
    keys in :func:`pipelines.provenance.code_version`'s order, then any others."""
    first = ["ltr", "git", "sources", "xgboost", "pyspark", "numpy"]
    seen = {k for r in records for k in r.code}
    keys = [k for k in first if k in seen] + sorted(seen - set(first))
    out: dict[str, dict[str, int]] = {}
    for k in keys:
        for r in records:
            v = r.code.get(k, "")
            out.setdefault(k, {}).setdefault(v, 0)
            out[k][v] += 1
    return out


def report_version() -> dict[str, str]:
    """The code writing the report: ltr, git and scipy (which computes the statistics)."""
    import scipy

    from pipelines.provenance import code_version

    v = code_version()
    return {"ltr": v["ltr"], "git": v["git"], "scipy": scipy.__version__}


# ------------------------------------------------------------ rendering
def _p(v: float | None) -> str:
    return "n/a" if v is None else ("<0.0001" if v < 1e-4 else f"{v:.4f}")


def _cell(r: dict[str, Any]) -> str:
    spread = f" ± {r['std']:.4f}" if r["folds"] > 1 else ""
    short = f" [{r['folds']}/{r['folds_expected']} folds]" if r["folds"] < r["folds_expected"] else ""
    return f"{r['mean']:.4f}{spread}{short}"


def _versions_line(v: dict[str, dict[str, int]]) -> tuple[str, str | None]:
    if not v:
        return "- Code of the runs: not recorded (no `code.*` params)", None
    parts = []
    split = []
    for k, vals in v.items():
        if len(vals) == 1:
            parts.append(f"{k} `{next(iter(vals)) or '?'}`")
        else:
            parts.append(f"{k} (differs)")
            split.append(
                f"{k}: " + ", ".join(f"`{x or '?'}` ({n} run{'s' * (n != 1)})" for x, n in sorted(vals.items()))
            )
    warn = ("- **Warning: the children of this grid ran different code**: " + "; ".join(split)) if split else None
    return "- Code of the runs: " + ", ".join(parts), warn


def render(t1: list[dict], t2: dict | None, fig2: dict | None, meta: dict[str, Any]) -> tuple[str, str]:
    """Markdown and HTML of the report."""
    m = meta["metric_name"].replace("_at_", "@").upper()
    switches = sorted({r["switch"] for r in t1 if r["switch"] is not None})
    folds = meta["folds"]
    n_folds = len(folds)
    md = [
        f"# {meta['title']}",
        "",
        f"- Experiment `{meta['experiment']}`, parent run `{meta['parent']}` ({meta['status']}), grid folds {folds}",
    ]
    if meta.get("problems"):
        md.append(
            "- **Warning: this grid is unfinished**: "
            + "; ".join(meta["problems"])
            + ". The tables use the finished child runs only."
        )
    md += [f"- Dataset `{meta['data']}`, fingerprint `{meta['fingerprint']}`", f"- Metric: {meta['metric']}"]
    if meta.get("metric_warning"):
        md.append(meta["metric_warning"])
    line, warn = _versions_line(meta.get("versions", {}))
    md.append(line)
    if warn:
        md.append(warn)
    rv = meta.get("report_version")
    if rv:
        md.append(f"- Report written by ltr `{rv['ltr']}` (git `{rv['git'] or '?'}`), scipy `{rv['scipy']}`")
    spread = "one fold" if n_folds == 1 else f"mean ± standard deviation over the grid's {n_folds} folds"
    split = meta.get("split", "test")
    if split != "test":
        md.append(
            f"- **The dataset has no test split**: every {m} below is on {split} (no significance tests: "
            "they pair per-query test NDCG)"
        )
    md += ["", f"## Table 1: {m} on {split} after the last tree, {spread}", ""]
    head = ["model"] + ([f"t={s}" for s in switches] or [m])
    md += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    by_strategy: dict[str, dict[Any, dict]] = {}
    for r in t1:
        by_strategy.setdefault(r["strategy"], {})[r["switch"]] = r
    others = []
    for strat, cells in by_strategy.items():
        if strat == BASELINE:
            md.append(
                "| LambdaMART (baseline, all t) | " + " | ".join([_cell(cells[None])] * max(1, len(switches))) + " |"
            )
        elif None in cells:  # a path without switch points: listed below
            others.append(cells[None])
        else:
            row = ["MSE-t" if strat == MSE else strat] + [_cell(cells[s]) if s in cells else "" for s in switches]
            md.append("| " + " | ".join(row) + " |")
    if others:
        md += ["", f"### Other training paths ({m} on {split})", "", "| path | NDCG |", "|---|---|"] + [
            f"| {r['label']} | {_cell(r)} |" for r in others
        ]
    if any(r["folds"] < r["folds_expected"] for r in t1):
        md += [
            "",
            f"[k/{n_folds} folds]: the cell averages only the k folds whose run of that system finished; "
            "the grid's other folds are missing for it (see the warning above).",
        ]
    tested = [r for r in t1 if r["t_p"] is not None or r["perm_p"] is not None]
    if tested:
        md += [
            "",
            "## Significance against LambdaMART",
            "",
            f"Paired per test query over the folds both systems finished (one difference per query, folds "
            f"pooled). Two-sided paired t-test (scipy.stats.ttest_rel) and two-sided randomisation test "
            f"(scipy.stats.permutation_test, the two values of each pair swapped at random, statistic the mean "
            f"difference, {meta['n_perm']} resamples, seed {meta['seed']}; exact when 2^queries is fewer). "
            f"p-values are shown raw and Holm-corrected side by side (Holm-Bonferroni step-down over the "
            f"{len(tested)} comparisons of this table, for each test separately).",
            "",
            f"| model | Δ {m} | queries (folds) | t-test p | t-test p, Holm | randomisation p | "
            "randomisation p, Holm |",
            "|---|---|---|---|---|---|---|",
        ]
        for r in tested:
            d = "n/a" if r["delta"] is None else f"{r['delta']:+.4f}"
            md.append(
                f"| {r['label']} | {d} | {r['queries']} ({len(r['paired_folds'])}) | {_p(r['t_p'])} | "
                f"{_p(r['t_p_holm'])} | {_p(r['perm_p'])} | {_p(r['perm_p_holm'])} |"
            )
    if t2:
        T = t2["baseline_max_trees"]
        vali = ", ".join(f"{k} {v:.4f}" for k, v in t2["vali"].items())
        md += [
            "",
            f"## Table 2: smallest LambdaMART with {m} at least that of {t2['mse']}",
            "",
            f"{t2['mse']} is the MSE-t with the best mean final {m} on validation ({vali}); test {m}, means over "
            f"folds {t2['folds']}. Sizes: {t2['sizes_from']}. LambdaMART's curve ends at {T} trees: '> {T}' "
            "means it never reaches that NDCG.",
            "",
            f"| size of {t2['mse']} (trees) | its {m} | LambdaMART trees | ratio |",
            "|---|---|---|---|",
        ]
        for r in t2["rows"]:
            lm = r["baseline_trees"] if r["baseline_trees"] else f"> {T}"
            ratio = f"{r['ratio']:.2f}" if r["ratio"] else f"> {T / r['size']:.2f}"
            md.append(f"| {r['size']} | {r['mse_ndcg']:.4f} | {lm} | {ratio} |")
    elif meta.get("no_table2"):
        md += ["", f"## Table 2: not built ({meta['no_table2']})"]
    md += ["", f"## Figure 1: {m} against the number of trees", "", "![Figure 1](figure1.png)"]
    if fig2:
        md += [
            "",
            f"## Figure 2: score distributions after {fig2['tree']} trees",
            "",
            f"KL(P_lowest ‖ P_highest): MSE ({fig2['mse_run']}) {fig2['kl_mean']['MSE']:.4f}, "
            f"LambdaMART {fig2['kl_mean']['LambdaMART']:.4f} (mean over folds; natural log, the trainer's "
            f"histogram bins, {KL_PSEUDO_COUNT} added per bin)",
            "",
            "![Figure 2](figure2.png)",
        ]
    text = "\n".join(md) + "\n"
    return text, _html(md, meta["title"])


def _inline(text: str) -> str:
    s = html.escape(text)
    s = re.sub(r"\*\*(.+?)\*\*", r"<strong>\1</strong>", s)
    return re.sub(r"`(.+?)`", r"<code>\1</code>", s)


def _html(md: list[str], title: str) -> str:
    body = []
    for line in md:
        if line.startswith("# "):
            body.append(f"<h1>{_inline(line[2:])}</h1>")
        elif line.startswith("### "):
            body.append(f"<h3>{_inline(line[4:])}</h3>")
        elif line.startswith("## "):
            body.append(f"<h2>{_inline(line[3:])}</h2>")
        elif line.startswith("- "):
            body.append(f"<p>{_inline(line[2:])}</p>")
        elif line.startswith("!["):
            src = line.split("(")[1].rstrip(")")
            body.append(f'<img src="{html.escape(src)}" style="max-width:900px">')
        elif line.startswith("|---"):
            continue
        elif line.startswith("| "):
            cells = [_inline(c.strip()) for c in line.strip("|").split("|")]
            body.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
        elif line:
            body.append(f"<p>{_inline(line)}</p>")
    page, in_table = [], False
    for b in body:
        if b.startswith("<tr>") and not in_table:
            page.append('<table border="1" cellpadding="4" style="border-collapse:collapse">')
            in_table = True
        if not b.startswith("<tr>") and in_table:
            page.append("</table>")
            in_table = False
        page.append(b)
    if in_table:
        page.append("</table>")
    return (
        "<!doctype html><html><head><meta charset='utf-8'><title>"
        + html.escape(title)
        + "</title></head><body style='font-family:sans-serif'>"
        + "\n".join(page)
        + "</body></html>\n"
    )


def build_report(
    tracker: Tracker,
    out: str,
    parent: str | None = None,
    metric_name: str = "ndcg_at_10",
    n_perm: int = 10_000,
    seed: int = 0,
    table2_sizes: Sequence[int] = (),
) -> dict[str, Any]:
    """Rebuild the tables and figures of a grid: ``parent`` (a grid's parent run id), else the experiment's
    latest FINISHED grid. ``table2_sizes``: empty = :func:`default_table2_sizes`."""
    run = find_grid(tracker, parent)
    parent = run.info.run_id
    records, state = load_grid(tracker, run, metric_name)
    if not records:
        raise ReportError(f"grid run {parent} ({state.status}) has no finished children")
    problems = state.problems(records)
    if problems:
        log.warning("grid %s is unfinished: %s", parent, "; ".join(problems))
    t1 = table1(records, n_perm, seed, folds=state.folds)
    g = groups(records)
    t2, no_table2 = None, None
    if not any(r.vali for r in records):
        no_table2 = "the dataset has no vali split, and Table 2 chooses its MSE-t on validation"
        log.warning("no Table 2: %s", no_table2)
    elif (BASELINE, None) in g and any(k[0] == MSE for k in g):
        t2 = table2(records, list(table2_sizes) or None)
    else:
        no_table2 = "the grid has no finished LambdaMART baseline and MSE-t runs"
        log.warning("no Table 2: %s", no_table2)
    os.makedirs(out, exist_ok=True)
    files = {"figure1.png": figure1(records, metric_name.replace("_at_", "@").upper(), state.split)}
    fig2 = None
    dist_trees = sorted({d["tree"] for r in records for d in r.score_dists})
    if dist_trees:
        try:
            files["figure2.png"], fig2 = figure2(records, dist_trees[0])
        except ReportError as e:
            log.warning("no Figure 2: %s", e)
    params = state.params
    metric = params.get("metric", metric_name)
    child_metrics = sorted({r.metric for r in records if r.metric and r.metric != metric})
    versions = code_versions(records)
    meta = {
        "title": f"Curriculum and continuation LtR: {tracker.experiment}",
        "experiment": tracker.experiment,
        "parent": parent,
        "status": state.status,
        "folds": state.folds,
        "problems": problems,
        "data": params.get("data", "?"),
        "fingerprint": params.get("data_fingerprint", "?"),
        "metric": metric,
        "metric_warning": ("- **Warning: some children used other metric conventions**: " + "; ".join(child_metrics))
        if child_metrics
        else None,
        "metric_name": metric_name,
        "n_perm": n_perm,
        "seed": seed,
        "versions": versions,
        "report_version": report_version(),
        "no_table2": no_table2,
        "split": state.split,
    }
    if any(len(v) > 1 for v in versions.values()):
        log.warning(
            "children of grid %s ran different code: %s", parent, {k: v for k, v in versions.items() if len(v) > 1}
        )
    md, page = render(t1, t2, fig2, meta)
    files["report.md"] = md.encode()
    files["report.html"] = page.encode()
    files["table1.json"] = json.dumps(t1, indent=1).encode()
    if t2:
        files["table2.json"] = json.dumps(t2, indent=1).encode()
    if fig2:
        files["figure2.json"] = json.dumps(fig2, indent=1).encode()
    for name, data in files.items():
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)
        tracker.client.log_artifact(parent, os.path.join(out, name), "report")
    log.info(
        "report of %d runs of grid %s (%s) written to %s (and logged to that run)",
        len(records),
        parent,
        state.status,
        out,
    )
    return {
        "out": out,
        "parent": parent,
        "status": state.status,
        "problems": problems,
        "table1": t1,
        "table2": t2,
        "figure2": fig2,
        "records": len(records),
        "versions": versions,
    }
