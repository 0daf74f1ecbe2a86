"""The Airflow study's decisions (pipelines.app.study_tasks): plain functions, tested without Airflow or Spark."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipelines.app.study_tasks import StudyTaskError, resolve_study, study_parent


def test_the_parent_run_comes_from_grid_setup_or_its_record_never_a_guess(tmp_path):
    """In cluster deploy mode the driver's output does not reach the task: the parent run id is read from the
    record ``ltr grid --setup-only --result`` writes; with neither, the task fails (the report never reads
    "the latest grid" of the experiment, which may be another study)."""
    study = resolve_study(
        {
            "conf": "",
            "set": [f"work_dir={tmp_path}"],
            "src": "",
            "train_timeout_base_s": 60,
            "train_timeout_per_tree_s": 1,
        },
        "manual__2026-11-24T10:00:00+00:00",
    )
    record = Path(study["setup_record"])
    assert record.parent == tmp_path / "airflow" / "manual__2026-11-24T10_00_00_00_00"
    assert study["setup_args"][:3] == ["--setup-only", "--result", str(record)]
    with pytest.raises(StudyTaskError, match="printed no parent run id and its record"):
        study_parent(study, None)
    record.parent.mkdir(parents=True)
    record.write_text(json.dumps({"parent_run_id": "", "finished": False}))
    with pytest.raises(StudyTaskError, match="recorded no parent run id"):
        study_parent(study, None)
    record.write_text(json.dumps({"parent_run_id": "abc123", "finished": True}))
    assert study_parent(study, None) == {"parent_run_id": "abc123", "finished": True}
    assert study_parent(study, {"parent_run_id": "printed", "finished": False})["parent_run_id"] == "printed"
    with pytest.raises(StudyTaskError, match="train_timeout_base_s"):
        resolve_study(
            {
                "conf": "",
                "set": [f"work_dir={tmp_path}"],
                "src": "",
                "train_timeout_base_s": -1,
                "train_timeout_per_tree_s": 1,
            },
            "r",
        )
