"""The ground every other package stands on: typed config (schema, loading), every key (``keys``), every
location of the work directory (``layout``), storage (URIs, the one atomic writer), the process tree (``proctree``),
the Spark session, provenance, and the error model (``errors``: one base class with an exit code).

May import: ``udfs`` and the standard and third-party libraries; nothing else of ``pipelines``.
"""
