"""What MLflow shows of a grid: no progress bars while the report reads the children, the headline on the parent
run (metrics and description, once), and the UI's addresses, opened in headless Chromium against a real
``mlflow ui``."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from pipelines.core.config import load_config
from pipelines.report.mlflow_view import (
    NOTE_TAG,
    default_ui,
    experiment_urls,
    headline_metrics,
    log_headline,
    ui_lines,
)
from pipelines.testing.processes import free_port, mlflow_ui, stop_process, wait_http
from pipelines.tracking.runs import PROGRESS_BAR_ENV, TAG_KIND, TAG_PARENT, Tracker

PARENT, CHILDREN = "grid-parent-7f3a", ("fold1-lambdamart-c1d2", "fold1-mse-2-e5f6")


@pytest.fixture(scope="module")
def small_grid(tmp_path_factory) -> tuple[Tracker, str, list[str]]:
    """A parent run (FINISHED) and two children in a fresh SQLite store; each child holds a JSON artifact."""
    work = tmp_path_factory.mktemp("view") / "work"
    cfg = load_config(None, [f"work_dir={work}", "grid.experiment=view-grid"])
    tracker = Tracker.for_config(cfg)
    pid = tracker.client.create_run(tracker.experiment_id, run_name=PARENT, tags={TAG_KIND: "grid"}).info.run_id
    kids = []
    for name in CHILDREN:
        rid = tracker.client.create_run(
            tracker.experiment_id, run_name=name, tags={TAG_KIND: "child", TAG_PARENT: pid}
        ).info.run_id
        tracker.log_text(rid, json.dumps({"qid": [1, 2]}), "per_query_test.json")
        tracker.log_metrics(rid, {"final_ndcg_at_10_test": 0.5})
        tracker.finish(rid)
        kids.append(rid)
    tracker.finish(pid)
    return tracker, pid, kids


def test_reading_artifacts_shows_no_progress_bar(small_grid, capsys, monkeypatch, tmp_path):
    """MLflow draws a "Downloading artifacts" bar per download (56 on the default study's report); the tracker's
    reads draw none and leave the environment as it was; a user's explicit setting is honoured."""
    from mlflow.tracking import MlflowClient

    tracker, _, kids = small_grid
    monkeypatch.delenv(PROGRESS_BAR_ENV, raising=False)
    capsys.readouterr()
    MlflowClient(tracker.uri).download_artifacts(kids[0], "per_query_test.json", str(tmp_path))
    assert "Downloading artifacts" in capsys.readouterr().err  # what the check below would see: MLflow's bar
    assert tracker.load_json(kids[0], "per_query_test.json") == {"qid": [1, 2]}
    assert tracker.load_json(kids[1], "per_query_test.json") == {"qid": [1, 2]}
    assert "Downloading artifacts" not in capsys.readouterr().err
    assert PROGRESS_BAR_ENV not in os.environ  # set for the reads only
    monkeypatch.setenv(PROGRESS_BAR_ENV, "true")
    tracker.load_json(kids[0], "per_query_test.json")
    assert "Downloading artifacts" in capsys.readouterr().err and os.environ[PROGRESS_BAR_ENV] == "true"


HEADLINE = {
    "primary_test": "randomisation",
    "margin": 0.005,
    "metric": "NDCG@10",
    "baseline": {"system": "LambdaMART", "mean": 0.45, "trees": 100},
    "rows": [
        {
            "family": "continuation",
            "family_label": "MSE then LambdaMART",
            "system": "MSE-20",
            "switch": 20,
            "chosen_on": "vali",
            "vali": 0.47,
            "delta": 0.012,
            "ci95": [0.004, 0.02],
            "p_holm": 0.003,
            "p_holm_other": 0.004,
            "significant": "win",
            "trees": 40,
            "trees_ci95": [30, 55],
            "ratio": 2.5,
            "ratio_ci95": None,
            "baseline_trees": 100,
            "sentence": "MSE-20 beats LambdaMART by +0.0120 NDCG@10 (95% CI [+0.0040, +0.0200]).",
        },
        {
            "family": "q_nrel",
            "family_label": "curriculum q_nrel",
            "system": "q_nrel-40",
            "switch": 40,
            "chosen_on": "vali",
            "vali": 0.44,
            "delta": -0.001,
            "ci95": [-0.006, 0.004],
            "p_holm": 0.7,
            "p_holm_other": 0.68,
            "significant": None,
            "trees": None,
            "trees_ci95": None,
            "ratio": None,
            "ratio_ci95": None,
            "baseline_trees": 100,
            "sentence": "q_nrel-40 is not distinguishable from LambdaMART.",
        },
    ],
    "note": None,
}


def test_the_headline_on_the_parent_run_once(small_grid):
    """The parent run gets each family's figures as metrics (None left out) and the sentences as its
    description; a second report with the same headline adds no history point, a changed value one."""
    tracker, pid, _ = small_grid
    log_headline(tracker, pid, HEADLINE, "randomisation")
    run = tracker.client.get_run(pid)
    m = run.data.metrics
    assert m["headline.continuation.delta"] == 0.012 and m["headline.continuation.ci95_low"] == 0.004
    assert m["headline.continuation.ci95_high"] == 0.02 and m["headline.continuation.p_holm"] == 0.003
    assert m["headline.continuation.p_holm_t"] == 0.004 and m["headline.continuation.trees"] == 40
    assert m["headline.continuation.ratio"] == 2.5 and "headline.continuation.ratio_ci95_low" not in m
    assert m["headline.q_nrel.delta"] == -0.001 and "headline.q_nrel.trees" not in m
    assert m["headline.baseline.mean"] == 0.45 and m["headline.margin"] == 0.005
    note = run.data.tags[NOTE_TAG]
    assert HEADLINE["rows"][0]["sentence"] in note and HEADLINE["rows"][1]["sentence"] in note
    assert "randomisation test, Holm-corrected" in note and "`report/report.html`" in note
    n_metrics = len(headline_metrics(HEADLINE, "randomisation"))
    assert n_metrics == len([k for k in m if k.startswith("headline.")])
    log_headline(tracker, pid, HEADLINE, "randomisation")
    for key in m:
        if key.startswith("headline."):
            assert len(tracker.client.get_metric_history(pid, key)) == 1, key
    changed = json.loads(json.dumps(HEADLINE))
    changed["rows"][0]["delta"] = 0.013
    log_headline(tracker, pid, changed, "t")
    assert [x.value for x in tracker.client.get_metric_history(pid, "headline.continuation.delta")] == [0.012, 0.013]
    assert len(tracker.client.get_metric_history(pid, "headline.continuation.ci95_low")) == 1
    m = tracker.client.get_run(pid).data.metrics
    assert m["headline.continuation.p_holm_randomisation"] == 0.004  # the other test, by its name
    assert "paired t-test" in tracker.client.get_run(pid).data.tags[NOTE_TAG]


def test_the_addresses_open_the_training_runs_view(small_grid):
    """The model-training view's runs table and run page (``workflowType=machine_learning``); a tracking server
    serves the UI itself."""
    tracker, pid, _ = small_grid
    assert default_ui("sqlite:////w/mlflow.db") == "http://127.0.0.1:5000"
    assert default_ui("http://mlflow.example:5000/") == "http://mlflow.example:5000"
    urls = experiment_urls(tracker, pid, "http://h:1/")
    e = tracker.experiment_id
    assert urls["training_runs"] == f"http://h:1/#/experiments/{e}/runs?workflowType=machine_learning"
    assert urls["parent_run"] == f"http://h:1/#/experiments/{e}/runs/{pid}?workflowType=machine_learning"
    assert set(experiment_urls(tracker, None)) == {"training_runs"}
    text = ui_lines(tracker, pid)
    assert f"mlflow ui --backend-store-uri {tracker.uri}" in text
    assert urls["parent_run"].replace("http://h:1", "http://127.0.0.1:5000") in text and "report page" not in text
    assert experiment_urls(tracker, pid)["report"] in ui_lines(tracker, pid, report=True)


def test_ltr_report_prints_the_addresses(small_grid, tmp_path, capsys, monkeypatch):
    """``ltr report`` prints the ``mlflow ui`` command and the training-runs, grid-run and report addresses of
    the grid it reported (the report itself stubbed: its tables are tests/report/test_report.py's)."""
    import pipelines.app.run
    from pipelines.app.cli import main

    tracker, pid, _ = small_grid
    work = Path(tracker.uri[len("sqlite:///") :]).parent
    out = str(tmp_path / "r")
    monkeypatch.setattr(
        pipelines.app.run, "build_report", lambda cfg, t, o, parent: {"out": o, "parent": pid, "problems": []}
    )
    assert main(["report", "--set", f"work_dir={work}", "--experiment", "view-grid", "--out", out]) == 0
    err = capsys.readouterr().err
    urls = experiment_urls(tracker, pid)
    assert f"MLflow UI: mlflow ui --backend-store-uri {tracker.uri}" in err
    assert all(u in err for u in urls.values()) and len(urls) == 3


def test_ltr_grid_prints_the_addresses_but_not_for_one_unit(small_grid, capsys, monkeypatch):
    """``ltr grid`` prints the training-runs and grid-run addresses after the grid (training stubbed: no Spark);
    a scheduler's one unit (``--unit``) prints none."""
    import pipelines.app.cli
    import pipelines.app.grid
    from pipelines.app.cli import main

    tracker, pid, _ = small_grid
    work = Path(tracker.uri[len("sqlite:///") :]).parent
    summary = {"parent_run_id": pid, "experiment": "view-grid", "tracking_uri": tracker.uri, "folds": [1]}
    monkeypatch.setattr(pipelines.app.cli, "_session", lambda cfg: None)
    monkeypatch.setattr(pipelines.app.grid, "run_grid", lambda *a, **k: {**summary, "finished": True})
    argv = ["grid", "--set", f"work_dir={work}", "--set", "grid.experiment=view-grid"]
    assert main(argv) == 0
    err = capsys.readouterr().err
    urls = experiment_urls(tracker, pid)
    assert urls["training_runs"] in err and urls["parent_run"] in err and urls["report"] not in err
    assert main([*argv, "--unit", "1:0"]) == 0
    assert urls["training_runs"] not in capsys.readouterr().err


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


def _dump_doms(browser: str, urls: dict[str, str], profiles: Path) -> dict[str, str]:
    """Each page's DOM after its scripts ran (headless Chromium, one at a time each with a fresh profile: the UI
    keeps the last workflow type in the browser's storage; virtual time does not advance while requests are
    pending, so the UI's calls to the server are answered first). The pages load concurrently."""
    procs = {
        name: subprocess.Popen(
            [
                browser,
                "--headless=new",
                "--no-sandbox",
                "--disable-gpu",
                f"--user-data-dir={profiles / name}",
                "--virtual-time-budget=15000",
                "--dump-dom",
                url,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        for name, url in urls.items()
    }
    return {name: p.communicate(timeout=90)[0] for name, p in procs.items()}


@pytest.mark.processes
@pytest.mark.deployment
@pytest.mark.slow(minutes=0.5)  # mlflow ui starting, four headless Chromium pages
@pytest.mark.skipif(_chromium() is None, reason="no Chromium binary (chromium, chromium-browser or google-chrome)")
def test_the_printed_addresses_in_a_browser(small_grid, tmp_path):
    """``mlflow ui`` on the store; headless Chromium opens the printed addresses: the training-runs one lists the
    parent run (the model-training runs table, not the GenAI overview that the experiment's plain address
    opens), the parent run's lists its children, the report's shows report.html."""
    tracker, pid, _ = small_grid
    tracker.log_text(pid, "<html><body><h1>the report</h1></body></html>", "report.html", "report")
    port = free_port()
    ui = f"http://127.0.0.1:{port}"
    server = mlflow_ui(tracker.uri, port, workers=1)
    try:
        wait_http(f"{ui}/health", 90, server)
        urls = experiment_urls(tracker, pid, ui)
        plain = f"{ui}/#/experiments/{tracker.experiment_id}"
        browser = _chromium()
        assert browser
        dom = _dump_doms(browser, {**urls, "plain": plain}, tmp_path)
        assert PARENT in dom["training_runs"] and "Evaluation runs" not in dom["training_runs"], dom["training_runs"]
        assert not any(c in dom["training_runs"] for c in CHILDREN)  # nested under the parent, collapsed
        assert "Evaluation runs" in dom["plain"] and PARENT not in dom["plain"]  # MLflow 3.17's GenAI overview
        page = dom["parent_run"]
        assert PARENT in page and "Child runs" in page and all(c in page for c in CHILDREN), page[-3000:]
        assert "mlflow-html-iframe" in dom["report"] and "report.html" in dom["report"]
    finally:
        stop_process(server)
