"""What the tests and the benchmarks share (the ``xgboost.testing`` pattern): a checkout's processes and services
on loopback, started and stopped the way the product walks process trees (:mod:`pipelines.core.proctree`).

* ``processes``: the repository's root, the JVM options of every JVM a test or benchmark starts, free ports, a
  process stopped with its whole tree, a standalone Spark cluster (master and workers).
* ``deployment``: PostgreSQL, an MLflow server and Airflow's services, as production runs them.

For a source checkout (``ROOT`` is the folder above ``pipelines/``): ``tests/`` and ``benchmarks/`` import it;
no other package of ``pipelines`` does (the top of the layers contract in ``.importlinter``).

May import: every other package of ``pipelines`` and ``udfs``.
"""
