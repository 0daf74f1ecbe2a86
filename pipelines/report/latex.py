"""The report's tables for a paper: LaTeX (booktabs) and the per-query values as CSV.

Significance is marked the way ranx's ``Report.to_latex`` marks it: every system gets a letter (the
baseline ``a``), and a mean carries the superscript letter of each system it is significantly better
than; here each system is compared with the baseline only, by the report's primary test
(``report.primary_test``: the randomisation test or the paired t-test), Holm-corrected over the table, at
:data:`pipelines.report.significance.LEVEL`. A mean significantly *worse* than the baseline carries
:data:`LOSS_MARK` before the letter (ranx marks gains only). The table's caption says which test and what each
mark means.
"""

from __future__ import annotations

import csv
import io
import string
from typing import Any

from pipelines.report.records import Record
from pipelines.report.significance import LEVEL, TESTS, row_significance
from pipelines.report.stats import alpha_key
from pipelines.study.design import BASELINE

#: What marks a mean significantly worse than the system whose letter follows it.
LOSS_MARK = r"$\downarrow$"

_ESCAPES = {"&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_", "{": r"\{", "}": r"\}", "~": r"\~{}",
            "^": r"\^{}", "\\": r"\textbackslash{}"}  # fmt: skip


def tex(text: Any) -> str:
    """``text`` with LaTeX's special characters escaped."""
    return "".join(_ESCAPES.get(c, c) for c in str(text))


def _num(v: float | None, fmt: str = ".4f") -> str:
    return "--" if v is None else format(v, fmt).replace("-", "$-$")


def _table(caption: str, label: str, head: list[str], rows: list[list[str]], align: str) -> str:
    return "\n".join(
        [
            r"\begin{table}[t]",
            r"\centering",
            rf"\caption{{{caption}}}",
            rf"\label{{{label}}}",
            rf"\begin{{tabular}}{{{align}}}",
            r"\toprule",
            " & ".join(head) + r" \\",
            r"\midrule",
            *(" & ".join(r) + r" \\" for r in rows),
            r"\bottomrule",
            r"\end{tabular}",
            r"\end{table}",
            "",
        ]
    )


def letters(t1: list[dict[str, Any]]) -> dict[str, str]:
    """Each system's letter, in Table 1's order (the baseline first: ``a``)."""
    return {r["label"]: string.ascii_lowercase[i % 26] for i, r in enumerate(t1)}


def table1_tex(t1: list[dict[str, Any]], metric: str, primary_test: str = "randomisation") -> str:
    """Table 1: mean (and sd over folds) per system, the significance mark (by ``primary_test``:
    ``randomisation`` or ``t``, :func:`pipelines.report.significance.row_significance`), Δ with its t interval, d_z."""
    mark = letters(t1)
    base = next((r["label"] for r in t1 if r["strategy"] == BASELINE), None)
    test = TESTS[primary_test].name if primary_test in TESTS else primary_test
    rows = []
    for r in t1:
        sig = row_significance(r, primary_test) if base and r["label"] != base else None
        sig_tex = ""
        if base and sig:
            sig_tex = rf"\textsuperscript{{{LOSS_MARK if sig == 'loss' else ''}{mark[base]}}}"
        ci = "--" if r["ci_t"] is None else f"[{_num(r['ci_t'][0])}, {_num(r['ci_t'][1])}]"
        rows.append(
            [
                f"({mark[r['label']]}) {tex(r['label'])}",
                f"{_num(r['mean'])}{sig_tex}",
                _num(r["std"]) if r["folds"] > 1 else "--",
                _num(r["delta"], "+.4f"),
                ci,
                _num(r["d_z"], "+.3f"),
                str(r["queries"]) if r["strategy"] != BASELINE else "--",
            ]
        )
    caption = (
        f"{tex(metric)} on test after the last tree: mean and standard deviation over folds, over every test "
        "query (a query without a relevant document scores the metric's convention for it, metric.empty, in "
        f"every system); $\\Delta$ against {tex(base or 'the baseline')}, its 95\\% paired t interval, $d_z$ "
        "and the tests over the test queries with a relevant document only (Queries: how many). A superscript "
        f"letter: significantly better than that system; {LOSS_MARK} before the letter: significantly worse "
        f"({test}, two-sided, Holm-corrected over the table, $p < {LEVEL:g}$)."
    )
    head = ["System", "Mean", "SD", r"$\Delta$", r"95\% CI", "$d_z$", "Queries"]
    return _table(caption, "tab:table1", head, rows, "lrrrrrr")


def risk_tex(t1: list[dict[str, Any]], alphas: list[float]) -> str:
    """URisk, TRisk and GeoRisk at each alpha, wins / ties / losses."""
    keys = [alpha_key(a) for a in alphas]
    head = ["System", "W/T/L"] + [rf"URisk$_{{{a:g}}}$ & TRisk$_{{{a:g}}}$" for a in alphas]
    head += [rf"GeoRisk$_{{{a:g}}}$" for a in alphas]
    rows = []
    for r in t1:
        wtl = "--" if r["wins"] is None else f"{r['wins']}/{r['ties']}/{r['losses']}"
        risk = [f"{_num((r['urisk'] or {}).get(k), '+.4f')} & {_num((r['trisk'] or {}).get(k), '+.2f')}" for k in keys]
        geo = [_num((r["georisk"] or {}).get(k)) for k in keys]
        rows.append([tex(r["label"]), wtl, *risk, *geo])
    caption = "Risk against the baseline: URisk (Wang et al., 2012), TRisk (Din\\c{c}er et al., 2014), GeoRisk "
    caption += "over the systems of the table (Din\\c{c}er et al., 2016); wins, ties and losses per query."
    return _table(caption, "tab:risk", head, rows, "l" + "r" * (1 + 3 * len(alphas)))


def table2_tex(t2: dict[str, Any], metric: str) -> str:
    """Table 2: the best MSE-t at each size against the smallest LambdaMART reaching its test NDCG."""
    T = t2["baseline_max_trees"]
    rows = [
        [
            str(r["size"]),
            _num(r["mse_ndcg"]),
            str(r["baseline_trees"]) if r["baseline_trees"] else f"$>{T}$",
            _num(r["ratio"], ".2f") if r["ratio"] else f"$>{T / r['size']:.2f}$",
        ]
        for r in t2["rows"]
    ]
    caption = f"Smallest LambdaMART with test {tex(metric)} at least that of {tex(t2['mse'])} (chosen on validation)."
    head = [f"{tex(t2['mse'])} trees", tex(metric), "LambdaMART trees", "Ratio"]
    return _table(caption, "tab:table2", head, rows, "rrrr")


def convergence_tex(conv: list[dict[str, Any]], metric: str) -> str:
    """Trees to the target, best vali iteration, test NDCG there, vali AUC per tree."""
    frac = conv[0]["fraction"]
    rows = [
        [
            tex(r["label"]),
            ("never" if r["trees_to_target"] is None else f"{r['trees_to_target']:.1f}")
            + f" ({r['reached']}/{r['folds']})",
            f"{r['best_iteration']:.1f}",
            _num(r["test_at_best"]),
            _num(r["vali_auc"]),
        ]
        for r in conv
    ]
    caption = (
        f"Convergence, chosen on validation and reported on test (means over folds): trees to reach {frac:g} of "
        f"LambdaMART's final vali {tex(metric)}, the best vali iteration and the test {tex(metric)} there, the "
        "area under the vali curve per tree."
    )
    head = ["System", "Trees to target", "Best iteration", f"Test {tex(metric)}", "Vali AUC"]
    return _table(caption, "tab:convergence", head, rows, "lrrrr")


def folds_tex(t1: list[dict[str, Any]], metric: str) -> str | None:
    """Each system's final test value fold by fold, its mean, and the folds it beats the baseline on (None for
    one fold)."""
    folds = sorted({f for r in t1 for f in r["fold_ids"]})
    if len(folds) < 2:
        return None
    rows = []
    for r in t1:
        by = dict(zip(r["fold_ids"], r["per_fold"], strict=True))
        won = "--" if r["folds_won"] is None else f"{r['folds_won']}/{len(r['paired_folds'])}"
        rows.append([tex(r["label"]), *(_num(by.get(f)) for f in folds), _num(r["mean"]), won])
    caption = f"Final test {tex(metric)} fold by fold, the mean, and the folds on which the system beats the baseline."
    head = ["System", *(f"Fold {f}" for f in folds), "Mean", "Folds won"]
    return _table(caption, "tab:folds", head, rows, "l" + "r" * (len(folds) + 2))


def seeds_tex(rows: list[dict[str, Any]], metric: str) -> str:
    """The spread across seed repetitions (:func:`pipelines.report.seeds.average_seeds`)."""
    body = [
        [
            tex(r["system"]),
            str(len(r["seeds"])),
            _num(r["final_mean"]),
            _num(r["final_sd"]),
            _num(r["delta_mean"], "+.4f"),
            _num(r["delta_sd"]),
        ]
        for r in rows
    ]
    caption = (
        f"Seed repetitions: the mean over seeds of each seed's mean final test {tex(metric)} and of its mean paired "
        r"difference with the baseline ($\Delta$), and their standard deviations across seeds."
    )
    head = ["System", "Seeds", "Mean", "SD", r"$\Delta$", r"SD of $\Delta$"]
    return _table(caption, "tab:seeds", head, body, "lrrrrr")


def difficulty_tex(by: dict[str, dict[str, Any]], metric: str) -> str:
    """Per difficulty score, each system's mean difference with the baseline in each quartile (n in brackets)."""
    parts = []
    for key, t in by.items():
        e = t["edges"]
        bins = [f"[{e[i]:.3g}, {e[i + 1]:.3g}]" for i in range(len(e) - 1)]
        rows = [
            [tex(label), *(f"{_num(c['delta'], '+.4f')} ({c['n']})" for c in cells)]
            for label, cells in t["systems"].items()
        ]
        caption = (
            f"Mean difference in test {tex(metric)} with the baseline by quartile of {tex(t['name'])} (queries with a "
            "relevant document; number of queries in brackets)."
        )
        parts.append(_table(caption, f"tab:difficulty-{tex(key)}", ["System", *bins], rows, "l" + "r" * len(bins)))
    return "\n".join(parts)


def per_query_csv(records: list[Record], metric_name: str) -> str:
    """Every finished child's per-query test value: system, fold, qid, value, relevant documents."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["system", "strategy", "switch", "fold", "qid", metric_name, "relevant", "run_id"])
    for r in sorted(records, key=lambda r: (r.strategy, r.switch or 0, r.fold)):
        for q in sorted(r.per_query):
            rel = "" if r.relevant is None else r.relevant.get(q, "")
            w.writerow(
                [
                    r.label,
                    r.strategy,
                    "" if r.switch is None else r.switch,
                    r.fold,
                    q,
                    repr(r.per_query[q]),
                    rel,
                    r.run_id,
                ]
            )
    return buf.getvalue()
