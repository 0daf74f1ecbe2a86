"""Inside a barrier task, around the kernel (:mod:`pipelines.kernel`: the data path and the boosting loop): how
a task reads its fold's rows itself (:mod:`~pipelines.worker.rows`), and XGBoost imported without scikit-learn.

May import: ``pipelines.store`` and below (``plan``, ``data``, ``kernel``, ``core``) and ``udfs``.

Imported first in a barrier task's Python worker (:mod:`pipelines.execution.barrier_job` imports it before any
module that imports XGBoost), where it imports XGBoost without scikit-learn: see :func:`in_a_spark_worker`.
"""

from __future__ import annotations

import os
import sys

#: Set (to anything but empty) in a Spark worker's environment to keep XGBoost's scikit-learn estimators there.
KEEP_SKLEARN = "LTR_XGBOOST_SKLEARN"


def in_a_spark_worker() -> bool:
    """Whether this process is a PySpark Python worker (forked by ``pyspark.daemon``, or ``python -m
    pyspark.worker`` where Spark runs no daemon)."""
    main = getattr(sys.modules.get("__main__"), "__spec__", None)
    return "pyspark.worker" in sys.modules or getattr(main, "name", "") == "pyspark.worker"


def import_xgboost_without_sklearn() -> bool:
    """Import XGBoost in a Spark worker without the scikit-learn it imports for its sklearn-style estimators,
    which training never uses; True when it did so.

    ``import xgboost`` imports scikit-learn (``xgboost.compat``), and scikit-learn SciPy: most of the time a
    barrier task's worker takes to import its code, paid by every training worker process (benchmarks/RESULTS.md,
    "A small barrier job's fixed cost"). While XGBoost is imported, ``sklearn`` is marked absent, so XGBoost takes
    its branch without it; afterwards scikit-learn imports as usual, but XGBoost's estimators in this process
    (``XGBRanker`` ...) say that scikit-learn is not installed. So this is done only in a PySpark worker
    (:func:`in_a_spark_worker`, a process of the Spark application, where training runs boosters), only when
    neither XGBoost nor scikit-learn is imported yet, and not when :data:`KEEP_SKLEARN` is set (for an application
    that also runs xgboost.spark's estimators on the same executors: ``spark.executorEnv.LTR_XGBOOST_SKLEARN=1``).
    """
    if os.environ.get(KEEP_SKLEARN) or "xgboost" in sys.modules or "sklearn" in sys.modules or not in_a_spark_worker():
        return False
    sys.modules["sklearn"] = None  # type: ignore[assignment]  # `import sklearn` raises ImportError
    try:
        import xgboost  # noqa: F401
    finally:
        if sys.modules.get("sklearn", 0) is None:
            del sys.modules["sklearn"]
    return True


from pipelines.core import threads  # noqa: E402 (the OpenMP settings, before XGBoost loads its runtime)

threads.apply()
import_xgboost_without_sklearn()
