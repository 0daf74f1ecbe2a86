"""Training paths and the pure trie of checkpointed nodes: ``paths`` (the path syntax) and ``trie`` (nodes,
units, states). No Spark, no MLflow, no storage.

May import: ``pipelines.core`` and ``udfs``.
"""
