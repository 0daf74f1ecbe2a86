"""The Airflow study's decisions (pipelines.app.study_tasks): plain functions, tested without Airflow or Spark."""

from __future__ import annotations

import json
import os
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


def _params(tmp_path, *sets: str, **more) -> dict:
    return {"conf": "", "set": [f"work_dir={tmp_path}", *sets], "src": "", "train_timeout_base_s": 60,
            "train_timeout_per_tree_s": 1, **more}  # fmt: skip


def test_a_credential_in_the_run_params_is_refused_naming_the_connection(tmp_path):
    """A run's params are shown in the Airflow UI: a password there fails the first task, and the message says
    where credentials go (without repeating the password)."""
    for params in (
        _params(tmp_path, "tracking.uri=http://ltr:Pl4nted@mlflow:5000"),
        _params(tmp_path, spark_conf={"spark.hadoop.fs.s3a.endpoint": "https://h/x?token=Pl4nted"}),
        _params(tmp_path, src="https://u:Pl4nted@data.example/letor"),
    ):
        with pytest.raises(StudyTaskError, match=r"holds a credential.*Airflow connection 'mlflow_default'") as e:
            resolve_study(params, "r")
        assert "Pl4nted" not in str(e.value) and "\n" not in str(e.value)


def test_the_mlflow_connection_gives_the_jobs_their_tracking_uri_and_the_task_its_credentials(tmp_path, monkeypatch):
    from pipelines.app.study_tasks import CREDENTIAL_ENV, MlflowServer

    for name in CREDENTIAL_ENV:
        monkeypatch.delenv(name, raising=False)
    store = f"sqlite:///{tmp_path}/mlflow.db"  # a store, so that no server is asked (the deployment test asks one)
    conns = {"mlflow_default": MlflowServer(store, "ltr", "Pl4nted"), "other": None}
    study = resolve_study(_params(tmp_path, "tracking.uri=sqlite:///elsewhere.db"), "r", connection=conns.get)
    assert study["set"][-1] == f"tracking.uri={store}" and study["mlflow_conn_id"] == "mlflow_default"
    assert all("Pl4nted" not in a for a in study["grid_args"])  # the password is on no command line
    assert [os.environ.get(n) for n in CREDENTIAL_ENV] == ["ltr", "Pl4nted"]  # but where MLflow's client reads it
    with pytest.raises(StudyTaskError, match="params.mlflow_conn_id: no Airflow connection 'other'"):
        resolve_study(_params(tmp_path, mlflow_conn_id="other"), "r", connection=conns.get)
    # no default connection: the config's tracking.uri as it is
    study = resolve_study(_params(tmp_path, f"tracking.uri={store}"), "r", connection=lambda c: None)
    assert study["mlflow_conn_id"] == "" and study["set"][-1] == f"tracking.uri={store}"


def test_spark_remote_makes_every_step_a_client_of_that_server(tmp_path):
    """``params.spark_remote``: every step's ``--set spark.remote=...`` (their sessions are Spark Connect clients);
    a URL that is not one fails the first task in one line."""
    params = {"conf": "", "set": [f"work_dir={tmp_path}"], "src": "", "train_timeout_base_s": 60}
    params["train_timeout_per_tree_s"] = 1
    study = resolve_study({**params, "spark_remote": "sc://spark.example.com:15002"}, "r")
    assert 'spark.remote="sc://spark.example.com:15002"' in study["set"]
    assert "spark.remote" not in " ".join(resolve_study(params, "r")["set"])
    with pytest.raises(StudyTaskError, match=r"spark_remote: spark.remote='spark://h:7077' is not a Spark Connect"):
        resolve_study({**params, "spark_remote": "spark://h:7077"}, "r")
