"""What the report hands to other tools: ``report.json`` (every number of every table, for scripts) and the TREC
run and qrels files (for trec_eval, ranx and ir_measures).

TREC files (:func:`trec_files`), one run per system and fold and one qrels file per fold:

* ``runs/<system>.fold<F>.trec``: ``qid Q0 docno rank score tag``, the final model's test scores (the float32
  margins the report's NDCG ranked, written with 9 significant digits, which give back the same float32), at most
  ``depth`` documents per query. ``docno`` is the document's position in its query as stored (0-based), and
  ``rank`` the report's order: score descending, ties in position order (``metric.ties=input``). trec_eval
  re-sorts by score and breaks ties by docno descending as strings, so the two agree wherever no two of a
  query's top k documents with different labels share a score; :func:`trec_files` counts the queries where
  some do (``tied_queries``). ``<system>`` is the system's label; a system repeated over ``grid.seeds`` has one
  file per seed, ``<label>.seed<i>``, seed 0 included. ``qid`` is the dataset's own query id, as stored.
* ``qrels/fold<F>.qrels``: ``qid 0 docno label``, the graded labels. trec_eval and pytrec_eval take the qrels
  value as the gain (linear gain); ``qrels/fold<F>.exp2.qrels`` holds 2^label - 1 instead, the gain of
  ``metric.gain=exp2`` (ranx: ``ndcg_burges`` on the labels; ir_measures: ``nDCG(gains=...)``).
"""

from __future__ import annotations

import csv
import io
import itertools
import logging
import tempfile
from collections import Counter
from typing import Any

import numpy as np

from pipelines.report.records import Record, ReportError
from pipelines.study.design import BASELINE
from pipelines.tracking.runs import Tracker

log = logging.getLogger(__name__)

#: The name of the per-child artifact that holds every test document's final score (:func:`load_test_scores`).
TEST_SCORES = "test_scores.npz"


#: ``report.json``'s fields and what each holds: a top-level field by name, a field of each element of a list by
#: ``name[].field``, of an object by ``name.field``. The reference page (``docs/reference/report-json.md``) is
#: written from it (:mod:`pipelines.app.reference`), and a test compares it with a report's fields, both ways.
REPORT_FIELDS: dict[str, str] = {
    "experiment": "the MLflow experiment of the grid",
    "parent": "the grid's parent run id",
    "status": "the parent run's status (FINISHED, or RUNNING for a report of an unfinished grid)",
    "folds": "the folds the report covers",
    "split": "the split the tables score (test; the configuration each family's headline takes is chosen on vali)",
    "data": "where the grid's dataset was read from",
    "fingerprint": "the dataset's content fingerprint (its key)",
    "metric": "the NDCG conventions, in one line (cutoff, gain, discount, queries without relevant documents, ties)",
    "metric_name": "the metric's name in MLflow, e.g. ndcg_at_10",
    "report_version": "the version of the report's layout",
    "versions": "the versions of the libraries the report and the grid ran with",
    "problems": "what the report found wrong or missing in the grid's runs (one line each), or null",
    "settings": "the report's settings",
    "settings.permutations": "sign flips of the randomisation test (report.permutations)",
    "settings.bootstrap": "resamples of the paired bootstrap interval (report.bootstrap)",
    "settings.seed": "the seed of the sign flips and of the bootstrap (report.seed)",
    "settings.risk_alphas": "the alphas of URisk and TRisk (report.risk_alphas)",
    "settings.target_fraction": "the convergence table's target share of the baseline's final vali NDCG",
    "settings.confidence": "the confidence of every interval (0.95)",
    "settings.primary_test": "the test of the headline and of every significance mark (randomisation or t)",
    "settings.margin": "the non-inferiority margin in NDCG",
    "systems": "Table 1: one object per system",
    "systems[].system": "the system's label (LambdaMART, MSE-40, q_nrel-40, ...)",
    "systems[].strategy": "its curriculum strategy (baseline, mse, q_nrel, ..., or an extra path's name)",
    "systems[].switch": "its switch point in trees (null for the baseline)",
    "systems[].folds": "the folds it has a final value for",
    "systems[].missing_folds": "the grid's folds it has no final value for",
    "systems[].mean": "the mean over folds of its final test NDCG",
    "systems[].sd": "the standard deviation over folds",
    "systems[].per_fold": "fold -> its final test NDCG",
    "comparisons": "each system against the baseline (LambdaMART), paired over the test queries",
    "comparisons[].system": "the system",
    "comparisons[].strategy": "its strategy",
    "comparisons[].switch": "its switch point",
    "comparisons[].baseline": "the baseline's label",
    "comparisons[].n": "queries paired (those with a relevant document)",
    "comparisons[].n_without_relevant": "queries without a relevant document, left out of the paired statistics",
    "comparisons[].folds": "folds paired",
    "comparisons[].folds_won": "folds where the system's mean is above the baseline's",
    "comparisons[].mean_delta": "the mean paired difference (system - baseline) of NDCG",
    "comparisons[].ci95_t": "its 95% t interval",
    "comparisons[].ci95_bootstrap": "its 95% paired bootstrap interval (report.bootstrap resamples)",
    "comparisons[].d_z": "the standardised effect size: the mean difference over the differences' sd",
    "comparisons[].wins": "queries where the system scores higher",
    "comparisons[].ties": "queries where both score the same",
    "comparisons[].losses": "queries where the system scores lower",
    "comparisons[].t_p": "the paired t test's two-sided p-value",
    "comparisons[].t_p_holm": "that p-value, Holm-corrected over the comparisons",
    "comparisons[].perm_p": "the paired randomisation test's two-sided p-value",
    "comparisons[].perm_p_holm": "that p-value, Holm-corrected over the comparisons",
    "comparisons[].urisk": 'URisk against the baseline, by alpha ("1", "5")',
    "comparisons[].trisk": "TRisk against the baseline, by alpha",
    "comparisons[].mde": "the smallest mean difference the test would detect with 80% power at these n and sd",
    "comparisons[].es_e": "the equivalence bound reached: the largest difference the interval rules out",
    "georisk": "per system and alpha, GeoRisk over the systems",
    "table2": "Table 2: per MSE-t size, the smallest LambdaMART reaching its test NDCG (null when not built)",
    "convergence": "per system, the trees it needs to reach settings.target_fraction of the baseline's final vali NDCG",
    "by_difficulty": "per system and difficulty score, the paired difference by difficulty quartile",
    "figure2": "Figure 2: test score distributions per label after train.score_dist_trees trees",
    "trec": "the TREC run and qrels files written (report.trec_depth) and, per run file, its tied_queries",
    "seeds": "per system repeated over grid.seeds, each seed's mean final NDCG and mean difference with LambdaMART",
    "headline": "the answer: per family, the configuration chosen on vali and its test figures, with primary_test",
    "noninferiority": "per system, the trees it needs to be as good as LambdaMART's final model within margin, "
    "the tree ratio and its bootstrap interval",
    "per_fold": "per system, each fold's difference and 95% interval",
    "meta": "per system, DerSimonian-Laird random effects over the folds: delta, ci95, tau2, i2",
    "difficulty_interaction": "per system and difficulty score, the slope of the paired difference on the "
    "difficulty rank and its difference from the random curriculum's",
    "notes": "why a part of the report is missing, or null",
    "controls": "per curriculum ordered by a difficulty score and switch point: its kind, and against its "
    "anti-curriculum (anti) and the random curriculum (random) at the same switch point the paired difference, its "
    "bootstrap interval, p-values raw and Holm-corrected over these comparisons, significance; beats_both",
    "controls_by_kind": "per kind of difficulty (oracle, label_free, model, dynamic): its curricula, those with both "
    "controls trained (controlled) and those that beat both (beat_both)",
}


def comparisons(t1: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each comparison of Table 1 with the baseline, under the names ``report.json`` documents."""
    base = next((r["label"] for r in t1 if r["strategy"] == BASELINE), None)
    out = []
    for r in t1:
        if r["strategy"] == BASELINE or base is None:
            continue
        out.append(
            {
                "system": r["label"],
                "strategy": r["strategy"],
                "switch": r["switch"],
                "baseline": base,
                "n": r["queries"],
                "n_without_relevant": r["queries_no_relevant"],
                "folds": r["paired_folds"],
                "folds_won": r["folds_won"],
                "mean_delta": r["delta"],
                "ci95_t": None if r["ci_t"] is None else list(r["ci_t"]),
                "ci95_bootstrap": None if r["ci_boot"] is None else list(r["ci_boot"]),
                "d_z": r["d_z"],
                "wins": r["wins"],
                "ties": r["ties"],
                "losses": r["losses"],
                "t_p": r["t_p"],
                "t_p_holm": r["t_p_holm"],
                "perm_p": r["perm_p"],
                "perm_p_holm": r["perm_p_holm"],
                "urisk": r["urisk"],
                "trisk": r["trisk"],
                "mde": r.get("mde"),
                "es_e": r.get("es_e"),
            }
        )
    return out


def report_json(
    meta: dict[str, Any],
    t1: list[dict[str, Any]],
    t2: dict[str, Any] | None,
    conv: list[dict[str, Any]] | None,
    by_diff: dict[str, Any] | None,
    fig2: dict[str, Any] | None,
    trec: dict[str, Any] | None,
    seeds: list[dict[str, Any]] | None = None,
    answer: Any = None,
) -> dict[str, Any]:
    """``report.json``: the report's settings and every number of every table.

    Keys: the grid (``experiment``, ``parent``, ``status``, ``folds``, ``split``, ``data``, ``fingerprint``,
    ``metric``, ``versions``, ``problems``), ``settings`` (resamples, seed, risk levels, convergence target),
    ``systems`` (Table 1: per system the mean and sd over folds and each fold's final value), ``comparisons``
    (:func:`comparisons`: each system against the baseline, the paired statistics on the queries with a
    relevant document), ``georisk`` (per system, per alpha), ``table2``, ``convergence``, ``by_difficulty``,
    ``figure2``, ``trec`` (:func:`trec_files`' summary) and ``seeds`` (the spread across ``grid.seeds``
    repetitions: :func:`pipelines.report.seeds.average_seeds`); ``null`` where the report built none.

    From ``answer`` (:class:`pipelines.report.answer.Answer`): ``headline`` (the configuration chosen on
    validation per family and its test figures, with ``primary_test``), ``noninferiority`` (per system: the trees
    to be as good as LambdaMART's final model within ``margin``, the tree ratio and its bootstrap interval),
    ``per_fold`` (per system, each fold's Δ and 95% interval), ``meta`` (per system, DerSimonian-Laird random
    effects over the folds: ``delta``, ``ci95``, ``tau2``, ``i2``), ``difficulty_interaction`` (per system and
    difficulty score, the slope of the paired difference on the difficulty rank and its difference from the
    random curriculum's) and ``notes`` (why a part is missing). ``comparisons[i]`` carry ``mde`` and ``es_e``.
    """
    systems = [
        {
            "system": r["label"],
            "strategy": r["strategy"],
            "switch": r["switch"],
            "folds": r["fold_ids"],
            "missing_folds": r["missing_folds"],
            "mean": r["mean"],
            "sd": r["std"],
            "per_fold": dict(zip((str(f) for f in r["fold_ids"]), r["per_fold"], strict=True)),
        }
        for r in t1
    ]
    keep = ("experiment", "parent", "status", "folds", "split", "data", "fingerprint", "metric", "metric_name")
    return {
        **{k: meta.get(k) for k in keep},
        "report_version": meta.get("report_version"),
        "versions": meta.get("versions"),
        "problems": meta.get("problems"),
        "settings": {
            "permutations": meta.get("n_perm"),
            "bootstrap": meta.get("n_boot"),
            "seed": meta.get("seed"),
            "risk_alphas": meta.get("risk_alphas"),
            "target_fraction": meta.get("target_fraction"),
            "confidence": 0.95,
            "primary_test": meta.get("primary_test"),
            "margin": meta.get("margin"),
        },
        "systems": systems,
        "comparisons": comparisons(t1),
        "georisk": {r["label"]: r["georisk"] for r in t1 if r["georisk"] is not None},
        "table2": t2,
        "convergence": conv,
        "by_difficulty": by_diff,
        "figure2": fig2,
        "trec": trec,
        "seeds": seeds or None,
        "headline": None if answer is None else answer.headline,
        "noninferiority": None if answer is None else answer.noninferiority or None,
        "per_fold": None if answer is None else answer.per_fold or None,
        "meta": None if answer is None else answer.meta or None,
        "difficulty_interaction": None if answer is None else answer.interaction,
        "notes": None if answer is None else answer.notes or None,
        "controls": meta.get("controls"),
        "controls_by_kind": meta.get("controls_by_kind"),
    }


def load_test_scores(tracker: Tracker, run_id: str) -> dict[str, np.ndarray] | None:
    """A child's ``test_scores.npz`` (arrays ``qid``, ``doc``, ``label``, ``score``); None for a run of an ltr that
    logged none."""
    from mlflow.exceptions import MlflowException

    with tempfile.TemporaryDirectory() as d:
        try:  # one call per run (no listing first): the report's time goes into these calls
            path = tracker.download(run_id, TEST_SCORES, d)
        except (MlflowException, OSError):
            return None
        with np.load(path) as z:
            return {k: z[k] for k in ("qid", "doc", "label", "score")}


def _check_scores(rec: Record, s: dict[str, np.ndarray]) -> None:
    qid, doc = s["qid"], s["doc"]
    n = {len(v) for v in s.values()}
    if len(n) != 1:
        raise ReportError(f"{rec.label} fold {rec.fold} (run {rec.run_id}): {TEST_SCORES} has arrays of lengths {n}")
    if qid.size and np.any((np.diff(qid) < 0) | ((np.diff(qid) == 0) & (np.diff(doc) <= 0))):
        raise ReportError(f"{rec.label} fold {rec.fold} (run {rec.run_id}): {TEST_SCORES} is not in (qid, doc) order")
    if set(np.unique(qid).tolist()) != set(rec.per_query):
        raise ReportError(
            f"{rec.label} fold {rec.fold} (run {rec.run_id}): {TEST_SCORES}'s queries are not those of its "
            "per_query_test.json"
        )


def _ranked(s: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """The report's order (per query: score descending, ties by position) and each row's 1-based rank in it."""
    order = np.lexsort((s["doc"], -s["score"].astype(np.float64), s["qid"]))
    q = s["qid"][order]
    start = np.r_[0, np.flatnonzero(np.diff(q)) + 1]
    rank = np.arange(q.size) - np.repeat(start, np.diff(np.r_[start, q.size])) + 1
    return order, rank


def _tied_queries(s: dict[str, np.ndarray], order: np.ndarray, rank: np.ndarray, k: int) -> int:
    """Queries with a group of equal scores that reaches into the top ``k`` (in the report's order) and holds
    different labels: where trec_eval's tie order (docno descending) can give another NDCG@k than the
    report's (position ascending)."""
    if not order.size:
        return 0
    q, sc, lab = s["qid"][order], s["score"][order], s["label"][order]
    start = np.r_[0, np.flatnonzero((q[1:] != q[:-1]) | (sc[1:] != sc[:-1])) + 1]  # groups of equal scores
    mixed = np.minimum.reduceat(lab, start) != np.maximum.reduceat(lab, start)
    return int(np.unique(q[start][mixed & (rank[start] <= k)]).size)


def _field(x: Any) -> str:
    """One text field as the csv module writes it with a space delimiter (quoted when it holds a space, a quote
    or a line break)."""
    buf = io.StringIO()
    csv.writer(buf, delimiter=" ", lineterminator="").writerow([x])
    return buf.getvalue()


def _lines(cols: dict[str, Any]) -> bytes:
    """Space-separated lines, one per row of ``cols`` (arrays of one length, or a scalar for every row): integers
    as ``str``, floats as ``%.9g`` (NaN as an empty field), text quoted where it must be.

    The same bytes as ``pandas.DataFrame.to_csv(sep=" ", float_format="%.9g")`` (tested), which formats cell by
    cell; this formats each column once in a comprehension and joins, many times faster."""
    n = next((len(v) for v in cols.values() if isinstance(v, np.ndarray)), 0)
    fields: list[Any] = []
    for v in cols.values():
        if not isinstance(v, np.ndarray):
            fields.append(itertools.repeat(_field(v), n))
        elif v.dtype.kind == "f":
            fields.append(["" if x != x else f"{x:.9g}" for x in v.tolist()])
        elif v.dtype.kind in "iub":
            fields.append(map(str, v.tolist()))
        else:
            fields.append(map(_field, v.tolist()))
    return "".join(f"{line}\n" for line in map(" ".join, zip(*fields))).encode()


def ndcg_conventions(records: list[Record]) -> tuple[int, str]:
    """The cut-off k and the gain the children computed their NDCG with, as each logged them (``metric.k``,
    ``metric.gain``): the exported qrels and the ties counted at k follow the values they are checked against.
    Children that disagree (the report warns of other conventions) give the most common; none logged (not a
    run of ``ltr``): a ReportError."""
    seen = Counter((r.conventions.get("k"), r.conventions.get("gain")) for r in records)
    (k, gain), _ = seen.most_common(1)[0]
    if k is None or gain is None:
        bad = next(r for r in records if "k" not in r.conventions or "gain" not in r.conventions)
        raise ReportError(
            f"{bad.label} fold {bad.fold} (run {bad.run_id}) logged no metric.k and metric.gain params, which every "
            "ltr child logs: its NDCG conventions are unknown (report.trec_depth=0 exports no TREC runs)"
        )
    return int(k), gain


def trec_files(
    records: list[Record], scores: dict[str, dict[str, np.ndarray]], depth: int
) -> tuple[dict[str, bytes], dict[str, Any]]:
    """The TREC run files of every record with scores (``scores`` by run id) and each fold's qrels (see the
    module's docstring): ``{"runs/<system>.fold<F>.trec": bytes, "qrels/fold<F>.qrels": bytes, ...}`` and a
    summary (depth, files, the conventions of :func:`ndcg_conventions`, and per run file the queries with ties
    that trec_eval can order otherwise at k).

    Every system on a fold must carry the same documents and labels (one qrels per fold); otherwise a
    ReportError names the two runs.
    """
    k, gain = ndcg_conventions(records)
    # a system repeated over grid.seeds names every run file by its seed, seed 0 included (the tables average
    # the seeds: no file stands for the system alone); a system trained once keeps its bare name
    seeded = {r.label for r in records if r.seed}
    files: dict[str, bytes] = {}
    runs: dict[str, dict[str, Any]] = {}
    qrels_of: dict[int, tuple[Record, dict[str, np.ndarray]]] = {}
    for rec in sorted(records, key=lambda r: (r.fold, r.label, r.seed)):
        s = scores.get(rec.run_id)
        if s is None:
            continue
        _check_scores(rec, s)
        first = qrels_of.setdefault(rec.fold, (rec, s))
        if first[0] is not rec and not all(np.array_equal(first[1][c], s[c]) for c in ("qid", "doc", "label")):
            raise ReportError(
                f"fold {rec.fold}: {rec.label} (run {rec.run_id}) and {first[0].label} (run {first[0].run_id}) "
                "were tested on different documents or labels; one qrels file per fold cannot hold both"
            )
        order, rank = _ranked(s)
        keep = rank <= depth
        o = order[keep]
        system = rec.label + (f".seed{rec.seed}" if rec.label in seeded else "")
        name = f"runs/{system}.fold{rec.fold}.trec"
        files[name] = _lines(
            {
                "qid": s["qid"][o],
                "q0": "Q0",
                "docno": s["doc"][o],
                "rank": rank[keep],
                "score": s["score"][o].astype(np.float64),
                "tag": system,
            }
        )
        runs[name] = {
            "system": system,
            "fold": rec.fold,
            "run_id": rec.run_id,
            "queries": int(np.unique(s["qid"]).size),
            "lines": int(keep.sum()),
            "tied_queries": _tied_queries(s, order, rank, k),
        }
    for fold, (_, s) in sorted(qrels_of.items()):
        files[f"qrels/fold{fold}.qrels"] = _lines({"qid": s["qid"], "zero": 0, "docno": s["doc"], "rel": s["label"]})
        if gain == "exp2":
            g = (np.left_shift(1, s["label"].astype(np.int64)) - 1).astype(np.int64)
            files[f"qrels/fold{fold}.exp2.qrels"] = _lines({"qid": s["qid"], "zero": 0, "docno": s["doc"], "rel": g})
    missing = sorted(
        {
            f"{r.label}{f' seed {r.seed}' if r.label in seeded else ''} fold {r.fold}"
            for r in records
            if r.run_id not in scores
        }
    )
    tied = sum(v["tied_queries"] for v in runs.values())
    if tied:
        log.warning(
            "TREC runs: %d queries (over %d run files) have tied scores in their top %d with different labels: "
            "trec_eval orders such ties otherwise than the report (see report.json's trec.runs)",
            tied,
            len(runs),
            k,
        )
    return files, {"depth": depth, "k": k, "gain": gain, "runs": runs, "without_scores": missing}
