"""The kernel: the code that decides numbers, and nothing else.

Tree growth (:mod:`~pipelines.kernel.loop`: the segment loop, curves, the objectives it calls), the worker's data
path (:mod:`~pipelines.kernel.matrices`: Arrow -> bin codes -> XGBoost's matrix, rows in (qid, doc) order), its
threads and collective (:mod:`~pipelines.kernel.env`), the histogram cuts and their sample
(:mod:`~pipelines.kernel.cuts`) and the plan node it trains (:mod:`~pipelines.kernel.nodes`), with the per-query
math of ``udfs`` they import (metrics, the objectives and their registry, tree walks, curriculum ordering and
pacing, difficulty scores).

Each kind of result is keyed by the code of the kernel that computes it (:data:`pipelines.core.keys.IDENTITY_ROOTS`),
so the kernel imports no operations code: no config loading, storage, leases, progress, session, process trees,
signals, MLflow. Those reach it as arguments (objects with the methods it calls, callables, plain values). The
import contract ``kernel`` in ``.importlinter`` holds it to that; ``ltr keys --explain`` lists what each key covers.

May import: ``pipelines.core.errors`` (exceptions with an exit code), ``udfs`` and libraries.
"""
