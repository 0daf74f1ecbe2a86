"""A Spark worker imports XGBoost without scikit-learn (pipelines/worker/__init__.py); nothing else does."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from pipelines.testing.processes import ROOT

#: Run in a fresh interpreter: what a process has imported once the worker package is imported.
PROBE = """
import json, sys
{before}
import pipelines.worker
import xgboost.compat
import sklearn.base
seen = {{"xgboost_sees_sklearn": xgboost.compat.SKLEARN_INSTALLED, "sklearn_imports": "sklearn" in sys.modules}}
print(json.dumps(seen))
"""


def _probe(before: str, **env: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", PROBE.format(before=before)],
        cwd=ROOT,
        env={**{k: v for k, v in os.environ.items() if k != "LTR_XGBOOST_SKLEARN"}, **env},
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize(
    ("case", "before", "env", "sees"),
    [
        ("a Spark worker", "import pyspark.worker", {}, False),
        ("a Spark worker that keeps scikit-learn", "import pyspark.worker", {"LTR_XGBOOST_SKLEARN": "1"}, True),
        ("a Spark worker that imported scikit-learn first", "import pyspark.worker, sklearn", {}, True),
        ("a driver, a notebook, a test", "", {}, True),
    ],
)
def test_xgboost_skips_sklearn_only_in_a_spark_worker(case, before, env, sees):
    got = _probe(before, **env)
    assert got == {"xgboost_sees_sklearn": sees, "sklearn_imports": True}, case  # scikit-learn itself still imports
