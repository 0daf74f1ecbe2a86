"""A dataset without a vali or a test split trains, tracks and reports: curves on the splits it has,
no NaN metric in MLflow, no IndexError after the training is done."""

from __future__ import annotations

import os
import shutil
from typing import Any

import pytest

from pipelines.app.grid import run_grid
from pipelines.core.config import IngestConfig, ReportConfig, load_config, load_dataset_spec
from pipelines.data.ingest import ingest
from pipelines.report import build_report
from pipelines.tracking.runs import Tracker
from tests.helpers import tiny_study


def _report(tracker: Tracker, out: str, parent: str | None = None, **report: Any) -> dict[str, Any]:
    """:func:`build_report` of the grid ``parent`` (None: the latest finished) with the metric ``ndcg_at_10``, no
    difficulty scores and the report settings ``report`` (:class:`ReportConfig` fields, its defaults else)."""
    return build_report(tracker, out, parent, report=ReportConfig(**report), metric_name="ndcg_at_10", difficulty=None)


@pytest.mark.parametrize("files", [("train", "test"), ("train", "vali")])
def test_grid_and_report_on_the_splits_that_exist(spark, small_letor, tmp_path, files):
    src = tmp_path / "src"
    src.mkdir()
    for f in files:
        shutil.copy(small_letor / "Fold1" / f"{f}.txt", src / f"{f}.txt")
    data = str(tmp_path / "ds")
    ingest(spark, str(src), data, load_dataset_spec("mslr"), IngestConfig())
    cfg = load_config(None, tiny_study(f"work_dir={tmp_path / 'work'}", "grid.experiment=splits"))
    summary = run_grid(spark, cfg, data=data)
    assert summary["trained"] == 3
    tracker = Tracker(summary["tracking_uri"], "splits", os.path.join(cfg.work_dir, "mlartifacts"))
    have, missing = ("test", "vali") if "test" in files else ("vali", "test")
    for run in tracker.children(summary["parent_run_id"]):
        metrics = run.data.metrics
        assert f"final_ndcg_at_10_{have}" in metrics and f"ndcg_at_10_{have}" in metrics
        assert not any(missing in k for k in metrics), metrics  # nothing logged for the absent split
        hist = tracker.client.get_metric_history(run.info.run_id, f"ndcg_at_10_{have}")
        assert sorted(m.step for m in hist) == [1, 2, 3, 4]
    r = _report(tracker, str(tmp_path / "report"), summary["parent_run_id"], permutations=100)
    assert r["records"] == 3
    md = (tmp_path / "report" / "report.md").read_text()
    assert "Table 1" in md
    if have == "vali":  # no test split: the tables are on vali and say so
        assert "The dataset has no test split" in md and "NDCG@10 on vali after the last tree" in md
    else:  # no vali split: no Table 2 (it chooses on validation), and the reason is given
        assert "no vali split" in md and "NDCG@10 on test after the last tree" in md
