"""A Spark worker imports XGBoost without scikit-learn (pipelines/worker/__init__.py); nothing else does."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from pipelines.testing.processes import ROOT

#: fresh interpreters, one per case, run at once
pytestmark = [pytest.mark.processes]

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

#: (case, code run before, environment added, whether XGBoost sees scikit-learn)
CASES = [
    ("a Spark worker", "import pyspark.worker", {}, False),
    ("a Spark worker that keeps scikit-learn", "import pyspark.worker", {"LTR_XGBOOST_SKLEARN": "1"}, True),
    ("a Spark worker that imported scikit-learn first", "import pyspark.worker, sklearn", {}, True),
    ("a driver, a notebook, a test", "", {}, True),
]


def test_xgboost_skips_sklearn_only_in_a_spark_worker():
    base = {k: v for k, v in os.environ.items() if k != "LTR_XGBOOST_SKLEARN"}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", PROBE.format(before=before)],
            cwd=ROOT,
            env={**base, **env},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _, before, env, _ in CASES
    ]
    for (case, _, _, sees), proc in zip(CASES, procs, strict=True):
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, f"{case}: {err[-3000:]}"
        got = json.loads(out.strip().splitlines()[-1])
        assert got == {"xgboost_sees_sklearn": sees, "sklearn_imports": True}, case  # scikit-learn still imports
