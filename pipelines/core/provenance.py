"""Which code produced a result, as provenance: package version, git commit of a checkout, library versions.

Recorded on MLflow runs and in reports; never part of a key (keys hold the code identity, the content
of the computing code: :func:`pipelines.core.keys.code_identity`)."""

from __future__ import annotations

import functools
import subprocess
from pathlib import Path


@functools.lru_cache(maxsize=1)
def code_version() -> dict[str, str]:
    """``ltr``, ``git`` (commit, ``-dirty`` with uncommitted changes; empty outside a checkout),
    ``xgboost``, ``pyspark``, ``numpy`` versions: provenance only (keys hold ``keys.code_identity``)."""
    from importlib.metadata import PackageNotFoundError, version

    import numpy
    import xgboost

    try:
        ltr = version("ltr-curriculum")
    except PackageNotFoundError:
        ltr = "unknown"
    try:
        import pyspark

        spark = pyspark.__version__
    except ImportError:  # planning works without Spark
        spark = ""
    return {
        "ltr": ltr,
        "git": _git_commit(),
        "xgboost": xgboost.__version__,
        "pyspark": spark,
        "numpy": numpy.__version__,
    }


def _git_commit() -> str:
    root = Path(__file__).resolve().parents[2]
    if not (root / ".git").exists():
        return ""
    try:
        head = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no", "--", "pipelines", "udfs"],
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""
    return head + ("-dirty" if dirty else "")
