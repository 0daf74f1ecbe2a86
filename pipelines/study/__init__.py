"""What a study trains (``design``: children, fold plans, the study's keys) and the steps it needs first
(``steps``: generate, ingest, difficulty, curricula, each with its inputs, key, location and freshness check).

May import: ``pipelines.execution`` and below and ``udfs``; never MLflow.
"""
