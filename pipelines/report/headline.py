"""The report's answer first: per method, the configuration chosen on validation and what it gains on test.

For the continuation method (MSE-t) and each curriculum strategy (and each extra training path), the
switch point with the highest mean final *validation* NDCG over the folds every switch point of that
family finished (ties: the smallest t), so the choice does not look at test; then, on test, that
system's difference with LambdaMART, its 95% interval and the primary test's Holm-corrected p
(``report.primary_test``; the interval that goes with it: the paired bootstrap for the randomisation
test, the paired t interval for the t-test), and the trees it needs to be as good as LambdaMART's final
model within ``report.margin`` (:func:`pipelines.report.inference.noninferiority`), with the ratio to
LambdaMART's trees and its bootstrap interval.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import numpy as np

from pipelines.report.pairing import groups
from pipelines.report.records import Record, label_of
from pipelines.report.significance import TESTS, other_test, significance, test_of
from pipelines.study.design import BASELINE, MSE

log = logging.getLogger(__name__)


def family_of(strategy: str) -> str:
    """The headline family of a strategy: ``continuation`` for MSE-t, else the strategy's name."""
    return "continuation" if strategy == MSE else strategy


def family_label(strategy: str, random_strategy: str | None = None, path: bool = False) -> str:
    """How the headline names a family (``path``: an extra training path, no switch points)."""
    if strategy == MSE:
        return "Continuation (MSE-t, then LambdaMART)"
    if path:
        return f"{strategy} (training path)"
    if strategy == random_strategy:
        return f"{strategy} curriculum (the control)"
    return f"{strategy} curriculum"


def choose_on_vali(records: list[Record]) -> dict[str, tuple[str, int | None]]:
    """Per strategy (not the baseline), the system with the highest mean final vali NDCG over the folds every
    system of that strategy finished (ties: the smallest switch point); strategies without a vali curve are
    left out."""
    g = groups(records)
    by_strategy: dict[str, list[tuple[str, int | None]]] = {}
    for key in g:
        if key != (BASELINE, None):
            by_strategy.setdefault(key[0], []).append(key)
    out = {}
    for strategy, keys in by_strategy.items():
        folds = set.intersection(*({r.fold for r in g[k]} for k in keys))
        if not folds or not all(r.vali for k in keys for r in g[k] if r.fold in folds):
            continue
        vali = {k: float(np.mean([r.final_vali for r in g[k] if r.fold in folds])) for k in keys}
        out[strategy] = max(sorted(keys, key=lambda k: k[1] or 0), key=lambda k: vali[k])
    return out


def _fmt_ci(ci: Any) -> str:
    if not ci:
        return "[n/a]"
    return "[" + ", ".join("n/a" if v is None else f"{v:+.4f}" for v in ci) + "]"


def headline(
    t1: list[dict[str, Any]],
    records: list[Record],
    noninferiority: Mapping[str, dict[str, Any]] | None,
    *,
    primary_test: str,
    margin: float,
    metric: str,
    random_strategy: str | None = None,
    note: str | None = None,
) -> dict[str, Any] | None:
    """``report.json``'s ``headline``: one row per family (:func:`choose_on_vali`) in Table 1's order, each with
    its chosen ``system``, mean final ``vali``, test ``delta`` with ``ci95`` and the primary test's ``p_holm``
    (``p_holm_other``: the other test), ``significant`` (:func:`significance`), the non-inferiority
    ``trees`` with ``trees_ci95``, ``ratio`` with ``ratio_ci95`` and ``baseline_trees`` (None where
    ``noninferiority`` has no entry: ``note`` says why), and a ``sentence``. None without a baseline or vali
    curves."""
    base = next((r for r in t1 if (r["strategy"], r["switch"]) == (BASELINE, None)), None)
    chosen = choose_on_vali(records)
    if base is None or not chosen:
        return None
    test, other = test_of(primary_test), TESTS[other_test(primary_test)]
    base_trees = max((r.steps[-1] for r in records if (r.strategy, r.switch) == (BASELINE, None)), default=None)
    rows = []
    by_key = {(r["strategy"], r["switch"]): r for r in t1}
    for strategy, key in sorted(chosen.items(), key=lambda kv: list(by_key).index(kv[1])):
        row = by_key.get(key)
        if row is None or row["delta"] is None:
            continue
        label = label_of(*key)
        ni = (noninferiority or {}).get(label) or {}
        ci = row[test.ci]
        out = {
            "family": family_of(strategy),
            "family_label": family_label(strategy, random_strategy, path=key[1] is None),
            "system": label,
            "strategy": strategy,
            "switch": key[1],
            "chosen_on": "vali",
            "vali": float(np.mean([r.final_vali for r in records if (r.strategy, r.switch) == key])),
            "delta": row["delta"],
            "ci95": None if ci is None else list(ci),
            "p_holm": row[test.p_holm],
            "p_holm_other": row[other.p_holm],
            "significant": significance(row[test.p_holm], row["delta"]),
            "trees": ni.get("trees"),
            "trees_ci95": ni.get("trees_ci95"),
            "ratio": ni.get("ratio"),
            "ratio_ci95": ni.get("ratio_ci95"),
            "baseline_trees": ni.get("baseline_trees", base_trees),
        }
        out["sentence"] = sentence(out, metric, margin, test.name, ni)
        rows.append(out)
    return {
        "primary_test": primary_test,
        "margin": margin,
        "metric": metric,
        "baseline": {"system": "LambdaMART", "mean": base["mean"], "trees": base_trees},
        "rows": rows,
        "note": note,
    }


def sentence(row: dict[str, Any], metric: str, margin: float, test_name: str, ni: Mapping[str, Any]) -> str:
    """One row of the headline in words."""
    p = row["p_holm"]
    p_text = "n/a" if p is None else ("< 0.0001" if p < 1e-4 else f"{p:.4f}")
    verdict = {"win": "significantly better than", "loss": "significantly worse than"}.get(
        row["significant"] or "", "not significantly different from"
    )
    text = (
        f"{row['family_label']}: {row['system']} (chosen on validation) is {verdict} LambdaMART, "
        f"Δ {metric} {row['delta']:+.4f} {_fmt_ci(row['ci95'])} (95% CI; {test_name}, Holm p {p_text})."
    )
    if not ni:
        return text
    if row["trees"] is None:
        return text + (
            f" Not shown to be as good as LambdaMART's {row['baseline_trees']} trees within {margin:g} "
            f"{metric} at any point of its curve (up to {ni.get('max_trees', '?')} trees)."
        )
    r_ci = row["ratio_ci95"] or [None, None]
    hi = "n/a" if r_ci[1] is None else f"{r_ci[1]:.2f}"
    lo = "n/a" if r_ci[0] is None else f"{r_ci[0]:.2f}"
    return text + (
        f" As good as LambdaMART's {row['baseline_trees']} trees (within {margin:g} {metric}, one-sided 95%) "
        f"after {row['trees']} trees: {row['ratio']:.2f}x the trees [{lo}, {hi}]."
    )
