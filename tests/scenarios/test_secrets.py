"""Credentials out of every output (:mod:`pipelines.core.secrets`). The study with a password planted in its
tracking URI, searched for in every output, is ``tests/app/test_cli.py::test_run_is_the_whole_pipeline`` (it runs
``ltr run`` against a real tracking server); the deployment's (Airflow task logs, ``ps``, the closed server) is
``tests/scenarios/test_deploy.py``."""

from __future__ import annotations

import pytest

from pipelines.core.secrets import browser_address, has_secret, redact
from tests.helpers import PLANTED


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


def test_a_credential_in_a_data_path_is_in_no_ingest_record_and_in_no_key(tmp_path, monkeypatch):
    """The ingest step's key and its record (``_ingest_key.json``) hold a data path's credentials masked, and a
    rotated password or token keeps the key: it must not ingest again (nor re-key anything after it)."""
    import json

    from pipelines.core import keys
    from pipelines.core.config import load_config
    from pipelines.study import steps

    monkeypatch.setattr(steps, "_listing", lambda src: [["Fold1/train.txt", 10, 1]])  # no store to list here
    monkeypatch.setattr(steps, "fingerprint_at", lambda data: "sha256:abc")
    cfg = load_config(None, [f"work_dir={tmp_path}"])

    def key(password: str, token: str) -> str:
        src = f"s3://ltr:{password}@bucket/mslr"
        return keys.ingest_key(steps.ingest_inputs(cfg, src, f"https://store/ds?token={token}"))

    assert key(PLANTED, "t1") == key("rotated", "t2")
    doc = steps.ingest_inputs(cfg, f"s3://ltr:{PLANTED}@bucket/mslr", "/w/ds")
    assert doc["src"] == "s3://ltr:***@bucket/mslr"
    record = tmp_path / "_ingest_key.json"
    steps.record_ingest(str(record), "k", f"s3://ltr:{PLANTED}@bucket/mslr", f"/w/ds?token={PLANTED}")
    text = record.read_text()
    assert PLANTED not in text and json.loads(text)["src"] == "s3://ltr:***@bucket/mslr"
