"""A password in the tracking URI appears in no output of a study: its console, its logs, ``work_dir``, the MLflow
store (the server's database and artifacts) and the report. A real MLflow tracking server (``mlflow ui`` over a
SQLite store, which takes any credentials), a real ``ltr run`` of the tiny study (in the suite's Spark session)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pipelines.core.secrets import browser_address, has_secret, redact
from pipelines.testing.processes import free_port, mlflow_ui, stop_process, wait_http
from tests.helpers import set_args, tiny_study

PLANTED = "Pl4ntedSecret9"  # what must not appear anywhere


def _files_holding(root: Path, needle: bytes) -> list[str]:
    hits = []
    for p in root.rglob("*"):
        if p.is_file() and not p.is_symlink():
            try:
                if needle in p.read_bytes():
                    hits.append(str(p.relative_to(root)))
            except OSError:
                continue
    return hits


def test_redact_masks_passwords_and_token_parameters_only():
    assert redact(f"see http://ltr:{PLANTED}@h:5000/x and done") == "see http://ltr:***@h:5000/x and done"
    assert redact(f"postgresql://mlflow:{PLANTED}@db:5432/mlflow") == "postgresql://mlflow:***@db:5432/mlflow"
    assert redact(f"http://u:p@{PLANTED}@h/") == "http://u:***@h/"  # an unescaped @: the authority's last one
    assert redact(f"https://h/a?x=1&token={PLANTED}&y=2") == "https://h/a?x=1&token=***&y=2"
    assert redact(f"s3://b/k?X-Amz-Signature={PLANTED}") == "s3://b/k?X-Amz-Signature=***"
    for clean in ("http://ltr@h:5000", "sqlite:////w/mlflow.db", "train.eta=0.1", "a:b@c", "file:///x:y"):
        assert redact(clean) == clean and not has_secret(clean)
    assert browser_address(f"http://ltr:{PLANTED}@127.0.0.1:5000/?token=1") == "http://127.0.0.1:5000"


def test_a_credential_in_the_artifact_location_is_refused():
    from pipelines.core.config import ConfigError, load_config

    with pytest.raises(ConfigError, match=r"tracking.artifacts 'https://u:\*\*\*@store/a' holds a credential") as e:
        load_config(None, [f"tracking.artifacts=https://u:{PLANTED}@store/a"])
    assert PLANTED not in str(e.value)


def test_a_password_in_the_tracking_uri_is_in_no_output_of_a_study(spark, tmp_path, capfd):
    from pipelines.app.cli import main

    store, work = tmp_path / "server", tmp_path / "work"
    store.mkdir()
    port = free_port()
    server = mlflow_ui(f"sqlite:///{store / 'mlflow.db'}", port, workers=1, cwd=store)
    saved = os.environ.pop("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", None)  # MLflow's own lines: off by ltr itself
    try:
        wait_http(f"http://127.0.0.1:{port}/health", 90, server)
        uri = f"http://ltr:{PLANTED}@127.0.0.1:{port}"
        sets = set_args(tiny_study(f"work_dir={work}", f"tracking.uri={uri}", "grid.experiment=secrets"))
        assert main(["run", "--queries", "20", *sets]) == 0  # in this process: the suite's Spark session
        console = "".join(capfd.readouterr())
        # the study talked to the server (its runs are there) and told the user where to look, without the password
        assert f"MLflow UI: http://127.0.0.1:{port}" in console and "report page:" in console, console[-2000:]
        assert "View run" not in console  # MLflow's own "View run ... at: <URI>" lines are off
        assert "mlflow ui --backend-store-uri http" not in console  # a server is opened, not served again
        # a failure's line and its saved trace: an unknown run id's error names the store without the password
        assert main(["report", "--run-id", "nosuchrun", *sets]) != 0
        console += "".join(capfd.readouterr())
    finally:
        stop_process(server)
        if saved is not None:
            os.environ["MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT"] = saved
    assert PLANTED not in console
    needle = PLANTED.encode()
    assert _files_holding(work, needle) == []  # work_dir: report, report.json, leases, results, logs
    assert _files_holding(store, needle) == []  # the server's database (params, tags, runs) and artifacts
    tmp = Path(os.environ.get("TMPDIR", "/tmp"))
    traces = [p for p in tmp.glob("ltr-report-*.log") if p.stat().st_mtime > work.stat().st_mtime]
    assert all(needle not in p.read_bytes() for p in traces)
