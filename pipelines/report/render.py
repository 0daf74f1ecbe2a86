"""The report as Markdown, and as HTML from that Markdown (markdown-it-py, not by hand)."""

from __future__ import annotations

import html
import logging
from collections.abc import Iterable, Sequence
from typing import Any

from pipelines.report.stats import KL_PSEUDO_COUNT, alpha_key
from pipelines.study.design import BASELINE, MSE

log = logging.getLogger(__name__)


def _md_table(head: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    """A Markdown table (the GFM pipe syntax markdown-it-py renders): the header, its rule, a line per row."""
    return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)] + ["| " + " | ".join(r) + " |" for r in rows]


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
    by_strategy: dict[str, dict[Any, dict]] = {}
    for r in t1:
        by_strategy.setdefault(r["strategy"], {})[r["switch"]] = r
    rows, others = [], []
    for strat, cells in by_strategy.items():
        if strat == BASELINE:
            rows.append(["LambdaMART (baseline, all t)"] + [_cell(cells[None])] * max(1, len(switches)))
        elif None in cells:  # a path without switch points: listed below
            others.append(cells[None])
        else:
            rows.append(
                ["MSE-t" if strat == MSE else strat] + [_cell(cells[s]) if s in cells else "" for s in switches]
            )
    md += _md_table(["model"] + ([f"t={s}" for s in switches] or [m]), rows)
    if others:
        md += ["", f"### Other training paths ({m} on {split})", ""]
        md += _md_table(["path", "NDCG"], [[r["label"], _cell(r)] for r in others])
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
            f"pooled), leaving out the test queries without a relevant document: every system scores them by "
            f"the metric's empty-query convention, so they carry no evidence and would only inflate n "
            f"(the means of Table 1 keep them). Two-sided paired t-test (scipy.stats.ttest_rel) and two-sided "
            f"randomisation test "
            f"(scipy.stats.permutation_test, the two values of each pair swapped at random, statistic the mean "
            f"difference, {meta['n_perm']} resamples, seed {meta['seed']}; exact when 2^queries is fewer). "
            f"p-values are shown raw and Holm-corrected side by side (Holm-Bonferroni step-down over the "
            f"{len(tested)} comparisons of this table, for each test separately).",
            "",
        ]
        md += _md_table(
            ["model", f"Δ {m}", "queries (folds)", "left out: no relevant document"]
            + ["t-test p", "t-test p, Holm", "randomisation p", "randomisation p, Holm"],
            (
                [
                    r["label"],
                    _f(r["delta"]),
                    f"{r['queries']} ({len(r['paired_folds'])})",
                    str(r["queries_no_relevant"]),
                ]
                + [_p(r[k]) for k in ("t_p", "t_p_holm", "perm_p", "perm_p_holm")]
                for r in tested
            ),
        )
        md += _effect_table(tested, t1, meta, m)
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
        ]
        md += _md_table(
            [f"size of {t2['mse']} (trees)", f"its {m}", "LambdaMART trees", "ratio"],
            (
                [
                    str(r["size"]),
                    f"{r['mse_ndcg']:.4f}",
                    str(r["baseline_trees"]) if r["baseline_trees"] else f"> {T}",
                    f"{r['ratio']:.2f}" if r["ratio"] else f"> {T / r['size']:.2f}",
                ]
                for r in t2["rows"]
            ),
        )
    elif meta.get("no_table2"):
        md += ["", f"## Table 2: not built ({meta['no_table2']})"]
    md += _folds_table(t1, m, split)
    if meta.get("seeds"):
        md += _seeds_table(meta["seeds"], m, split)
    if meta.get("convergence"):
        md += _convergence_table(meta["convergence"], m)
    if meta.get("by_difficulty"):
        md += _difficulty_tables(meta["by_difficulty"], m)
    elif meta.get("no_difficulty"):
        md += ["", f"## The effect by difficulty: not built ({meta['no_difficulty']})"]
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
    md += _files_section(meta)
    text = "\n".join(md) + "\n"
    return text, _html(md, meta["title"])


def _files_section(meta: dict[str, Any]) -> list[str]:
    """Where the numbers are for scripts and other tools (``report.json``, the TREC runs, LaTeX, CSV)."""
    md = [
        "",
        "## Files for scripts and other tools",
        "",
        "- `report.json`: every number of every table (`comparisons`: each system against LambdaMART; `georisk`)",
        "- LaTeX (booktabs) of every table (`table1.tex`, `risk.tex`, `table2.tex`, `convergence.tex`, `folds.tex`, "
        "`by_difficulty.tex`, `seeds.tex`, those the report has) and `per_query.csv`",
    ]
    trec = meta.get("trec")
    if trec and trec["runs"]:
        tied = sum(v["tied_queries"] for v in trec["runs"].values())
        k = trec["k"]
        qrels = "fold<F>.exp2.qrels" if trec["gain"] == "exp2" else "fold<F>.qrels"
        md += [
            f"- `runs/<system>.fold<F>.trec` ({len(trec['runs'])} runs, top {trec['depth']} documents a query; "
            "docno: the document's position in its query) and `qrels/fold<F>.qrels` (graded labels)"
            + (", `qrels/fold<F>.exp2.qrels` (gain 2^label-1)" if trec["gain"] == "exp2" else ""),
            f"- `trec_eval -m ndcg_cut.{k} qrels/{qrels} runs/<system>.fold<F>.trec` gives each query's "
            f"NDCG@{k} of this report; trec_eval scores a query without relevant documents 0 (here: "
            f"metric.empty) and orders tied scores by docno descending (here: by position): {tied} query-run "
            "pairs hold such a tie in their top "
            f"{k} with different labels",
        ]
    if trec and trec["without_scores"]:
        md.append(f"- No TREC run for {', '.join(trec['without_scores'])}: their ltr logged no test scores")
    return md


def _ci(ci: list[float] | tuple[float, float] | None) -> str:
    return "n/a" if ci is None else f"[{ci[0]:+.4f}, {ci[1]:+.4f}]"


def _f(v: float | None, fmt: str = "+.4f") -> str:
    return "n/a" if v is None else format(v, fmt)


def _effect_table(tested: list[dict[str, Any]], t1: list[dict[str, Any]], meta: dict[str, Any], m: str) -> list[str]:
    """The effect sizes, risk and folds of each comparison with the baseline (issue 29)."""
    alphas = [alpha_key(a) for a in meta.get("risk_alphas", [])]  # the keys of table1's risk figures
    md = [
        "",
        "## Effect sizes and risk against LambdaMART",
        "",
        f"The same pairs as above (queries with a relevant document). Δ: mean difference, with its 95% paired t "
        f"interval and its 95% paired bootstrap interval (scipy.stats.bootstrap, percentile, "
        f"{meta.get('n_boot', '?')} resamples of the queries, seed {meta['seed']}); d_z: Δ / standard deviation "
        "of the differences; W/T/L: queries won, tied and lost. URisk_α: the mean difference with each loss "
        "counted 1 + α times (Wang et al., SIGIR 2012); TRisk_α: URisk_α / its standard error (Dinçer et al., "
        "SIGIR 2014; below -2: significantly riskier than the baseline, above 2: significantly safer). GeoRisk_α "
        "(Dinçer et al., SIGIR 2016): over the systems of this table with every fold of the baseline, the "
        "geometric mean of the mean score and of the normal CDF of the chi-square-like z-scores, losses "
        "weighted 1 + α (higher is better). Folds won: folds whose final test "
        f"{m} beats LambdaMART's.",
        "",
    ]
    head = ["model", "Δ", "95% CI (t)", "95% CI (bootstrap)", "d_z", "W / T / L"]
    head += [f"{x} α={a}" for a in alphas for x in ("URisk", "TRisk")] + [f"GeoRisk α={a}" for a in alphas]
    rows = []
    base = next((r for r in t1 if r["strategy"] == BASELINE), None)
    if base is not None and base.get("georisk"):
        geo = [_f(base["georisk"].get(a), ".4f") for a in alphas]
        rows.append([f"{base['label']} (baseline)"] + [""] * 5 + ["n/a"] * (2 * len(alphas)) + geo + [""])
    for r in tested:
        wtl = "n/a" if r["wins"] is None else f"{r['wins']} / {r['ties']} / {r['losses']}"
        risk = [v for a in alphas for v in (_f((r["urisk"] or {}).get(a)), _f((r["trisk"] or {}).get(a), "+.2f"))]
        geo = [_f((r["georisk"] or {}).get(a), ".4f") for a in alphas]
        won = "n/a" if r["folds_won"] is None else f"{r['folds_won']} / {len(r['paired_folds'])}"
        rows.append(
            [r["label"], _f(r["delta"]), _ci(r["ci_t"]), _ci(r["ci_boot"]), _f(r["d_z"], "+.3f"), wtl, *risk, *geo, won]
        )
    return md + _md_table([*head, "folds won"], rows)


def _folds_table(t1: list[dict[str, Any]], m: str, split: str) -> list[str]:
    """Each system's final NDCG fold by fold, next to the pooled mean, and the folds it beats the baseline on."""
    folds = sorted({f for r in t1 for f in r["fold_ids"]})
    if len(folds) < 2:
        return []
    md = [
        "",
        f"## Folds side by side: final {m} on {split}",
        "",
    ]
    rows = []
    for r in t1:
        by = dict(zip(r["fold_ids"], r["per_fold"], strict=True))
        cells = [f"{by[f]:.4f}" if f in by else "" for f in folds]
        won = "" if r["folds_won"] is None else f"{r['folds_won']} / {len(r['paired_folds'])}"
        rows.append([r["label"], *cells, f"{r['mean']:.4f}", won])
    return md + _md_table(["model", *(f"fold {f}" for f in folds), "mean", "folds beating LambdaMART"], rows)


def _seeds_table(rows: list[dict[str, Any]], m: str, split: str) -> list[str]:
    """The spread across seed repetitions (:func:`pipelines.report.seeds.average_seeds`)."""
    md = [
        "",
        f"## Seeds: final {m} on {split} and the difference with LambdaMART, seed by seed",
        "",
        f"The systems whose trees depend on a seed (the random curriculum, the stochastic objective) ran once per "
        f"seed (grid.seeds); every other table uses each query's {m} averaged over the seeds. Per seed: the mean "
        f"over folds of the final {m}, and Δ, the mean paired difference with LambdaMART (queries with a relevant "
        "document); then their mean and standard deviation across seeds.",
        "",
    ]
    cells = []
    for r in rows:
        finals = ", ".join(f"{s['final']:.4f}" for s in r["per_seed"])
        deltas = ", ".join(_f(s["delta"]) for s in r["per_seed"])
        sd = "" if r["final_sd"] is None else f" ± {r['final_sd']:.4f}"
        dsd = "" if r["delta_sd"] is None else f" ± {r['delta_sd']:.4f}"
        cells.append(
            [r["system"], str(len(r["seeds"])), finals, f"{r['final_mean']:.4f}{sd}", deltas, _f(r["delta_mean"]) + dsd]
        )
    head = ["model", "seeds", f"final {m} per seed", "mean ± sd", "Δ per seed", "Δ mean ± sd"]
    return md + _md_table(head, cells)


def _convergence_table(conv: list[dict[str, Any]], m: str) -> list[str]:
    """How fast each system gets there (:func:`pipelines.report.tables.convergence`)."""
    frac = conv[0]["fraction"]
    md = [
        "",
        "## Convergence: chosen on validation, reported on test",
        "",
        f"Means over folds. Trees to target: the first curve point whose vali {m} reaches {frac:g} x LambdaMART's "
        f"final vali {m} on that fold (mean over the folds that reach it). Best iteration: the curve point of the "
        f"highest vali {m}, and the test {m} there. Vali AUC per tree: the mean of the vali curve's points.",
        "",
    ]
    head = ["model", f"trees to {frac:g} x LambdaMART (folds reaching it)", "best vali iteration"]
    head += [f"test {m} there", "vali AUC per tree"]
    rows = []
    for r in conv:
        tt = "never" if r["trees_to_target"] is None else f"{r['trees_to_target']:.1f}"
        rows.append(
            [
                r["label"],
                f"{tt} ({r['reached']}/{r['folds']})",
                f"{r['best_iteration']:.1f}",
                f"{r['test_at_best']:.4f}",
                f"{r['vali_auc']:.4f}",
            ]
        )
    return md + _md_table(head, rows)


def _difficulty_tables(by: dict[str, dict[str, Any]], m: str) -> list[str]:
    """Per difficulty score: each system's mean difference with LambdaMART in each quartile of the score."""
    md = [
        "",
        "## The effect by difficulty",
        "",
        f"The paired test queries (those with a relevant document) in quartiles of each difficulty score the study "
        f"computed; per system, the mean difference in {m} with LambdaMART, its 95% paired t interval and the "
        "number of queries. Tied scores stay in one bin, so a score with few distinct values has fewer bins.",
        "",
        "![The effect by difficulty](by_difficulty.png)",
    ]
    for t in by.values():
        e = t["edges"]
        bins = [f"[{e[i]:.3g}, {e[i + 1]:.3g}]" for i in range(len(e) - 1)]
        md += ["", f"### By {t['name']}", ""]
        md += _md_table(
            ["model", *bins],
            (
                [label] + [f"{_f(c['delta'])} {_ci(c['ci_t'])} ({c['n']})" for c in cells]
                for label, cells in t["systems"].items()
            ),
        )
    return md


def _html(md: list[str], title: str) -> str:
    """The Markdown page as HTML: CommonMark with tables (markdown-it-py, the parser of MyST and Jupyter Book),
    raw HTML in the Markdown escaped, in a minimal page with the figures at a readable width."""
    from markdown_it import MarkdownIt

    body = MarkdownIt("commonmark", {"html": False}).enable("table").render("\n".join(md) + "\n")
    return (
        "<!doctype html><html><head><meta charset='utf-8'><title>"
        + html.escape(title)
        + "</title><style>body{font-family:sans-serif} img{max-width:900px} "
        + "table{border-collapse:collapse} td,th{border:1px solid #999;padding:4px}</style></head><body>\n"
        + body
        + "</body></html>\n"
    )
