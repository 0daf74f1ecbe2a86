"""``ltr report``'s entry point: a grid's tables and figures, written to a folder and logged to its parent run."""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import dataclass, field
from typing import Any

from pipelines.core.config import ReportConfig
from pipelines.core.plots import drawn_in_background
from pipelines.core.plots import resolve as resolve_figures
from pipelines.report.answer import RANDOM, Answer, answer
from pipelines.report.by_difficulty import by_difficulty, load_scores
from pipelines.report.controls import by_kind, curriculum_controls
from pipelines.report.export import comparisons, load_test_scores, report_json, trec_files
from pipelines.report.figures import (
    convergence_figure,
    difficulty_figure,
    figure1,
    figure2,
    forest_plot,
    selfpaced_figure,
)
from pipelines.report.latex import (
    convergence_tex,
    difficulty_tex,
    folds_tex,
    per_query_csv,
    risk_tex,
    seeds_tex,
    table1_tex,
    table2_tex,
)
from pipelines.report.loading import code_versions, find_grid, load_grid, report_version
from pipelines.report.mlflow_view import log_headline
from pipelines.report.pairing import groups, pairs_with_baseline
from pipelines.report.records import Record, ReportError
from pipelines.report.render import render
from pipelines.report.seeds import average_seeds
from pipelines.report.stats import alpha_key
from pipelines.report.tables import convergence, run_convergence, table1, table2
from pipelines.study.design import BASELINE, MSE
from pipelines.tracking.runs import Tracker

log = logging.getLogger(__name__)


def named(stem: str, fig: dict[str, bytes]) -> dict[str, bytes]:
    """A figure's files (:func:`pipelines.report.figures.figure_files`: ``png``, ``pdf``) under ``stem``."""
    return {f"{stem}.{ext}": data for ext, data in fig.items()}


@dataclass
class ComputedReport:
    """What a report computed from a grid's runs (:func:`compute_report`), before anything is drawn or written:
    the records, the tables, the answer and the data of every figure. :func:`render_report` turns it into files,
    :func:`publish_report` writes them and logs them to MLflow."""

    tracker: Tracker
    parent: str
    state: Any  # pipelines.report.loading's grid state (status, folds, split, params)
    runs: list[Any]
    records: list[Record]
    seed_rows: list[dict[str, Any]]
    problems: list[str]
    config: ReportConfig
    metric_name: str
    t1: list[dict[str, Any]]
    t2: dict[str, Any] | None
    conv: list[dict[str, Any]] | None
    by_diff: dict[str, dict[str, Any]] | None
    ans: Answer
    meta: dict[str, Any]
    test_scores: dict[str, Any] | None  # run id -> its logged test scores, for the TREC files (None: no files)
    laps: dict[str, float] = field(default_factory=dict)  # seconds per stage (logged at the end)

    @property
    def m_label(self) -> str:
        """The metric as the tables print it (``NDCG@10``)."""
        return self.metric_name.replace("_at_", "@").upper()


class _Laps:
    """One progress line per stage with its time (the report's log is otherwise quiet), kept in ``laps``."""

    def __init__(self, laps: dict[str, float]) -> None:
        self.laps, self.t = laps, time.perf_counter()

    def __call__(self, stage: str) -> None:
        now = time.perf_counter()
        self.laps[stage] = self.laps.get(stage, 0.0) + now - self.t
        log.info("report: %s in %.1f s", stage, now - self.t)
        self.t = now


def compute_report(
    tracker: Tracker, parent: str | None, *, report: ReportConfig, metric_name: str, difficulty: str | None
) -> ComputedReport:
    """Read a grid's runs from MLflow and compute its tables, statistics and answer (see :func:`build_report`)."""
    laps: dict[str, float] = {}
    lap = _Laps(laps)
    run = find_grid(tracker, parent)
    parent = run.info.run_id
    runs, state = load_grid(tracker, run, metric_name)
    lap("load (MLflow)")
    if not runs:
        raise ReportError(f"grid run {parent} ({state.status}) has no finished children")
    problems = state.problems(runs)
    # the tables: one record per system and fold, seed repetitions (grid.seeds) averaged query by query
    records, seed_rows = average_seeds(runs)
    if problems:
        log.warning("grid %s is unfinished: %s", parent, "; ".join(problems))
    pairs = pairs_with_baseline(records)  # once, for Table 1 and the effect by difficulty
    t1 = table1(
        records,
        report.permutations,
        report.seed,
        folds=state.folds,
        n_boot=report.bootstrap,
        risk_alphas=report.risk_alphas,
        pairs=pairs,
    )
    lap("table 1 (tests, bootstrap, risk)")
    controls = None
    if state.split == "test":  # the controls pair per-query test NDCG, as Table 1's tests do
        common = {"n_perm": report.permutations, "n_boot": report.bootstrap, "seed": report.seed}
        controls = curriculum_controls(records, **common, primary_test=report.primary_test) or None
    lap("curricula against their controls")
    g = groups(records)
    conv = (
        convergence(records, report.target_fraction) if (BASELINE, None) in g and any(r.vali for r in records) else None
    )
    t2, no_table2 = None, None
    if not any(r.vali for r in records):
        no_table2 = "the dataset has no vali split, and Table 2 chooses its MSE-t on validation"
        log.warning("no Table 2: %s", no_table2)
    elif (BASELINE, None) in g and any(k[0] == MSE for k in g):
        t2 = table2(records, list(report.table2_sizes) or None)
    else:
        no_table2 = "the grid has no finished LambdaMART baseline and MSE-t runs"
        log.warning("no Table 2: %s", no_table2)
    lap("convergence, table 2")
    params = state.params
    metric = params.get("metric", metric_name)
    child_metrics = sorted({r.metric for r in runs if r.metric and r.metric != metric})
    versions = code_versions(runs)
    meta: dict[str, Any] = {
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
        "n_perm": report.permutations,
        "n_boot": report.bootstrap,
        "risk_alphas": list(report.risk_alphas),
        "target_fraction": report.target_fraction,
        "seed": report.seed,
        "versions": versions,
        "report_version": report_version(),
        "no_table2": no_table2,
        "split": state.split,
    }
    if any(len(v) > 1 for v in versions.values()):
        log.warning(
            "children of grid %s ran different code: %s", parent, {k: v for k, v in versions.items() if len(v) > 1}
        )
    meta["convergence"] = conv
    meta["controls"] = controls
    meta["controls_by_kind"] = by_kind(controls) if controls else None
    by_diff, meta["no_difficulty"] = None, None
    scores = None
    if difficulty and (BASELINE, None) in g and state.split == "test":
        try:
            scores = load_scores(difficulty, state.params.get("data"), state.folds)
            by_diff = by_difficulty(records, scores, pairs)
        except ReportError as e:
            scores = None
            meta["no_difficulty"] = str(e)
            log.warning("no effect by difficulty: %s", e)
    meta["by_difficulty"] = by_diff
    lap("by difficulty")
    m_label = metric_name.replace("_at_", "@").upper()
    if state.split == "test":
        ans = answer(
            tracker, t1, records, runs, pairs, scores, dataset=state.params.get("data"), report=report, metric=m_label
        )
    else:
        ans = Answer(notes={"headline": f"the dataset has no test split (the tables are on {state.split})"})
    meta.update(headline=ans.headline, primary_test=report.primary_test, margin=report.margin, notes=ans.notes)
    meta["no_headline"] = ans.notes.get("headline")
    lap("headline, non-inferiority, folds, interaction")
    test_scores = None
    if report.trec_depth and state.split == "test":
        test_scores = {r.run_id: s for r in runs if (s := load_test_scores(tracker, r.run_id)) is not None}
    lap("test scores (MLflow)")
    return ComputedReport(
        tracker, parent, state, runs, records, seed_rows, problems, report, metric_name,
        t1, t2, conv, by_diff, ans, meta, test_scores, laps,
    )  # fmt: skip


@drawn_in_background  # the figures are drawn in a second process while the tables are written
def render_report(r: ComputedReport) -> dict[str, bytes]:
    """The report's files: figures (PNG and PDF), the page and its Markdown, JSON, LaTeX, CSV and TREC files."""
    lap = _Laps(r.laps)
    records, m_label, split, meta = r.records, r.m_label, r.state.split, dict(r.meta)
    files = named("figure1", figure1(records, m_label, split))
    fig2 = None
    dist_trees = sorted({d["tree"] for rec in records for d in rec.score_dists})
    if dist_trees:
        try:
            f2, fig2 = figure2(records, dist_trees[0])
            files.update(named("figure2", f2))
        except ReportError as e:
            log.warning("no Figure 2: %s", e)
    comps = comparisons(r.t1)
    if any(c["mean_delta"] is not None for c in comps):  # something was paired (none without a test split)
        files.update(named("forest", forest_plot(comps, r.config.primary_test, m_label)))
    if r.conv:
        files.update(named("convergence", convergence_figure(records, r.ans.chosen, m_label, split)))
    if any(rec.selections for rec in records):
        files.update(named("selfpaced", selfpaced_figure(records)))
    if r.by_diff:
        files["by_difficulty.json"] = json.dumps(r.by_diff, indent=1).encode()
        if r.ans.interaction:
            fig = difficulty_figure(r.by_diff, r.ans.interaction, r.ans.chosen, RANDOM, m_label)
            if fig:
                files.update(named("by_difficulty", fig))
    lap("figures")
    trec = None
    if r.test_scores is not None:
        trec_out, trec = trec_files(r.runs, r.test_scores, r.config.trec_depth)
        files.update(trec_out)
        if trec["without_scores"]:
            log.warning("no TREC run for %s: their ltr logged no test scores", ", ".join(trec["without_scores"]))
    meta["trec"] = trec
    meta["seeds"] = r.seed_rows
    t1, t2, conv, by_diff, seed_rows = r.t1, r.t2, r.conv, r.by_diff, r.seed_rows
    files["table1.json"] = json.dumps(t1, indent=1).encode()
    if t2:
        files["table2.json"] = json.dumps(t2, indent=1).encode()
    if conv:
        files["convergence.json"] = json.dumps(conv, indent=1).encode()
    # for a paper: LaTeX (booktabs) and the per-query values as CSV
    files["table1.tex"] = table1_tex(t1, m_label, r.config.primary_test).encode()
    if any(row["urisk"] for row in t1):
        files["risk.tex"] = risk_tex(t1, list(r.config.risk_alphas)).encode()
    if t2:
        files["table2.tex"] = table2_tex(t2, m_label).encode()
    if conv:
        files["convergence.tex"] = convergence_tex(conv, m_label).encode()
    folds_table = folds_tex(t1, m_label)
    if folds_table:
        files["folds.tex"] = folds_table.encode()
    if seed_rows:
        files["seeds.tex"] = seeds_tex(seed_rows, m_label).encode()
    if by_diff:
        files["by_difficulty.tex"] = difficulty_tex(by_diff, m_label).encode()
    files["per_query.csv"] = per_query_csv(records, r.metric_name).encode()
    if fig2:
        files["figure2.json"] = json.dumps(fig2, indent=1).encode()
    lap("TREC runs, tables")
    files = resolve_figures(files)
    lap("figures drawn (in the background)")
    md, page = render(t1, t2, fig2, meta, images={k: v for k, v in files.items() if k.endswith(".png")})
    files["report.md"] = md.encode()
    files["report.html"] = page.encode()
    files["report.json"] = json.dumps(
        report_json(meta, t1, t2, conv, by_diff, fig2, trec, seed_rows, r.ans), indent=1
    ).encode()
    r.meta["trec"], r.meta["figure2"] = trec, fig2
    lap("render")
    return files


def publish_report(r: ComputedReport, files: dict[str, bytes], out: str) -> None:
    """Write ``files`` to ``out``, log them to the grid's parent run (under ``report/``) with the headline, and
    log each child run's figures on it."""
    lap = _Laps(r.laps)
    tracker, parent = r.tracker, r.parent
    os.makedirs(out, exist_ok=True)
    for name, data in files.items():
        path = os.path.join(out, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)
        tracker.client.log_artifact(parent, path, os.path.dirname(os.path.join("report", name)))
    if r.ans.headline:
        log_headline(tracker, parent, r.ans.headline, r.config.primary_test)
    lap("write, log to the parent run")
    # each child run (a seed repetition too) its own convergence figures and its system's Table 1 figures
    have = {run.run_id: run.logged for run in r.runs}
    logged = log_child_metrics(
        tracker, metrics_for_children(r.runs, r.t1, r.config.target_fraction, r.metric_name), have
    )
    log.info("report: %d metric values logged on the %d child runs", logged, len(r.runs))
    lap("metrics on the children")


def build_report(
    tracker: Tracker,
    out: str,
    parent: str | None,
    *,
    report: ReportConfig,
    metric_name: str,
    difficulty: str | None,
) -> dict[str, Any]:
    """Rebuild the tables and figures of a grid and write them to ``out``: :func:`compute_report`, then
    :func:`render_report`, then :func:`publish_report`.

    Parameters
    ----------
    tracker : Tracker
        The MLflow experiment of the grid.
    out : str
        The output folder (the CLI's: ``report.out``, else ``<work_dir>/report``).
    parent : str or None
        The grid's parent run id; None: the experiment's latest FINISHED grid.
    report : ReportConfig
        The config's ``report:`` section: ``permutations`` and ``seed`` of the randomisation test,
        ``bootstrap`` resamples and ``risk_alphas`` (:func:`table1`), ``table2_sizes`` (empty:
        :func:`default_table2_sizes`), ``target_fraction`` (:func:`convergence`) and ``trec_depth``, documents
        per query in the TREC run files (0: none; :func:`pipelines.report.export.trec_files`). Its ``out`` is
        the caller's to resolve.
    metric_name : str
        The metric the children logged (``metric.name`` of the config, e.g. ``ndcg_at_10``).
    difficulty : str or None
        The study's difficulty scores (``ltr difficulty``'s output) for the effect by difficulty (left out,
        with a note, when None or absent).

    Returns
    -------
    dict[str, Any]
        The report's summary: ``out``, ``parent``, its ``status`` and ``problems``, the tables and figures'
        data, ``records`` (children read) and ``seeds``.
    """
    r = compute_report(tracker, parent, report=report, metric_name=metric_name, difficulty=difficulty)
    files = render_report(r)
    publish_report(r, files, out)
    log.info("report time: %s", ", ".join(f"{k} {v:.1f} s" for k, v in r.laps.items()))
    log.info(
        "report of %d runs of grid %s (%s) written to %s (and logged to that run)",
        len(r.records),
        r.parent,
        r.state.status,
        out,
    )
    return {
        "out": out,
        "parent": r.parent,
        "status": r.state.status,
        "problems": r.problems,
        "table1": r.t1,
        "table2": r.t2,
        "convergence": r.conv,
        "by_difficulty": r.by_diff,
        "figure2": r.meta.get("figure2"),
        "trec": r.meta.get("trec"),
        "records": len(r.runs),
        "seeds": r.seed_rows,
        "timings": r.laps,
        "versions": r.meta["versions"],
        "headline": r.ans.headline,
    }


#: Prefix of the metrics the report logs on the child runs (:func:`metrics_for_children`).
REPORT_METRIC = "report."


def metrics_for_children(
    records: list[Record], t1: list[dict[str, Any]], target_fraction: float, metric_name: str
) -> dict[str, dict[str, float]]:
    """What the report logs on each child run, by run id, so that MLflow's run comparison sorts and plots what
    the tables say: the child's own final vali/test NDCG, best vali iteration and trees to the convergence
    target on its fold; and its system's pooled figures against the baseline from Table 1 (the same on every
    fold's child): mean difference, Holm-corrected t-test p, d_z, URisk at alpha 1. A figure that does not
    exist (no baseline, target never reached, nothing paired) is left out, not logged as NaN."""
    rows = {(r["strategy"], r["switch"]): r for r in t1}
    base = {r.fold: r for r in records if (r.strategy, r.switch, r.seed) == (BASELINE, None, 0)}
    out: dict[str, dict[str, float]] = {}
    for rec in records:
        m: dict[str, float | None] = {f"final_{metric_name}_test": rec.final}
        if rec.vali:
            m[f"final_{metric_name}_vali"] = rec.final_vali
        p = run_convergence(rec, base.get(rec.fold), target_fraction)
        if p is not None:
            m[f"{REPORT_METRIC}best_vali_iteration"] = p["best_iteration"]
            m[f"{REPORT_METRIC}trees_to_target"] = p["trees_to_target"]
        row = rows.get((rec.strategy, rec.switch))
        if row is not None:
            m[f"{REPORT_METRIC}delta_{metric_name}"] = row["delta"]
            m[f"{REPORT_METRIC}t_p_holm"] = row["t_p_holm"]
            m[f"{REPORT_METRIC}d_z"] = row["d_z"]
            m[f"{REPORT_METRIC}urisk_alpha1"] = (row["urisk"] or {}).get(alpha_key(1))
        out[rec.run_id] = {k: float(v) for k, v in m.items() if v is not None}
    return out


def log_child_metrics(
    tracker: Tracker, metrics: dict[str, dict[str, float]], have: dict[str, dict[str, float]] | None = None
) -> int:
    """Log ``metrics`` (:func:`metrics_for_children`) on the child runs, idempotently: a metric whose latest value
    on the run is already that value is not logged again (a second report adds no history points). ``have``:
    the runs' metrics as already read (run id -> name -> latest value); a run not in it is read from MLflow.
    Returns the number of metric values written."""
    written = 0
    for run_id, values in metrics.items():
        latest = (have or {}).get(run_id)
        if latest is None:
            latest = tracker.client.get_run(run_id).data.metrics
        new = {k: v for k, v in values.items() if latest.get(k) != v}
        if new:
            tracker.log_metrics(run_id, new)
            written += len(new)
    return written
