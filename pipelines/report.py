"""``ltr report``: the paper's tables and figures, rebuilt from the tracked runs.

From the children of a grid's parent run (MLflow):

* **Table 1**: NDCG@k on test, mean and standard deviation over folds, for the
  baseline and every strategy and switch point; each compared with the
  baseline over the test queries of all folds (paired differences, one per
  query): a paired t-test and a two-sided sign-flip randomisation test
  (10,000 permutations, seeded), p-values shown.
* **Table 2**: for the best MSE-t (highest mean final NDCG), at several model
  sizes n, the smallest baseline whose mean NDCG@k reaches MSE-t's at n trees,
  and the size ratio.
* **Figure 1**: NDCG@k on test (mean over folds) against the number of trees,
  baseline against every MSE-t.
* **Figure 2**: after ``tree`` trees, the distribution of test scores of the
  least and the most relevant documents, for MSE (an MSE-t with t >= tree, so
  still pure MSE at that point) and for LambdaMART, with
  KL(P_lowest || P_highest) on the trainer's histogram bins (100 bins over the
  score range, 0.5 added to every bin count).

The metric conventions and the dataset fingerprint are printed with the
tables. Output: ``report.md``, ``report.html``, PNG figures and CSV tables in
``--out``, also logged to the parent run under ``report/``.
"""

from __future__ import annotations

import html
import json
import logging
import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pipelines.tracking import (
    BASELINE,
    MSE,
    TAG_FOLD,
    TAG_KIND,
    TAG_STRATEGY,
    TAG_SWITCH,
    Tracker,
    png_bytes,
    pyplot,
)

log = logging.getLogger(__name__)


class ReportError(ValueError):
    """Nothing (or not enough) to report on."""


@dataclass
class Record:
    """What the report needs of one child run."""

    fold: int
    strategy: str
    switch: int | None
    steps: list[int]
    test: list[float]
    vali: list[float] = field(default_factory=list)
    per_query: dict[int, float] = field(default_factory=dict)
    score_dists: list[dict[str, Any]] = field(default_factory=list)
    run_id: str = ""

    @property
    def label(self) -> str:
        if self.strategy == BASELINE:
            return "LambdaMART"
        if self.strategy == MSE:
            return f"MSE-{self.switch}"
        return f"{self.strategy}" + ("" if self.switch is None else f"-{self.switch}")

    @property
    def final(self) -> float:
        return self.test[-1]

    def at(self, tree: int) -> float:
        if tree not in self.steps:
            raise ReportError(f"{self.label} fold {self.fold}: no NDCG recorded after {tree} trees "
                              "(train.eval_every must divide the report's model sizes)")
        return self.test[self.steps.index(tree)]


# ------------------------------------------------------------ statistics
def randomization_test(d: np.ndarray, n_perm: int = 10_000, seed: int = 0) -> float:
    """Two-sided paired sign-flip test of mean(d) = 0; p = (#|perm mean| >= |obs| + 1) / (n_perm + 1)."""
    d = np.asarray(d, dtype=np.float64)
    if d.size == 0 or not np.any(d):
        return 1.0
    obs = abs(d.mean())
    rng = np.random.default_rng(seed)
    hits = 0
    for start in range(0, n_perm, 1000):
        n = min(1000, n_perm - start)
        signs = rng.integers(0, 2, size=(n, d.size), dtype=np.int8) * 2 - 1
        hits += int(np.sum(np.abs(signs @ d) / d.size >= obs - 1e-15))
    return (hits + 1) / (n_perm + 1)


def paired_t_test(d: np.ndarray) -> float:
    """Two-sided paired t-test p-value of mean(d) = 0 (scipy's ttest_1samp on the differences)."""
    from scipy import stats

    d = np.asarray(d, dtype=np.float64)
    if d.size < 2 or not np.any(d):
        return 1.0
    if np.allclose(d, d[0]):
        return 0.0
    return float(stats.ttest_1samp(d, 0.0).pvalue)


def paired_differences(records: list[Record], base: list[Record]) -> np.ndarray:
    """Per-query differences record - baseline over the test queries of every fold."""
    by_fold = {b.fold: b for b in base}
    out = []
    for r in records:
        b = by_fold.get(r.fold)
        if b is None:
            continue
        qs = sorted(set(r.per_query) & set(b.per_query))
        out.append(np.array([r.per_query[q] - b.per_query[q] for q in qs]))
    return np.concatenate(out) if out else np.empty(0)


def kl_divergence(p_counts: list[int], q_counts: list[int], pseudo: float = 0.5) -> float:
    """KL(P || Q) of two histograms on the same bins, ``pseudo`` added to every count."""
    p = np.asarray(p_counts, np.float64) + pseudo
    q = np.asarray(q_counts, np.float64) + pseudo
    p /= p.sum()
    q /= q.sum()
    return float(np.sum(p * np.log(p / q)))


# ------------------------------------------------------------ tables
def groups(records: list[Record]) -> dict[tuple[str, int | None], list[Record]]:
    out: dict[tuple[str, int | None], list[Record]] = {}
    for r in records:
        out.setdefault((r.strategy, r.switch), []).append(r)
    return out


def table1(records: list[Record], n_perm: int = 10_000, seed: int = 0) -> list[dict[str, Any]]:
    """Mean/std over folds of the final test NDCG, and tests against the baseline."""
    g = groups(records)
    base = g.get((BASELINE, None), [])
    rows = []
    order = sorted(g, key=lambda k: (k[0] != BASELINE, k[0] != MSE, k[0], k[1] or 0))
    for key in order:
        rs = sorted(g[key], key=lambda r: r.fold)
        finals = np.array([r.final for r in rs])
        row = {"strategy": key[0], "switch": key[1], "label": rs[0].label, "folds": len(rs),
               "mean": float(finals.mean()), "std": float(finals.std(ddof=1)) if len(rs) > 1 else 0.0,
               "per_fold": finals.tolist(), "t_p": None, "perm_p": None, "delta": None, "queries": 0}
        if key != (BASELINE, None) and base:
            d = paired_differences(rs, base)
            row.update(delta=float(d.mean()) if d.size else None, queries=int(d.size),
                       t_p=paired_t_test(d), perm_p=randomization_test(d, n_perm, seed))
        rows.append(row)
    return rows


def table2(records: list[Record], sizes: list[int]) -> dict[str, Any]:
    """Best MSE-t at each size n vs the smallest baseline reaching its mean NDCG."""
    g = groups(records)
    base = g.get((BASELINE, None))
    mses = {k: v for k, v in g.items() if k[0] == MSE}
    if not base or not mses:
        raise ReportError("Table 2 needs the LambdaMART baseline and MSE-t runs")
    best_key = max(mses, key=lambda k: np.mean([r.final for r in mses[k]]))
    best = mses[best_key]
    folds = sorted({r.fold for r in best} & {r.fold for r in base})
    bmean = np.mean([[r for r in base if r.fold == f][0].test for f in folds], axis=0)
    bsteps = [r for r in base if r.fold == folds[0]][0].steps
    rows = []
    for n in sizes:
        v = float(np.mean([[r for r in best if r.fold == f][0].at(n) for f in folds]))
        reach = [s for s, x in zip(bsteps, bmean, strict=True) if x >= v - 1e-12]
        m = reach[0] if reach else None
        rows.append({"size": n, "mse_ndcg": v, "baseline_trees": m, "ratio": (m / n) if m else None})
    return {"mse": f"MSE-{best_key[1]}", "switch": best_key[1], "rows": rows, "baseline_max_trees": bsteps[-1]}


# ------------------------------------------------------------ figures
def figure1(records: list[Record], metric: str) -> bytes:
    plt = pyplot()
    g = groups(records)
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for key in sorted(g, key=lambda k: (k[0] != BASELINE, k[1] or 0)):
        if key[0] not in (BASELINE, MSE):
            continue
        rs = g[key]
        steps = rs[0].steps
        ax.plot(steps, np.mean([r.test for r in rs], axis=0), label=rs[0].label,
                lw=2.2 if key[0] == BASELINE else 1.2, color="black" if key[0] == BASELINE else None)
    ax.set_xlabel("number of trees")
    ax.set_ylabel(f"{metric} (test, mean over folds)")
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
        for i, r in enumerate(sorted(rs, key=lambda r: r.fold)):
            d = next((x for x in r.score_dists if x["tree"] == tree), None)
            if d is None:
                raise ReportError(f"{r.label} fold {r.fold}: no score distribution after {tree} trees "
                                  "(train.score_dist_trees)")
            counts = d["counts"]
            lo = next(c for c in counts if sum(c) > 0)
            hi = next(c for c in reversed(counts) if sum(c) > 0)
            kl[name].append(kl_divergence(lo, hi))
            if i == 0:
                e = np.asarray(d["edges"])
                mid = (e[:-1] + e[1:]) / 2
                for c, lab in ((lo, f"label {d['labels'][counts.index(lo)]}"),
                               (hi, f"label {d['labels'][counts.index(hi)]}")):
                    c = np.asarray(c, np.float64)
                    ax.plot(mid, c / max(c.sum(), 1) / np.diff(e), label=lab)
        ax.set_title(f"{name} after {tree} trees: KL = {np.mean(kl[name]):.3f}")
        ax.set_xlabel("predicted score")
        ax.legend(fontsize=8)
    axes[0].set_ylabel(f"density (fold {min(r.fold for r in which['MSE'])})")
    out = png_bytes(fig)
    plt.close(fig)
    return out, {"tree": tree, "mse_run": which["MSE"][0].label,
                 "kl_mean": {k: float(np.mean(v)) for k, v in kl.items()},
                 "kl_per_fold": kl}


# ------------------------------------------------------------ loading
def load_records(tracker: Tracker, parent: str, metric: str) -> list[Record]:
    """FINISHED children of ``parent`` with their curves, per-query NDCG and score distributions."""
    out = []
    for r in tracker.children(parent):
        if r.info.status != "FINISHED" or r.data.tags.get(TAG_KIND) != "child":
            continue
        hist = tracker.client.get_metric_history(r.info.run_id, f"{metric}_test")
        vh = tracker.client.get_metric_history(r.info.run_id, f"{metric}_vali")
        hist = sorted(hist, key=lambda m: m.step)
        perq = tracker.load_json(r.info.run_id, "per_query_test.json")
        training = tracker.load_json(r.info.run_id, "training.json")
        sw = r.data.tags.get(TAG_SWITCH, "")
        out.append(Record(fold=int(r.data.tags[TAG_FOLD]), strategy=r.data.tags[TAG_STRATEGY],
                          switch=int(sw) if sw else None, steps=[m.step for m in hist],
                          test=[m.value for m in hist], vali=[m.value for m in sorted(vh, key=lambda m: m.step)],
                          per_query=dict(zip(perq["qid"], perq[metric], strict=True)),
                          score_dists=training.get("score_dists", []), run_id=r.info.run_id))
    return out


# ------------------------------------------------------------ rendering
def _p(v: float | None) -> str:
    return "" if v is None else ("<0.0001" if v < 1e-4 else f"{v:.4f}")


def _cell(r: dict[str, Any], tests: bool = True) -> str:
    spread = f" ± {r['std']:.4f}" if r["folds"] > 1 else ""
    p = f" ({_p(r['t_p'])} / {_p(r['perm_p'])})" if tests and r["t_p"] is not None else ""
    return f"{r['mean']:.4f}{spread}{p}"


def render(t1: list[dict], t2: dict | None, fig2: dict | None, meta: dict[str, Any]) -> tuple[str, str]:
    """Markdown and HTML of the report."""
    m = meta["metric_name"].replace("_at_", "@").upper()
    switches = sorted({r["switch"] for r in t1 if r["switch"] is not None})
    single = all(r["folds"] == 1 for r in t1)
    md = [f"# {meta['title']}", "",
          f"- Experiment `{meta['experiment']}`, parent run `{meta['parent']}`, folds {meta['folds']}",
          f"- Dataset `{meta['data']}`, fingerprint `{meta['fingerprint']}`",
          f"- Metric: {meta['metric']}", f"- Significance: paired t-test / randomisation test "
          f"({meta['n_perm']} sign flips) against LambdaMART over the test queries of all folds", "",
          f"## Table 1: {m} on test, " + ("one fold" if single else "mean ± standard deviation over folds")
          + " (p-values against LambdaMART: t-test / randomisation)", ""]
    head = ["model"] + [f"t={s}" for s in switches]
    md += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    by_strategy: dict[str, dict[Any, dict]] = {}
    for r in t1:
        by_strategy.setdefault(r["strategy"], {})[r["switch"]] = r
    others = []
    for strat, cells in by_strategy.items():
        if strat == BASELINE:
            md.append("| LambdaMART (baseline, all t) | " + " | ".join([_cell(cells[None])] * len(switches)) + " |")
        elif None in cells:  # a path without switch points: listed below
            others.append(cells[None])
        else:
            row = ["MSE-t" if strat == MSE else strat] + [_cell(cells[s]) if s in cells else "" for s in switches]
            md.append("| " + " | ".join(row) + " |")
    if others:
        md += ["", f"### Other training paths ({m} on test; p-values against LambdaMART)", "",
               "| path | NDCG |", "|---|---|"] + [f"| {r['label']} | {_cell(r)} |" for r in others]
    if t2:
        md += ["", f"## Table 2: smallest LambdaMART with {m} at least that of {t2['mse']}", "",
               f"| size of {t2['mse']} (trees) | its {m} | LambdaMART trees | ratio |", "|---|---|---|---|"]
        for r in t2["rows"]:
            lm = r["baseline_trees"] if r["baseline_trees"] else f"> {t2['baseline_max_trees']}"
            ratio = f"{r['ratio']:.2f}" if r["ratio"] else "n/a"
            md.append(f"| {r['size']} | {r['mse_ndcg']:.4f} | {lm} | {ratio} |")
    md += ["", f"## Figure 1: {m} against the number of trees", "", "![Figure 1](figure1.png)"]
    if fig2:
        md += ["", f"## Figure 2: score distributions after {fig2['tree']} trees", "",
               f"KL(P_lowest ‖ P_highest): MSE ({fig2['mse_run']}) {fig2['kl_mean']['MSE']:.4f}, "
               f"LambdaMART {fig2['kl_mean']['LambdaMART']:.4f} (mean over folds; 100 bins, 0.5 added per bin)",
               "", "![Figure 2](figure2.png)"]
    text = "\n".join(md) + "\n"
    body = []
    for line in md:
        if line.startswith("# "):
            body.append(f"<h1>{html.escape(line[2:])}</h1>")
        elif line.startswith("### "):
            body.append(f"<h3>{html.escape(line[4:])}</h3>")
        elif line.startswith("## "):
            body.append(f"<h2>{html.escape(line[3:])}</h2>")
        elif line.startswith("- "):
            body.append(f"<p>{html.escape(line[2:])}</p>")
        elif line.startswith("!["):
            src = line.split("(")[1].rstrip(")")
            body.append(f'<img src="{src}" style="max-width:900px">')
        elif line.startswith("|---"):
            continue
        elif line.startswith("| "):
            cells = [html.escape(c.strip()) for c in line.strip("|").split("|")]
            body.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
        elif line:
            body.append(f"<p>{html.escape(line)}</p>")
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
    doc = ("<!doctype html><html><head><meta charset='utf-8'><title>" + html.escape(meta["title"]) +
           "</title></head><body style='font-family:sans-serif'>" + "\n".join(page) + "</body></html>\n")
    return text, doc


def build_report(tracker: Tracker, out: str, parent: str | None = None, metric_name: str = "ndcg_at_10",
                 n_perm: int = 10_000, seed: int = 0) -> dict[str, Any]:
    """Rebuild the tables and figures of a grid (default: the experiment's latest grid run)."""
    if parent is None:
        runs = tracker.client.search_runs([tracker.experiment_id], filter_string=f"tags.`{TAG_KIND}` = 'grid'",
                                          order_by=["attributes.start_time DESC"], max_results=1)
        if not runs:
            raise ReportError(f"experiment {tracker.experiment!r} has no grid run; run `ltr grid` first")
        parent = runs[0].info.run_id
    prun = tracker.client.get_run(parent)
    records = load_records(tracker, parent, metric_name)
    if not records:
        raise ReportError(f"grid run {parent} has no finished children")
    t1 = table1(records, n_perm, seed)
    switches = sorted({r.switch for r in records if r.strategy == MSE and r.switch})
    t2 = None
    try:
        t2 = table2(records, switches[:3])
    except ReportError as e:
        log.warning("no Table 2: %s", e)
    os.makedirs(out, exist_ok=True)
    files = {"figure1.png": figure1(records, metric_name.replace("_at_", "@").upper())}
    fig2 = None
    dist_trees = sorted({d["tree"] for r in records for d in r.score_dists})
    if dist_trees:
        try:
            files["figure2.png"], fig2 = figure2(records, dist_trees[0])
        except ReportError as e:
            log.warning("no Figure 2: %s", e)
    params = prun.data.params
    meta = {"title": f"Curriculum and continuation LtR: {tracker.experiment}", "experiment": tracker.experiment,
            "parent": parent, "folds": sorted({r.fold for r in records}), "data": params.get("data", "?"),
            "fingerprint": params.get("data_fingerprint", "?"), "metric": params.get("metric", metric_name),
            "metric_name": metric_name, "n_perm": n_perm}
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
    log.info("report of %d runs written to %s (and logged to run %s)", len(records), out, parent)
    return {"out": out, "parent": parent, "table1": t1, "table2": t2, "figure2": fig2, "records": len(records)}
