"""The report's answers where MLflow shows them, and the addresses of the MLflow UI's pages of a grid.

* :func:`log_headline`: the grid's parent run carries the headline (each family's best system against the
  baseline) as metrics ``headline.<family>.<figure>`` and as its description (the ``mlflow.note.content`` tag,
  Markdown: the headline's sentences and where the report is), idempotently.
* :func:`experiment_urls`: the experiment's training-runs list and the parent run's page in the MLflow UI.
  MLflow 3.17's UI takes an experiment's kind from its *workflow type* (the ``workflowType`` URL parameter, else
  the browser's last choice, ``genai`` at first), not from the experiment's ``mlflow.experimentKind`` tag: a
  plain ``#/experiments/<id>`` opens the GenAI overview (traces, token usage) and lists the parent run under
  "Evaluation runs". ``?workflowType=machine_learning`` opens the model-training view, whose ``runs`` tab is the
  runs table (the parent run with its children nested under it) and whose run page lists a grid's child runs.
"""

from __future__ import annotations

import logging
import math
import re
from typing import Any

from pipelines.core.secrets import browser_address
from pipelines.report.significance import LEVEL, TESTS
from pipelines.tracking.runs import Tracker, is_server, open_ui

log = logging.getLogger(__name__)

#: Where ``mlflow ui`` serves by default (``--host 127.0.0.1 --port 5000``).
DEFAULT_UI = "http://127.0.0.1:5000"
#: The URL parameter that makes MLflow 3.17's UI show an experiment as model training (runs, charts).
TRAINING_VIEW = "workflowType=machine_learning"
#: The tag MLflow's UI shows as a run's description.
NOTE_TAG = "mlflow.note.content"
#: Prefix of the headline's metrics on the parent run.
HEADLINE_METRIC = "headline."
#: The report's page among the parent run's artifacts (``build_report`` logs its files under ``report/``).
REPORT_ARTIFACT = "report/report.html"


def metric_key(name: str) -> str:
    """``name`` as an MLflow metric name: characters MLflow rejects (it takes letters, digits, ``_ - . /`` and
    spaces) become ``_``."""
    return re.sub(r"[^A-Za-z0-9_\-./ ]", "_", name)


def headline_metrics(headline: dict[str, Any], primary_test: str) -> dict[str, float]:
    """The parent run's metrics for ``headline`` (see :func:`log_headline`): per row (family) ``delta``,
    ``ci95_low``, ``ci95_high``, ``p_holm`` (``primary_test``'s Holm-corrected p), ``p_holm_<other test>``,
    ``vali``, ``switch``, ``trees``, ``trees_ci95_low/high``, ``ratio``, ``ratio_ci95_low/high`` and
    ``baseline_trees``; and ``headline.baseline.mean``, ``headline.baseline.trees``, ``headline.margin``.
    A value that is None (or not finite) is left out."""
    other = next((t for t in TESTS if t != primary_test), "other")
    out: dict[str, Any] = {}
    base = headline.get("baseline") or {}
    out[f"{HEADLINE_METRIC}baseline.mean"] = base.get("mean")
    out[f"{HEADLINE_METRIC}baseline.trees"] = base.get("trees")
    out[f"{HEADLINE_METRIC}margin"] = headline.get("margin")
    for row in headline.get("rows") or []:
        p = f"{HEADLINE_METRIC}{metric_key(str(row['family']))}."
        ci = row.get("ci95") or (None, None)
        tci = row.get("trees_ci95") or (None, None)
        rci = row.get("ratio_ci95") or (None, None)
        out.update(
            {
                f"{p}delta": row.get("delta"),
                f"{p}ci95_low": ci[0],
                f"{p}ci95_high": ci[1],
                f"{p}p_holm": row.get("p_holm"),
                f"{p}p_holm_{other}": row.get("p_holm_other"),
                f"{p}vali": row.get("vali"),
                f"{p}switch": row.get("switch"),
                f"{p}trees": row.get("trees"),
                f"{p}trees_ci95_low": tci[0],
                f"{p}trees_ci95_high": tci[1],
                f"{p}ratio": row.get("ratio"),
                f"{p}ratio_ci95_low": rci[0],
                f"{p}ratio_ci95_high": rci[1],
                f"{p}baseline_trees": row.get("baseline_trees"),
            }
        )
    return {k: float(v) for k, v in out.items() if isinstance(v, int | float) and math.isfinite(v)}


def headline_note(headline: dict[str, Any], primary_test: str) -> str:
    """The parent run's description (Markdown): the headline's sentences, how significance was decided, and
    where the report's page is."""
    test = TESTS[primary_test].name if primary_test in TESTS else primary_test
    base = headline.get("baseline") or {}
    lines = [f"## Headline: {headline.get('metric', 'NDCG@10')} on test against {base.get('system', 'the baseline')}"]
    lines.append("")
    rows = headline.get("rows") or []
    lines += [f"- {r['sentence']}" for r in rows if r.get("sentence")] or ["- (no system to compare)"]
    if headline.get("note"):
        lines += ["", str(headline["note"])]
    lines += [
        "",
        f"Significance: two-sided {test}, Holm-corrected over the report's comparisons, p < {LEVEL:g}"
        + (f"; non-inferiority margin {headline['margin']:g}." if headline.get("margin") is not None else "."),
        "",
        f"The report: this run's artifact `{REPORT_ARTIFACT}` (Artifacts tab; also `report.md`, `report.json`, "
        "the LaTeX tables and the TREC runs under `report/`). The figures are this run's "
        f"`{HEADLINE_METRIC}*` metrics.",
    ]
    return "\n".join(lines) + "\n"


def log_headline(tracker: Tracker, parent_run_id: str, headline: dict[str, Any], primary_test: str) -> None:
    """Put ``headline`` (the report's ``headline`` section: ``rows`` of one family each, ``baseline``,
    ``margin``, ``note``) on the grid's parent run: its figures as metrics (:func:`headline_metrics`, names
    ``headline.<family>.delta`` etc.) and its sentences as the run's description (:func:`headline_note`, the
    ``mlflow.note.content`` tag that the UI shows on the run's page). Idempotent: a metric whose latest value on
    the run is already that value is not logged again (a second report adds no history point), and the
    description is written only when it changes."""
    run = tracker.client.get_run(parent_run_id)
    latest = run.data.metrics
    new = {k: v for k, v in headline_metrics(headline, primary_test).items() if latest.get(k) != v}
    if new:
        tracker.log_metrics(parent_run_id, new)
    note = headline_note(headline, primary_test)
    if run.data.tags.get(NOTE_TAG) != note:
        tracker.client.set_tag(parent_run_id, NOTE_TAG, note)
    log.info("headline on grid run %s: %d metric values logged", parent_run_id, len(new))


def default_ui(tracking_uri: str) -> str:
    """The MLflow UI's address for ``tracking_uri``: a tracking server serves its own UI (its browser address: no
    credentials, :func:`pipelines.core.secrets.browser_address`); for a store the process opens (SQLite, a
    database) ``mlflow ui``'s default :data:`DEFAULT_UI`."""
    return browser_address(tracking_uri) if is_server(tracking_uri) else DEFAULT_UI


def experiment_urls(tracker: Tracker, parent_run_id: str | None, ui: str = DEFAULT_UI) -> dict[str, str]:
    """The MLflow UI's addresses of the experiment and its grid (see the module's docstring): ``training_runs``
    (the runs table of the model-training view: the parent run, its children nested under it) and, with a
    ``parent_run_id``, ``parent_run`` (the parent run's page: its description, metrics and child runs) and
    ``report`` (its ``report/report.html`` artifact). ``ui``: where the UI is served (:func:`default_ui`)."""
    base = f"{ui.rstrip('/')}/#/experiments/{tracker.experiment_id}"
    out = {"training_runs": f"{base}/runs?{TRAINING_VIEW}"}
    if parent_run_id:
        out["parent_run"] = f"{base}/runs/{parent_run_id}?{TRAINING_VIEW}"
        out["report"] = f"{base}/runs/{parent_run_id}/artifacts/{REPORT_ARTIFACT}?{TRAINING_VIEW}"
    return out


def ui_lines(tracker: Tracker, parent_run_id: str | None, report: bool = False) -> str:
    """What ``ltr run``, ``ltr grid`` and ``ltr report`` print: how to open the MLflow UI (``mlflow ui
    --backend-store-uri ...``, or the tracking server's address) and the addresses of
    :func:`experiment_urls` (``report``: the report's page too)."""
    ui = default_ui(tracker.uri)
    urls = experiment_urls(tracker, parent_run_id, ui)
    how = ui if is_server(tracker.uri) else open_ui(tracker.uri)
    lines = [f"  MLflow UI: {how}", f"    training runs: {urls['training_runs']}"]
    if "parent_run" in urls:
        lines.append(f"    grid run:      {urls['parent_run']}")
    if report and "report" in urls:
        lines.append(f"    report page:   {urls['report']}")
    return "\n".join(lines) + "\n"
