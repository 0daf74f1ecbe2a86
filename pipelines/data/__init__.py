"""Where data comes in and what is derived from it before training: the dataset (manifest, folds), the
synthetic generator, ingest (discovery, the Spark job, checks, quarantine, merge), query difficulty and curricula
(the ``Curriculum`` type included).

May import: ``pipelines.core`` and ``udfs``.
"""
