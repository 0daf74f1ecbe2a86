"""The report as Markdown (``report.md``) and as one self-contained HTML page (``report.html``,
:mod:`pipelines.report.page`), both from the same sections in the same order: the title and a one-line summary of
the grid, the answer (the headline), the figures, the tables (systems in Table 1's order in every one), then the
provenance and the files."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from pipelines.report.document import (
    FIGURE_NAMES,
    Block,
    Figure,
    Report,
    Section,
    Table,
    headline_markdown,
    p_text,
    test_name,
)
from pipelines.report.significance import LEVEL, TESTS
from pipelines.report.stats import KL_PSEUDO_COUNT, alpha_key
from pipelines.study.design import BASELINE, MSE

log = logging.getLogger(__name__)


def _md_table(head: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    """A Markdown table (the GFM pipe syntax markdown-it-py renders): the header, its rule, a line per row."""
    return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)] + ["| " + " | ".join(r) + " |" for r in rows]


def _cell(r: dict[str, Any]) -> str:
    spread = f" ± {r['std']:.4f}" if r["folds"] > 1 else ""
    short = f" [{r['folds']}/{r['folds_expected']} folds]" if r["folds"] < r["folds_expected"] else ""
    return f"{r['mean']:.4f}{spread}{short}"


def _ci(ci: Sequence[float | None] | None) -> str:
    return "n/a" if ci is None else f"[{_f(ci[0])}, {_f(ci[1])}]"


def _f(v: float | None, fmt: str = "+.4f") -> str:
    return "n/a" if v is None else format(v, fmt)


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


def _by_table1(labels: Iterable[str], t1: list[dict[str, Any]]) -> list[str]:
    """``labels`` in Table 1's order of systems (those Table 1 lacks last, in their order)."""
    order = {r["label"]: i for i, r in enumerate(t1)}
    return sorted(labels, key=lambda s: order.get(s, len(order)))


def render(
    t1: list[dict],
    t2: dict | None,
    fig2: dict | None,
    meta: dict[str, Any],
    images: Mapping[str, bytes] | None = None,
) -> tuple[str, str]:
    """Markdown and HTML of the report.

    ``images``: the figures' PNG bytes by file name (:data:`FIGURE_NAMES`): the page embeds each one as a data: URI
    and leaves out a name absent from it; the Markdown links them by file name. None (the default): the page and the
    Markdown link the files the report always writes beside them (``figure1.png``; ``by_difficulty.png`` with the
    effect by difficulty; ``figure2.png`` with Figure 2).

    ``meta`` (besides the grid's description): ``headline`` (``report.json``'s headline: the answer, first on the
    page; absent: the section says so, with ``no_headline`` as the reason when given), ``primary_test``
    (``randomisation`` or ``t``: marked as primary wherever it appears, the other a robustness column; absent: both
    tests side by side, neither primary) and ``margin`` (the non-inferiority margin in NDCG).
    """
    from pipelines.report.page import page

    rep = _report(t1, t2, fig2, meta, images)
    return _markdown(rep), page(rep, images)


def _report(
    t1: list[dict], t2: dict | None, fig2: dict | None, meta: dict[str, Any], images: Mapping[str, bytes] | None
) -> Report:
    m = meta["metric_name"].replace("_at_", "@").upper()
    folds = meta["folds"]
    n_folds = len(folds)
    split = meta.get("split", "test")
    primary = meta.get("primary_test") if meta.get("primary_test") in TESTS else None
    margin = meta.get("margin")
    headline = meta.get("headline")
    if margin is None and headline:
        margin = headline.get("margin")
    if primary is None and headline and headline.get("primary_test") in TESTS:
        primary = headline["primary_test"]
    others = [r for r in t1 if r["strategy"] != BASELINE]
    data = str(meta.get("data", "?"))
    summary = (
        f"{len(others)} system{'s' * (len(others) != 1)} against LambdaMART on `{os.path.basename(data) or data}`, "
        f"{n_folds} fold{'s' * (n_folds != 1)}, {m} on {split}; grid {meta.get('status', '?')}."
    )
    warnings = []
    if meta.get("problems"):
        warnings.append(
            "- **Warning: this grid is unfinished**: "
            + "; ".join(meta["problems"])
            + ". The tables use the finished child runs only."
        )
    if meta.get("metric_warning"):
        warnings.append(meta["metric_warning"])
    line, warn = _versions_line(meta.get("versions", {}))
    if warn:
        warnings.append(warn)
    if split != "test":
        warnings.append(
            f"- **The dataset has no test split**: every {m} below is on {split} (no significance tests: "
            "they pair per-query test NDCG)"
        )
    tables = [_table1(t1, meta, m, split)]
    tested = [r for r in t1 if r["t_p"] is not None or r["perm_p"] is not None]
    if tested:
        tables.append(_significance(tested, meta, m, primary))
        tables.append(_effect_table(tested, t1, meta, m))
    if t2:
        tables.append(_table2(t2, m))
    elif meta.get("no_table2"):
        tables.append(Section("table2", f"Table 2: not built ({meta['no_table2']})"))
    tables += _folds_table(t1, m, split)
    if meta.get("seeds"):
        tables.append(_seeds_table(meta["seeds"], t1, m, split))
    if meta.get("controls"):
        tables.append(_controls_table(meta["controls"], meta.get("controls_by_kind") or {}, m))
    if meta.get("convergence"):
        tables.append(_convergence_table(meta["convergence"], t1, m))
    if meta.get("by_difficulty"):
        tables.append(_difficulty_tables(meta["by_difficulty"], t1, m))
    elif meta.get("no_difficulty"):
        tables.append(Section("by-difficulty", f"The effect by difficulty: not built ({meta['no_difficulty']})"))
    provenance = [
        f"- Experiment `{meta['experiment']}`, parent run `{meta['parent']}` ({meta['status']}), grid folds {folds}"
    ]
    provenance += [f"- Dataset `{meta['data']}`, fingerprint `{meta['fingerprint']}`", f"- Metric: {meta['metric']}"]
    if meta.get("metric_warning"):
        provenance.append(meta["metric_warning"])
    provenance.append(line)
    rv = meta.get("report_version")
    if rv:
        provenance.append(f"- Report written by ltr `{rv['ltr']}` (git `{rv['git'] or '?'}`), scipy `{rv['scipy']}`")
    settings = [f"randomisation test {meta['n_perm']} resamples", f"seed {meta['seed']}"]
    if meta.get("n_boot"):
        settings.insert(1, f"bootstrap {meta['n_boot']} resamples")
    if primary:
        settings.append(f"primary test: the {test_name(primary)} (report.primary_test)")
    if margin is not None:
        settings.append(f"non-inferiority margin {margin:g} {m} (report.margin)")
    provenance.append("- Settings: " + ", ".join(settings))
    return Report(
        title=meta["title"],
        summary=summary,
        warnings=warnings,
        headline=headline,
        no_headline=meta.get("no_headline") or "this report was built without one (report.json has no headline)",
        metric=m,
        primary=primary,
        margin=margin,
        figures=_figures(t1, fig2, meta, images, m, margin),
        tables=tables,
        provenance=provenance,
        files=_files_section(meta),
    )


def _figures(
    t1: list[dict],
    fig2: dict | None,
    meta: dict[str, Any],
    images: Mapping[str, bytes] | None,
    m: str,
    margin: float | None,
) -> list[Figure]:
    """The figures to show: those in ``images``; without ``images``, the files the report always writes."""
    if images is None:
        names = ["figure1.png"]
        if meta.get("by_difficulty"):
            names.insert(0, "by_difficulty.png")
        if fig2:
            names.append("figure2.png")
    else:
        names = [n for n in FIGURE_NAMES if n in images]
    within = (
        f"; an interval wholly right of −{margin:g} means as good as LambdaMART within the margin"
        if margin is not None
        else ""
    )
    frac = (meta.get("convergence") or [{}])[0].get("fraction", meta.get("target_fraction"))
    target = f"{frac:g} x " if frac else ""
    out = {
        "forest.png": Figure(
            "forest.png",
            f"Forest plot: Δ {m} against LambdaMART",
            f"each row is a system (Table 1's order): its point is the mean paired difference in {m} with "
            f"LambdaMART over the test queries, its bar the 95% interval; right of the zero line is better{within}.",
        ),
        "convergence.png": Figure(
            "convergence.png",
            "Convergence: trees to reach LambdaMART",
            f"how many trees each system needs to reach {target}LambdaMART's final validation {m} (chosen on "
            "validation, as the convergence table below): fewer is faster; a fold that never gets there is "
            "beyond the end of the curve. A teacher-based curriculum's curve starts after its teachers' trees "
            "(per fold), which it needs before its first tree.",
        ),
        "selfpaced.png": Figure(
            "selfpaced.png",
            "Self-paced curricula: the queries kept",
            "the share of the training queries (with a pair of documents of different labels) each self-paced "
            "system trained on after each selection, against trees: the self-paced curriculum and its two controls "
            "keep the same number at the same trees by design (the pacing function's shares); a line that differs "
            "from the others would be a fault.",
        ),
        "by_difficulty.png": Figure(
            "by_difficulty.png",
            "The effect by difficulty (oracle difficulty)",
            f"one panel per difficulty score, the test queries in quartiles of it (hard to easy): each system's "
            f"mean difference in {m} with LambdaMART and its 95% interval; above the zero line the system does "
            "better on those queries. The scores use the test queries' own labels (oracle difficulty).",
        ),
        "figure1.png": Figure(
            "figure1.png",
            f"Figure 1: {m} against the number of trees",
            f"the mean {m} over folds after each number of trees: LambdaMART in black, each MSE-t in colour; a "
            "curve above LambdaMART's is better at that model size.",
        ),
        "figure2.png": Figure(
            "figure2.png",
            f"Figure 2: score distributions after {fig2['tree']} trees" if fig2 else "Figure 2: score distributions",
            "the scores a model gives the least and the most relevant documents; the less the two distributions "
            "overlap, the better it separates them (KL: the larger, the more apart).",
            (
                f"KL(P_lowest ‖ P_highest): MSE ({fig2['mse_run']}) {fig2['kl_mean']['MSE']:.4f}, "
                f"LambdaMART {fig2['kl_mean']['LambdaMART']:.4f} (mean over folds; natural log, the trainer's "
                f"histogram bins, {KL_PSEUDO_COUNT} added per bin)"
            )
            if fig2
            else None,
        ),
    }
    return [out[n] for n in names if n in out]


def _markdown(rep: Report) -> str:
    """``report.md``: a plain document in the page's order, the headline first, images linked by file name."""
    md = [f"# {rep.title}", "", rep.summary]
    if rep.warnings:
        md += ["", *rep.warnings]
    md += ["", "## The answer", ""]
    md += headline_markdown(rep)
    for fig in rep.figures:
        md += ["", f"## {fig.title}", "", f"![{fig.title}]({fig.name})", "", f"How to read: {fig.how}"]
        if fig.note:
            md += ["", fig.note]
    for s in rep.tables:
        md += ["", f"## {s.title}"]
        for b in s.body:
            if isinstance(b, Table):
                if b.caption:
                    md += ["", f"### {b.caption}"]
                md += ["", *_md_table(b.head, b.rows)]
            else:
                md += ["", b]
        if s.how:
            md += ["", f"How to read: {s.how}"]
    md += ["", "## Provenance", "", *rep.provenance]
    md += ["", "## Files for scripts and other tools", "", *rep.files]
    return "\n".join(md) + "\n"


def _table1(t1: list[dict], meta: dict[str, Any], m: str, split: str) -> Section:
    n_folds = len(meta["folds"])
    switches = sorted({r["switch"] for r in t1 if r["switch"] is not None})
    spread = "one fold" if n_folds == 1 else f"mean ± standard deviation over the grid's {n_folds} folds"
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
    body: list[Block] = [Table(["model"] + ([f"t={s}" for s in switches] or [m]), rows)]
    if others:
        body.append(
            Table(["path", "NDCG"], [[r["label"], _cell(r)] for r in others], f"Other training paths ({m} on {split})")
        )
    if any(r["folds"] < r["folds_expected"] for r in t1):
        body.append(
            f"[k/{n_folds} folds]: the cell averages only the k folds whose run of that system finished; "
            "the grid's other folds are missing for it (see the warning above)."
        )
    return Section(
        "table1",
        f"Table 1: {m} on {split} after the last tree, {spread}",
        f"each system's final {m}, one row per strategy, one column per switch point t",
        body,
        "higher is better; compare a cell with LambdaMART's row (the same value in every column); ± is the spread "
        "over folds, not an interval of the mean (the tests are below).",
    )


def _significance(tested: list[dict], meta: dict[str, Any], m: str, primary: str | None) -> Section:
    order = [primary, *(k for k in TESTS if k != primary)] if primary else ["t", "randomisation"]
    head = ["model", f"Δ {m}", "queries (folds)", "left out: no relevant document"]
    for k in order:
        name = TESTS[k].label
        mark = "" if primary is None else (" (primary)" if k == primary else " (robustness)")
        head += [f"{name} p{mark}", f"{name} p, Holm{mark}"]
    keys = [key for k in order for key in (TESTS[k].p, TESTS[k].p_holm)]
    rows = [
        [r["label"], _f(r["delta"]), f"{r['queries']} ({len(r['paired_folds'])})", str(r["queries_no_relevant"])]
        + [p_text(r[k]) for k in keys]
        for r in tested
    ]
    if primary:
        other = next(k for k in TESTS if k != primary)
        which = (
            f" The primary test (report.primary_test) is the {test_name(primary)}: its columns come first and "
            f"the headline's significance is its Holm-corrected p; the {test_name(other)} is a robustness check."
        )
    else:
        which = ""
    text = (
        f"Paired per test query over the folds both systems finished (one difference per query, folds "
        f"pooled), leaving out the test queries without a relevant document: every system scores them by "
        f"the metric's empty-query convention, so they carry no evidence and would only inflate n "
        f"(the means of Table 1 keep them). Two-sided paired t-test (scipy.stats.ttest_rel) and two-sided "
        f"randomisation test "
        f"(scipy.stats.permutation_test, the two values of each pair swapped at random, statistic the mean "
        f"difference, {meta['n_perm']} resamples, seed {meta['seed']}; exact when 2^queries is fewer). "
        f"p-values are shown raw and Holm-corrected side by side (Holm-Bonferroni step-down over the "
        f"{len(tested)} comparisons of this table, for each test separately).{which}"
    )
    p_col = f"the {TESTS[primary].label} p, Holm (primary)" if primary else "a Holm-corrected p"
    return Section(
        "significance",
        "Significance against LambdaMART",
        "each system's mean paired difference with LambdaMART and the p-values of both tests, raw and Holm",
        [text, Table(head, rows)],
        f"{p_col} below {LEVEL:g} means a difference unlikely under no difference at all, after correcting for the "
        f"{len(tested)} comparisons; its sign is Δ's. A large p says nothing about being as good (see the headline's "
        "margin).",
    )


def _effect_table(tested: list[dict[str, Any]], t1: list[dict[str, Any]], meta: dict[str, Any], m: str) -> Section:
    """The effect sizes, risk and folds of each comparison with the baseline."""
    alphas = [alpha_key(a) for a in meta.get("risk_alphas", [])]  # the keys of table1's risk figures
    text = (
        f"The same pairs as above (queries with a relevant document). Δ: mean difference, with its 95% paired t "
        f"interval and its 95% paired bootstrap interval (scipy.stats.bootstrap, percentile, "
        f"{meta.get('n_boot', '?')} resamples of the queries, seed {meta['seed']}); d_z: Δ / standard deviation "
        "of the differences; W/T/L: queries won, tied and lost. URisk_α: the mean difference with each loss "
        "counted 1 + α times (Wang et al., SIGIR 2012); TRisk_α: URisk_α / its standard error (Dinçer et al., "
        "SIGIR 2014; below -2: significantly riskier than the baseline, above 2: significantly safer). A TRisk "
        "below -2 with Δ near 0 means the system loses on some queries about as much as it gains on others: "
        "risky, not worse on average. GeoRisk_α (Dinçer et al., SIGIR 2016): over the systems of this table "
        "with every fold of the baseline, the geometric mean of the mean score and of the normal CDF of the "
        "chi-square-like z-scores, losses weighted 1 + α (higher is better); a query every one of these systems "
        "scores 0 on gets z = 0 for all of them (no evidence either way) and still counts among the queries. "
        f"Folds won: folds whose final test {m} beats LambdaMART's."
    )
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
    return Section(
        "effect",
        "Effect sizes and risk against LambdaMART",
        "how large each difference is, how often a system wins, and how risky it is per query (URisk, TRisk, GeoRisk)",
        [text, Table([*head, "folds won"], rows)],
        "an interval that excludes 0 agrees with a significant test; |d_z| near 0.2 is small, 0.5 medium; a TRisk "
        "below -2 flags a system that hurts some queries, even when Δ is near 0; compare GeoRisk within this table "
        "only.",
    )


def _table2(t2: dict[str, Any], m: str) -> Section:
    T = t2["baseline_max_trees"]
    vali = ", ".join(f"{k} {v:.4f}" for k, v in t2["vali"].items())
    text = (
        f"{t2['mse']} is the MSE-t with the best mean final {m} on validation ({vali}); test {m}, means over "
        f"folds {t2['folds']}. Sizes: {t2['sizes_from']}. LambdaMART's curve ends at {T} trees: '> {T}' "
        "means it never reaches that NDCG."
    )
    rows = [
        [
            str(r["size"]),
            f"{r['mse_ndcg']:.4f}",
            str(r["baseline_trees"]) if r["baseline_trees"] else f"> {T}",
            f"{r['ratio']:.2f}" if r["ratio"] else f"> {T / r['size']:.2f}",
        ]
        for r in t2["rows"]
    ]
    return Section(
        "table2",
        f"Table 2: smallest LambdaMART with {m} at least that of {t2['mse']}",
        f"how many LambdaMART trees match {t2['mse']} at each of its sizes",
        [text, Table([f"size of {t2['mse']} (trees)", f"its {m}", "LambdaMART trees", "ratio"], rows)],
        f"a ratio above 1: LambdaMART needs that many times the trees to match {t2['mse']}'s test {m}.",
    )


def _folds_table(t1: list[dict[str, Any]], m: str, split: str) -> list[Section]:
    """Each system's final NDCG fold by fold, next to the pooled mean, and the folds it beats the baseline on."""
    folds = sorted({f for r in t1 for f in r["fold_ids"]})
    if len(folds) < 2:
        return []
    rows = []
    for r in t1:
        by = dict(zip(r["fold_ids"], r["per_fold"], strict=True))
        cells = [f"{by[f]:.4f}" if f in by else "" for f in folds]
        won = "" if r["folds_won"] is None else f"{r['folds_won']} / {len(r['paired_folds'])}"
        rows.append([r["label"], *cells, f"{r['mean']:.4f}", won])
    head = ["model", *(f"fold {f}" for f in folds), "mean", "folds beating LambdaMART"]
    return [
        Section(
            "folds",
            f"Folds side by side: final {m} on {split}",
            f"each system's final {m} on every fold, its mean and the folds it beats LambdaMART on",
            [Table(head, rows)],
            "read a column to compare systems on one fold (the folds differ in difficulty); a system that beats "
            "LambdaMART on every fold is consistently better, one that wins on few is not.",
        )
    ]


def _seeds_table(rows: list[dict[str, Any]], t1: list[dict[str, Any]], m: str, split: str) -> Section:
    """The spread across seed repetitions (:func:`pipelines.report.seeds.average_seeds`)."""
    text = (
        f"The systems whose trees depend on a seed (the random curriculum, the seeded objectives noisy_lambdamart "
        f"and stochastic_rank) ran once per "
        f"seed (grid.seeds); every other table uses each query's {m} averaged over the seeds. Per seed: the mean "
        f"over folds of the final {m}, and Δ, the mean paired difference with LambdaMART (queries with a relevant "
        "document); then their mean and standard deviation across seeds."
    )
    by = {r["system"]: r for r in rows}
    cells = []
    for r in (by[s] for s in _by_table1(by, t1)):
        finals = ", ".join(f"{s['final']:.4f}" for s in r["per_seed"])
        deltas = ", ".join(_f(s["delta"]) for s in r["per_seed"])
        sd = "" if r["final_sd"] is None else f" ± {r['final_sd']:.4f}"
        dsd = "" if r["delta_sd"] is None else f" ± {r['delta_sd']:.4f}"
        cells.append(
            [r["system"], str(len(r["seeds"])), finals, f"{r['final_mean']:.4f}{sd}", deltas, _f(r["delta_mean"]) + dsd]
        )
    head = ["model", "seeds", f"final {m} per seed", "mean ± sd", "Δ per seed", "Δ mean ± sd"]
    return Section(
        "seeds",
        f"Seeds: final {m} on {split} and the difference with LambdaMART, seed by seed",
        "how much the seed-dependent systems move from one seed to the next",
        [text, Table(head, cells)],
        "a Δ whose sign changes from seed to seed, or whose sd is as large as its mean, depends on the seed.",
    )


def _trees(v: float | None, T: Any) -> str:
    if v is None:
        return f"> {T}" if T is not None else "never"
    return f"{v:.0f}" if float(v).is_integer() else f"{v:.1f}"


def _convergence_table(conv: list[dict[str, Any]], t1: list[dict[str, Any]], m: str) -> Section:
    """How fast each system gets there (:func:`pipelines.report.tables.convergence`): the median over folds of the
    trees to the target (a fold that never reaches it counts as '> T'), with the range."""
    frac = conv[0]["fraction"]
    how_tt = (
        f"the first curve point whose vali {m} reaches {frac:g} x LambdaMART's final vali {m} on that fold; the "
        "median over folds, a fold that never reaches it counted as '> T' (T: the last tree of the curve), "
        "with [min, max] over folds"
    )
    col = f"trees to {frac:g} x LambdaMART: median [min, max] (folds reaching it)"
    text = (
        f"Over folds. Trees to target: {how_tt}. Best iteration: the curve point of the highest vali {m} (mean over "
        f"folds), and the test {m} there. Vali AUC per tree: the mean of the vali curve's points. A teacher-based "
        "curriculum's row states the trees of its teachers per fold (teacher.path on each cross-fitting group), "
        "which it trains before its own first tree."
    )
    by = {r["label"]: r for r in conv}
    rows = []
    for r in (by[s] for s in _by_table1(by, t1)):
        T = r.get("max_trees")
        tt = _trees(r.get("trees_to_target"), T)
        rng = r.get("trees_to_target_range")
        if rng:
            tt += f" [{_trees(rng[0], T)}, {_trees(rng[1], T)}]"
        if r.get("teacher_trees"):  # a teacher-based curriculum: its teachers' trees come first
            tt += f", after {r['teacher_trees']:g} teachers' trees"
        rows.append(
            [
                r["label"],
                f"{tt} ({r.get('reached', '?')}/{r.get('folds', '?')})",
                f"{r['best_iteration']:.1f}",
                f"{r['test_at_best']:.4f}",
                f"{r['vali_auc']:.4f}",
            ]
        )
    head = ["model", col, "best vali iteration", f"test {m} there", "vali AUC per tree"]
    return Section(
        "convergence",
        "Convergence: chosen on validation, reported on test",
        f"how many trees each system needs to reach LambdaMART's {m}, and where its validation curve peaks",
        [text, Table(head, rows)],
        "fewer trees to the target is faster; '> T' means the median fold never got there within the curve; a "
        "higher vali AUC per tree means a curve that rises earlier.",
    )


#: How the report names each kind of difficulty.
KIND_NAMES = {
    "oracle": "oracle (read from the labels)",
    "label_free": "label-free",
    "model": "a model's judgement",
    "dynamic": "the model being trained (self-paced)",
}


def _controls_table(rows: list[dict[str, Any]], kinds: dict[str, dict[str, Any]], m: str) -> Section:
    """Each curriculum against its anti-curriculum and the random curriculum, a table per kind of difficulty."""

    def cell(c: dict[str, Any] | None) -> str:
        if c is None:
            return "not in the grid"
        mark = {"win": " (win)", "loss": " (loss)"}.get(str(c.get("significance")), "")
        return f"{_f(c['delta'])} {_ci(c['ci95_bootstrap'])}{mark}"

    text = (
        f"Each curriculum minus each of its controls at the same switch point, in {m} over the paired test queries "
        "(those with a relevant document): its anti-curriculum (the same difficulty score, hardest first; "
        "`grid.anti: true` adds them) and the random curriculum (a seeded sample of the same size). Interval: "
        "95% paired bootstrap; win/loss: significant under the primary test after Holm's correction over these "
        "comparisons. A curriculum beats its controls only when it beats both: beating the random one alone "
        "says that an order by this score helps, not that easy-first does."
    )
    body: list[Block] = [text]
    for kind, k in kinds.items():
        won = ", ".join(k["beat_both"]) or "none"
        answer = (
            f"{KIND_NAMES.get(kind, kind).capitalize()}: {len(k['controlled'])} of {len(k['curricula'])} "
            f"curricula have both controls in the grid; beat both: {won}."
        )
        body.append(answer)
        body.append(
            Table(
                ["curriculum", "minus its anti-curriculum", "minus the random curriculum", "beats both"],
                [
                    [
                        r["system"]
                        + (f" (its teachers: {r['teacher_trees']:g} trees)" if r.get("teacher_trees") else ""),
                        cell(r["anti"]),
                        cell(r["random"]),
                        "yes" if r["beats_both"] else "no",
                    ]
                    for r in rows
                    if r["kind"] == kind
                ],
                f"Difficulty {KIND_NAMES.get(kind, kind)}",
            )
        )
    return Section(
        "controls",
        "Curricula against their controls",
        "each curriculum against its anti-curriculum and the random curriculum at the same switch point, by kind",
        body,
        "a cell is Δ [95% interval]; a positive Δ favours the curriculum; 'not in the grid': that control was not "
        "trained at this switch point.",
    )


def _difficulty_tables(by: dict[str, dict[str, Any]], t1: list[dict[str, Any]], m: str) -> Section:
    """Per difficulty score: each system's mean difference with LambdaMART in each quartile of the score."""
    text = (
        f"The paired test queries (those with a relevant document) in quartiles of each difficulty score the study "
        f"computed; per system, the mean difference in {m} with LambdaMART, its 95% paired t interval and the "
        "number of queries. Tied scores stay in one bin, so a score with few distinct values has fewer bins. "
        "The difficulty scores use the test queries' own relevance labels (oracle difficulty: BM25's and "
        "PageRank's NDCG against those labels, the number of relevant documents): they describe the queries after "
        "the fact, and no system could know them when ranking."
    )
    body: list[Block] = [text]
    for t in by.values():
        e = t["edges"]
        bins = [f"[{e[i]:.3g}, {e[i + 1]:.3g}]" for i in range(len(e) - 1)]
        systems = t["systems"]
        body.append(
            Table(
                ["model", *bins],
                [
                    [label] + [f"{_f(c['delta'])} {_ci(c['ci_t'])} ({c['n']})" for c in systems[label]]
                    for label in _by_table1(systems, t1)
                ],
                f"By {t['name']}",
            )
        )
    return Section(
        "by-difficulty",
        "The effect by difficulty",
        "each system's difference with LambdaMART in each quartile of each (oracle) difficulty score",
        body,
        "a cell is Δ [95% interval] (queries); a system whose gains sit in the hard quartiles helps the hard "
        "queries; an interval across 0 is no evidence either way.",
    )


def _files_section(meta: dict[str, Any]) -> list[str]:
    """Where the numbers are for scripts and other tools (``report.json``, the TREC runs, LaTeX, CSV)."""
    md = [
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
